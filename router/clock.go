package router

import (
	"context"
	"time"
)

// Clock is the time the chain reads and waits on: the immediate retries'
// waits, the pauses of a queue whose copies fail or whose database is
// away, and the failure times a copy carries. Deps.Clock leaves it to
// the real one; a test hands in a clock it moves itself, so it can assert
// a schedule exactly instead of timing real sleeps.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends, and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the system's time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return ctx.Err()
}

// clockOr returns c, or the real clock when c is nil.
func clockOr(c Clock) Clock {
	if c == nil {
		return realClock{}
	}
	return c
}
