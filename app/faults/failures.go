package faults

import (
	"context"
	"strconv"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

func unroutable(ctx context.Context, r *run) error {
	hold := r.scale(3, 2)
	r.injected("writers at ~300 events/s; the probe queue's binding deleted for %d s, then bound again", hold)
	if err := r.steady(ctx, 1); err != nil {
		return err
	}
	ch, closeCh, err := r.channel()
	if err != nil {
		return err
	}
	defer closeCh()
	err = r.strike(ctx, 1, 5*time.Second, "binding deleted", time.Duration(hold)*time.Second,
		func(context.Context) error {
			return ch.QueueUnbind(faultprobe.Queue, faultprobe.Name+".#", faultprobe.Exchange, nil)
		},
		func(context.Context) error {
			return ch.QueueBind(faultprobe.Queue, faultprobe.Name+".#", faultprobe.Exchange, false, nil)
		})
	if err != nil {
		return err
	}
	if err := r.tail(ctx); err != nil {
		return err
	}
	// The unrouted events wait in their queue until the checker drains
	// it: the gauge must show them now.
	alert := -1.0 // /metrics did not answer
	if m, err := r.Nodes[0].Metrics(); err == nil {
		alert = m["moenda_unrouted_messages"]
	}
	r.judge("alert", alert > 0, "moenda_unrouted_messages read %g before the checker drained the queue", alert)
	r.after = append(r.after, func(_ []harness.Op, seen harness.Observed) {
		r.note("%d events kept in %s while the binding was gone", len(seen.Unrouted), harness.ProbeQueues.Unrouted)
		r.judge("unrouted", len(seen.Unrouted) > 0 && len(r.result.Report.Lost) == 0, "%d events kept in %s while the binding was gone, none lost (lost %d)",
			len(seen.Unrouted), harness.ProbeQueues.Unrouted, len(r.result.Report.Lost))
	})
	return nil
}

func transient(ctx context.Context, r *run) error {
	r.injected("writers at ~300 events/s; 1 event in 100 fails its first 2 deliveries, then succeeds")
	if err := r.steady(ctx, 1, func(w *harness.Workload) { w.PoisonEvery, w.TransientEvery = 0, 100 }); err != nil {
		return err
	}
	if err := r.wait(ctx, time.Duration(r.scale(40, 15))*time.Second); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		// Two failures wait 1 s and 5 s in the retry queues: the effect
		// comes 6 s after the commit, and not much later.
		first := harness.FirstEffects(seen.Effects)
		var lo, hi time.Duration
		n := 0
		for _, op := range ops {
			if op.Outcome != harness.OK || op.Kind != harness.Transient {
				continue
			}
			d := first[op.EventID].Sub(op.At)
			if n == 0 || d < lo {
				lo = d
			}
			hi = max(hi, d)
			n++
		}
		r.judge("schedule", n > 0 && lo >= 5500*time.Millisecond && hi <= 9*time.Second, "%d transient events applied %s to %s after their commit (schedule: 1 s + 5 s)",
			n, lo.Round(10*time.Millisecond), hi.Round(10*time.Millisecond))
		r.judge("nodlq", r.result.Report.DeadLettered == 0, "%d events dead-lettered", r.result.Report.DeadLettered)
	})
	return nil
}

func permanent(ctx context.Context, r *run) error {
	dur := r.scale(40, 12)
	r.injected("writers at ~300 events/s for %d s, 1 event in 100 always failing", dur)
	if err := r.steady(ctx, 1, func(w *harness.Workload) { w.PoisonEvery = 100 }); err != nil {
		return err
	}
	if err := r.wait(ctx, time.Duration(dur)*time.Second); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		r.checkDeadLetters(seen)
		rep := r.result.Report
		r.judge("exactlyone", rep.DLQDuplicates == 0 && len(rep.DLQMissing) == 0, "%d dead letters for %d poison events, %d copies beyond one", rep.DeadLettered, rep.PoisonConfirmed, rep.DLQDuplicates)
		r.judge("p99", r.result.Latency.P99 < lagBound, "good events' p99 %s", r.result.Latency.P99.Round(time.Millisecond))
	})
	return nil
}

// checkDeadLetters checks each dead letter's headers: the reason, the
// attempts, the queue and routing key, and the span of its failures, as
// the case's schedule (with no immediate retry) makes them.
func (r *run) checkDeadLetters(seen harness.Observed) {
	schedule := r.c.schedule(r.quick)
	attempts := strconv.Itoa(len(schedule) + 1)
	var span time.Duration
	for _, d := range schedule {
		span += d
	}
	key := event.Event{Name: faultprobe.Event}.RoutingKey()
	bad := 0
	var lo, hi time.Duration
	for i, d := range seen.DeadLetters {
		first, ferr := time.Parse(time.RFC3339Nano, d.FirstFailure)
		last, lerr := time.Parse(time.RFC3339Nano, d.LastFailure)
		took := last.Sub(first)
		if i == 0 || took < lo {
			lo = took
		}
		hi = max(hi, took)
		if d.Reason != event.ReasonRetriesExhausted || d.Attempts != attempts || d.Queue != faultprobe.Queue || d.RoutingKey != key || !d.HeaderEventID ||
			d.CorrelationID == "" || ferr != nil || lerr != nil || took < span-2*time.Second || took > span+5*time.Second {
			if bad < 3 {
				r.judge(clauseDeadLetters, false, "dead letter %s: reason %q, attempts %q, queue %q, routing key %q, event_id header %v, correlation_id %q, failures %s apart; want %s, %s, %s, %s, the header, the request's id, about %s",
					d.EventID, d.Reason, d.Attempts, d.Queue, d.RoutingKey, d.HeaderEventID, d.CorrelationID, took, event.ReasonRetriesExhausted, attempts, faultprobe.Queue, key, span)
			}
			bad++
		}
	}
	// The checker compares each dead letter's correlation id with the
	// request's (DLQIncomplete).
	r.judge(clauseDeadLetters, len(seen.DeadLetters) > 0 && bad == 0 && len(r.result.Report.DLQIncomplete) == 0,
		"%d dead letters, %d not as expected, %d without the request's correlation id; first to last failure %s to %s",
		len(seen.DeadLetters), bad, len(r.result.Report.DLQIncomplete), lo.Round(10*time.Millisecond), hi.Round(10*time.Millisecond))
}

func poisonBurst(ctx context.Context, r *run) error {
	r.injected("8 writers for 60 s, 1 event in 8 always failing: about 2,000 poison events among 14,000")
	if err := r.Start(ctx, 2); err != nil {
		return err
	}
	r.write(ctx, harness.Workload{Writers: 8, Interval: 5 * time.Millisecond, PoisonEvery: 8})
	if err := r.wait(ctx, time.Duration(r.scale(60, 15))*time.Second); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		r.checkDeadLetters(seen)
		// A dead letter may be sent again when its ack is lost: at most
		// once for each message a node holds unacknowledged.
		inFlight := len(r.Nodes) * amqp.DefaultConfig().Prefetch
		r.judge("copies", r.result.Report.DLQDuplicates <= inFlight, "%d copies beyond one per event; at most %d in flight (%d nodes × amqp.prefetch)",
			r.result.Report.DLQDuplicates, inFlight, len(r.Nodes))
		if r.result.Latency.P99 > lagBound {
			r.problem("good events' p99 was %s while poison events were retried; under %s expected", r.result.Latency.P99, lagBound)
		}
	})
	return nil
}

func duplicateInjection(ctx context.Context, r *run) error {
	events, copies := r.scale(200, 50), 5
	r.injected("two nodes; %d events published %d times each straight to the exchange, the copies back to back", events, copies)
	if err := r.Start(ctx, 2); err != nil {
		return err
	}
	if err := r.publishDirect(ctx, r.DBName, events, copies, nil); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		want := events * (copies - 1)
		r.note("%d copies beyond the first were acknowledged by the inbox as duplicates (%d sent)", seen.Deduplicated, want)
		r.judge("acked", seen.Deduplicated == want && r.result.Report.DeadLettered == 0,
			"the inbox counted %d duplicates, %d copies beyond the first were sent; %d dead-lettered", seen.Deduplicated, want, r.result.Report.DeadLettered)
	})
	return nil
}

// publishDirect publishes n events straight to the probe's exchange, as
// another service's client would, copies times each with a confirm for
// every one, and records them in the history as the checker's own
// business rows; dress, when set, changes each publishing first. runID
// names the events apart from the writers'.
func (r *run) publishDirect(ctx context.Context, runID string, n, copies int, dress func(seq int, pub *amqp091.Publishing)) error {
	ch, closeCh, err := r.channel()
	if err != nil {
		return err
	}
	defer closeCh()
	for seq := range n {
		id := harness.EventID(runID, 0, seq)
		op := harness.Op{Outcome: harness.Invoked, Seq: seq, EventID: id, Kind: harness.Good, At: time.Now()}
		if err := r.History.Add(harness.Line{Op: op}); err != nil {
			return err
		}
		pub, err := wire(event.Event{ID: id, Name: faultprobe.Event, OccurredAt: time.Now().UTC(), Source: "faults",
			Payload: []byte(`{"writer":0,"seq":` + strconv.Itoa(seq) + `}`)})
		if err != nil {
			return err
		}
		if dress != nil {
			dress(seq, &pub)
		}
		for range copies {
			conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, faultprobe.Exchange, faultprobe.Event, true, false, pub)
			if err != nil {
				return err
			}
			if ok, err := conf.WaitContext(ctx); err != nil || !ok {
				return errOr(err, "the broker refused a copy")
			}
		}
		if _, err := r.Pool.Exec(ctx, `INSERT INTO moenda_inbox (consumer, event_id) VALUES ($1, $2)`, harness.DirectWriter, id); err != nil {
			return err
		}
		op.Outcome, op.At = harness.OK, time.Now()
		if err := r.History.Add(harness.Line{Op: op}); err != nil {
			return err
		}
	}
	return nil
}

// wire is an event as the relay publishes it.
func wire(e event.Event) (amqp091.Publishing, error) {
	msg, err := event.ToMessage(e)
	if err != nil {
		return amqp091.Publishing{}, err
	}
	return amqp.Marshaler{}.Marshal(msg)
}
