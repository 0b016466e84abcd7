package failures

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/handlers/event"
)

// Ledger keeps the failures: in PostgreSQL (Postgres), or in memory
// (Memory) in the memory environment. Both answer alike; the same tests
// hold them to it.
type Ledger interface {
	// Record adds failures in one transaction and returns how many rows
	// it added or changed. A failure already there (same queue and event
	// id) adds nothing, unless it was being re-driven and this is a later
	// failure: then it is unresolved again, with one more occurrence.
	Record(ctx context.Context, fs []Failure) (int, error)
	// List returns the failures f selects, newest first, after the
	// cursor page.After (0: from the newest), page.Limit at most.
	List(ctx context.Context, f Filter, page Page) ([]Failure, error)
	// Get returns one failure whole, or ErrNotFound.
	Get(ctx context.Context, id int64) (Failure, error)
	// Groups returns the groups of the failures f selects, by by (by
	// cause when empty), the largest first. Cause groups carry their
	// comment.
	Groups(ctx context.Context, f Filter, by GroupBy) ([]Group, error)
	// SetComment sets the operator's comment on the cause group
	// fingerprint, as who, and returns it; empty text clears it (nil).
	// ErrNotFound when no failure has that fingerprint: a comment is a
	// note on failures the ledger holds.
	SetComment(ctx context.Context, fingerprint, text, who string) (*Comment, error)
	// Mark sets the status of the failures ids that are in status from,
	// and returns how many it changed: archiving takes unresolved ones, a
	// re-drive those it sends.
	Mark(ctx context.Context, ids []int64, from, to Status) (int, error)
	// Redrive marks the unresolved failures ids re-driving by the
	// re-drive redrive, counting one more re-drive of each, and returns
	// how many it marked.
	Redrive(ctx context.Context, ids []int64, redrive int64) (int, error)
	// Release undoes Redrive for those of ids the re-drive redrive marked
	// and never sent: unresolved again, one re-drive fewer.
	Release(ctx context.Context, ids []int64, redrive int64) error
	// Edit records an edit of the unresolved failure id: a new failure,
	// unresolved and never re-driven, with id's queue, event id and story
	// and the body and event name of edit, linked to id, which becomes
	// Edited. It returns the new failure; ErrNotFound, or ErrNotUnresolved
	// (wrapped, with the status) when id is not unresolved any more.
	Edit(ctx context.Context, id int64, edit Edition) (Failure, error)
	// Select returns the ids of every failure f selects, in id order: a
	// selection frozen when an action is asked for, so failures recorded
	// after are not swept in.
	Select(ctx context.Context, f Filter) ([]int64, error)
	// Delete deletes the failures ids, and returns how many there were.
	Delete(ctx context.Context, ids []int64) (int, error)
	// Unresolved counts the unresolved failures by failed queue and
	// reason, for the metrics.
	Unresolved(ctx context.Context) ([]Count, error)
	// Prune deletes up to batch resolved or archived failures whose last
	// failure is before cutoff, and edited ones whose edit is gone, and
	// returns how many; unresolved and re-driving ones are kept whatever
	// their age.
	Prune(ctx context.Context, cutoff time.Time, batch int) (int, error)
}

// Count is how many unresolved failures one queue has for one reason.
type Count struct {
	FailedQueue string
	Reason      string
	N           int
}

// ErrNotFound is the error of a failure id the ledger does not hold.
var ErrNotFound = errors.New("failures: no such failure")

// ErrNotUnresolved is the error of an edit of a failure that is not
// unresolved: being re-driven, resolved, archived or edited already.
var ErrNotUnresolved = errors.New("failures: the failure is not unresolved")

// Edition is what an edit changes: the body, and the event name the body
// now carries (its headers follow it).
type Edition struct {
	Body      []byte
	EventName string
}

// edited is f's edit by e, before the ledger gives it an id: f's queue,
// event id and story, e's body and name, unresolved and never re-driven.
func (e Edition) edited(f Failure) Failure {
	n := f
	n.ID, n.EditOf, n.EditedBy = 0, f.ID, 0
	n.Status, n.Redrives, n.RedriveID = Unresolved, 0, 0
	n.Body, n.EventName = e.Body, e.EventName
	n.Headers = maps.Clone(f.Headers)
	if n.Headers == nil {
		n.Headers = map[string]string{}
	}
	if _, ok := n.Headers[event.MetaName]; ok {
		n.Headers[event.MetaName] = e.EventName
	}
	return n
}

// Filter selects failures; its zero value selects those not archived.
// Every field set must hold.
type Filter struct {
	// IDs are the failures to take, by their ledger ids; empty is any.
	IDs []int64
	// Status is one status; empty is every status but Archived and
	// Edited, or every status with AnyStatus.
	Status        Status
	AnyStatus     bool
	FailedQueue   string
	Handler       string
	Reason        string
	EventName     string
	EventID       string
	CorrelationID string
	Fingerprint   string
	// Since and Until bound the last failure: Since <= t < Until.
	Since, Until time.Time
	// Text is found, whatever its case, in the error text.
	Text string
}

// Page is a keyset page: the failures with an id below After (0: from
// the newest), Limit at most.
type Page struct {
	After int64
	Limit int
}

// MaxPage bounds Page.Limit; 0 or more is MaxPage.
const MaxPage = 500

func (p Page) limit() int {
	if p.Limit <= 0 || p.Limit > MaxPage {
		return MaxPage
	}
	return p.Limit
}

// GroupBy is what groups are keyed by.
type GroupBy string

// The keys of groups: the cause (the fingerprint), or one column.
const (
	ByCause     GroupBy = "cause"
	ByQueue     GroupBy = "queue"
	ByEventType GroupBy = "event_type"
	ByReason    GroupBy = "reason"
)

// GroupBys are the accepted keys, the default first.
var GroupBys = []GroupBy{ByCause, ByQueue, ByEventType, ByReason}

// ParseGroupBy reads a key of groups; empty is ByCause.
func ParseGroupBy(s string) (GroupBy, error) {
	if s == "" {
		return ByCause, nil
	}
	if by := GroupBy(s); slices.Contains(GroupBys, by) {
		return by, nil
	}
	return "", fmt.Errorf("by must be cause, queue, event_type or reason, got %q", s)
}

// key is what x is grouped under by by.
func (by GroupBy) key(x Failure) string {
	switch by {
	case ByQueue:
		return x.FailedQueue
	case ByEventType:
		return x.EventName
	case ByReason:
		return x.Reason
	default:
		return x.Fingerprint
	}
}

// MaxComment bounds a comment, in characters: a note on a cause (an
// incident, who is on it), not a report.
const MaxComment = 2000

// Comment is an operator's note on a cause group: who wrote it, and when.
// It is kept by fingerprint, apart from the failures, so that a cause
// that comes back after its failures were pruned comes back with it.
type Comment struct {
	Text string    `json:"text"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
}

// Group is the failures that share a key: a fingerprint (a cause), or a
// queue, event type or reason (see GroupBy).
type Group struct {
	// Key is what the group shares: the fingerprint of a cause group.
	Key string `json:"key"`
	// Fingerprint, Handler, Reason and Error are a cause group's; a
	// group by reason has its Reason too.
	Fingerprint string `json:"fingerprint"`
	Handler     string `json:"handler"`
	Reason      string `json:"reason"`
	// Error is the normalised error text the group shares.
	Error          string    `json:"error"`
	Count          int       `json:"count"`
	FirstFailureAt time.Time `json:"first_failure_at"`
	LastFailureAt  time.Time `json:"last_failure_at"`
	// Queues are the failed queues, and EventNames the event types, in
	// the group, sorted.
	Queues     []string `json:"queues"`
	EventNames []string `json:"event_names"`
	// Comment is a cause group's operator's note; nil when it has none.
	Comment *Comment `json:"comment"`
}

// match says whether f selects x: the memory ledger's form of the
// PostgreSQL one's WHERE clause.
func (f Filter) match(x Failure) bool {
	eq := func(want, got string) bool { return want == "" || want == got }
	status := x.Status != pruned && (f.AnyStatus || x.Status == f.Status || (f.Status == "" && x.Status != Archived && x.Status != Edited))
	return status && (len(f.IDs) == 0 || slices.Contains(f.IDs, x.ID)) && eq(f.FailedQueue, x.FailedQueue) && eq(f.Handler, x.Handler) && eq(f.Reason, x.Reason) &&
		eq(f.EventName, x.EventName) && eq(f.EventID, x.EventID) && eq(f.CorrelationID, x.CorrelationID) &&
		eq(f.Fingerprint, x.Fingerprint) &&
		(f.Since.IsZero() || !x.LastFailureAt.Before(f.Since)) && (f.Until.IsZero() || x.LastFailureAt.Before(f.Until)) &&
		(f.Text == "" || strings.Contains(strings.ToLower(x.Error), strings.ToLower(f.Text)))
}

// once is fs with one failure per queue and event id, the latest: a
// dead-letter queue can hold two copies of one event (a dead letter
// published again because its delivery's acknowledgement was lost).
func once(fs []Failure) []Failure {
	type key struct{ queue, id string }
	at := make(map[key]int, len(fs))
	out := make([]Failure, 0, len(fs))
	for _, f := range fs {
		k := key{f.Queue, f.EventID}
		i, seen := at[k]
		switch {
		case !seen:
			at[k] = len(out)
			out = append(out, f)
		case f.LastFailureAt.After(out[i].LastFailureAt):
			out[i] = f
		}
	}
	return out
}
