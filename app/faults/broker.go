package faults

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/moenda/moenda/app/harness"
)

// steady starts n nodes and the writers: four of them, a command each
// 10 ms (about 300 events/s), every 50th event poison, unless change
// says otherwise.
func (r *run) steady(ctx context.Context, n int, change ...func(*harness.Workload)) error {
	if err := r.Start(ctx, n); err != nil {
		return err
	}
	w := harness.Workload{Writers: 4, Interval: 10 * time.Millisecond, PoisonEvery: 50}
	for _, c := range change {
		c(&w)
	}
	r.write(ctx, w)
	return nil
}

// strike injects a fault times times, each after about every (give or
// take a quarter, from the seeded schedule): do, a hold, then heal.
func (r *run) strike(ctx context.Context, times int, every time.Duration, fault string, hold time.Duration, do, heal func(context.Context) error) error {
	for range times {
		if err := r.wait(ctx, r.jitter(every)); err != nil {
			return err
		}
		if err := r.inject(ctx, fault, hold, do, heal); err != nil {
			return err
		}
	}
	return nil
}

// underLoad is the shape most cases take: n nodes and the writers as
// steady starts them (changed by change), then faults, then the tail.
func (r *run) underLoad(ctx context.Context, n int, faults func(context.Context) error, change ...func(*harness.Workload)) error {
	if err := r.steady(ctx, n, change...); err != nil {
		return err
	}
	if err := faults(ctx); err != nil {
		return err
	}
	return r.tail(ctx)
}

// tail lets the writers run on after the last fault for longer than the
// case's recovery bound, so that the recovery can be seen.
func (r *run) tail(ctx context.Context) error {
	return r.wait(ctx, max(r.jitter(15*time.Second), r.result.Bound+5*time.Second))
}

func brokerRestart(ctx context.Context, r *run) error {
	times, hold := r.scale(2, 1), r.scale(10, 5)
	r.injected("writers at ~300 events/s; %d× rabbitmqctl stop_app, %d s, start_app", times, hold)
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		return r.strike(ctx, times, 8*time.Second, "broker stop_app", time.Duration(hold)*time.Second, stopBroker, startBroker)
	})
}

func brokerCrash(ctx context.Context, r *run) error {
	times := r.scale(2, 1)
	r.injected("writers at ~300 events/s; %d× kill -9 of beam.smp, then rabbitmq-server -detached", times)
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		return r.strike(ctx, times, 8*time.Second, "broker kill -9", 0, crashBroker, bootBroker)
	})
}

func connectionStorm(ctx context.Context, r *run) error {
	times := r.scale(12, 4)
	r.injected("writers at ~300 events/s; %d× every 5 s: close every AMQP connection of the vhost and end every database session", times)
	storm := func(ctx context.Context) error {
		if err := r.closeConnections(ctx); err != nil {
			return err
		}
		_, err := r.Terminate(ctx)
		return err
	}
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		if err := r.strike(ctx, times, 5*time.Second, "connection storm", 0, storm, nil); err != nil {
			return err
		}
		r.after = append(r.after, func([]harness.Op, harness.Observed) { r.judgeReconnects(reconnectBound) })
		return nil
	})
}

// reconnectBound is how soon after each storm the nodes must be back.
const reconnectBound = 5 * time.Second

// judgeReconnects judges the reconnect clause: after each healed fault,
// the probe's queue had as many consumers as before the first fault
// within bound. The relay's reconnection shows in the recovery instead.
func (r *run) judgeReconnects(bound time.Duration) {
	want := max(r.consumersAtFault, 1)
	worst := time.Duration(0)
	for _, rc := range r.result.Recoveries {
		back := r.consumersReach(rc.Healed, want)
		took := back.Sub(rc.Healed)
		if back.IsZero() || took > bound {
			r.judge(clauseReconnect, false, "%s healed at %s: %d consumers not back within %s", rc.Fault, rc.Healed.Format("15:04:05.000"), want, bound)
			continue
		}
		worst = max(worst, took)
	}
	r.judge(clauseReconnect, len(r.result.Recoveries) > 0, "%d reconnects, the %d consumers back within %s at worst", len(r.result.Recoveries), want, fmtTook(worst))
}

func brokerUnreachable(ctx context.Context, r *run) error {
	hold := r.scale(60, 20)
	r.injected("writers at ~300 events/s; rabbitmqctl suspend_listeners and close_all_connections for %d s, then resume_listeners", hold)
	var before int
	suspend := func(ctx context.Context) error {
		before = r.Acknowledged()
		return r.suspendListeners(ctx)
	}
	resume := func(ctx context.Context) error {
		n := r.Acknowledged() - before
		r.judge("committing", n > 0, "the API acknowledged %d commands while the broker was unreachable", n)
		return resumeListeners(ctx)
	}
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		return r.strike(ctx, 1, 5*time.Second, "broker unreachable", time.Duration(hold)*time.Second, suspend, resume)
	})
}

func memoryAlarmCase(ctx context.Context, r *run) error {
	hold := r.scale(60, 20)
	r.injected("writers at ~300 events/s; rabbitmqctl set_vm_memory_high_watermark 0.0001 for %d s, then the previous watermark", hold)
	var restore func(context.Context) error
	alarm := func(ctx context.Context) (err error) {
		restore, err = memoryAlarm(ctx)
		return err
	}
	heal := func(ctx context.Context) error {
		a, err := call(r.Nodes[0], http.MethodGet, "/readyz", "", "")
		if err != nil {
			a.body = err.Error()
		}
		r.note("/readyz during the alarm: %d %s", a.code, a.body)
		r.judge("degraded", strings.Contains(a.body, `"degraded"`), "/readyz during the alarm: %d, status degraded: %v", a.code, strings.Contains(a.body, `"degraded"`))
		if restore == nil {
			return nil
		}
		return restore(ctx)
	}
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		return r.strike(ctx, 1, 5*time.Second, "memory alarm", time.Duration(hold)*time.Second, alarm, heal)
	})
}
