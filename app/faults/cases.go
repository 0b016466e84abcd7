package faults

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Case is one of the reliability cases: an injection, and what must hold
// once it is healed (the checker's criteria, plus the case's own).
type Case struct {
	ID    string
	Title string
	// Quick marks the cases run for every change (--quick, CI).
	Quick bool
	// NotHere says why the command does not run the case, and where what
	// it checks is shown instead; empty when it runs.
	NotHere string
	// Reader is outbox.reader for the case's nodes; auto when empty.
	Reader string
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
	Run   func(ctx context.Context, r *run) error
}

func (c Case) bound() time.Duration {
	if c.Bound == 0 {
		return 15 * time.Second
	}
	return c.Bound
}

// overlay is the configuration the case's nodes run, on base.yaml: the
// probe alone, and its seed-like schedule of 1 s, 5 s and 25 s with no
// immediate retry, so that attempts and delays can be checked.
func (c Case) overlay() string {
	reader := c.Reader
	if reader == "" {
		reader = "auto"
	}
	return fmt.Sprintf(`log: {level: warn, format: json}
handlers: {enabled: [%s]}
outbox: {reader: %s}
metrics: {poll_interval: 1s}
router: {close_timeout: 10s}
topology:
  exchanges:
    - name: faultprobe.eventos
      failure: {immediate_retries: 0, delays: [1s, 5s, 25s]}
`, strings.Join(append([]string{"faultprobe"}, c.Plugins...), ", "), reader)
}

// Cases lists every case of RELIABILITY-CASES, in order: those the command
// runs, and for the others the reason and where they are shown.
func Cases() []Case {
	return []Case{
		{ID: "T01", Title: "broker graceful restart mid-stream", Run: brokerRestart},
		{ID: "T02", Title: "broker hard crash", Run: brokerCrash},
		{ID: "T03", Title: "connection drop storm", Quick: true, Run: connectionStorm},
		{ID: "T04", Title: "broker unreachable for 60 s", Bound: 30 * time.Second, Run: brokerUnreachable},
		{ID: "T05", Title: "broker memory alarm: publishers blocked", Bound: 30 * time.Second, Run: memoryAlarmCase},
		{ID: "T06", Title: "PostgreSQL restart, fast and immediate", Bound: 10 * time.Second, Run: postgresRestart},
		{ID: "T07", Title: "database sessions killed", Quick: true, Run: sessionsKilled},
		{ID: "T08", Title: "consumer crash mid-handler", Run: consumerCrash},
		{ID: "T09", Title: "relay crash while publishing", Run: relayCrash},
		{ID: "T10", Title: "two relays on one outbox", Run: twoRelays},
		{ID: "T11", Title: "commit-order inversion and rollbacks", Quick: true, Reader: "poll", Run: commitOrder},
		{ID: "T12", Title: "idle-in-transaction session", Reader: "poll", Bound: 10 * time.Second, Run: idleInTransaction},
		{ID: "T13", Title: "outbox and inbox bloat soak", Overlay: soakOverlay, Drain: 15 * time.Minute, Run: bloatSoak},
		{ID: "T14", Title: "network degradation", Run: networkDegradation},
		{ID: "T15", Title: "unroutable events", Run: unroutable},
		{ID: "T16", Title: "transient failure, then success", Run: transient},
		{ID: "T17", Title: "permanent failure, no head-of-line blocking", Quick: true, Run: permanent},
		{ID: "T18", Title: "poison burst", Run: poisonBurst},
		{ID: "T19", Title: "malformed JSON", Run: malformedJSON},
		{ID: "T20", Title: "invalid UTF-8 and NUL characters", Run: invalidEncoding},
		{ID: "T21", Title: "unknown event type or version", Run: unknownType},
		{ID: "T22", Title: "missing, empty or oversize event_id", Run: badEventIDs},
		{ID: "T23", Title: "non-string AMQP headers", Overlay: quorumOverlay, Run: nonStringHeaders},
		{ID: "T24", Title: "oversized messages", Run: oversized},
		{ID: "T25", Title: "duplicate delivery injection", Quick: true, Run: duplicateInjection},
		{ID: "T26", Title: "shutdown during a retry's backoff", Run: shutdownInBackoff},
		{ID: "T27", Title: "Kafka analytics replay, rebalance, poison record", NotHere: notHereKafka},
		{ID: "T28", Title: "unauthenticated and unauthorised admin calls", Overlay: authOverlay, Run: unauthorised},
		{ID: "T29", Title: "SQL injection and hostile parameters", Plugins: []string{"tarefas"}, Run: hostileParameters},
		{ID: "T30", Title: "oversized bodies, slow clients, header abuse", Run: slowClients},
	}
}
