package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/adapters/testenv/cluster"
	"github.com/moenda/moenda/app/harness"
)

// The cluster cases run on machines of their own, started for each case
// on loopback ports: three RabbitMQ nodes, or a PostgreSQL primary with a
// standby. A node of the cluster dies, restarts or stops answering; the
// checker's criteria are the same as on one machine.

// clusterNodes is the size of the RabbitMQ cluster of the cases.
const clusterNodes = 3

// clusterDrain bounds the wait for quiet after a quorum queue's node
// died. RabbitMQ's dead-letter worker (at-least-once, which moenda's
// quorum retry queues use) sends a retry queue's expired messages back to
// their queue and waits for its confirms; those a dying leader never
// confirmed it sends again only after
// dead_letter_worker_publisher_confirm_timeout: 3 minutes by default, 20
// s on the cases' nodes (as README recommends), and a death can take a
// few rounds. Meanwhile they count among the retry queue's messages,
// neither ready nor unacknowledged.
const clusterDrain = 5 * time.Minute

// queueLeader is the node that leads queue, read from a node that is up.
func (r *run) queueLeader(ctx context.Context, queue string) (*cluster.RabbitNode, error) {
	return r.Rabbit.QueueLeader(ctx, r.VHost, queue)
}

// online lists the members of queue that run, as RabbitMQ reports them.
func (r *run) online(ctx context.Context, queue string) ([]string, error) {
	out, err := r.Rabbitmqctl(ctx, "list_queues", "-p", r.VHost, "--no-table-headers", "name", "online")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && name == queue {
			return strings.FieldsFunc(rest, func(c rune) bool { return strings.ContainsRune("[], \t\"", c) }), nil
		}
	}
	return nil, fmt.Errorf("queue %s is not listed", queue)
}

// caughtUp waits until node is an online member of the probe's queues
// again, and judges the clause key by how long it took.
func (r *run) caughtUp(ctx context.Context, key string, node *cluster.RabbitNode, since time.Time) {
	queues := []string{harness.ProbeQueues.Work, harness.ProbeQueues.DLQ}
	deadline := time.Now().Add(time.Minute)
	for {
		missing := ""
		for _, q := range queues {
			if on, err := r.online(ctx, q); err != nil || !slices.Contains(on, node.Name) {
				missing = q
				break
			}
		}
		if missing == "" {
			r.judge(key, true, "%s an online member of the probe's queues again %s after it was started", node.Name, fmtTook(time.Since(since)))
			return
		}
		if time.Now().After(deadline) || r.wait(ctx, 250*time.Millisecond) != nil {
			r.judge(key, false, "%s not an online member of %s a minute after it was started", node.Name, missing)
			return
		}
	}
}

// consumersNow reads the probe queue's consumers through the checker's
// own connection.
func (r *run) consumersNow() (int, error) {
	conn, err := r.DialAMQP()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n, ok := consumersOf(conn, harness.ProbeQueues.Work)
	if !ok {
		return 0, fmt.Errorf("the broker did not answer within a second")
	}
	return n, nil
}

// judgeMoved judges the clause key: with node away, the probe's queue has
// as many consumers as before the first fault, on the nodes still up.
func (r *run) judgeMoved(key string, node *cluster.RabbitNode, away time.Time) {
	n, err := r.consumersNow()
	want := max(r.consumersAtFault, 1)
	r.judge(key, err == nil && n >= want, "%s after %s was taken away: the probe's queue has %d consumers (%d before; err %v)",
		fmtTook(time.Since(away)), node.Name, n, want, err)
}

// clusterLoad starts two moenda processes on the cluster, each dialing
// the nodes from another one (amqp.urls), checks that the probe's queues
// are quorum, and starts the writers.
func (r *run) clusterLoad(ctx context.Context, quorum bool) error {
	if err := r.steady(ctx, 2); err != nil {
		return err
	}
	if quorum {
		return r.quorumQueues(ctx)
	}
	return nil
}

// settledLeader lets the load run a while (about 8 s, from the seeded
// schedule), then reads the node that leads the probe's queue.
func (r *run) settledLeader(ctx context.Context) (*cluster.RabbitNode, error) {
	if err := r.wait(ctx, r.jitter(8*time.Second)); err != nil {
		return nil, err
	}
	return r.queueLeader(ctx, harness.ProbeQueues.Work)
}

func quorumLeaderKilled(ctx context.Context, r *run) error {
	times, hold := r.scale(2, 1), 10*time.Second
	r.injected("three RabbitMQ nodes, quorum queues, two moenda processes with amqp.urls listing the three nodes (each from another one); writers at ~300 events/s; "+
		"%d× kill -9 of the node leading the probe's queue, started again after %s", times, hold)
	if err := r.clusterLoad(ctx, true); err != nil {
		return err
	}
	for range times {
		leader, err := r.settledLeader(ctx)
		if err != nil {
			return err
		}
		var killed, started time.Time
		kill := func(context.Context) error { killed = time.Now(); return r.Rabbit.Kill(leader) }
		restart := func(ctx context.Context) error {
			if now, err := r.queueLeader(ctx, harness.ProbeQueues.Work); err != nil || now == leader {
				r.judge("leader", false, "no new leader of the probe's queue %s after %s was killed (%v)", fmtTook(time.Since(killed)), leader.Name, err)
			} else {
				r.judge("leader", true, "%s killed, %s elected", leader.Name, now.Name)
			}
			r.judgeMoved("moved", leader, killed)
			started = time.Now()
			return r.Rabbit.Restart(ctx, leader)
		}
		if err := r.inject(ctx, "kill -9 of "+leader.Name, hold, kill, restart); err != nil {
			return err
		}
		r.caughtUp(ctx, "caughtup", leader, started)
	}
	return r.tail(ctx)
}

func rollingRestart(ctx context.Context, r *run) error {
	hold := 10 * time.Second
	r.injected("three RabbitMQ nodes, quorum queues, two moenda processes with amqp.urls listing the three nodes; writers at ~300 events/s; "+
		"each node in turn: rabbitmqctl stop_app, %s, start_app", hold)
	if err := r.clusterLoad(ctx, true); err != nil {
		return err
	}
	start := time.Now()
	for _, node := range r.Rabbit.Nodes {
		if err := r.wait(ctx, r.jitter(8*time.Second)); err != nil {
			return err
		}
		stop := func(ctx context.Context) error { _, err := r.Rabbit.Ctl(ctx, node, "stop_app"); return err }
		startApp := func(ctx context.Context) error {
			if _, err := r.Rabbit.Ctl(ctx, node, "start_app"); err != nil {
				return err
			}
			_, err := r.Rabbit.Ctl(ctx, node, "await_startup")
			return err
		}
		if err := r.inject(ctx, "stop_app of "+node.Name, hold, stop, startApp); err != nil {
			return err
		}
	}
	if err := r.tail(ctx); err != nil {
		return err
	}
	end := time.Now()
	r.after = append(r.after, func([]harness.Op, harness.Observed) {
		gap := r.longestWithoutConsumers(start, end)
		r.judge("consumers", gap <= r.result.Bound, "the longest stretch with no consumer on the probe's queue: %s (bound %s)", fmtTook(gap), r.result.Bound)
	})
	return nil
}

// longestWithoutConsumers is the longest stretch between from and to in
// which every sample of the probe's queue saw no consumer.
func (r *run) longestWithoutConsumers(from, to time.Time) time.Duration {
	r.backMu.Lock()
	defer r.backMu.Unlock()
	var longest time.Duration
	var since time.Time
	for _, s := range r.samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		switch {
		case s.consumers == 0 && since.IsZero():
			since = s.at
		case s.consumers > 0 && !since.IsZero():
			longest = max(longest, s.at.Sub(since))
			since = time.Time{}
		}
	}
	if !since.IsZero() {
		longest = max(longest, to.Sub(since))
	}
	return longest
}

// partitionHold is how long T33 keeps a node suspended: well past
// net_ticktime (60 s; the others count the node gone 45 to 75 s after it
// went silent). Until then RabbitMQ itself stalls, on the nodes still up
// too (measured on 3.10.8: the queue's new leader elected 10 s after the
// SIGSTOP, moenda's connections on other nodes at 15 s, and nothing
// confirmed or delivered until the node was counted gone, at 69 s).
const partitionHold = 120 * time.Second

func nodeCutOff(ctx context.Context, r *run) error {
	r.injected("three RabbitMQ nodes (cluster_partition_handling = pause_minority), quorum queues, two moenda processes with amqp.urls listing the three nodes; "+
		"writers at ~300 events/s; SIGSTOP of the node leading the probe's queue for %s (past net_ticktime, 60 s), then SIGCONT", partitionHold)
	if err := r.clusterLoad(ctx, true); err != nil {
		return err
	}
	node, err := r.settledLeader(ctx)
	if err != nil {
		return err
	}
	var suspended, resumed time.Time
	suspend := func(context.Context) error { suspended = time.Now(); return r.Rabbit.Suspend(node) }
	resume := func(ctx context.Context) error {
		r.judgeMoved("moved", node, suspended)
		if at, ok := r.loggedAt("consumer lost"); ok {
			r.note("the nodes noticed %s was silent %s after the SIGSTOP (their first \"consumer lost\")", node.Name, fmtTook(at.Sub(suspended)))
		}
		resumed = time.Now()
		return r.Rabbit.Resume(node)
	}
	if err := r.inject(ctx, "SIGSTOP of "+node.Name, partitionHold, suspend, resume); err != nil {
		return err
	}
	r.caughtUp(ctx, "caughtup", node, resumed)
	r.reportPartition(ctx, node, suspended)
	if err := r.tail(ctx); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		// What was acknowledged in the hold's last 20 s went through the
		// nodes still up, unless a process kept using the suspended one;
		// what came in the last lagBound may be applied after the resume.
		n, worst, pending := lagBetween(ops, seen.Effects, resumed.Add(-20*time.Second), resumed.Add(-lagBound), resumed)
		r.judge("noticed", n > 0 && pending == 0 && worst <= lagBound,
			"from 20 s to %s before the resume %d events acknowledged, %d of them applied only after the node was resumed, the slowest of the others in %s (bound %s)",
			lagBound,
			n, pending, fmtTook(worst), lagBound)
	})
	return nil
}

// lagBetween looks at the good events acknowledged between from and to:
// how many, the longest lag of those applied before by, and how many
// were applied only after by (or never).
func lagBetween(ops []harness.Op, effects []harness.Effect, from, to, by time.Time) (n int, worst time.Duration, pending int) {
	first := harness.FirstEffects(effects)
	for _, op := range ops {
		if op.Outcome != harness.OK || op.Kind != harness.Good || op.At.Before(from) || op.At.After(to) {
			continue
		}
		n++
		at, ok := first[op.EventID]
		if !ok || at.After(by) {
			pending++
			continue
		}
		worst = max(worst, at.Sub(op.At))
	}
	return n, worst, pending
}

// reportPartition notes what RabbitMQ did with the node suspended at
// since, from its cluster status and the nodes' logs: partitions seen,
// and a pause of the minority.
func (r *run) reportPartition(ctx context.Context, node *cluster.RabbitNode, since time.Time) {
	status, err := r.Rabbit.Ctl(ctx, node, "cluster_status", "--formatter", "json")
	if err != nil {
		r.judge("partition", false, "cluster status from %s: %v", node.Name, err)
		return
	}
	var seen []string
	for _, n := range r.Rabbit.Nodes {
		logs, _ := filepath.Glob(filepath.Join(n.Dir(), "log", "*.log"))
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				lower := strings.ToLower(line)
				if strings.Contains(lower, "partition") || strings.Contains(lower, "pause_minority") || strings.Contains(lower, "minority") {
					seen = append(seen, n.Name+": "+strings.TrimSpace(line))
				}
			}
		}
	}
	partitions := strings.Contains(status, `"partitions":{}`) || strings.Contains(status, `"partitions": {}`)
	r.judge("partition", true, "after the heal, partitions in the cluster status: %v; the nodes' logs on partitions and pauses since %s: %d lines%s",
		!partitions, since.Format("15:04:05"), len(seen), firstLines(seen, 6))
}

// firstLines is up to n of lines, each on a line of its own after a
// colon, for a clause's detail.
func firstLines(lines []string, n int) string {
	if len(lines) == 0 {
		return ""
	}
	if len(lines) > n {
		lines = append(lines[:n:n], fmt.Sprintf("… %d more", len(lines)-n))
	}
	return ":\n      " + strings.Join(lines, "\n      ")
}

// postgresFailover kills the primary under load (pg_ctl stop -m
// immediate) and promotes the standby; the nodes and the checker reach
// whichever takes writes through the pair's multi-host URL.
func postgresFailover(ctx context.Context, r *run) error {
	standby := map[string]string{harness.StandbySync: "a synchronous", harness.StandbyAsync: "an asynchronous"}[r.c.Standby]
	r.injected("a PostgreSQL primary and %s standby; two moenda processes (outbox.reader %s) on the pair's multi-host postgres.url (target_session_attrs=read-write); "+
		"writers at ~300 events/s; pg_ctl stop -m immediate of the primary, then pg_ctl promote of the standby", standby, r.c.Reader)
	if err := r.steady(ctx, 2); err != nil {
		return err
	}
	if err := r.wait(ctx, r.jitter(8*time.Second)); err != nil {
		return err
	}
	kill := func(ctx context.Context) error { return r.Postgres.Kill(ctx, r.Postgres.Primary) }
	promote := func(ctx context.Context) error { return r.Postgres.Promote(ctx) }
	if err := r.inject(ctx, "primary killed, standby promoted", 0, kill, promote); err != nil {
		return err
	}
	if err := r.tail(ctx); err != nil {
		return err
	}
	switch r.c.Reader {
	case "logical":
		r.judgeSlotRecreated(ctx)
	case "poll":
		r.judgeLockTaken(ctx)
	}
	if r.c.Standby == harness.StandbyAsync {
		r.after = append(r.after, func([]harness.Op, harness.Observed) {
			rep := r.result.Report
			r.judge("consistent", len(rep.Lost) == 0 && len(rep.DatabaseGhosts) == 0 && len(rep.Unexpected) == 0,
				"commits PostgreSQL lost: %d events, each with its business row and without an effect; lost by moenda %d; delivered though their rows are gone %d; ghosts %d",
				len(rep.DatabaseLost), len(rep.Lost), len(rep.DatabaseGhosts), len(rep.Unexpected))
		})
	}
	return nil
}

// judgeSlotRecreated judges the clause "slot": the logical relay found no
// slot on the promoted standby, created one there and read the gap from
// the outbox table.
func (r *run) judgeSlotRecreated(ctx context.Context) {
	var slots int
	err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND NOT pg_is_in_recovery()`, r.DBName).Scan(&slots)
	logged := r.logged("is gone (dropped); creating it again")
	r.judge("slot", err == nil && slots == 1 && logged, "the new primary holds %d replication slots of the run's database (err %v); a relay logged that the slot was gone and created it again: %v",
		slots, err, logged)
}

// judgeLockTaken judges the clause "lock": a session of the promoted
// standby holds the polling relay's advisory lock.
func (r *run) judgeLockTaken(ctx context.Context) {
	var locks int
	err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1 AND NOT pg_is_in_recovery()`, r.DBName).Scan(&locks)
	r.judge("lock", err == nil && locks >= 1, "advisory locks held on the new primary in the run's database: %d (err %v)", locks, err)
}

// classicNodeKilled kills the node a classic queue lives on: its messages
// are there alone, so the queue is away until the node is back, and
// moenda must say so.
func classicNodeKilled(ctx context.Context, r *run) error {
	hold := 20 * time.Second
	r.injected("three RabbitMQ nodes, classic queues, two moenda processes with amqp.urls listing the three nodes (each from another one); writers at ~300 events/s; "+
		"kill -9 of the node the probe's queue lives on, started again after %s", hold)
	if err := r.clusterLoad(ctx, false); err != nil {
		return err
	}
	node, err := r.settledLeader(ctx)
	if err != nil {
		return err
	}
	var killed time.Time
	kill := func(context.Context) error { killed = time.Now(); return r.Rabbit.Kill(node) }
	restart := func(ctx context.Context) error {
		r.judgeQueueReported(ctx, node, killed)
		return r.Rabbit.Restart(ctx, node)
	}
	if err := r.inject(ctx, "kill -9 of "+node.Name, hold, kill, restart); err != nil {
		return err
	}
	return r.tail(ctx)
}

// judgeQueueReported judges the clauses "readyz" and "metrics": with the
// classic queue's node down, every running node's /readyz names the
// probe's queue unavailable, and its metrics say 1 for it.
func (r *run) judgeQueueReported(ctx context.Context, node *cluster.RabbitNode, killed time.Time) {
	queue := harness.ProbeQueues.Work
	for _, nd := range r.Nodes {
		if !nd.Running() {
			continue
		}
		a, err := call(nd, http.MethodGet, "/readyz", "", "")
		var ready struct {
			Status            string            `json:"status"`
			UnavailableQueues map[string]string `json:"unavailable_queues"`
		}
		if err == nil {
			err = json.Unmarshal([]byte(a.body), &ready)
		}
		reason := ready.UnavailableQueues[queue]
		r.judge("readyz", err == nil && ready.Status == "degraded" && reason != "",
			"%s after %s died, %s's /readyz: %d %s, %s: %q (err %v)", fmtTook(time.Since(killed)), node.Name, nd.Name, a.code, ready.Status, queue, reason, err)
		// The probe's queue is the one the nodes consume.
		m, err := nd.Metrics()
		r.judge("metrics", err == nil && m["moenda_queue_unavailable"] == 1, "%s's moenda_queue_unavailable: %v (err %v)", nd.Name, m["moenda_queue_unavailable"], err)
	}
}
