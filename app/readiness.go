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
	body Readiness
}

// Readiness is what /readyz answers, and the status page shows.
type Readiness struct {
	// Status is ready, degraded (ready, with a part that waits: see
	// probeReadiness) or unavailable.
	Status string `json:"status"`
	// Checks are "ok", or the error, of each service the process talks to.
	Checks map[string]string `json:"checks"`
	Relays []RelayState      `json:"outbox_relays,omitempty"`
	// FailureIngest is leading or standby where the process ingests.
	FailureIngest string `json:"failure_ingest,omitempty"`
	// Slots are the replication slots ([]outbox.Slot), or the error of
	// reading them, where relays may stream.
	Slots any `json:"outbox_slots,omitempty"`
	// UnavailableQueues are the consumed queues the broker cannot serve
	// now, each with its reason (a classic queue whose node is down): the
	// process is degraded, and their messages wait on that node.
	UnavailableQueues map[string]string `json:"unavailable_queues,omitempty"`
}

// shared shares one probe among the requests that ask at once, and
// keeps its answer for keep. The probe runs on a context of its own,
// bounded by bound, so a request that ends early neither cancels it for
// the others nor waits for it: each request waits within its own context.
// /readyz and the status page each keep one.
type shared[T any] struct {
	keep, bound time.Duration
	mu          sync.Mutex
	at          time.Time     // when last was probed
	last        T             // the last probe's answer
	running     chan struct{} // closed when the probe in flight ends; nil when none
}

// get returns the answer of a probe that ended less than keep ago, or of
// the one in flight, or starts one with probe; it returns ctx's error if
// ctx ends first.
func (r *shared[T]) get(ctx context.Context, probe func(context.Context) T) (T, error) {
	r.mu.Lock()
	if r.running == nil && !r.at.IsZero() && time.Since(r.at) < r.keep {
		a := r.last
		r.mu.Unlock()
		return a, nil
	}
	if r.running == nil {
		done := make(chan struct{})
		r.running = done
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), r.bound)
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
		var zero T
		return zero, ctx.Err()
	}
}
