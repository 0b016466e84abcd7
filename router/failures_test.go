package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/testenv"
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock(true)
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
			failedAt := clock.Now().UTC().Format(time.RFC3339Nano)
			_, err := Failures("q", "p/s", schedule, sink, clock, stats, logger)(handlerFunc(func(*message.Message) error { return tt.err }))(msg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			// Only the database's absence makes the delivery wait in
			// its consumer, and for UnavailablePause.
			var wantSleeps []time.Duration
			if errors.Is(tt.err, handlers.ErrUnavailable) {
				wantSleeps = []time.Duration{UnavailablePause}
			}
			if got := clock.sleeps(); !slices.Equal(got, wantSleeps) {
				t.Fatalf("waits %v, want %v", got, wantSleeps)
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
				event.HeaderFirstFailureAt: failedAt, event.HeaderLastFailureAt: failedAt,
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
			if md.Get(event.HeaderError) == "" {
				t.Errorf("headers lack the error: %v", md)
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

// A copy the broker did not take leaves the delivery unacknowledged,
// after the queue's first pause.
func TestFailuresKeepTheMessageWhenTheCopyFails(t *testing.T) {
	for _, pol := range []topology.Policy{schedule, {DeadLetterExchange: "dlx", DeadLetterQueue: "q.dlq"}} {
		clock := newFakeClock(true)
		sink := &recordingSink{fail: errors.New("channel closed")}
		_, err := Failures("q", "p/s", pol, sink, clock, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error { return errors.New("boom") }))(decoded(t, newEvent(t)))
		if err == nil {
			t.Fatalf("delays %v: the delivery would be acknowledged without its copy", pol.Delays)
		}
		if got := clock.sleeps(); !slices.Equal(got, []time.Duration{CopyFailurePause}) {
			t.Fatalf("delays %v: waits %v, want one of %s", pol.Delays, got, CopyFailurePause)
		}
	}
}

// While the broker takes no copy, deliveries that fail go back to their
// queue only after a pause that doubles up to its ceiling, shared by every
// delivery of the queue and logged once; a copy the broker takes ends the
// backoff. Ten consumers fail at once, round after round, on the test's
// clock: each round all ten wait out the same pause, to the nanosecond.
func TestACopyThatFailsPausesTheQueue(t *testing.T) {
	clock := newFakeClock(false)
	logs := &pauseLog{level: slog.LevelError}
	sink := &recordingSink{fail: errors.New("NOT_FOUND - no queue 'q.retry.1s'")}
	failing := Failures("q", "p/s", schedule, sink, clock, NewStats(true).Queue("q"),
		slog.New(logs))(handlerFunc(func(*message.Message) error { return errors.New("boom") }))
	round := func(pause time.Duration) {
		t.Helper()
		pauseRound(t, clock, pause, func() {
			if _, err := failing(decoded(t, newEvent(t))); err == nil {
				t.Error("acknowledged without its copy")
			}
		})
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, copyFailurePauseMax, copyFailurePauseMax}
	for _, pause := range want {
		round(pause)
	}
	if got := logs.all(); !slices.Equal(got, want) {
		t.Fatalf("pauses logged %v, want one line per pause: %v", got, want)
	}
	sink.mu.Lock()
	sink.fail = nil
	sink.mu.Unlock()
	if _, err := failing(decoded(t, newEvent(t))); err != nil || len(sink.all()) != 1 {
		t.Fatalf("a copy the broker takes: error %v, %d copies", err, len(sink.all()))
	}
	sink.mu.Lock()
	sink.fail = errors.New("channel closed")
	sink.mu.Unlock()
	round(CopyFailurePause)
}

// pauseLog keeps the pause of each record a logger writes at level or
// above.
type pauseLog struct {
	level  slog.Level
	mu     sync.Mutex
	pauses []time.Duration
}

func (h *pauseLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *pauseLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < h.level {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var pause time.Duration
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "pause" {
			pause = a.Value.Duration()
		}
		return true
	})
	h.pauses = append(h.pauses, pause)
	return nil
}
func (h *pauseLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *pauseLog) WithGroup(string) slog.Handler      { return h }

func (h *pauseLog) all() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.pauses)
}

// An undecodable message is dead-lettered with the transport's ids.
func TestFailuresOfAnUndecodableMessage(t *testing.T) {
	sink := &recordingSink{}
	msg := message.NewMessage("11111111-1111-1111-1111-111111111111", []byte("{"))
	msg.Metadata.Set(event.MetaCorrelationID, "corr-9")
	_, err := Failures("q", "p/s", schedule, sink, newFakeClock(true), NewStats(true).Queue("q"), logger)(Decode("", nil, 0, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error { return nil })))(msg)
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
// queue after a pause that doubles up to its ceiling, shared by the
// queue's deliveries and logged once per pause: each return counts toward
// a quorum queue's delivery limit, so an outage must spend few of them.
// The first delivery that gets through ends the backoff.
func TestAnOutagePausesTheQueue(t *testing.T) {
	clock := newFakeClock(false)
	logs := &pauseLog{level: slog.LevelWarn}
	var down atomic.Bool
	down.Store(true)
	handle := Failures("q", "p/s", schedule, &recordingSink{}, clock, NewStats(true).Queue("q"), slog.New(logs))(handlerFunc(func(*message.Message) error {
		if down.Load() {
			return fmt.Errorf("inbox: claim: %w: SQLSTATE 25006", handlers.ErrUnavailable)
		}
		return nil
	}))
	away := func() {
		if _, err := handle(decoded(t, newEvent(t))); err == nil {
			t.Error("acknowledged while the database is away")
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, UnavailablePauseMax, UnavailablePauseMax}
	for _, pause := range want {
		pauseRound(t, clock, pause, away)
	}
	if got := logs.all(); !slices.Equal(got, want) {
		t.Fatalf("pauses logged %v, want one line per pause: %v", got, want)
	}
	down.Store(false)
	if _, err := handle(decoded(t, newEvent(t))); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	pauseRound(t, clock, UnavailablePause, away)
}

// pauseRound has ten consumers deliver at once and checks that all ten
// wait out the same pause, to the nanosecond, on clock.
func pauseRound(t *testing.T, clock *fakeClock, pause time.Duration, deliver func()) {
	t.Helper()
	before := len(clock.sleeps())
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(deliver)
	}
	testenv.Eventually(t, 10*time.Second, "ten deliveries pausing", func() bool { return clock.waiting() == 10 })
	for i, d := range clock.sleeps()[before:] {
		if d != pause {
			t.Fatalf("delivery %d waits %s, want %s", i, d, pause)
		}
	}
	clock.Advance(pause - time.Nanosecond)
	if n := clock.waiting(); n != 10 {
		t.Fatalf("%d of 10 deliveries went back before their %s pause ended", 10-n, pause)
	}
	clock.Advance(time.Nanosecond)
	wg.Wait()
}
