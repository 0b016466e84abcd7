package router

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// chainRun routes msgs through the whole chain on the memory broker, with
// 2 immediate retries and delays of 20 and 40 ms, and returns how often the
// handler ran, the queue's counters and the dead letters, once quiet.
func chainRun(t *testing.T, handle func(ctx context.Context, e event.Event) error, msgs ...*message.Message) (int32, *QueueStats, []*message.Message) {
	t.Helper()
	wlog := watermill.NewSlogLogger(logger)
	retries := 2
	top, err := topology.Build(topology.Config{
		Exchanges: []topology.ExchangeConfig{{Name: "x", Events: []string{"#"}}},
		Failure: topology.FailureConfig{ImmediateRetries: &retries, ImmediateInterval: time.Millisecond,
			Delays: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}, DeadLetter: topology.DeadLetterConfig{Exchange: "dlx", Queue: "{queue}.dlq"}},
	}, []topology.Subscription{{Queue: "q", Patterns: []string{"a.#"}}})
	if err != nil {
		t.Fatal(err)
	}
	b := memory.NewBroker(top, time.Second, wlog)
	defer b.Close()
	r, err := New(Config{CloseTimeout: time.Second}, wlog)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	pol, _ := top.Policy("q")
	stats := NewStats(true)
	AddRoutes(r, Deps{Subscriber: b.Subscriber, Sink: b, Inbox: memory.NewTransactor(b.Publisher, func(string) error { return nil }), Stats: stats, Logger: logger},
		[]Route{{Queue: "q", Handler: "p/s", Policy: pol, Handle: func(ctx context.Context, e event.Event) error { n.Add(1); return handle(ctx, e) }}})
	dlq, err := b.Subscriber.Subscribe(context.Background(), "q.dlq")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	for _, m := range msgs {
		if err := b.Publisher.Publish("a.b", m); err != nil {
			t.Fatal(err)
		}
	}
	var dead []*message.Message
	for {
		select {
		case m := <-dlq:
			m.Ack()
			dead = append(dead, m)
			continue
		case <-time.After(500 * time.Millisecond):
		}
		return n.Load(), stats.Queue("q"), dead
	}
}

func envelope(t *testing.T) *message.Message {
	msg, err := event.ToMessage(newEvent(t))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestChainOrder pins the order of the chain by behaviour that breaks if
// it changes. Each case names the swap it catches.
func TestChainOrder(t *testing.T) {
	transient := errors.New("webhook answered 503")
	t.Run("failures outside retry: a handler that fails twice then succeeds never leaves the consumer", func(t *testing.T) {
		var fails atomic.Int32
		calls, stats, dead := chainRun(t, func(context.Context, event.Event) error {
			if fails.Add(1) <= 2 {
				return transient
			}
			return nil
		}, envelope(t))
		if calls != 3 || stats.RetriedLater.Load() != 0 || stats.Handled.Load() != 1 || len(dead) != 0 {
			t.Fatalf("calls %d, delayed %d, handled %d, dead %d", calls, stats.RetriedLater.Load(), stats.Handled.Load(), len(dead))
		}
	})
	t.Run("retry inside failures: each delivery gets its immediate retries, then one dead letter", func(t *testing.T) {
		calls, stats, dead := chainRun(t, func(context.Context, event.Event) error { return transient }, envelope(t))
		if calls != 9 || stats.RetriedLater.Load() != 2 || len(dead) != 1 || dead[0].Metadata.Get(event.HeaderAttempts) != "3" ||
			dead[0].Metadata.Get(event.HeaderReason) != event.ReasonRetriesExhausted {
			t.Fatalf("calls %d (want 3 deliveries x 3), delayed %d, dead %d", calls, stats.RetriedLater.Load(), len(dead))
		}
	})
	t.Run("decode outside retry: a bad envelope is dead-lettered once, unhandled", func(t *testing.T) {
		calls, _, dead := chainRun(t, func(context.Context, event.Event) error { return nil },
			message.NewMessage(watermill.NewUUID(), []byte(`{"event_name":"a.b.v1"`)))
		if calls != 0 || len(dead) != 1 || dead[0].Metadata.Get(event.HeaderReason) != event.ReasonDecode {
			t.Fatalf("calls %d, dead %d", calls, len(dead))
		}
	})
	t.Run("inbox inside retry, recoverer inside inbox: a panic rolls back and is retried", func(t *testing.T) {
		var panics atomic.Int32
		calls, stats, dead := chainRun(t, func(context.Context, event.Event) error {
			if panics.Add(1) == 1 {
				panic("boom")
			}
			return nil
		}, envelope(t))
		if calls != 2 || stats.Handled.Load() != 1 || len(dead) != 0 {
			t.Fatalf("calls %d, handled %d, dead %d", calls, stats.Handled.Load(), len(dead))
		}
	})
	t.Run("inbox: a redelivered event runs once", func(t *testing.T) {
		msg := envelope(t)
		calls, stats, _ := chainRun(t, func(context.Context, event.Event) error { return nil }, msg, msg.Copy(), msg.Copy())
		if calls != 1 || stats.Duplicates.Load() != 2 {
			t.Fatalf("calls %d, duplicates %d", calls, stats.Duplicates.Load())
		}
	})
	t.Run("permanent: dead-lettered after one run", func(t *testing.T) {
		calls, _, dead := chainRun(t, func(context.Context, event.Event) error { return event.Permanent(errors.New("lacks titulo")) }, envelope(t))
		if calls != 1 || len(dead) != 1 || dead[0].Metadata.Get(event.HeaderReason) != event.ReasonPermanent {
			t.Fatalf("calls %d, dead %d", calls, len(dead))
		}
	})
}
