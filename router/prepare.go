package router

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers"
)

// Prepare runs a handler's first step (handlers.PrepareFunc) outside the
// unit of work the inbox opens next, and hands the context it returns to
// the rest of the chain: a handler that waits on another service (credito's
// analysis) then holds no database connection meanwhile, and a pool of a
// few connections serves the HTTP routes while many such handlers wait.
// It sits inside retry, so each attempt prepares again.
func Prepare(prepare handlers.PrepareFunc) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			e, ok := eventOf(msg.Context())
			if !ok {
				return h(msg)
			}
			outer := msg.Context()
			ctx, err := prepare(outer, e)
			if err != nil {
				return nil, err
			}
			if ctx == nil {
				ctx = outer
			}
			msg.SetContext(ctx)
			defer msg.SetContext(outer)
			return h(msg)
		}
	}
}
