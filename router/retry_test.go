package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/event"
)

func TestRetry(t *testing.T) {
	transient := errors.New("503")
	tests := []struct {
		name      string
		failFirst int   // the handler fails this many times, then succeeds
		err       error // the error it fails with
		wantCalls int
		wantErr   bool
	}{
		{"success", 0, transient, 1, false},
		{"fails twice, then succeeds", 2, transient, 3, false},
		{"fails for good: retries spent", 9, transient, 3, true},
		{"permanent: not retried", 9, event.Permanent(transient), 1, true},
		{"shutdown: not retried", 9, errStopped, 1, true},
		{"an error wrapping context.Canceled while nothing stops: retried", 9, fmt.Errorf("x: %w", context.Canceled), 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stats := NewStats(true).Queue("q")
			calls := 0
			msg := decoded(t, newEvent(t))
			if tt.err == errStopped {
				ctx, cancel := context.WithCancel(msg.Context())
				cancel()
				msg.SetContext(ctx)
			}
			_, err := Retry(2, time.Millisecond, newFakeClock(true), stats, logger)(handlerFunc(func(*message.Message) error {
				calls++
				if calls <= tt.failFirst {
					return tt.err
				}
				return nil
			}))(msg)
			if calls != tt.wantCalls || (err != nil) != tt.wantErr {
				t.Fatalf("%d calls, error %v; want %d calls, error %v", calls, err, tt.wantCalls, tt.wantErr)
			}
			if got := stats.RetriedImmediately.Load(); got != int64(tt.wantCalls-1) {
				t.Fatalf("%d immediate retries counted", got)
			}
		})
	}
}

// A message waiting for its next attempt lends its subscriber's slot to
// the next delivery, and holds it again when it runs.
func TestRetryStandsAsideWhileItWaits(t *testing.T) {
	slots := transport.NewSlots(1)
	slot, _ := slots.Take(context.Background())
	msg := decoded(t, newEvent(t))
	msg.SetContext(transport.WithSlot(msg.Context(), slot))
	free := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		other, ok := slots.Take(ctx)
		if ok {
			other.Release()
		}
		return ok
	}
	var freeWhileWaiting, freeWhileRunning []bool
	clock := probeClock{fakeClock: newFakeClock(true), sleeping: func() { freeWhileWaiting = append(freeWhileWaiting, free()) }}
	_, err := Retry(2, time.Millisecond, clock, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error {
		freeWhileRunning = append(freeWhileRunning, free())
		return errors.New("still failing")
	}))(msg)
	if err == nil {
		t.Fatal("the retries' last error was not returned")
	}
	if !slices.Equal(freeWhileWaiting, []bool{true, true}) || !slices.Equal(freeWhileRunning, []bool{false, false, false}) {
		t.Fatalf("the slot was free during the waits %v and the attempts %v; want during both waits and no attempt", freeWhileWaiting, freeWhileRunning)
	}
}

// probeClock is a fake clock that calls sleeping at each wait.
type probeClock struct {
	*fakeClock
	sleeping func()
}

func (c probeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleeping()
	return c.fakeClock.Sleep(ctx, d)
}

// The waits are the configured ones, doubling: nothing spends extra steps.
// The clock is the test's, so the schedule is asserted exactly.
func TestRetrySchedule(t *testing.T) {
	clock := newFakeClock(true)
	var at []time.Time
	_, err := Retry(3, 150*time.Millisecond, clock, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error {
		at = append(at, clock.Now())
		return errors.New("still failing")
	}))(decoded(t, newEvent(t)))
	if err == nil || len(at) != 4 {
		t.Fatalf("%d calls, error %v; want 4 calls and the last error", len(at), err)
	}
	want := []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond}
	if got := clock.sleeps(); !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	for i, w := range want {
		if gap := at[i+1].Sub(at[i]); gap != w {
			t.Errorf("attempt %d came %s after the one before, want %s", i+2, gap, w)
		}
	}
}

// A wait ends with the message's context: the process stops without
// waiting out the schedule, and the handler runs no more.
func TestRetryStopsWaitingWhenTheContextEnds(t *testing.T) {
	clock := newFakeClock(false)
	msg := decoded(t, newEvent(t))
	ctx, cancel := context.WithCancel(msg.Context())
	msg.SetContext(ctx)
	calls := 0
	done := make(chan error, 1)
	go func() {
		_, err := Retry(2, time.Hour, clock, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error {
			calls++
			return errors.New("still failing")
		}))(msg)
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the first wait", func() bool { return clock.waiting() == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || calls != 1 {
			t.Fatalf("%d calls, error %v; want 1 call and context.Canceled", calls, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after its context ended")
	}
}

// The real clock really waits: each wait lasts at least its configured
// length. The upper bound only catches a wait gone far astray, as a
// loaded machine may be late; TestRetrySchedule pins the schedule.
func TestRetryScheduleInRealTime(t *testing.T) {
	var at []time.Time
	_, _ = Retry(2, 50*time.Millisecond, realClock{}, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error {
		at = append(at, time.Now())
		return errors.New("still failing")
	}))(decoded(t, newEvent(t)))
	if len(at) != 3 {
		t.Fatalf("%d calls", len(at))
	}
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < want || gap > want+2*time.Second {
			t.Errorf("wait %d was %s, want %s", i+1, gap, want)
		}
	}
}
