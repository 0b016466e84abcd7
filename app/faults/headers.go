package faults

import (
	"context"
	"os"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

// quorumOverlay makes every queue of a case quorum.
const quorumOverlay = "topology: {queue_type: quorum}\n"

// nonStringHeaders delivers headers that are not strings: x-delivery-count
// (an integer RabbitMQ sets on a quorum queue's redeliveries), x-death (an
// array of tables, from the retry tier) and foreign headers of every AMQP
// type, straight from a publisher. Each must be read, not refused.
func nonStringHeaders(ctx context.Context, r *run) error {
	foreign := r.scale(200, 50)
	r.injected("quorum queues, two nodes; writers at ~300 events/s, handlers holding their transaction 20 ms, 1 event in 20 failing its first delivery "+
		"to each process (back through the retry tier: x-death); kill -9 of the second node with deliveries in hand (redelivered with x-delivery-count); "+
		"%d events straight to the exchange with integer, float, boolean, timestamp, array and table headers", foreign)
	if err := r.Start(ctx, 2); err != nil {
		return err
	}
	if err := r.quorumQueues(ctx); err != nil {
		return err
	}
	r.write(ctx, harness.Workload{Writers: 4, Interval: 10 * time.Millisecond, PoisonEvery: 50, TransientEvery: 20, Payload: func(writer, seq int, kind harness.Kind) any {
		pl := faultprobe.Payload{Writer: writer, Seq: seq, Poison: kind == harness.Poison, HoldMillis: 20}
		// One failure per process: with two nodes and a restart, at
		// most three of the four attempts fail.
		if kind == harness.Transient {
			pl.FailFirst = 1
		}
		return pl
	}})
	if err := r.crashLoop(ctx, "kill -9", 1, func() *harness.Node { return r.Nodes[1] }); err != nil {
		return err
	}
	if err := r.publishDirect(ctx, r.DBName+":foreign", foreign, 1, foreignHeaders); err != nil {
		return err
	}
	r.after = append(r.after, func([]harness.Op, harness.Observed) {
		refused := 0
		for _, nd := range r.Nodes {
			logs, err := os.ReadFile(nd.Log)
			if err != nil {
				r.judge("logs", false, "read %s's log: %v", nd.Name, err)
				continue
			}
			for _, refusal := range []string{"delivery cannot be decoded", "not a string"} {
				if n := strings.Count(string(logs), refusal); n > 0 {
					r.judge("logs", false, "node %s logged %q %d times: a header was refused", nd.Name, refusal, n)
					refused += n
				}
			}
		}
		r.judge("logs", refused == 0, "%d refusals of a header logged", refused)
		rep := r.result.Report
		r.judge("budget", len(rep.DLQExtra) == 0 && len(rep.Lost) == 0, "good events dead-lettered %d, lost %d", len(rep.DLQExtra), len(rep.Lost))
	})
	return r.tail(ctx)
}

// quorumQueues checks that the probe's queue and its retry and
// dead-letter queues were declared quorum.
func (r *run) quorumQueues(ctx context.Context) error {
	out, err := r.Rabbitmqctl(ctx, "list_queues", "-p", r.VHost, "--no-table-headers", "name", "type")
	if err != nil {
		return err
	}
	types := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			types[f[0]] = f[1]
		}
	}
	for _, q := range []string{harness.ProbeQueues.Work, harness.ProbeQueues.Work + ".retry.1s", harness.ProbeQueues.DLQ} {
		if types[q] != "quorum" {
			r.problem("queue %s is %q, not quorum", q, types[q])
		}
	}
	return nil
}

// foreignHeaders dresses an event as another service's client might: a
// header of each AMQP type.
func foreignHeaders(seq int, pub *amqp091.Publishing) {
	pub.Headers["x-retries"] = int64(seq)
	pub.Headers["x-priority-hint"] = int32(3)
	pub.Headers["x-score"] = 0.5
	pub.Headers["x-replayed"] = true
	pub.Headers["x-sent-at"] = time.Now().UTC().Truncate(time.Second)
	pub.Headers["x-path"] = []any{"gateway", int64(2)}
	pub.Headers["x-origin"] = amqp091.Table{"service": "billing", "attempt": int64(1)}
}
