package router

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

type eventKey struct{}

// withEvent returns ctx carrying the decoded event and its ids, so the
// middleware inside decode and the handler read it without decoding again.
func withEvent(ctx context.Context, e event.Event) context.Context {
	ctx = event.WithCausation(event.WithCorrelation(ctx, e.CorrelationID), e.ID)
	return context.WithValue(ctx, eventKey{}, e)
}

// eventOf returns the event decode put in ctx.
func eventOf(ctx context.Context) (event.Event, bool) {
	e, ok := ctx.Value(eventKey{}).(event.Event)
	return e, ok
}

// run adapts a plugin handler to Watermill: it runs innermost, on the
// event decode put in the message's context, and counts the outcome.
func run(handle handlers.HandlerFunc, stats *QueueStats) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		e, ok := eventOf(msg.Context())
		if !ok {
			return event.Reject(event.ReasonDecode, errNotDecoded)
		}
		err := stats.time(func() error { return handle(msg.Context(), e) })
		if err != nil {
			stats.Failed.Add(1)
			return err
		}
		stats.Handled.Add(1)
		return nil
	}
}
