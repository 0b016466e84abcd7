package faults

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/moenda/moenda/app/harness"
	"github.com/moenda/moenda/handlers/faultprobe"
)

// Case is one of the reliability cases: an injection, and what must hold
// once it is healed (the checker's criteria, plus the case's own).
type Case struct {
	ID    string
	Title string
	// Quick marks the cases run for every change (--quick, CI): a
	// consumer crashed mid-handler, and a quorum queue's leader killed on
	// a cluster of its own (once, about 2.5 minutes), within CI's 20
	// minutes. CI runs them side by side, so a quick case must leave the
	// local PostgreSQL and RabbitMQ running. The paths of
	// the others have tests of their own in go test; T03's connection
	// storm, for one: TestRelaySurvivesBrokerDroppingConnections,
	// TestNotificationsSurviveDroppedConnections and
	// TestUnitsOfWorkAnswer503WhileTheDatabaseIsAway.
	Quick bool
	// NotHere says why the command does not run the case, and where what
	// it checks is shown instead; empty when it runs.
	NotHere string
	// Reader is outbox.reader for the case's nodes; auto when empty.
	Reader string
	// Failures runs the failure ledger (failures.enabled): the nodes
	// ingest the dead letters, and the checker counts them in the ledger.
	Failures bool
	// Delays is the probe's retry schedule; when empty, seedDelays, or
	// quickDelays in the quick set (schedule).
	Delays []time.Duration
	// Rabbits runs the case on a RabbitMQ cluster of that many nodes, and
	// Standby on a PostgreSQL primary with a standby (harness.StandbySync
	// or StandbyAsync), started for it; on the machine's servers when
	// zero and empty.
	Rabbits int
	Standby string
	// Overlay is a configuration file layered over the case's (--config),
	// and Plugins enables plugins beside the probe.
	Overlay string
	Plugins []string
	// Drain bounds the wait for quiet after the case; drainBound when
	// zero.
	Drain time.Duration
	// Bound is the recovery bound after each healed fault; 15 s when
	// zero.
	Bound time.Duration
	// Holds are the clauses of the case's "what must hold" beyond the
	// checker's shared criteria, which every case has: each is judged by
	// a check of the run, or says why the suite cannot check it here.
	Holds []Clause
	Run   func(ctx context.Context, r *run) error
}

func (c Case) bound() time.Duration {
	if c.Bound == 0 {
		return 15 * time.Second
	}
	return c.Bound
}

// schedule is the probe's retry schedule in the case: its own, the
// quick set's when a case of that set runs with --quick, or the seeds'.
// A case outside the set keeps the seeds' under --quick: its checks and
// faults (T17's spans, T26's 25 s backoff) are written for it.
func (c Case) schedule(quick bool) []time.Duration {
	switch {
	case len(c.Delays) > 0:
		return c.Delays
	case quick && c.Quick:
		return quickDelays
	}
	return seedDelays
}

// seedDelays is the probe's schedule by default, the seeds' own.
// quickDelays is the quick set's: three retry queues, as the seeds',
// that dead-letter a failing event 7 s after its first attempt rather
// than 31, the least every case waits for once its writers stop.
var (
	seedDelays  = []time.Duration{time.Second, 5 * time.Second, 25 * time.Second}
	quickDelays = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
)

// overlay is the configuration the case's nodes run, on base.yaml: the
// probe alone, and its seed-like schedule of 1 s, 5 s and 25 s (or the
// case's, or the quick set's) with no immediate retry, so that attempts
// and delays can be checked; the failure ledger when the case runs it,
// with batches that wait little, so a dead letter is in the ledger soon
// after it fails.
func (c Case) overlay(quick bool) string {
	reader := c.Reader
	if reader == "" {
		reader = "auto"
	}
	var delays []string
	for _, d := range c.schedule(quick) {
		delays = append(delays, d.String())
	}
	out := fmt.Sprintf(`log: {level: warn, format: json}
handlers: {enabled: [%s]}
outbox: {reader: %s}
metrics: {poll_interval: 1s}
router: {close_timeout: 10s}
topology:
  exchanges:
    - name: %s
      failure: {immediate_retries: 0, delays: [%s]}
`, strings.Join(append([]string{faultprobe.Name}, c.Plugins...), ", "), reader, faultprobe.Exchange, strings.Join(delays, ", "))
	if c.Failures {
		out += "failures: {enabled: true, linger: 50ms}\n"
	}
	return out
}

// Cases lists every case of RELIABILITY-CASES, in order: those the command
// runs, and for the others the reason and where they are shown. Each
// case's Holds are its "what must hold" beyond the checker's criteria.
func Cases() []Case {
	return []Case{
		{ID: "T01", Title: "broker graceful restart mid-stream", Run: brokerRestart, Holds: []Clause{
			recoveredWithin("consumers > 0 on all queues and lag < 2 s within 15 s of the broker running again"),
		}},
		{ID: "T02", Title: "broker hard crash", Run: brokerCrash, Holds: []Clause{
			must(clauseNoLoss, "no event whose outbox row was marked forwarded is missing (confirms ⇒ fsync)"),
			recoveredWithin("recovery ≤ 15 s after the node is up"),
		}},
		{ID: "T03", Title: "connection drop storm", Run: connectionStorm, Holds: []Clause{
			must(clauseReconnect, "each reconnect ≤ 5 s (the probe queue's consumers; the relay's shows in the recovery)"),
			must(clauseResources, "no goroutine leak (nor file descriptor leak) once the storm is over"),
		}},
		{ID: "T04", Title: "broker unreachable for 60 s", Bound: 30 * time.Second, Run: brokerUnreachable, Holds: []Clause{
			must("committing", "the API keeps committing (the outbox grows)"),
			must(clauseDrained, "the relay's backlog drains"),
			recoveredWithin("lag back to baseline within 30 s"),
		}},
		{ID: "T05", Title: "broker memory alarm: publishers blocked", Bound: 30 * time.Second, Run: memoryAlarmCase, Holds: []Clause{
			must(clauseNoLoss, "the relay stalls without loss"),
			must("degraded", "/health shows degraded"),
			must(clauseResources, "RSS and goroutines bounded"),
			must(clauseNoDuplicate, "no duplicate effects after the restore; roll-backs cause only duplicate deliveries"),
		}},
		{ID: "T06", Title: "PostgreSQL restart, fast and immediate", Bound: 10 * time.Second, Run: postgresRestart, Holds: []Clause{
			must("503", "the API answers 503 (not 500) during the outage"),
			must(clauseOnce, "client retries with the same event_id create exactly one business row and one effect"),
			recoveredWithin("relay and consumers resume ≤ 10 s"),
		}},
		{ID: "T07", Title: "database sessions killed", Run: sessionsKilled, Holds: []Clause{
			must(clauseRolledBack, "rolled-back consumer transactions leave no effect and no inbox claim; the message is redelivered"),
		}},
		{ID: "T08", Title: "consumer crash mid-handler", Quick: true, Run: consumerCrash, Holds: []Clause{
			notHere("the redelivered flag is seen", "the probe keeps no delivery log, so the flag is not read; that the killed node's deliveries came again shows as nothing lost"),
			must(clauseOnce, "processed_events (the inbox) unique"),
			must(clauseDrained, "no stuck unacknowledged messages after the restart"),
		}},
		{ID: "T09", Title: "relay crash while publishing", Run: relayCrash, Holds: []Clause{
			must("republished", "republished events appear as duplicate deliveries, at most one batch per crash"),
		}},
		{ID: "T10", Title: "two relays on one outbox", Run: twoRelays, Holds: []Clause{
			notHere("per-aggregate order preserved, if promised", "moenda promises no order: a queue's deliveries are handled amqp.prefetch at a time (README: Configuration)"),
		}},
		{ID: "T11", Title: "commit-order inversion and rollbacks", Reader: "poll", Run: commitOrder, Holds: []Clause{
			must("exact", "the relayed set equals the committed set exactly (no skip)"),
			must(clauseRolledBack, "rolled-back events are never relayed (ghosts 0)"),
		}},
		{ID: "T12", Title: "idle-in-transaction session", Reader: "poll", Bound: 10 * time.Second, Run: idleInTransaction, Holds: []Clause{
			must("alert", "a relay-lag alert within 60 s"),
			must("ended", "idle_in_transaction_session_timeout ends the session"),
			must(clauseNoLoss, "nothing skipped"),
			recoveredWithin("lag back to baseline ≤ 10 s after"),
		}},
		{ID: "T13", Title: "outbox and inbox bloat soak", Overlay: soakOverlay, Drain: 15 * time.Minute, Run: bloatSoak, Holds: []Clause{
			must("plateau", "the outbox's size plateaus (< 2× steady state after 3 retention cycles)"),
			notHere("the relay's query p99 < 20 ms", "it needs pg_stat_statements, which this machine's PostgreSQL does not load (shared_preload_libraries), and the suite does not change the server's configuration"),
			must("autovacuum", "autovacuum completes on the outbox"),
			must(clauseNoLoss, "undelivered rows are never deleted"),
		}},
		{ID: "T14", Title: "network degradation", Run: networkDegradation, Holds: []Clause{
			notHere("the blackhole is detected within 2× the AMQP heartbeat", "the suite does not time the nodes' detection, which shows only in their logs; the recovery after the blackhole is bounded instead"),
			must("p99", "p99 latency bounded (under the longest fault's hold plus the recovery bound)"),
			must(clauseResources, "no goroutine or file descriptor leak"),
		}},
		{ID: "T15", Title: "unroutable events", Run: unroutable, Holds: []Clause{
			must("unrouted", "never silently lost: what no binding matches lands in the unrouted queue, and the checker counts it there"),
			must("alert", "an alert fires (moenda_unrouted_messages)"),
		}},
		{ID: "T16", Title: "transient failure, then success", Run: transient, Holds: []Clause{
			must("schedule", "3 attempts, after ≈ 1 s and 5 s: each transient event applied about 6 s after its commit"),
			must("nodlq", "nothing in the DLQ"),
		}},
		{ID: "T17", Title: "permanent failure, no head-of-line blocking", Run: permanent, Holds: []Clause{
			must(clauseDeadLetters, "each poison event: attempts 1+3 at ≈ 1 s, 5 s, 25 s, then a DLQ entry with reason, attempts=4, origin queue, routing key, event_id and correlation_id"),
			must("exactlyone", "exactly one DLQ entry per poison event"),
			must("p99", "good events' p99 latency < 2 s during the retries"),
		}},
		{ID: "T18", Title: "poison burst", Run: poisonBurst, Holds: []Clause{
			must("copies", "extra DLQ copies reported apart, at most the messages in flight"),
			must(clauseDeadLetters, "each poison message redelivered at most once a second (4 attempts over ≈ 31 s)"),
			notHere("with NoRequeueOnNack=false on a quorum queue with delivery-limit=5, the message ends in the DLQ with x-first-death-reason=delivery_limit", "moenda has no setting that requeues a nacked message, so the misconfiguration cannot be made"),
		}},
		{ID: "T19", Title: "malformed JSON", Run: malformedJSON, Holds: []Clause{
			must(clauseAPI, "API: 400 in < 100 ms"),
			must(clauseBroker, "broker path: no retries; DLQ reason decode_error (invalid_encoding for bytes that are not UTF-8) within 1 s"),
			must(clauseRunning, "no panic: the consumer keeps running"),
		}},
		{ID: "T20", Title: "invalid UTF-8 and NUL characters", Run: invalidEncoding, Holds: []Clause{
			must(clauseAPI, "API: 400 (invalid encoding)"),
			must(clauseBroker, "broker path: DLQ reason invalid_encoding (invalid_data for the NUL PostgreSQL refuses) on the first attempt, never an endless retry"),
		}},
		{ID: "T21", Title: "unknown event type or version", Run: unknownType, Holds: []Clause{
			must(clauseAPI, "API: 400 for an event no exchange carries"),
			must(clauseBroker, "per policy: DLQ reason unknown_version on the first attempt; an unknown type acknowledged and counted, exactly; never a nack-requeue loop"),
		}},
		{ID: "T22", Title: "missing, empty or oversize event_id", Run: badEventIDs, Holds: []Clause{
			must(clauseBroker, "all three dead-lettered with reason missing_event_id, none deduplicated against another, no effect"),
			must(clauseAPI, "the API answers 400 for a bad id (not 500)"),
		}},
		{ID: "T23", Title: "non-string AMQP headers", Overlay: quorumOverlay, Run: nonStringHeaders, Holds: []Clause{
			must("budget", "processed normally, redeliveries within the retry budget (no good event dead-lettered)"),
			must("logs", "zero \"not a string\" refusals in the logs"),
		}},
		{ID: "T24", Title: "oversized messages", Run: oversized, Holds: []Clause{
			must(clauseAPI, "API: 413 above the configured limit, within 1 s"),
			notHere("the 413 comes before the whole body is read", "a 10 MB body crosses loopback within the bound either way; T30's 100 MB chunked body, answered 413 within 1 s, shows it"),
			notHere("a publish the broker refuses makes the relay park the row, not retry forever", "no row of 17 MB reaches the relay: the API refuses bodies over http.max_body_bytes, and the outbox events over outbox.max_event_bytes (RabbitMQ's max_message_size by default); a row the broker refuses for good is parked, with reason refused, by TestARefusedRowIsParkedAndTheRestGoOnce and, through Kafka's record limit, TestKafkaRelayParksARecordTheBrokerRefuses"),
			must(clauseBroker, "the consumer's size limit dead-letters with reason too_large"),
			must(clauseResources, "RSS growth < 100 MB"),
		}},
		{ID: "T25", Title: "duplicate delivery injection", Run: duplicateInjection, Holds: []Clause{
			must(clauseOnce, "exactly one effect and one processed_events row per event"),
			must("acked", "the duplicates acknowledged, not dead-lettered, and counted: duplicates = 4 per event"),
		}},
		{ID: "T26", Title: "shutdown during a retry's backoff", Run: shutdownInBackoff, Holds: []Clause{
			must("exit", "the process exits within router.close_timeout (10 s)"),
			must(clauseNoLoss, "the message is requeued or parked, not lost"),
			must("precondition", "no PRECONDITION_FAILED channel closures"),
			notHere("a handler blocking past x-consumer-timeout: the handler's own timeout fires first and routes to the retry tier", "not injected: a handler blocking past x-consumer-timeout (≥ 60 s) would hold the case for minutes"),
		}},
		{ID: "T27", Title: "Kafka analytics replay, rebalance, poison record", NotHere: notHereKafka},
		{ID: "T28", Title: "unauthenticated and unauthorised admin calls", Overlay: authOverlay, Run: unauthorised, Holds: []Clause{
			must("refused", "401 / 403 on every admin and publish route, with a uniform error body"),
			must("state", "no state change (database and broker compared before and after)"),
			must("audit", "a log entry of each refusal, with its correlation id"),
			notHere("no CSRF-less cross-origin call", "moenda's own routes take bearer tokens, never cookies"),
		}},
		{ID: "T29", Title: "SQL injection and hostile parameters", Plugins: []string{"tarefas"}, Run: hostileParameters, Holds: []Clause{
			must("answers", "400 with a clear message; never 500 or SQL text"),
			notHere("pg_stat_statements shows only parameterised statements", "this machine's PostgreSQL does not load pg_stat_statements (shared_preload_libraries), and the suite does not change the server's configuration"),
			must("state", "schema and row counts unchanged"),
			must("sqlmap", "sqlmap finds nothing"),
		}},
		{ID: "T30", Title: "oversized bodies, slow clients, header abuse", Run: slowClients, Holds: []Clause{
			must("413", "413 promptly for 10 MB and 100 MB bodies"),
			must("probe", "probe requests' p99 < 500 ms throughout"),
			must(clauseSlow, "slow connections closed by http.read_header_timeout and http.read_timeout"),
			must("fds", "the open file count bounded"),
			must("correlation", "an invalid correlation id replaced by a new UUID, never echoed into the answer's headers"),
			notHere("an invalid correlation id never written raw into the logs", "the nodes log at warn and a replaced id is logged at info; TestCorrelationIDIsKeptOnlyWhenPlain checks that line quotes and cuts it"),
			notHere("no allowlist or rate-limit bypass through X-Forwarded-For", "moenda has neither an allowlist nor a rate limit, and reads no X-Forwarded-For"),
		}},
		{ID: "T31", Title: "quorum-queue leader node killed (three-node cluster)", Quick: true, Rabbits: clusterNodes, Overlay: quorumOverlay, Drain: clusterDrain, Run: quorumLeaderKilled, Holds: []Clause{
			must("moved", "consumers move to another node: the probe's queue has its consumers back while the node is down"),
			must("leader", "a new leader is elected"),
			recoveredWithin("recovery ≤ 15 s after the node is started again"),
			must("caughtup", "the restarted node catches up: an online member of the probe's queues again"),
		}},
		{ID: "T32", Title: "rolling restart of the cluster", Rabbits: clusterNodes, Overlay: quorumOverlay, Drain: clusterDrain, Run: rollingRestart, Holds: []Clause{
			must("consumers", "no moment with zero consumers on the probe's queue longer than the bound"),
			recoveredWithin("recovery ≤ 15 s after each node"),
		}},
		{ID: "T33", Title: "one node cut off (partition)", Rabbits: clusterNodes, Overlay: quorumOverlay, Drain: clusterDrain, Run: nodeCutOff, Holds: []Clause{
			must("noticed", "moenda never publishes to or consumes from the cut-off node without noticing: once RabbitMQ counts the node gone (net_ticktime), events acknowledged in the suspension's last 20 s (but its last 2) are applied within 2 s, before it ends"),
			must("moved", "the probe's queue has its consumers on the nodes still up"),
			must("partition", "what the broker did (partitions, paused minority) is reported"),
			must("caughtup", "the node an online member of the probe's queues again after the heal"),
			recoveredWithin("recovery ≤ 15 s after the heal"),
		}},
		{ID: "T34", Title: "a classic queue's node dies", Rabbits: clusterNodes, Bound: 30 * time.Second, Run: classicNodeKilled, Holds: []Clause{
			must("readyz", "/readyz says the queue is unavailable (degraded, unavailable_queues)"),
			must("metrics", "the metrics say so: moenda_queue_unavailable 1"),
			must(clauseNoLoss, "nothing lost once the node returns"),
			recoveredWithin("recovery ≤ 30 s after the node is up; T31 is the same death on a quorum queue"),
		}},
		{ID: "T35", Title: "PostgreSQL failover, synchronous standby", Standby: harness.StandbySync, Reader: "logical", Run: postgresFailover, Holds: []Clause{
			must("slot", "the logical relay creates its slot on the new primary and reads the gap from the table"),
			notHere("the polling relay takes its lock there", "T36's relay polls: its lock clause shows it, on the same failover with an asynchronous standby"),
			must(clauseNoLoss, "the inbox and the outbox tables are there: nothing lost"),
			must(clauseNoDuplicate, "no duplicate effects"),
			recoveredWithin("recovery ≤ 15 s after the promotion"),
		}},
		{ID: "T36", Title: "PostgreSQL failover, asynchronous standby", Standby: harness.StandbyAsync, Reader: "poll", Run: postgresFailover, Holds: []Clause{
			must("consistent", "loss, if any, is PostgreSQL's and consistent: an event missing only with its business row, none delivered whose rows are gone; the commits PostgreSQL lost counted apart"),
			must("lock", "the polling relay takes its lock on the new primary"),
			recoveredWithin("recovery ≤ 15 s after the promotion"),
		}},
		// The failure workbench's cases, beyond RELIABILITY-CASES.
		{ID: "W01", Title: "failure ingest under broker restart", Failures: true, Delays: workbenchDelays, Run: ingestUnderRestart, Holds: []Clause{
			must(clauseLedger, "every poisoned event in the ledger exactly once: none missing, none recorded twice by (queue, event_id)"),
			must(clauseDLQEmpty, "the DLQ empty after the drain: the ingest took every dead letter"),
			must(clauseIngest, "ingest resumes within 15 s of the broker running again (/readyz failure_ingest leading, the DLQ consumed)"),
		}},
		{ID: "W02", Title: "re-drive under consumer crash", Failures: true, Delays: workbenchDelays, Run: redriveUnderCrash, Holds: []Clause{
			must(clauseOnce, "every re-driven event handled exactly once: one effect, one inbox claim"),
			must(clauseRedrive, "the re-drive ends done, every item handled"),
			must(clauseSentOnce, "no failure sent twice: the re-drive's items sent once each, as many as it planned"),
			must(clauseResolved, "the ledger marks every failure resolved"),
		}},
	}
}

// Keys of clauses more than one case has.
const (
	clauseNoLoss      = "noloss"
	clauseNoDuplicate = "noduplicate"
	clauseOnce        = "once"
	clauseDrained     = "drained"
	clauseRolledBack  = "rolledback"
	clauseReconnect   = "reconnect"
	clauseResources   = "resources"
	clauseDeadLetters = "deadletters"
	clauseAPI         = "api"
	clauseBroker      = "broker"
	clauseRunning     = "running"
	clauseSlow        = "slow"
)
