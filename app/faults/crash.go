package faults

import (
	"context"
	"time"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/outbox"

	"github.com/moenda/moenda/app/harness"
)

// crashLoop kills a node chosen by pick, times times at random intervals
// of 3 to 10 s, and starts it again a second later, as a supervisor would.
func (r *run) crashLoop(ctx context.Context, fault string, times int, pick func() *harness.Node) error {
	for range times {
		if err := r.wait(ctx, 3*time.Second+time.Duration(r.rng.Int64N(int64(7*time.Second)))); err != nil {
			return err
		}
		nd := pick()
		err := r.inject(ctx, fault+" "+nd.Name, time.Second, func(context.Context) error { r.Kill(nd); return nil },
			func(ctx context.Context) error { return r.Restart(ctx, nd) })
		if err != nil {
			return err
		}
	}
	return nil
}

func consumerCrash(ctx context.Context, r *run) error {
	times := r.scale(20, 4)
	r.injected("two nodes; writers at ~300 events/s, handlers holding their transaction 20 ms; %d× kill -9 of the second node every 3-10 s, started again 1 s later", times)
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		return r.crashLoop(ctx, "kill -9", times, func() *harness.Node { return r.Nodes[1] })
	}, holding(20))
}

func relayCrash(ctx context.Context, r *run) error {
	times := r.scale(10, 3)
	r.injected("two nodes, the relay leader among them; writers at ~300 events/s; %d× kill -9 of a node chosen by the seed every 3-10 s, started again 1 s later", times)
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		if err := r.crashLoop(ctx, "kill -9", times, func() *harness.Node { return r.Nodes[r.rng.IntN(len(r.Nodes))] }); err != nil {
			return err
		}
		r.after = append(r.after, func([]harness.Op, harness.Observed) {
			// A crash repeats at most the relay's batch in hand, and the
			// killed node's unacknowledged deliveries come again.
			perCrash := outbox.DefaultConfig().BatchSize + amqp.DefaultConfig().Prefetch
			n := r.result.Report.DuplicateDeliveries
			r.judge("republished", n <= times*perCrash, "%d duplicate deliveries after %d crashes; at most %d a crash (outbox.batch_size + amqp.prefetch); a killed node's own count dies with it",
				n, times, perCrash)
		})
		return nil
	})
}

func twoRelays(ctx context.Context, r *run) error {
	r.injected("two nodes relaying one outbox; a third started mid-run (a double deploy), then the first stopped with SIGTERM")
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		if err := r.strike(ctx, 1, 8*time.Second, "a third relay", 0, func(ctx context.Context) error { return r.Start(ctx, 1) }, nil); err != nil {
			return err
		}
		first := r.Nodes[0]
		return r.strike(ctx, 1, 8*time.Second, "first node stopped", 0, func(context.Context) error {
			_, err := r.Stop(first, time.Minute)
			r.gone[first] = true
			return err
		}, nil)
	})
}

func shutdownInBackoff(ctx context.Context, r *run) error {
	r.injected("poison events waiting in the 5 s and 25 s retry queues; SIGTERM to every node, then all started again")
	stop := func(context.Context) error {
		for _, nd := range r.Nodes {
			took, err := r.Stop(nd, time.Minute)
			if err != nil {
				return err
			}
			r.result.addExtra("sigterm_exit_seconds_max", took.Seconds())
			r.judge("exit", took <= 10*time.Second, "node %s exited %s after SIGTERM; router.close_timeout is 10 s", nd.Name, took.Round(10*time.Millisecond))
		}
		return nil
	}
	restart := func(ctx context.Context) error {
		for _, nd := range r.Nodes {
			if err := r.Restart(ctx, nd); err != nil {
				return err
			}
		}
		return nil
	}
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		r.after = append(r.after, func([]harness.Op, harness.Observed) {
			_, closed := r.loggedAt("PRECONDITION_FAILED")
			r.judge("precondition", !closed, "a node logged PRECONDITION_FAILED: %v", closed)
		})
		return r.strike(ctx, 1, 10*time.Second, "SIGTERM", 0, stop, restart)
	})
}
