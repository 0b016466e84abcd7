package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

// The failure workbench's cases (W01, W02) run the failure ledger, whose
// ingest empties the probe's dead-letter queue into PostgreSQL: the
// checker counts the ledger's unresolved failures as the dead letters.
// A short retry schedule (1 s, 2 s) dead-letters a failing event 3 s after
// its first attempt, so that dead letters flow within seconds of the
// writers starting.
var workbenchDelays = []time.Duration{time.Second, 2 * time.Second}

// Keys of the workbench cases' clauses.
const (
	clauseLedger   = "ledger"
	clauseDLQEmpty = "dlqempty"
	clauseIngest   = "ingest"
	clauseRedrive  = "redrive"
	clauseSentOnce = "sentonce"
	clauseResolved = "resolved"
)

func ingestUnderRestart(ctx context.Context, r *run) error {
	hold := r.scale(10, 5)
	r.injected("failures.enabled; two nodes; writers at ~300 events/s, 1 event in 50 poison, dead-lettered 3 s after its first attempt (retries after 1 s and 2 s); "+
		"rabbitmqctl stop_app while dead letters arrive, %d s, start_app", hold)
	if err := r.steady(ctx, 2); err != nil {
		return err
	}
	var healed time.Time
	start := func(ctx context.Context) error {
		err := startBroker(ctx)
		healed = time.Now()
		return err
	}
	err := r.strike(ctx, 1, 12*time.Second, "broker stop_app", time.Duration(hold)*time.Second, stopBroker, start)
	if err != nil {
		return err
	}
	r.judgeIngestResumes(ctx, healed)
	if err := r.tail(ctx); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		r.judgeLedgerOnce(ops, seen)
		r.judge(clauseDLQEmpty, seen.Drained && seen.QueueDeadLetters == 0, "%d dead letters left in %s once drained (drained %v); the ledger holds %d failures",
			seen.QueueDeadLetters, harness.ProbeQueues.DLQ, seen.Drained, len(seen.Ledger))
	})
	return nil
}

// judgeIngestResumes judges the ingest clause: within the case's bound
// of the broker running again, a node leads the ingest (its /readyz says
// failure_ingest leading) and the ingest consumes the dead-letter queue
// again. Leading alone is not enough: the lead is a PostgreSQL lock,
// which the broker's restart leaves held.
func (r *run) judgeIngestResumes(ctx context.Context, healed time.Time) {
	bound := r.result.Bound
	var conn *amqp091.Connection
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	var recorded time.Time
	for {
		leader := r.ingestLeader()
		consumers := 0
		if conn == nil || conn.IsClosed() {
			conn, _ = r.DialAMQP()
		}
		if conn != nil && !conn.IsClosed() {
			var ok bool
			if consumers, ok = consumersOf(conn, harness.ProbeQueues.DLQ); !ok {
				_ = conn.Close()
				conn = nil
			}
		}
		if leader != "" && consumers > 0 {
			took := time.Since(healed)
			// The first dead letter recorded after the heal says the
			// ingest does its work again; it needs one to have failed.
			_ = r.Pool.QueryRow(ctx, `SELECT coalesce(min(recorded_at), 'epoch') FROM moenda_failures WHERE recorded_at > $1`, healed).Scan(&recorded)
			first := "none recorded yet"
			if recorded.After(healed) {
				first = "the first dead letter recorded " + fmtTook(recorded.Sub(healed)) + " after it"
			}
			r.judge(clauseIngest, took <= bound, "%s leads the ingest and %s has %d consumers %s after the broker ran again (bound %s); %s",
				leader, harness.ProbeQueues.DLQ, consumers, fmtTook(took), bound, first)
			return
		}
		if time.Since(healed) > bound+5*time.Second {
			r.judge(clauseIngest, false, "not back %s after the broker ran again: leader %q, %d consumers on %s",
				fmtTook(time.Since(healed)), leader, consumers, harness.ProbeQueues.DLQ)
			return
		}
		if !await.Sleep(ctx, 250*time.Millisecond) {
			return
		}
	}
}

// ingestLeader names the node whose /readyz says it leads the failure
// ingest; "" when none does.
func (r *run) ingestLeader() string {
	if nd := r.ingestNode(); nd != nil {
		return nd.Name
	}
	return ""
}

func (r *run) ingestNode() *harness.Node {
	for _, nd := range r.Nodes {
		if !nd.Running() {
			continue
		}
		a, err := call(nd, http.MethodGet, "/readyz", "", "")
		if err != nil {
			continue
		}
		var body struct {
			Ingest string `json:"failure_ingest"`
		}
		if json.Unmarshal([]byte(a.body), &body) == nil && body.Ingest == "leading" {
			return nd
		}
	}
	return nil
}

// judgeLedgerOnce judges the ledger clause: every confirmed poison event
// is in the ledger exactly once (one row for its queue and event id,
// recorded once), and nothing else is.
func (r *run) judgeLedgerOnce(ops []harness.Op, seen harness.Observed) {
	poison := confirmedOf(ops, seen, harness.Poison)
	rows := map[string]int{}
	again := 0
	for _, f := range seen.Ledger {
		rows[f.EventID]++
		if f.Occurrences != 1 {
			again++
		}
	}
	missing, twice, extra := 0, 0, 0
	for id := range poison {
		if rows[id] == 0 {
			missing++
		}
	}
	for id, n := range rows {
		if n > 1 {
			twice++
		}
		if !poison[id] {
			extra++
		}
	}
	r.judge(clauseLedger, len(poison) > 0 && missing == 0 && twice == 0 && extra == 0 && again == 0,
		"%d poison events confirmed, %d failures in the ledger: %d missing, %d with more than one row, %d with more than one occurrence, %d not poison",
		len(poison), len(seen.Ledger), missing, twice, again, extra)
}

// confirmedOf are the confirmed events of kind: acknowledged, or
// indeterminate with their business row.
func confirmedOf(ops []harness.Op, seen harness.Observed, kind harness.Kind) map[string]bool {
	ok := map[string]bool{}
	out := map[string]bool{}
	for _, op := range ops {
		if op.Outcome == harness.OK || op.Outcome == harness.Indeterminate && seen.Business[op.EventID] {
			ok[op.EventID] = true
		}
	}
	for _, op := range ops {
		if op.Outcome == harness.Invoked && op.Kind == kind && ok[op.EventID] {
			out[op.EventID] = true
		}
	}
	return out
}

// redriveUnderCrash: a dependency of the probe is down for a while, and
// one event in 20 fails until it is back, long enough to dead-letter;
// once it is back, they are re-driven at a rate while the node that
// consumes beside the one running the re-drive is killed and started
// again.
func redriveUnderCrash(ctx context.Context, r *run) error {
	downFor := r.scale(15, 10)
	down := time.Duration(downFor) * time.Second
	times := r.scale(3, 2)
	r.injected("failures.enabled; two nodes; writers at ~300 events/s, handlers holding their transaction 20 ms, 1 event in 20 failing every delivery for the first %d s "+
		"(dead-lettered 3 s after its first attempt); then a re-drive of them all at a rate, and %d× kill -9 of the node that consumes but does not run the re-drive, "+
		"started again 1 s later", downFor, times)
	if err := r.Start(ctx, 2); err != nil {
		return err
	}
	until := time.Now().Add(down)
	r.write(ctx, harness.Workload{Writers: 4, Interval: 10 * time.Millisecond, TransientEvery: 20,
		Payload: func(writer, seq int, kind harness.Kind) any {
			pl := faultprobe.Payload{Writer: writer, Seq: seq, HoldMillis: 20}
			if kind == harness.Transient {
				pl.FailUntil = until
			}
			return pl
		}})
	if err := r.wait(ctx, time.Until(until)); err != nil {
		return err
	}
	// Every event that ran out of retries did so before until; the
	// ledger has them all once its count stops growing and the
	// dead-letter queue is empty.
	failed, err := r.ledgerSettles(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	leader := r.ingestNode()
	if leader == nil {
		return fmt.Errorf("no node leads the failure ingest, which runs the re-drives")
	}
	var consumer *harness.Node
	for _, nd := range r.Nodes {
		if nd != leader {
			consumer = nd
		}
	}
	// About 4 s between kills, and the re-drive lasting a little longer
	// than them all.
	rate := max(5, failed/(times*4+4))
	a, err := call(leader, http.MethodPost, fmt.Sprintf("/v1/admin/redrives?queue=%s&rate=%d", faultprobe.Queue, rate), "", "")
	if err != nil {
		return fmt.Errorf("start the re-drive: %w", err)
	}
	var started struct {
		ID int64 `json:"id"`
	}
	if a.code != http.StatusCreated || json.Unmarshal([]byte(a.body), &started) != nil || started.ID == 0 {
		return fmt.Errorf("start the re-drive: %d %s", a.code, a.body)
	}
	r.note("re-drive %d of %d failures at %d/s, run by %s; %s killed", started.ID, failed, rate, leader.Name, consumer.Name)
	for range times {
		if err := r.wait(ctx, 3*time.Second+time.Duration(r.rng.Int64N(int64(2*time.Second)))); err != nil {
			return err
		}
		err := r.inject(ctx, "kill -9 "+consumer.Name, time.Second, func(context.Context) error { r.Kill(consumer); return nil },
			func(ctx context.Context) error { return r.Restart(ctx, consumer) })
		if err != nil {
			return err
		}
	}
	rd, err := r.redriveEnds(ctx, leader, started.ID, 2*time.Minute)
	if err != nil {
		return err
	}
	if rd.State != redrive.Done || rd.Counters.Pending > 0 {
		r.note("the re-drive was %s with %d pending when the kills ended", rd.State, rd.Counters.Pending)
	}
	if err := r.tail(ctx); err != nil {
		return err
	}
	r.after = append(r.after, func(ops []harness.Op, seen harness.Observed) {
		r.judgeRedrive(ctx, started.ID, failed, rd, ops, seen)
	})
	return nil
}

// ledgerSettles waits until the dead-letter queue is empty and the
// ledger's count of the probe's failures has stayed the same for two
// readings a second apart, within bound, and returns that count.
func (r *run) ledgerSettles(ctx context.Context, bound time.Duration) (int, error) {
	deadline := time.Now().Add(bound)
	last, same := -1, 0
	for time.Now().Before(deadline) {
		var n int
		if err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM moenda_failures WHERE failed_queue = $1`, faultprobe.Queue).Scan(&n); err != nil {
			return 0, err
		}
		depth := -1
		if out, err := r.Rabbitmqctl(ctx, "list_queues", "-p", r.VHost, "--no-table-headers", "name", "messages"); err == nil {
			depth = queueDepth(out, harness.ProbeQueues.DLQ)
		}
		if n == last && depth == 0 {
			same++
		} else {
			same = 0
		}
		if same >= 2 && n > 0 {
			return n, nil
		}
		last = n
		if !await.Sleep(ctx, time.Second) {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("the ledger did not settle within %s (last count %d)", bound, last)
}

// redriveEnds follows re-drive id on nd until it is neither in its canary
// nor running, or bound passes, and returns its last state.
func (r *run) redriveEnds(ctx context.Context, nd *harness.Node, id int64, bound time.Duration) (redrive.Redrive, error) {
	deadline := time.Now().Add(bound)
	var rd redrive.Redrive
	for {
		a, err := call(nd, http.MethodGet, fmt.Sprintf("/v1/admin/redrives/%d", id), "", "")
		if err == nil && a.code == http.StatusOK && json.Unmarshal([]byte(a.body), &rd) == nil && rd.State != redrive.Running && rd.State != redrive.Canary {
			return rd, nil
		}
		if time.Now().After(deadline) {
			return rd, nil
		}
		if !await.Sleep(ctx, 500*time.Millisecond) {
			return rd, ctx.Err()
		}
	}
}

// judgeRedrive judges the re-drive's clauses: it ended done with every
// item handled; no failure was sent twice (its items sent, once each,
// as many as it planned, and no failure re-driven more than once); and
// the ledger holds every failure resolved.
func (r *run) judgeRedrive(ctx context.Context, id int64, failed int, rd redrive.Redrive, ops []harness.Op, seen harness.Observed) {
	c := rd.Counters
	r.judge(clauseRedrive, rd.State == redrive.Done && c.Planned == failed && c.Handled == c.Planned,
		"re-drive %d %s: %d planned of %d failures, %d handled, %d failed again, %d skipped, %d unsettled, %d pending%s",
		id, rd.State, c.Planned, failed, c.Handled, c.FailedAgain, c.Skipped, c.Unsettled, c.Pending, reasonOf(rd.Reason))

	var items, sent, distinct, twice int
	err := r.Pool.QueryRow(ctx, `SELECT count(*), count(sent_at), count(DISTINCT failure_id),
		(SELECT count(*) FROM moenda_failures WHERE failed_queue = $2 AND redrives > 1)
		FROM moenda_redrive_items WHERE redrive_id = $1`, id, faultprobe.Queue).Scan(&items, &sent, &distinct, &twice)
	if err != nil {
		r.judge(clauseSentOnce, false, "the re-drive's items could not be read: %v", err)
	} else {
		r.judge(clauseSentOnce, items == c.Planned && sent == items && distinct == items && twice == 0,
			"%d items planned, %d sent, %d distinct failures; %d failures re-driven more than once", items, sent, distinct, twice)
	}

	transient := confirmedOf(ops, seen, harness.Transient)
	byStatus := map[failures.Status]int{}
	stray := 0
	for _, f := range seen.Ledger {
		byStatus[f.Status]++
		if !transient[f.EventID] {
			stray++
		}
	}
	r.judge(clauseResolved, len(seen.Ledger) == failed && byStatus[failures.Resolved] == failed && stray == 0,
		"%d failures in the ledger (%d re-driven): %d resolved, %d unresolved, %d re-driving; %d not of a failing event",
		len(seen.Ledger), failed, byStatus[failures.Resolved], byStatus[failures.Unresolved], byStatus[failures.Redriving], stray)
}

func reasonOf(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

// queueDepth reads queue's message count in the output of rabbitmqctl
// list_queues name messages; -1 when it is not there.
func queueDepth(out, queue string) int {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == queue {
			if n, err := strconv.Atoi(f[1]); err == nil {
				return n
			}
		}
	}
	return -1
}
