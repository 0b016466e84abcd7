package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

var schedule = topology.Policy{Delays: []time.Duration{time.Second, 5 * time.Second}, DeadLetterExchange: "dlx", DeadLetterQueue: "q.dlq"}

func TestFailures(t *testing.T) {
	transient := errors.New("webhook answered 503")
	tests := []struct {
		name       string
		failedYet  int // moenda-attempts on the delivery
		err        error
		wantErr    bool // nack: the delivery goes back to its queue
		wantDelay  time.Duration
		wantReason string
	}{
		{"success", 0, nil, false, 0, ""},
		{"first failure waits 1s in the broker", 0, transient, false, time.Second, ""},
		{"second failure waits 5s", 1, transient, false, 5 * time.Second, ""},
		{"schedule spent: dead letter", 2, transient, false, 0, event.ReasonRetriesExhausted},
		{"permanent: dead letter at once", 0, event.Permanent(transient), false, 0, event.ReasonPermanent},
		{"reason class kept", 0, event.Reject(event.ReasonDecode, transient), false, 0, event.ReasonDecode},
		{"shutdown: back to the queue, no copy", 0, errStopped, true, 0, ""},
		{"an error wrapping context.Canceled while nothing stops: retried", 0, fmt.Errorf("client: %w", context.Canceled), false, time.Second, ""},
		{"database away: back to the queue, no attempt spent", 1, fmt.Errorf("%w: conn refused", handlers.ErrUnavailable), true, 0, ""},
	}
	UnavailablePause = time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &recordingSink{}
			stats := NewStats(true).Queue("q")
			e := newEvent(t)
			msg := decoded(t, e)
			if tt.err == errStopped {
				ctx, cancel := context.WithCancel(msg.Context())
				cancel()
				msg.SetContext(ctx)
			}
			if tt.failedYet > 0 {
				msg.Metadata.Set(event.HeaderAttempts, fmt.Sprint(tt.failedYet))
				msg.Metadata.Set(event.HeaderFirstFailureAt, "2026-01-01T00:00:00Z")
				msg.Metadata.Set(event.HeaderOriginalExchange, "first")
				msg.Metadata.Set(event.HeaderOriginalRoutingKey, "a.b")
				msg.Metadata.Set(event.MetaDeliveryExchange, "") // handed back by a retry queue
				msg.Metadata.Set(event.MetaDeliveryRoutingKey, "q")
			}
			_, err := Failures("q", "p/s", schedule, sink, stats, logger)(handlerFunc(func(*message.Message) error { return tt.err }))(msg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			copies := sink.all()
			if tt.err == nil || tt.wantErr {
				if len(copies) != 0 {
					t.Fatalf("%d copies made", len(copies))
				}
				return
			}
			if len(copies) != 1 {
				t.Fatalf("%d copies, want 1", len(copies))
			}
			c := copies[0]
			md := c.msg.Metadata
			if c.queue != "q" || c.dead != (tt.wantReason != "") || c.delay != tt.wantDelay {
				t.Fatalf("copy = %+v, want delay %s reason %q", c, tt.wantDelay, tt.wantReason)
			}
			want := map[string]string{
				event.HeaderAttempts: fmt.Sprint(tt.failedYet + 1), event.HeaderQueue: "q", event.HeaderHandler: "p/s",
				event.HeaderEventID: e.ID, event.HeaderCorrelationID: "corr-1", event.HeaderReason: tt.wantReason,
				event.HeaderOriginalRoutingKey: "a.b", event.HeaderOriginalExchange: "x",
			}
			if tt.failedYet > 0 {
				want[event.HeaderFirstFailureAt] = "2026-01-01T00:00:00Z"
				want[event.HeaderOriginalExchange] = "first"
			}
			for k, v := range want {
				if md.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, md.Get(k), v)
				}
			}
			if md.Get(event.HeaderError) == "" || md.Get(event.HeaderLastFailureAt) == "" || md.Get(event.HeaderFirstFailureAt) == "" {
				t.Errorf("headers lack the error or the failure times: %v", md)
			}
			if c.msg.UUID != msg.UUID || string(c.msg.Payload) != string(msg.Payload) {
				t.Error("the copy is not the message")
			}
			if tt.wantReason != "" && stats.DeadLettered()[tt.wantReason] != 1 {
				t.Errorf("dead letters by reason = %v", stats.DeadLettered())
			}
		})
	}
}

// errStopped is the handler's error when the process stops: the
// message's context has ended.
var errStopped = fmt.Errorf("stopping: %w", context.Canceled)

// A copy the broker did not take leaves the delivery unacknowledged.
func TestFailuresKeepTheMessageWhenTheCopyFails(t *testing.T) {
	CopyFailurePause = time.Millisecond
	for _, pol := range []topology.Policy{schedule, {DeadLetterExchange: "dlx", DeadLetterQueue: "q.dlq"}} {
		sink := &recordingSink{fail: errors.New("channel closed")}
		_, err := Failures("q", "p/s", pol, sink, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error { return errors.New("boom") }))(decoded(t, newEvent(t)))
		if err == nil {
			t.Fatalf("delays %v: the delivery would be acknowledged without its copy", pol.Delays)
		}
	}
}

// While the broker takes no copy, deliveries that fail go back to their
// queue only after a pause that doubles, shared by every delivery of the
// queue and logged once: ten consumers handed their messages back at once
// run the handler a bounded number of times in 2 s, not as fast as it
// runs.
func TestACopyThatFailsPausesTheQueue(t *testing.T) {
	CopyFailurePause = 100 * time.Millisecond
	logs := &countingHandler{}
	failing := Failures("q", "p/s", schedule, &recordingSink{fail: errors.New("NOT_FOUND - no queue 'q.retry.1s'")}, NewStats(true).Queue("q"),
		slog.New(logs))(handlerFunc(func(*message.Message) error { return errors.New("boom") }))
	var runs atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for range 10 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				runs.Add(1)
				if _, err := failing(decoded(t, newEvent(t))); err == nil {
					t.Error("acknowledged without its copy")
					return
				}
			}
		})
	}
	wg.Wait()
	// Pauses of 0.1, 0.2, 0.4, 0.8 and 1.6 s fill 2 s: at most six rounds.
	if n := runs.Load(); n > 10*6 {
		t.Fatalf("the handler ran %d times in 2 s", n)
	}
	if n := logs.errors.Load(); n < 1 || n > 6 {
		t.Fatalf("%d errors logged in 2 s, want one per pause", n)
	}
}

// countingHandler counts the records a logger writes at level or above
// (ERROR when level is not set).
type countingHandler struct {
	level  slog.Level
	errors atomic.Int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	least := slog.LevelError
	if h.level != 0 {
		least = h.level
	}
	if r.Level >= least {
		h.errors.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// An undecodable message is dead-lettered with the transport's ids.
func TestFailuresOfAnUndecodableMessage(t *testing.T) {
	sink := &recordingSink{}
	msg := message.NewMessage("11111111-1111-1111-1111-111111111111", []byte("{"))
	msg.Metadata.Set(event.MetaCorrelationID, "corr-9")
	_, err := Failures("q", "p/s", schedule, sink, NewStats(true).Queue("q"), logger)(Decode("", nil, 0, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error { return nil })))(msg)
	if err != nil {
		t.Fatal(err)
	}
	c := sink.all()
	if len(c) != 1 || !c[0].dead || c[0].msg.Metadata.Get(event.HeaderReason) != event.ReasonDecode ||
		c[0].msg.Metadata.Get(event.HeaderEventID) != msg.UUID || c[0].msg.Metadata.Get(event.HeaderCorrelationID) != "corr-9" {
		t.Fatalf("copies = %+v", c)
	}
}

// While the platform's database is away, deliveries go back to their
// queue after a pause that doubles, shared by the queue's deliveries and
// logged once per pause: each return counts toward a quorum queue's
// delivery limit, so an outage must spend few of them. The first delivery
// that gets through ends the backoff.
func TestAnOutagePausesTheQueue(t *testing.T) {
	UnavailablePause = 100 * time.Millisecond
	t.Cleanup(func() { UnavailablePause = time.Second })
	logs := &countingHandler{level: slog.LevelWarn}
	var down atomic.Bool
	down.Store(true)
	handle := Failures("q", "p/s", schedule, &recordingSink{}, NewStats(true).Queue("q"), slog.New(logs))(handlerFunc(func(*message.Message) error {
		if down.Load() {
			return fmt.Errorf("inbox: claim: %w: SQLSTATE 25006", handlers.ErrUnavailable)
		}
		return nil
	}))
	var runs atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for range 10 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				runs.Add(1)
				if _, err := handle(decoded(t, newEvent(t))); err == nil {
					t.Error("acknowledged while the database is away")
					return
				}
			}
		})
	}
	wg.Wait()
	// Pauses of 0.1, 0.2, 0.4, 0.8 and 1.6 s fill 2 s: at most six rounds,
	// where a fixed pause would make twenty.
	if n := runs.Load(); n > 10*6 {
		t.Fatalf("the handler ran %d times in a 2 s outage", n)
	}
	if n := logs.errors.Load(); n < 1 || n > 6 {
		t.Fatalf("%d warnings logged in 2 s, want one per pause", n)
	}
	down.Store(false)
	if _, err := handle(decoded(t, newEvent(t))); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	start := time.Now()
	if _, err := handle(decoded(t, newEvent(t))); err == nil {
		t.Fatal("acknowledged while the database is away")
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("the next outage began with a pause of %s, want the first again", waited)
	}
}
