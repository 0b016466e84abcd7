package router

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
			_, err := Retry(2, time.Millisecond, stats, logger)(handlerFunc(func(*message.Message) error {
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

// The waits are the configured ones, doubling: nothing spends extra steps.
func TestRetrySchedule(t *testing.T) {
	var at []time.Time
	_, _ = Retry(2, 150*time.Millisecond, NewStats(true).Queue("q"), logger)(handlerFunc(func(*message.Message) error {
		at = append(at, time.Now())
		return errors.New("still failing")
	}))(decoded(t, newEvent(t)))
	if len(at) != 3 {
		t.Fatalf("%d calls", len(at))
	}
	for i, want := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond} {
		// The lower bound is exact; the upper one leaves a busy machine
		// 100 ms, well below a doubled wait.
		if gap := at[i+1].Sub(at[i]); gap < want || gap > want+100*time.Millisecond {
			t.Errorf("wait %d was %s, want %s", i+1, gap, want)
		}
	}
}
