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
