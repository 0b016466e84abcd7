package await_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/await"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := await.Until(context.Background(), time.Second, "three calls", func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err=%v calls=%d, want nil after 3 calls", err, calls)
	}
}

func TestUntilStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	err := await.Until(context.Background(), time.Second, "x", func() (bool, error) { return false, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err=%v, want boom", err)
	}
}

func TestUntilTimesOutNamingWhatItAwaited(t *testing.T) {
	err := await.Until(context.Background(), 30*time.Millisecond, "the queue to drain", func() (bool, error) { return false, nil })
	if !errors.Is(err, await.ErrTimeout) || err.Error() != "waiting 30ms for the queue to drain: timed out" {
		t.Fatalf("err=%v", err)
	}
}

func TestUntilEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := await.Until(ctx, time.Minute, "x", func() (bool, error) { return false, nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err=%v, want context.Canceled", err)
	}
}

// A look that costs more is followed by a longer pause, ten times its
// own, from Interval to a second.
func TestSparingPausesTenTimesTheLook(t *testing.T) {
	for took, want := range map[time.Duration]time.Duration{
		0:                      await.Interval,
		time.Millisecond:       await.Interval,
		20 * time.Millisecond:  200 * time.Millisecond,
		300 * time.Millisecond: time.Second,
	} {
		if got := await.SparingPause(took); got != want {
			t.Errorf("after a look of %s: pause %s, want %s", took, got, want)
		}
	}
}

func TestSparingTimesOutAsUntilDoes(t *testing.T) {
	err := await.Sparing(context.Background(), 30*time.Millisecond, "the queue to drain", func() (bool, error) { return false, nil })
	if !errors.Is(err, await.ErrTimeout) || err.Error() != "waiting 30ms for the queue to drain: timed out" {
		t.Fatalf("err=%v", err)
	}
}
