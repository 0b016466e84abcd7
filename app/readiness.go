package app

import (
	"context"
	"sync"
	"time"
)

// readyInterval is how long a readiness answer is reused: an orchestrator
// probing every few seconds, or a crowd of them, costs at most one probe
// of PostgreSQL and the broker per interval.
const readyInterval = time.Second

// readyTimeout bounds one probe, whoever waits for it.
const readyTimeout = 2 * time.Second

// readyAnswer is the status and body /readyz answers.
type readyAnswer struct {
	code int
	body map[string]any
}

// readiness shares one probe among the requests that ask at once, and
// keeps its answer for readyInterval. The probe runs on a context of its
// own, bounded by readyTimeout, so a request that ends early neither
// cancels it for the others nor waits for it: each request waits within
// its own context.
type readiness struct {
	mu      sync.Mutex
	at      time.Time     // when last was probed
	last    readyAnswer   // the last probe's answer
	running chan struct{} // closed when the probe in flight ends; nil when none
}

// get returns the answer of a probe that ended less than readyInterval
// ago, or of the one in flight, or starts one with probe; it returns
// ctx's error if ctx ends first.
func (r *readiness) get(ctx context.Context, probe func(context.Context) readyAnswer) (readyAnswer, error) {
	r.mu.Lock()
	if r.running == nil && !r.at.IsZero() && time.Since(r.at) < readyInterval {
		a := r.last
		r.mu.Unlock()
		return a, nil
	}
	if r.running == nil {
		done := make(chan struct{})
		r.running = done
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
			a := probe(pctx)
			cancel()
			r.mu.Lock()
			r.last, r.at, r.running = a, time.Now(), nil
			r.mu.Unlock()
			close(done)
		}()
	}
	done := r.running
	r.mu.Unlock()
	select {
	case <-done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.last, nil
	case <-ctx.Done():
		return readyAnswer{}, ctx.Err()
	}
}
