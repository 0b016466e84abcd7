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
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(Interval)
	defer ticker.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %s for %s: %w", timeout, what, ErrTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-ticker.C:
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
