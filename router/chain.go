package router

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"go.opentelemetry.io/otel/trace"
)

// Deps are what the chain works with.
type Deps struct {
	// Subscriber consumes with topic = queue name.
	Subscriber message.Subscriber
	Sink       Sink
	Inbox      Inbox
	Stats      *Stats
	Logger     *slog.Logger
	// MaxMessageBytes bounds a message's body; a larger one fails
	// permanently (too_large) before it is decoded. 0: no bound.
	MaxMessageBytes int
	// Tracer, when set, gives each message's handling a span (Trace),
	// outside the rest of the chain.
	Tracer trace.Tracer
	// Clock is the time the chain waits on; nil is the real one.
	Clock Clock
}

// AddRoutes adds one consumer handler per route, consuming its queue, each
// behind this chain (outermost first), after the goroutine's stack is
// grown (stack.go) and the tracing span when deps.Tracer is set
// (trace.go):
//
//  1. failures (failures.go): when the rest of the chain fails, the
//     message is copied to the queue's retry tier for the next delay of its
//     schedule, or, when the schedule is spent or the error is permanent,
//     to its dead-letter queue with the whole story in its headers; the
//     delivery is acknowledged once the broker holds the copy. A shutdown,
//     or the platform's own database away, sends the message back to its
//     queue without spending an attempt.
//  2. decode (decode.go): the envelope is decoded and checked (a bad or
//     oversized one is a permanent error with its reason class); an event type the handler
//     does not handle is acknowledged and counted, not failed.
//  3. retry (retry.go): a few immediate retries with doubling waits.
//  4. prepare (prepare.go), for a handler that has a first step: it runs
//     before the unit of work opens, so a wait holds no connection.
//  5. inbox (inbox.go): each attempt is one unit of work that claims the
//     event for the queue, runs the handler, and commits; an event
//     processed before is acknowledged without running the handler.
//  6. Watermill's recoverer: a panic becomes an error (and a rollback).
//
// Failures must sit outside retry, or a failing message would leave after
// one attempt; the inbox must sit inside it, so each attempt rolls back on
// its own. TestChainOrder pins this order.
func AddRoutes(r *message.Router, deps Deps, routes []Route) {
	for _, rt := range routes {
		stats := deps.Stats.route(rt.Queue, rt.Handler)
		log := deps.Logger.With("queue", rt.Queue, "handler", rt.Handler)
		h := r.AddConsumerHandler(rt.Queue, rt.Queue, deps.Subscriber, run(rt.Handle, stats))
		h.AddMiddleware(chain(rt, deps, stats, log)...)
	}
}

// chain returns the route's middleware, outermost first.
func chain(rt Route, deps Deps, stats *QueueStats, log *slog.Logger) []message.HandlerMiddleware {
	mws := []message.HandlerMiddleware{GrowStack}
	clock := clockOr(deps.Clock)
	if deps.Tracer != nil {
		mws = append(mws, Trace(rt.Queue, rt.Handler, deps.Tracer))
	}
	mws = append(mws,
		Failures(rt.Queue, rt.Handler, rt.Policy, deps.Sink, clock, stats, log),
		Decode(rt.Envelope, rt.Handles, deps.MaxMessageBytes, stats, log),
		Retry(rt.Policy.ImmediateRetries, rt.Policy.ImmediateInterval, clock, stats, log),
	)
	if rt.Prepare != nil {
		mws = append(mws, Prepare(rt.Prepare))
	}
	return append(mws,
		Dedup(rt.consumer(), deps.Inbox, stats, log),
		middleware.Recoverer,
	)
}
