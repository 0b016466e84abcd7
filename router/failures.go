package router

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// UnavailablePause is the first pause of a queue whose deliveries find
// the platform's own database away (handlers.ErrUnavailable: a restart, a
// failover, a full disk): the delivery waits it out in its consumer, then
// goes back to its queue. The outage is not the message's fault, so it
// spends no attempt. While the outage lasts the pause doubles, up to
// UnavailablePauseMax, and every delivery of the queue waits out the same
// one: each return counts toward a quorum queue's delivery limit
// (topology.DeliveryLimit), and the doubling keeps that count to a few a
// minute, where a fixed pause would spend the limit within as many
// seconds. The first delivery that gets past the database ends the
// backoff.
const UnavailablePause = time.Second

// UnavailablePauseMax bounds the pause of an outage: the longest a queue
// waits, once the database is back, before it looks again, so a consumer
// resumes within it of a restart however long the outage was.
const UnavailablePauseMax = 10 * time.Second

// CopyFailurePause is the first pause of a queue whose failure copies the
// broker does not take (a retry queue deleted, the connection for copies
// lost): the delivery goes back to its queue, and without a pause it would
// be handed back at once, as fast as the handler runs. While the copies
// keep failing the pause doubles, up to copyFailurePauseMax.
const CopyFailurePause = time.Second

const copyFailurePauseMax = 30 * time.Second

// pauser is a queue's pause after a failure that is not the message's:
// every delivery that meets it meanwhile waits out the same pause, and
// only the one that starts it logs. The pause doubles from first up to
// most until reset.
type pauser struct {
	clock       Clock
	first, most time.Duration
	engaged     atomic.Bool // a pause has been taken since the last reset
	mu          sync.Mutex
	until       time.Time
	next        time.Duration
}

// wait waits out the pause in course, or starts the next one, calling
// started with its length when it does; it returns early when ctx ends.
func (p *pauser) wait(ctx context.Context, started func(time.Duration)) {
	p.mu.Lock()
	if now := p.clock.Now(); !now.Before(p.until) {
		if p.next == 0 {
			p.next = p.first
		}
		p.until = now.Add(p.next)
		started(p.next)
		p.next = min(2*p.next, p.most)
		p.engaged.Store(true)
	}
	d := p.until.Sub(p.clock.Now())
	p.mu.Unlock()
	_ = p.clock.Sleep(ctx, d)
}

// reset ends the backoff once the failure is over; it costs one atomic
// read while no pause was taken.
func (p *pauser) reset() {
	if !p.engaged.Load() {
		return
	}
	p.mu.Lock()
	p.next = 0
	p.engaged.Store(false)
	p.mu.Unlock()
}

// maxErrorHeader bounds the error text a copy carries: headers share the
// broker's frame with the body.
const maxErrorHeader = 2048

// Failures decides what becomes of a message whose handling failed. While
// the queue's schedule has delays left, a copy waits in the broker's retry
// tier and comes back after the next delay; when it is spent, or the error
// is permanent, the copy goes to the dead-letter queue with its reason
// class, and one WARN line says so. Either way the delivery is acknowledged
// only once the broker holds the copy; if the copy cannot be published the
// delivery goes back to its queue after a pause (see CopyFailurePause).
// Every copy carries the failure headers (event.Header*), counting the
// failed deliveries in moenda-attempts. The pauses and the failure times
// are clock's.
func Failures(queue, handler string, pol topology.Policy, sink Sink, clock Clock, stats *QueueStats, logger *slog.Logger) message.HandlerMiddleware {
	pause := &pauser{clock: clock, first: CopyFailurePause, most: copyFailurePauseMax}
	outage := &pauser{clock: clock, first: UnavailablePause, most: UnavailablePauseMax}
	// refused pauses a delivery whose copy the broker did not take, and
	// returns the error that sends it back to its queue.
	refused := func(ctx context.Context, what string, ids []any, err, perr error) error {
		if stopping(ctx) {
			logger.InfoContext(ctx, what+": the event goes back to its queue, as the process stops", append(ids, "error", perr)...)
		} else {
			pause.wait(ctx, func(d time.Duration) {
				logger.ErrorContext(ctx, what+": the queue's events go back to it after a pause", append(ids, "pause", d, "error", perr)...)
			})
		}
		return errors.Join(err, perr)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				outage.reset()
				return out, nil
			}
			ctx := msg.Context()
			if stopping(ctx) {
				return nil, err
			}
			ids := idsOf(msg)
			if errors.Is(err, handlers.ErrUnavailable) {
				outage.wait(ctx, func(d time.Duration) {
					logger.WarnContext(ctx, "database unavailable: the queue's events go back to it after a pause", append(ids, "pause", d, "error", err)...)
				})
				return nil, err
			}
			failed := failedAttempts(msg) + 1
			cp := msg.Copy()
			stamp(cp.Metadata, msg, queue, handler, failed, clock.Now(), err)
			reason := event.ReasonOf(err)
			if reason == "" && failed <= len(pol.Delays) {
				delay := pol.Delays[failed-1]
				if perr := sink.Delay(ctx, queue, delay, cp); perr != nil {
					return nil, refused(ctx, "the retry copy was not published", ids, err, perr)
				}
				pause.reset()
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
				return nil, refused(ctx, "the dead letter was not published", ids, err, perr)
			}
			pause.reset()
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

// failedAttempts reads how many deliveries of msg failed before this one.
func failedAttempts(msg *message.Message) int {
	n, err := strconv.Atoi(msg.Metadata.Get(event.HeaderAttempts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// stamp writes the failure headers onto md, the metadata of a copy of msg.
func stamp(md message.Metadata, msg *message.Message, queue, handler string, failed int, at time.Time, err error) {
	now := at.UTC().Format(time.RFC3339Nano)
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
