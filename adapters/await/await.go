// Package await waits for a condition that something else makes true: a
// queue draining, a row arriving. Tests and the benchmark wait the same way,
// so a wait that times out reads the same in both.
package await

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Interval is how often Until checks its condition.
const Interval = 10 * time.Millisecond

// ErrTimeout is what Until's error wraps when the time ran out.
var ErrTimeout = errors.New("timed out")

// Until checks cond every Interval until it holds, returns an error, ctx
// ends or timeout passes. what names the awaited state in the timeout error.
func Until(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return poll(ctx, timeout, what, cond, func(took time.Duration) time.Duration { return max(Interval-took, 0) })
}

// Sparing is Until for a cond that may cost: a test's walk over every
// delivery of a long drain, looked at every Interval, would take a core
// from the drain it waits on. It waits SparingPause between two looks.
func Sparing(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return poll(ctx, timeout, what, cond, SparingPause)
}

// SparingPause is ten times what the last look took, from Interval to a
// second: a tenth of a core for a cond that walks a drain, half of one
// for a cond that runs rabbitmqctl.
func SparingPause(took time.Duration) time.Duration {
	return min(max(Interval, 10*took), time.Second)
}

// poll checks cond until it holds, returns an error, ctx ends or timeout
// passes, pausing after each look what pause makes of the time it took.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error), pause func(took time.Duration) time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		began := time.Now()
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %s for %s: %w", timeout, what, ErrTimeout)
		}
		if !Sleep(ctx, pause(time.Since(began))) {
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// Sleep waits d or until ctx ends, and reports whether ctx is still live:
// a loop that retries or idles stops at once when its context does.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
