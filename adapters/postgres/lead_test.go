package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
)

// Two processes contend for one lock: one runs at a time, and the other
// takes over when the first stops.
func TestLeadRunsOneAtATime(t *testing.T) {
	db := testenv.Postgres(t)
	var running, most atomic.Int32
	var leads [2]atomic.Bool
	runs := make(chan int, 2)
	start := func(i int) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		go postgres.Lead(ctx, db.Pool, "lead test", 50*time.Millisecond, testenv.Logger(), leads[i].Store, func(ctx context.Context) error {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			runs <- i
			<-ctx.Done()
			running.Add(-1)
			return nil
		})
		return cancel
	}
	stop := [2]context.CancelFunc{start(0), start(1)}
	first := <-runs
	time.Sleep(500 * time.Millisecond) // the other tries ten times meanwhile
	if !leads[first].Load() || leads[1-first].Load() {
		t.Fatalf("leads = %v %v, want only %d", leads[0].Load(), leads[1].Load(), first)
	}
	stop[first]()
	select {
	case second := <-runs:
		if second == first {
			t.Fatalf("%d ran again after it stopped", first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other process did not take over")
	}
	stop[1-first]()
	if m := most.Load(); m != 1 {
		t.Fatalf("%d ran at once, want 1", m)
	}
}
