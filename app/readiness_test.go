package app

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// However many ask at once, one probe runs, and its answer serves every
// request of the next readyInterval; after that the next request probes
// again.
func TestReadinessProbesOncePerInterval(t *testing.T) {
	r := shared[readyAnswer]{keep: readyInterval, bound: readyTimeout}
	var probes atomic.Int32
	probe := func(ctx context.Context) readyAnswer {
		probes.Add(1)
		time.Sleep(50 * time.Millisecond) // the others arrive meanwhile
		return readyAnswer{code: http.StatusOK}
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if a, err := r.get(context.Background(), probe); err != nil || a.code != http.StatusOK {
				t.Errorf("answer %d, %v", a.code, err)
			}
		})
	}
	wg.Wait()
	if _, err := r.get(context.Background(), probe); err != nil {
		t.Fatal(err)
	}
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes for 51 requests within the interval, want 1", n)
	}
	time.Sleep(readyInterval)
	if _, err := r.get(context.Background(), probe); err != nil {
		t.Fatal(err)
	}
	if n := probes.Load(); n != 2 {
		t.Fatalf("%d probes after the interval, want 2", n)
	}
}

// A request that ends while the probe is still out (a broker that does
// not answer) returns at once with its context's error, and does not
// cancel the probe the others wait for.
func TestReadinessHonoursTheRequestsContext(t *testing.T) {
	r := shared[readyAnswer]{keep: readyInterval, bound: readyTimeout}
	release := make(chan struct{})
	var probeErr atomic.Value
	probe := func(ctx context.Context) readyAnswer {
		select {
		case <-release:
		case <-ctx.Done():
			probeErr.Store(ctx.Err())
		}
		return readyAnswer{code: http.StatusOK}
	}
	other := make(chan error, 1)
	go func() {
		_, err := r.get(context.Background(), probe)
		other <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.get(ctx, probe)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("a request whose context ended: %v after %s", err, time.Since(start))
	}
	close(release)
	if err := <-other; err != nil {
		t.Fatalf("the request still waiting: %v", err)
	}
	if err, _ := probeErr.Load().(error); err != nil {
		t.Fatalf("the probe was cancelled with the request: %v", err)
	}
}

// GET /readyz from a crowd costs PostgreSQL one ping, not one per
// request.
func TestReadyzPingsPostgreSQLOncePerInterval(t *testing.T) {
	p, _ := startAMQP(t)
	time.Sleep(readyInterval) // past any answer kept from the start
	before := p.pool.Stat().AcquireCount()
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			if code, body := call(t, "GET", p.base+"/readyz", ""); code != http.StatusOK {
				t.Errorf("GET /readyz = %d %v", code, body)
			}
		})
	}
	wg.Wait()
	// Background work (metrics, pruning) may take a connection meanwhile.
	if n := p.pool.Stat().AcquireCount() - before; n > 3 {
		t.Fatalf("30 concurrent GET /readyz took %d connections from the pool, want one ping", n)
	}
}
