package bench

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/router"
)

// router returns a router running handle on the sink queue through the
// whole middleware chain, with the configured prefetch, and a function that
// closes its broker connections.
func (e *env) router(handle handlers.HandlerFunc) (*message.Router, func(), error) {
	b, err := amqp.NewTransport(e.set.AMQP, transport.Settings{Topology: e.top, CloseTimeout: e.set.Router.CloseTimeout, Logger: e.logger})
	if err != nil {
		return nil, nil, err
	}
	c, err := b.Consumer()
	var rt *message.Router
	if err == nil {
		rt, err = router.New(e.set.Router, e.wlog)
	}
	if err == nil {
		pol, _ := e.top.Policy(e.sink)
		route := router.Route{Queue: e.sink, Handler: "bench", Policy: pol, Handle: handle}
		router.AddRoutes(rt, router.Deps{Subscriber: c.Subscriber, Sink: c.Sink, Inbox: e.tx, Stats: router.NewStats(e.timed), Logger: e.logger, Tracer: e.tracer}, []router.Route{route})
	}
	if err != nil {
		_ = b.Close()
		return nil, nil, err
	}
	return rt, func() { _ = b.Close() }, nil
}

// newRelay returns a relay over the bench's outbox and exchange, as serve
// configures it, and a function that closes its connection.
func (e *env) newRelay(reader string) (*outbox.Relay, func() error, error) {
	return e.newRelayTo(reader, func(d outbox.Destination) outbox.Destination { return d })
}

// newRelayTo is newRelay publishing through what wrap makes of the
// broker's publisher, for a step that watches the relay's publishes.
func (e *env) newRelayTo(reader string, wrap func(outbox.Destination) outbox.Destination) (*outbox.Relay, func() error, error) {
	dest, err := amqp.NewBatchPublisher([]string{e.opts.AMQPURL}, "moenda outbox relay", e.set.Outbox.ConfirmWindow, e.top)
	if err != nil {
		return nil, nil, err
	}
	cfg := e.set.Outbox
	cfg.Reader = reader
	relay, err := outbox.NewRelay(e.pool, wrap(dest), e.top.Routable, cfg, e.logger)
	if err != nil {
		return nil, nil, errors.Join(err, dest.Close())
	}
	return relay, dest.Close, nil
}

// runRelay runs a relay with reader over the bench's outbox and exchange
// until stop is called.
func (e *env) runRelay(ctx context.Context, reader string) (relay *outbox.Relay, stop func(), err error) {
	relay, closeRelay, err := e.newRelay(reader)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	return relay, func() { cancel(); <-done; _ = closeRelay() }, nil
}

// publishEvents puts n fresh envelopes on the sink queue with the raw
// client and returns their event ids, in the order published.
func (e *env) publishEvents(ctx context.Context, n int) ([]string, error) {
	dest, err := amqp.NewBatchPublisher([]string{e.opts.AMQPURL}, "moenda bench", 256, e.top)
	if err != nil {
		return nil, err
	}
	defer dest.Close()
	ids := make([]string, 0, n)
	for sent := 0; sent < n; sent += 1000 {
		k := min(1000, n-sent)
		keys := make([]string, k)
		msgs := make([]*message.Message, k)
		for i := range k {
			ev := benchEvent()
			msg, err := event.ToMessage(ev)
			if err != nil {
				return nil, err
			}
			keys[i], msgs[i] = ev.RoutingKey(), msg
			ids = append(ids, ev.ID)
		}
		if err := dest.PublishBatch(ctx, keys, msgs); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
