package harness

import (
	"context"
	"strconv"
	"time"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/handlers/event"
)

// readLedger reads every failure the ledger holds of the probe's queue,
// whatever its status, through the ledger's own reader, a page at a
// time.
func (s *System) readLedger(ctx context.Context) ([]failures.Failure, error) {
	l := failures.NewPostgres(s.Pool)
	f := failures.Filter{AnyStatus: true, FailedQueue: ProbeQueues.Work}
	var out []failures.Failure
	page := failures.Page{Limit: failures.MaxPage}
	for {
		fs, err := l.List(ctx, f, page)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
		if len(fs) < page.Limit {
			return out, nil
		}
		page.After = fs[len(fs)-1].ID
	}
}

// LedgerDeadLetters are the failures of the ledger that are dead letters
// still: unresolved ones, and those archived (hidden, not handled). A
// failure resolved was handled once re-driven, and one re-driving is
// sent back and not settled: neither is a dead letter, and an event
// whose re-drive went astray shows as lost.
func LedgerDeadLetters(fs []failures.Failure) []DeadLetter {
	var out []DeadLetter
	for _, f := range fs {
		if f.Status != failures.Unresolved && f.Status != failures.Archived {
			continue
		}
		_, fromHeader := f.Headers[event.HeaderEventID]
		out = append(out, DeadLetter{EventID: f.EventID, Reason: f.Reason, Attempts: strconv.Itoa(f.Attempts), CorrelationID: f.CorrelationID,
			Queue: f.FailedQueue, RoutingKey: f.OriginalRoutingKey, FirstFailure: f.FirstFailureAt.Format(time.RFC3339Nano),
			LastFailure: f.LastFailureAt.Format(time.RFC3339Nano), HeaderEventID: fromHeader})
	}
	return out
}
