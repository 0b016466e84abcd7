// Package memory is the in-process environment: a broker on Watermill's
// GoChannel that routes by the same topology as RabbitMQ (exchanges, topic
// bindings, dead-letter queues) and keeps the same retry schedule with
// timers, and a transactor whose "outbox" publishes after an in-memory
// commit and whose inbox remembers processed events. It needs no external
// service; state lives as long as the process.
package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Broker routes messages to in-process queues.
type Broker struct {
	ch  *gochannel.GoChannel
	top *topology.Topology
	// Publisher publishes with topic = routing key, like the AMQP one.
	Publisher message.Publisher
	// Subscriber consumes with topic = queue name.
	Subscriber message.Subscriber
}

// NewBroker returns a broker whose queues keep messages published before
// anyone consumes them, like durable queues. GoChannel keeps every message
// for the life of the process, consumed or not: the memory environment is
// for development and tests, not for long runs. When a subscription ends,
// the messages in hand keep their contexts for nine tenths of
// closeTimeout at most, as with RabbitMQ (amqp.NewSubscriber).
func NewBroker(top *topology.Topology, closeTimeout time.Duration, logger watermill.LoggerAdapter) *Broker {
	ch := gochannel.NewGoChannel(gochannel.Config{Persistent: true, OutputChannelBuffer: 64}, logger)
	b := &Broker{ch: ch, top: top}
	b.Subscriber = &subscriber{b: b, grace: transport.Grace(closeTimeout), closing: make(chan struct{})}
	b.Publisher = exchangePublisher{b: b}
	return b
}

// Close ends the subscriptions, then closes the channels.
func (b *Broker) Close() error { return errors.Join(b.Subscriber.Close(), b.ch.Close()) }

// route delivers a copy of each message to every queue bound to exchange
// with a matching key; a message no binding matches goes to the exchange's
// alternate (unrouted) queue when there is one, as RabbitMQ would do.
func (b *Broker) route(exchange, key string, msgs ...*message.Message) error {
	queues := b.top.QueuesFor(exchange, key)
	if len(queues) == 0 {
		if alt := b.top.AlternateOf(exchange); alt != "" {
			queues = b.top.QueuesFor(alt, key)
		}
	}
	for _, q := range queues {
		for _, m := range msgs {
			if err := b.deliver(q, exchange, key, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// deliver puts a copy of msg on queue, noting where it came from as the
// AMQP adapter does.
func (b *Broker) deliver(queue, exchange, key string, msg *message.Message) error {
	cp := msg.Copy()
	cp.Metadata.Set(event.MetaDeliveryExchange, exchange)
	cp.Metadata.Set(event.MetaDeliveryRoutingKey, key)
	if err := b.ch.Publish(queue, cp); err != nil {
		return fmt.Errorf("memory: publish to %s: %w", queue, err)
	}
	return nil
}

// Delay delivers msg to queue again after delay, with a timer: the memory
// broker's retry tier. Like everything in this environment, a waiting
// message ends with the process.
func (b *Broker) Delay(_ context.Context, queue string, delay time.Duration, msg *message.Message) error {
	cp := msg.Copy()
	time.AfterFunc(delay, func() { _ = b.deliver(queue, "", queue, cp) }) // fails only once the broker is closed
	return nil
}

// DeadLetter routes msg through queue's dead-letter exchange, as RabbitMQ
// would route it.
func (b *Broker) DeadLetter(_ context.Context, queue string, msg *message.Message) error {
	pol, ok := b.top.Policy(queue)
	if !ok {
		return fmt.Errorf("memory: no subscription consumes %q", queue)
	}
	return b.route(pol.DeadLetterExchange, queue, msg)
}

// Redeliver puts msg on queue alone, through the default exchange as
// RabbitMQ would.
func (b *Broker) Redeliver(_ context.Context, queue string, msg *message.Message) error {
	if _, ok := b.top.Policy(queue); !ok {
		return fmt.Errorf("memory: no subscription consumes %q", queue)
	}
	return b.deliver(queue, "", queue, msg)
}

// Republish implements transport.Sink.
func (b *Broker) Republish(_ context.Context, exchange, key string, msg *message.Message) error {
	return b.route(exchange, key, msg)
}

type exchangePublisher struct{ b *Broker }

func (p exchangePublisher) Publish(topic string, msgs ...*message.Message) error {
	x, err := p.b.top.ExchangeFor(topic)
	if err != nil {
		return err
	}
	return p.b.route(x, topic, msgs...)
}

func (exchangePublisher) Close() error { return nil }

// Transactor runs units of work one at a time against in-memory stores;
// events published in a unit of work go to the broker after it commits.
type Transactor struct {
	mu       sync.Mutex
	pub      message.Publisher
	routable func(string) error
	inbox    map[inboxKey]inboxRow // guarded by mu
}

// NewTransactor returns a Transactor publishing committed events to pub.
func NewTransactor(pub message.Publisher, routable func(string) error) *Transactor {
	return &Transactor{pub: pub, routable: routable, inbox: map[inboxKey]inboxRow{}}
}

type pending struct {
	key string
	msg *message.Message
}

type tx struct {
	t      *Transactor
	events []pending
	hooks  []func()
}

// txKey marks a context that runs inside one of t's units of work.
type txKey struct{ t *Transactor }

// InTx runs fn; if it returns nil, the events are published and then the
// staged writes applied (OnCommit hooks). A failed publish (the broker is
// closed) applies nothing. Handlers woken by the events wait for the lock,
// so they see the writes. Called inside a unit of work of t (a handler's),
// it joins it.
func (t *Transactor) InTx(ctx context.Context, fn func(ctx context.Context, tx handlers.Tx) error) error {
	if x, ok := ctx.Value(txKey{t}).(*tx); ok {
		return fn(ctx, x)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.run(ctx, fn)
}

// run is InTx with t.mu held.
func (t *Transactor) run(ctx context.Context, fn func(ctx context.Context, tx handlers.Tx) error) error {
	x := &tx{t: t}
	if err := fn(context.WithValue(ctx, txKey{t}, x), x); err != nil {
		return err
	}
	for _, p := range x.events {
		if err := t.pub.Publish(p.key, p.msg); err != nil {
			return fmt.Errorf("memory: publish event %s: %w", p.msg.UUID, err)
		}
	}
	for _, h := range x.hooks {
		h()
	}
	return nil
}

func (x *tx) Publish(ctx context.Context, events ...event.Event) error {
	for _, e := range events {
		msg, key, err := outbox.Prepare(ctx, e, x.t.routable)
		if err != nil {
			return err
		}
		x.events = append(x.events, pending{key: key, msg: msg})
	}
	return nil
}

func (x *tx) Postgres() pgx.Tx { return nil }

func (x *tx) OnCommit(fn func()) { x.hooks = append(x.hooks, fn) }
