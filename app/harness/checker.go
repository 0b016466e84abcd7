// Package harness runs moenda as its operators do, to test and measure
// it: `moenda serve` processes (nodes) on a database and a vhost of their
// own, running the fault probe; writers that publish through the API and
// record every command in a history kept outside the system under test;
// and, once the system has drained, a checker that compares what was
// confirmed with what came out, in the manner of Jepsen's set-full and
// total-queue checkers. `moenda faults` injects faults into it; `moenda
// bench scale` measures it.
package harness

import (
	"slices"
	"time"

	"github.com/moenda/moenda/adapters/failures"
)

// Outcome is what the workload learnt of one operation.
type Outcome string

const (
	// Invoked: the operation was started; an outcome follows.
	Invoked Outcome = "invoke"
	// OK: the business commit was acknowledged.
	OK Outcome = "ok"
	// Failed: a definite failure (a 4xx, a refusal before commit).
	Failed Outcome = "fail"
	// Indeterminate: the answer was cut (a timeout, a reset during the
	// commit). It may or may not have happened.
	Indeterminate Outcome = "info"
)

// Kind says what the consumer under test does with an event.
type Kind string

const (
	// Good events are applied once.
	Good Kind = "good"
	// Transient events fail their first deliveries, then are applied
	// once, like good ones.
	Transient Kind = "transient"
	// Poison events fail every time and must end in the dead-letter
	// queue.
	Poison Kind = "poison"
)

// Op is one line of the history: an operation of a writer and what came
// of it. An event's id is derived from (run, writer, seq), so a retried
// command reuses it.
type Op struct {
	Outcome Outcome `json:"op"`
	Writer  int     `json:"writer"`
	Seq     int     `json:"seq"`
	EventID string  `json:"event_id"`
	Kind    Kind    `json:"kind"`
	// Aggregate is the key whose events must be applied in order; empty
	// where no order is promised.
	Aggregate string `json:"aggregate,omitempty"`
	// Correlation is the correlation id the request carried; a dead
	// letter of the event must carry it too.
	Correlation string    `json:"correlation,omitempty"`
	At          time.Time `json:"t"`
}

// Effect is a row of the consumer's deliberately non-idempotent effect
// log: a duplicate effect shows as a second row.
type Effect struct {
	EventID   string    `json:"event_id"`
	AppliedAt time.Time `json:"applied_at"`
}

// DeadLetter is a message the checker's reader drained from a dead-letter
// or unrouted queue.
type DeadLetter struct {
	EventID       string `json:"event_id"`
	Reason        string `json:"reason"`
	Attempts      string `json:"attempts"`
	CorrelationID string `json:"correlation_id"`
	Queue         string `json:"queue,omitempty"`
	RoutingKey    string `json:"routing_key,omitempty"`
	FirstFailure  string `json:"first_failure,omitempty"`
	LastFailure   string `json:"last_failure,omitempty"`
	// HeaderEventID says the dead letter named its event in the event_id
	// header, not only as the message id.
	HeaderEventID bool `json:"header_event_id,omitempty"`
}

// Observed is what came out of the system once it drained.
type Observed struct {
	// Business are the event ids whose business row exists.
	Business map[string]bool
	Effects  []Effect
	// Counter is the consumer's counter, incremented with each effect.
	Counter     int64
	DeadLetters []DeadLetter
	// Ledger is the failure ledger's record of the probe's queue, when
	// the nodes run it (System.Ledger): its failures that are dead
	// letters still are among DeadLetters, beside what the checker read
	// from the dead-letter queue itself, QueueDeadLetters of them, which
	// the ledger's ingest leaves empty.
	Ledger           []failures.Failure
	QueueDeadLetters int
	// Unrouted are the event ids the broker kept in the unrouted queue:
	// no binding matched them. They are accounted for, not lost.
	Unrouted []string
	// Deduplicated counts the deliveries the consumer's inbox skipped
	// because the event's effect had committed: duplicate deliveries.
	Deduplicated int
	// Drained reports whether relays, queues and dead-letter queues went
	// quiet within the bound; failing to drain is itself a failure.
	Drained bool
}

// Report is the checker's verdict on one case.
type Report struct {
	Valid bool `json:"valid"`
	// Attempted, Confirmed and Recovered count event ids: confirmed are
	// those acknowledged, and those indeterminate whose business row
	// exists (recovered).
	Attempted int `json:"attempted"`
	Confirmed int `json:"confirmed"`
	Recovered int `json:"recovered"`
	// Lost: confirmed good events never applied, and confirmed poison
	// events not dead-lettered.
	Lost []string `json:"lost"`
	// Unexpected: effects or dead letters of events never confirmed
	// (never attempted, failed, or rolled back): ghosts.
	Unexpected []string `json:"unexpected"`
	// DuplicateEffects: events applied more than once.
	DuplicateEffects []string `json:"duplicate_effects"`
	// CounterMismatch: the counter disagrees with the effect rows.
	CounterMismatch bool `json:"counter_mismatch"`
	// DLQMissing are poison events not dead-lettered; DLQExtra are good
	// events dead-lettered, or poison events applied; DLQIncomplete are
	// dead letters without a reason or an attempt count, or whose
	// correlation id is not the request's.
	DLQMissing    []string `json:"dlq_missing"`
	DLQExtra      []string `json:"dlq_extra"`
	DLQIncomplete []string `json:"dlq_incomplete"`
	// DeadLettered counts the events dead-lettered, and PoisonConfirmed
	// the confirmed poison events, which should be the same ones.
	DeadLettered    int `json:"dead_lettered"`
	PoisonConfirmed int `json:"poison_confirmed"`
	// DLQDuplicates counts dead letters beyond one per event (allowed:
	// dead-lettering is at least once).
	DLQDuplicates int `json:"dlq_duplicates"`
	// Unrouted counts events kept in the unrouted queue.
	Unrouted int `json:"unrouted"`
	// DuplicateDeliveries counts repeat deliveries of applied events
	// (allowed: the price of at-least-once).
	DuplicateDeliveries int `json:"duplicate_deliveries"`
	// OrderViolations are events applied before an event of the same
	// aggregate that its writer sent earlier.
	OrderViolations []string `json:"order_violations"`
	Drained         bool     `json:"drained"`
	// DatabaseLost are acknowledged events whose business row the
	// database no longer has, each without an effect either: commits
	// PostgreSQL lost (an asynchronous standby promoted), apart from
	// Lost. DatabaseGhosts are such events that were applied anyway:
	// delivered though their rows are gone. Both are set by
	// SeparateDatabaseLoss alone.
	DatabaseLost   []string `json:"database_lost,omitempty"`
	DatabaseGhosts []string `json:"database_ghosts,omitempty"`
}

// SeparateDatabaseLoss is for a run whose database may lose acknowledged
// commits: an event lost together with its business row is the
// database's loss, taken out of Lost into DatabaseLost; an event applied
// whose business row is gone is a ghost, DatabaseGhosts, and the report
// is not valid. Whatever else is lost stays moenda's.
func (r *Report) SeparateDatabaseLoss(history []Op, seen Observed) {
	acked := map[string]bool{}
	for _, op := range history {
		if op.Outcome == OK {
			acked[op.EventID] = true
		}
	}
	applied := map[string]bool{}
	for _, e := range seen.Effects {
		applied[e.EventID] = true
	}
	var lost []string
	for _, id := range r.Lost {
		if acked[id] && !seen.Business[id] && !applied[id] {
			r.DatabaseLost = append(r.DatabaseLost, id)
			continue
		}
		lost = append(lost, id)
	}
	r.Lost = lost
	for id := range applied {
		if acked[id] && !seen.Business[id] {
			r.DatabaseGhosts = append(r.DatabaseGhosts, id)
		}
	}
	slices.Sort(r.DatabaseGhosts)
	r.Valid = r.valid()
}

// Check compares the history with what was observed.
func Check(history []Op, seen Observed) Report {
	attempted := map[string]Op{}
	outcome := map[string]Outcome{}
	for _, op := range history {
		if op.Outcome == Invoked {
			attempted[op.EventID] = op
			continue
		}
		// A definite answer outranks an indeterminate one: a retried
		// command that was acknowledged is confirmed.
		if outcome[op.EventID] != OK {
			outcome[op.EventID] = op.Outcome
		}
	}
	r := Report{Attempted: len(attempted), Drained: seen.Drained}
	confirmed := map[string]Op{}
	for id, op := range attempted {
		switch {
		case outcome[id] == OK:
			confirmed[id] = op
		case outcome[id] == Indeterminate && seen.Business[id]:
			confirmed[id] = op
			r.Recovered++
		}
	}
	r.Confirmed = len(confirmed)

	effects := map[string]int{}
	for _, e := range seen.Effects {
		effects[e.EventID]++
	}
	dead := map[string]int{}
	for _, d := range seen.DeadLetters {
		dead[d.EventID]++
		if d.Reason == "" || d.Attempts == "" {
			r.DLQIncomplete = append(r.DLQIncomplete, d.EventID)
		}
	}
	unrouted := map[string]bool{}
	for _, id := range seen.Unrouted {
		unrouted[id] = true
	}
	r.Unrouted = len(unrouted)
	r.DeadLettered = len(dead)
	for id, op := range confirmed {
		poison := op.Kind == Poison
		if poison {
			r.PoisonConfirmed++
		}
		if unrouted[id] {
			continue
		}
		if !poison && effects[id] == 0 || poison && dead[id] == 0 {
			r.Lost = append(r.Lost, id)
		}
		if poison && dead[id] == 0 {
			r.DLQMissing = append(r.DLQMissing, id)
		}
		if !poison && dead[id] > 0 || poison && effects[id] > 0 {
			r.DLQExtra = append(r.DLQExtra, id)
		}
	}
	for _, d := range seen.DeadLetters {
		if op, ok := confirmed[d.EventID]; ok && op.Correlation != "" && d.CorrelationID != op.Correlation {
			r.DLQIncomplete = append(r.DLQIncomplete, d.EventID)
		}
	}
	ghosts := map[string]bool{}
	for id, n := range effects {
		if _, ok := confirmed[id]; !ok {
			ghosts[id] = true
		}
		if n > 1 {
			r.DuplicateEffects = append(r.DuplicateEffects, id)
		}
	}
	for id, n := range dead {
		if _, ok := confirmed[id]; !ok {
			ghosts[id] = true
		}
		r.DLQDuplicates += n - 1
	}
	for id := range ghosts {
		r.Unexpected = append(r.Unexpected, id)
	}
	r.CounterMismatch = seen.Counter != int64(len(seen.Effects))
	r.DuplicateDeliveries = seen.Deduplicated
	r.OrderViolations = orderViolations(seen.Effects, confirmed)

	for _, l := range [][]string{r.Lost, r.Unexpected, r.DuplicateEffects, r.DLQMissing, r.DLQExtra, r.DLQIncomplete, r.OrderViolations} {
		slices.Sort(l)
	}
	r.Valid = r.valid()
	return r
}

// valid reports whether nothing the checker found breaks the promise.
func (r *Report) valid() bool {
	return r.Drained && len(r.Lost) == 0 && len(r.Unexpected) == 0 && len(r.DuplicateEffects) == 0 && !r.CounterMismatch &&
		len(r.DLQMissing) == 0 && len(r.DLQExtra) == 0 && len(r.DLQIncomplete) == 0 && len(r.OrderViolations) == 0 &&
		len(r.DatabaseGhosts) == 0
}

// orderViolations lists the events applied, by their first effect, after
// an event of the same aggregate with a higher sequence number: each
// aggregate's events come from one writer, in its order.
func orderViolations(effects []Effect, confirmed map[string]Op) []string {
	first := FirstEffects(effects)
	byAggregate := map[string][]Op{}
	for id := range first {
		if op, ok := confirmed[id]; ok && op.Aggregate != "" {
			byAggregate[op.Aggregate] = append(byAggregate[op.Aggregate], op)
		}
	}
	var out []string
	for _, ops := range byAggregate {
		slices.SortFunc(ops, func(a, b Op) int { return first[a.EventID].Compare(first[b.EventID]) })
		highest := -1
		for _, op := range ops {
			if op.Seq < highest {
				out = append(out, op.EventID)
			}
			highest = max(highest, op.Seq)
		}
	}
	return out
}
