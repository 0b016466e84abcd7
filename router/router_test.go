package router_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/router"
)

var cfg = router.Config{
	CloseTimeout: time.Second,
	Retry:        router.RetryConfig{MaxRetries: 2, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond},
}

// run routes one message to handle through the chain over the memory
// broker and returns how often handle ran and what reached the DLQ.
func run(t *testing.T, msg *message.Message, handle func(ctx context.Context, e event.Event) error) (calls int32, dead *message.Message) {
	t.Helper()
	wlog := watermill.NewSlogLogger(testenv.Logger())
	top, err := topology.Build(topology.Config{
		Exchanges:  []topology.ExchangeConfig{{Name: "x", Events: []string{"#"}}},
		DeadLetter: topology.DeadLetterConfig{Exchange: "dlx", Queue: "{queue}.dlq"},
	}, []topology.Subscription{{Queue: "q", Patterns: []string{"a.#"}}})
	if err != nil {
		t.Fatal(err)
	}
	b := memory.NewBroker(top, wlog)
	defer b.Close()
	r, err := router.New(cfg, wlog)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	err = router.AddRoutes(r, b.Subscriber, b.DeadLetter, cfg, testenv.Logger(), []router.Route{{
		Queue:  "q",
		Handle: func(ctx context.Context, e event.Event) error { n.Add(1); return handle(ctx, e) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := b.Subscriber.Subscribe(context.Background(), "q.dlq")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	if err := b.Publisher.Publish("a.b", msg); err != nil {
		t.Fatal(err)
	}
	select {
	case dead = <-dlq:
		dead.Ack()
	case <-time.After(500*time.Millisecond + time.Duration(cfg.Retry.MaxRetries+1)*cfg.Retry.MaxInterval):
	}
	return n.Load(), dead
}

func envelope(t *testing.T) *message.Message {
	t.Helper()
	e, err := event.New("a.b.v1", "test", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	e.CorrelationID = "corr-1"
	msg, err := event.ToMessage(e)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func TestChain(t *testing.T) {
	transient := errors.New("webhook answered 503")
	tests := []struct {
		name      string
		msg       func(t *testing.T) *message.Message
		handle    func(fails *atomic.Int32) func(context.Context, event.Event) error
		wantCalls int32
		wantDLQ   string // "" when nothing may reach the DLQ
	}{
		{"success", envelope, func(*atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error { return nil }
		}, 1, ""},
		{"transient failure, then success", envelope, func(f *atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error {
				if f.Add(1) <= 2 {
					return transient
				}
				return nil
			}
		}, 3, ""},
		{"failing for good: retried, then dead-lettered", envelope, func(*atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error { return transient }
		}, 3, "webhook answered 503"},
		{"permanent error: no retry", envelope, func(*atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error { return event.Permanent(errors.New("payload lacks titulo")) }
		}, 1, "payload lacks titulo"},
		{"panic: recovered, retried, dead-lettered", envelope, func(*atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error { panic("boom") }
		}, 3, "boom"},
		{"undecodable envelope never reaches the handler", func(*testing.T) *message.Message {
			return message.NewMessage(watermill.NewUUID(), []byte(`{"event_name": "a.b.v1"`))
		}, func(*atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error { return nil }
		}, 0, "decode envelope"},
		{"envelope without event_id", func(*testing.T) *message.Message {
			return message.NewMessage(watermill.NewUUID(), []byte(`{"event_name":"a.b.v1","occurred_at":"2026-01-01T00:00:00Z","payload":{}}`))
		}, func(*atomic.Int32) func(context.Context, event.Event) error {
			return func(context.Context, event.Event) error { return nil }
		}, 0, "event_id is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fails atomic.Int32
			calls, dead := run(t, tt.msg(t), tt.handle(&fails))
			if calls != tt.wantCalls {
				t.Errorf("handler ran %d times, want %d", calls, tt.wantCalls)
			}
			switch {
			case tt.wantDLQ == "" && dead != nil:
				t.Errorf("message dead-lettered: %s", dead.Metadata.Get(middleware.ReasonForPoisonedKey))
			case tt.wantDLQ != "" && dead == nil:
				t.Errorf("message did not reach the DLQ")
			case tt.wantDLQ != "" && !strings.Contains(dead.Metadata.Get(middleware.ReasonForPoisonedKey), tt.wantDLQ):
				t.Errorf("DLQ reason %q lacks %q", dead.Metadata.Get(middleware.ReasonForPoisonedKey), tt.wantDLQ)
			}
		})
	}
}

func TestHandlerContextCarriesCorrelationAndCausation(t *testing.T) {
	msg := envelope(t)
	var corr, cause, id string
	calls, _ := run(t, msg, func(ctx context.Context, e event.Event) error {
		corr, cause, id = event.CorrelationID(ctx), event.CausationID(ctx), e.ID
		return nil
	})
	if calls != 1 || corr != "corr-1" || cause != id || id != msg.UUID {
		t.Fatalf("calls %d, correlation %q, causation %q, event %q (message %s)", calls, corr, cause, id, msg.UUID)
	}
}

// The waits between attempts are the configured ones (±20 % jitter):
// nothing in the chain spends extra backoff steps.
func TestRetrySchedule(t *testing.T) {
	slow := cfg
	slow.Retry = router.RetryConfig{MaxRetries: 2, InitialInterval: 300 * time.Millisecond, MaxInterval: time.Second}
	old := cfg
	cfg = slow
	defer func() { cfg = old }()
	var attempts []time.Time
	calls, dead := run(t, envelope(t), func(context.Context, event.Event) error {
		attempts = append(attempts, time.Now())
		return errors.New("still failing")
	})
	if calls != 3 || dead == nil {
		t.Fatalf("%d calls, dead-lettered %v", calls, dead != nil)
	}
	for i, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
		gap := attempts[i+1].Sub(attempts[i])
		// The lower bound is exact; the upper one leaves a busy machine
		// 150 ms, still well below the doubled wait a spent step would give.
		if gap < want*8/10 || gap > want*12/10+150*time.Millisecond {
			t.Errorf("wait %d was %s, want %s ±20%%", i+1, gap, want)
		}
	}
}
