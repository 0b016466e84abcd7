package router

import (
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/event"
)

// Retry retries a failing handler up to retries times in the consumer,
// waiting interval, then twice that, and so on. Permanent errors and a
// shutdown are not retried. The message stays unacknowledged while it
// waits, so the waits must stay short; longer ones are the broker's (see
// Failures). It stands aside meanwhile (transport.StandAside): its
// subscriber hands its slot to the next delivery. Watermill's Retry
// middleware is not used: its ShouldRetry hook advances the backoff on
// every call, which doubles the waits of the schedule one configures.
// The waits are clock's.
func Retry(retries int, interval time.Duration, clock Clock, stats *QueueStats, logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			wait := interval
			for attempt := 0; ; attempt++ {
				out, err := h(msg)
				if err == nil || attempt == retries || event.IsPermanent(err) || stopping(msg.Context()) {
					return out, err
				}
				logger.DebugContext(msg.Context(), "handler failed: retrying in the consumer",
					"event_id", msg.UUID, "correlation_id", event.CorrelationID(msg.Context()), "retry_in", wait, "error", err)
				if err := transport.StandAside(msg.Context(), func() error { return clock.Sleep(msg.Context(), wait) }); err != nil {
					return nil, err
				}
				stats.RetriedImmediately.Add(1)
				wait *= 2
			}
		}
	}
}
