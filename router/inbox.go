package router

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers/event"
)

// Dedup runs the rest of the chain inside one unit of work of inbox that
// claims the event for queue: the handler's writes, its events and the
// claim commit together, and only then is the delivery acknowledged. A
// delivery of an event the queue has processed is acknowledged without
// running the handler, and counted. A handler with no database work (a
// webhook) is deduplicated too, but its outside effect is at least once: a
// crash between the call and the commit repeats it.
func Dedup(queue string, inbox Inbox, stats *QueueStats, logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			e, ok := eventOf(msg.Context())
			if !ok {
				return nil, event.Reject(event.ReasonDecode, errNotDecoded)
			}
			outer := msg.Context()
			defer msg.SetContext(outer)
			var out []*message.Message
			ran, err := inbox.Once(outer, queue, e.ID, func(ctx context.Context) error {
				msg.SetContext(ctx) // the unit of work travels in the context
				var err error
				out, err = h(msg)
				return err
			})
			if err != nil {
				return nil, err
			}
			if !ran {
				stats.Duplicates.Add(1)
				logger.DebugContext(outer, "event already processed by this queue: acknowledged without running the handler",
					"event_id", e.ID, "event_name", e.Name, "correlation_id", e.CorrelationID)
			}
			return out, nil
		}
	}
}
