package router

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// UnavailablePause is how long a message waits in its consumer, when the
// platform's own database is away, before it goes back to its queue. The
// outage is not the message's fault, so it spends no attempt; the pause
// keeps the redelivery from spinning.
var UnavailablePause = time.Second

// maxErrorHeader bounds the error text a copy carries: headers share the
// broker's frame with the body.
const maxErrorHeader = 2048

// Failures decides what becomes of a message whose handling failed. While
// the queue's schedule has delays left, a copy waits in the broker's retry
// tier and comes back after the next delay; when it is spent, or the error
// is permanent, the copy goes to the dead-letter queue with its reason
// class, and one WARN line says so. Either way the delivery is acknowledged
// only once the broker holds the copy; if the copy cannot be published the
// delivery goes back to its queue. Every copy carries the failure headers
// (event.Header*), counting the failed deliveries in moenda-attempts.
func Failures(queue, handler string, pol topology.Policy, sink Sink, stats *QueueStats, logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			ctx := msg.Context()
			if errShutdown(err) {
				return nil, err
			}
			ids := idsOf(msg)
			if errors.Is(err, handlers.ErrUnavailable) {
				logger.WarnContext(ctx, "database unavailable: the event goes back to its queue", append(ids, "retry_in", UnavailablePause, "error", err)...)
				select {
				case <-ctx.Done():
				case <-time.After(UnavailablePause):
				}
				return nil, err
			}
			failed := failedAttempts(msg) + 1
			cp := msg.Copy()
			stamp(cp.Metadata, msg, queue, handler, failed, err)
			reason := event.ReasonOf(err)
			if reason == "" && failed <= len(pol.Delays) {
				delay := pol.Delays[failed-1]
				if perr := sink.Delay(ctx, queue, delay, cp); perr != nil {
					copyFailed(ctx, logger, "the retry copy was not published: the event goes back to its queue", ids, perr)
					return nil, errors.Join(err, perr)
				}
				stats.RetriedLater.Add(1)
				logger.InfoContext(ctx, "handler failed: the broker hands the event back later",
					append(ids, "attempt", failed, "attempts", pol.Attempts(), "retry_in", delay, "error", err)...)
				return nil, nil
			}
			if reason == "" {
				reason = event.ReasonRetriesExhausted
			}
			cp.Metadata.Set(event.HeaderReason, reason)
			if perr := sink.DeadLetter(ctx, queue, cp); perr != nil {
				copyFailed(ctx, logger, "the dead letter was not published: the event goes back to its queue", ids, perr)
				return nil, errors.Join(err, perr)
			}
			stats.deadLetter(reason)
			md := cp.Metadata
			logger.WarnContext(ctx, "event dead-lettered", append(ids,
				"reason", reason, "error", md.Get(event.HeaderError), "dead_letter_queue", pol.DeadLetterQueue,
				"attempts", failed, "first_failure_at", md.Get(event.HeaderFirstFailureAt), "last_failure_at", md.Get(event.HeaderLastFailureAt),
				"original_exchange", md.Get(event.HeaderOriginalExchange), "original_routing_key", md.Get(event.HeaderOriginalRoutingKey))...)
			return nil, nil
		}
	}
}

// copyFailed logs a copy the broker did not take: an error, unless the
// process is stopping, when the message going back to its queue is the
// plan.
func copyFailed(ctx context.Context, logger *slog.Logger, msg string, ids []any, err error) {
	level := slog.LevelError
	if errShutdown(err) {
		level = slog.LevelInfo
	}
	logger.Log(ctx, level, msg, append(ids, "error", err)...)
}

// failedAttempts reads how many deliveries of msg failed before this one.
func failedAttempts(msg *message.Message) int {
	n, err := strconv.Atoi(msg.Metadata.Get(event.HeaderAttempts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// stamp writes the failure headers onto md, the metadata of a copy of msg.
func stamp(md message.Metadata, msg *message.Message, queue, handler string, failed int, err error) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	text := strings.ToValidUTF8(err.Error(), "?")
	if len(text) > maxErrorHeader {
		text = strings.ToValidUTF8(text[:maxErrorHeader], "") + "..."
	}
	md.Set(event.HeaderAttempts, strconv.Itoa(failed))
	md.Set(event.HeaderError, text)
	md.Set(event.HeaderQueue, queue)
	md.Set(event.HeaderHandler, handler)
	md.Set(event.HeaderLastFailureAt, now)
	if md.Get(event.HeaderFirstFailureAt) == "" {
		md.Set(event.HeaderFirstFailureAt, now)
	}
	if md.Get(event.HeaderOriginalRoutingKey) == "" {
		md.Set(event.HeaderOriginalExchange, msg.Metadata.Get(event.MetaDeliveryExchange))
		md.Set(event.HeaderOriginalRoutingKey, msg.Metadata.Get(event.MetaDeliveryRoutingKey))
	}
	id, corr := msg.UUID, msg.Metadata.Get(event.MetaCorrelationID)
	if e, ok := eventOf(msg.Context()); ok {
		id, corr = e.ID, e.CorrelationID
	}
	md.Set(event.HeaderEventID, id)
	md.Set(event.HeaderCorrelationID, corr)
}

// idsOf returns the log fields that identify msg: its event and
// correlation ids, from the envelope when it was decoded, else from the
// transport.
func idsOf(msg *message.Message) []any {
	if e, ok := eventOf(msg.Context()); ok {
		return []any{"event_id", e.ID, "event_name", e.Name, "correlation_id", e.CorrelationID}
	}
	return []any{"event_id", msg.UUID, "event_name", msg.Metadata.Get(event.MetaName), "correlation_id", msg.Metadata.Get(event.MetaCorrelationID)}
}
