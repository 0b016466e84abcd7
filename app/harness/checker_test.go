package harness

import (
	"slices"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/handlers/event"
)

// history writes one invoke and one outcome per event: ids are "<kind
// letter><n>", and events g1..g4 share aggregate "a" in that order.
func history(outcomes map[string]Outcome) []Op {
	var h []Op
	t0 := time.Unix(0, 0)
	for i, id := range []string{"g1", "g2", "g3", "g4", "p1", "p2"} {
		kind, agg := Good, "a"
		if id[0] == 'p' {
			kind, agg = Poison, ""
		}
		op := Op{Outcome: Invoked, Writer: 1, Seq: i, EventID: id, Kind: kind, Aggregate: agg, At: t0.Add(time.Duration(i) * time.Second)}
		h = append(h, op)
		op.Outcome = OK
		if o, ok := outcomes[id]; ok {
			op.Outcome = o
		}
		h = append(h, op)
	}
	return h
}

// clean is what a correct run leaves for history(nil).
func clean() Observed {
	t0 := time.Unix(100, 0)
	return Observed{
		Business:     map[string]bool{"g1": true, "g2": true, "g3": true, "g4": true, "p1": true, "p2": true},
		Effects:      []Effect{{"g1", t0}, {"g2", t0.Add(time.Second)}, {"g3", t0.Add(2 * time.Second)}, {"g4", t0.Add(3 * time.Second)}},
		Counter:      4,
		DeadLetters:  []DeadLetter{{EventID: "p1", Reason: "retries_exhausted", Attempts: "4"}, {EventID: "p2", Reason: "retries_exhausted", Attempts: "4"}},
		Deduplicated: 1,
		Drained:      true,
	}
}

func TestACleanRunIsValid(t *testing.T) {
	r := Check(history(nil), clean())
	if !r.Valid || r.Attempted != 6 || r.Confirmed != 6 || r.DuplicateDeliveries != 1 {
		t.Fatalf("%+v", r)
	}
}

// The checker must fail each kind of defect it exists to find.
func TestTheCheckerReportsEachDefect(t *testing.T) {
	tests := []struct {
		name     string
		outcomes map[string]Outcome
		spoil    func(o *Observed)
		found    func(r Report) []string
		want     []string
	}{
		{"a lost event", nil, func(o *Observed) { o.Effects = slices.Delete(o.Effects, 1, 2); o.Counter-- },
			func(r Report) []string { return r.Lost }, []string{"g2"}},
		{"a duplicate effect", nil, func(o *Observed) { o.Effects = append(o.Effects, Effect{"g3", time.Unix(200, 0)}); o.Counter++ },
			func(r Report) []string { return r.DuplicateEffects }, []string{"g3"}},
		{"a ghost: a failed command applied", map[string]Outcome{"g4": Failed}, func(*Observed) {},
			func(r Report) []string { return r.Unexpected }, []string{"g4"}},
		{"a ghost: an event never attempted", nil, func(o *Observed) { o.Effects = append(o.Effects, Effect{"x9", time.Unix(200, 0)}); o.Counter++ },
			func(r Report) []string { return r.Unexpected }, []string{"x9"}},
		{"a missing dead letter", nil, func(o *Observed) { o.DeadLetters = o.DeadLetters[:1] },
			func(r Report) []string { return append(r.DLQMissing, r.Lost...) }, []string{"p2", "p2"}},
		{"a good event dead-lettered", nil, func(o *Observed) {
			o.DeadLetters = append(o.DeadLetters, DeadLetter{EventID: "g1", Reason: "x", Attempts: "1"})
		}, func(r Report) []string { return r.DLQExtra }, []string{"g1"}},
		{"a dead letter without its reason", nil, func(o *Observed) { o.DeadLetters[0].Reason = "" },
			func(r Report) []string { return r.DLQIncomplete }, []string{"p1"}},
		{"events of an aggregate out of order", nil, func(o *Observed) {
			o.Effects[1].AppliedAt, o.Effects[2].AppliedAt = o.Effects[2].AppliedAt, o.Effects[1].AppliedAt
		},
			func(r Report) []string { return r.OrderViolations }, []string{"g2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := clean()
			tt.spoil(&seen)
			r := Check(history(tt.outcomes), seen)
			if r.Valid {
				t.Fatalf("valid: %+v", r)
			}
			if got := tt.found(r); !slices.Equal(got, tt.want) {
				t.Fatalf("found %v, want %v: %+v", got, tt.want, r)
			}
		})
	}
}

// An indeterminate command counts as confirmed when its business row
// exists, and as never done when it does not: neither is lost or a ghost.
func TestIndeterminateCommands(t *testing.T) {
	seen := clean()
	r := Check(history(map[string]Outcome{"g4": Indeterminate}), seen)
	if !r.Valid || r.Recovered != 1 || r.Confirmed != 6 {
		t.Fatalf("recovered: %+v", r)
	}
	seen.Business["g4"] = false
	seen.Effects, seen.Counter = seen.Effects[:3], 3
	if r := Check(history(map[string]Outcome{"g4": Indeterminate}), seen); !r.Valid || r.Confirmed != 5 {
		t.Fatalf("never done: %+v", r)
	}
	// Had it been applied without its business row, it is a ghost.
	seen.Effects, seen.Counter = clean().Effects, 4
	if r := Check(history(map[string]Outcome{"g4": Indeterminate}), seen); r.Valid || !slices.Equal(r.Unexpected, []string{"g4"}) {
		t.Fatalf("applied without its row: %+v", r)
	}
}

func TestACounterOutOfStepOrAnUndrainedRunIsInvalid(t *testing.T) {
	seen := clean()
	seen.Counter = 5
	if r := Check(history(nil), seen); r.Valid || !r.CounterMismatch {
		t.Fatalf("counter: %+v", r)
	}
	seen = clean()
	seen.Drained = false
	if r := Check(history(nil), seen); r.Valid {
		t.Fatalf("not drained: %+v", r)
	}
}

// A dead letter must carry the request's correlation id; an event kept in
// the unrouted queue is accounted for, not lost.
func TestCorrelationAndUnrouted(t *testing.T) {
	h := history(nil)
	for i := range h {
		if h[i].EventID == "p1" {
			h[i].Correlation = "c-p1"
		}
	}
	seen := clean()
	if r := Check(h, seen); r.Valid || !slices.Equal(r.DLQIncomplete, []string{"p1"}) {
		t.Fatalf("a dead letter without the request's correlation id: %+v", r)
	}
	seen.DeadLetters[0].CorrelationID = "c-p1"
	if r := Check(h, seen); !r.Valid {
		t.Fatalf("with it: %+v", r)
	}
	seen.Effects, seen.Counter = seen.Effects[:3], 3
	if r := Check(h, seen); r.Valid || !slices.Equal(r.Lost, []string{"g4"}) {
		t.Fatalf("g4 neither applied nor unrouted: %+v", r)
	}
	seen.Unrouted = []string{"g4"}
	if r := Check(h, seen); !r.Valid || r.Unrouted != 1 {
		t.Fatalf("g4 unrouted: %+v", r)
	}
}

// With the failure ledger, its unresolved and archived failures are the
// dead letters; a failure resolved by a re-drive, or re-driving, is not
// one, and its event must have its effect.
func TestTheLedgerHoldsTheDeadLetters(t *testing.T) {
	at := time.Unix(200, 0).UTC()
	row := func(id string, s failures.Status) failures.Failure {
		return failures.Failure{EventID: id, Status: s, Reason: "retries_exhausted", Attempts: 3, CorrelationID: "c-" + id,
			FailedQueue: ProbeQueues.Work, FirstFailureAt: at, LastFailureAt: at, Headers: map[string]string{event.HeaderEventID: id}}
	}
	ledger := []failures.Failure{row("p1", failures.Unresolved), row("p2", failures.Archived), row("g1", failures.Resolved), row("g2", failures.Redriving)}
	dead := LedgerDeadLetters(ledger)
	if len(dead) != 2 || dead[0].EventID != "p1" || dead[1].EventID != "p2" {
		t.Fatalf("dead letters %+v, want p1 and p2", dead)
	}
	if d := dead[0]; d.Reason != "retries_exhausted" || d.Attempts != "3" || d.CorrelationID != "c-p1" || d.Queue != ProbeQueues.Work ||
		!d.HeaderEventID || d.LastFailure != at.Format(time.RFC3339Nano) {
		t.Fatalf("dead letter %+v", d)
	}
	seen := clean()
	seen.Ledger, seen.DeadLetters = ledger, dead
	if r := Check(history(nil), seen); !r.Valid || r.DeadLettered != 2 {
		t.Fatalf("the ledger's dead letters: %+v", r)
	}
	// g2 re-driven and never handled is lost, not dead-lettered.
	seen.Effects, seen.Counter = slices.DeleteFunc(slices.Clone(seen.Effects), func(e Effect) bool { return e.EventID == "g2" }), 3
	if r := Check(history(nil), seen); r.Valid || !slices.Equal(r.Lost, []string{"g2"}) {
		t.Fatalf("a re-drive gone astray: %+v", r)
	}
	// g1 failing again after its re-drive is a good event dead-lettered.
	ledger[2].Status = failures.Unresolved
	seen = clean()
	seen.DeadLetters = append(seen.DeadLetters, LedgerDeadLetters(ledger[2:3])...)
	if r := Check(history(nil), seen); r.Valid || !slices.Equal(r.DLQExtra, []string{"g1"}) {
		t.Fatalf("a good event unresolved in the ledger: %+v", r)
	}
}

// With a database that may lose acknowledged commits, an event lost with
// its business row is the database's loss; one lost whose row is there
// stays moenda's, and one applied whose row is gone is a ghost.
func TestSeparateDatabaseLoss(t *testing.T) {
	seen := clean()
	// g4's commit was lost with its business row and never delivered.
	delete(seen.Business, "g4")
	seen.Effects, seen.Counter = seen.Effects[:3], 3
	r := Check(history(nil), seen)
	if r.Valid || !slices.Equal(r.Lost, []string{"g4"}) {
		t.Fatalf("before the separation: %+v", r)
	}
	r.SeparateDatabaseLoss(history(nil), seen)
	if !r.Valid || len(r.Lost) != 0 || !slices.Equal(r.DatabaseLost, []string{"g4"}) || len(r.DatabaseGhosts) != 0 {
		t.Fatalf("g4 lost with its row is the database's: %+v", r)
	}

	// g3 was applied though its business row is gone: delivered from a
	// commit the database then lost.
	ghost := clean()
	delete(ghost.Business, "g3")
	r = Check(history(nil), ghost)
	r.SeparateDatabaseLoss(history(nil), ghost)
	if r.Valid || !slices.Equal(r.DatabaseGhosts, []string{"g3"}) {
		t.Fatalf("g3 applied without its row: %+v", r)
	}

	// g2 lost though its business row is there: moenda's loss.
	mine := clean()
	mine.Effects = slices.Delete(slices.Clone(mine.Effects), 1, 2)
	mine.Counter = 3
	r = Check(history(nil), mine)
	r.SeparateDatabaseLoss(history(nil), mine)
	if r.Valid || !slices.Equal(r.Lost, []string{"g2"}) || len(r.DatabaseLost) != 0 {
		t.Fatalf("g2 lost with its row: %+v", r)
	}
}
