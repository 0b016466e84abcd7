package failures

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

var _ Ledger = (*Memory)(nil)

// pruned is the status of a memory ledger's pruned or deleted row, which no
// filter selects.
const pruned Status = "pruned"

// Memory is the ledger of the memory environment: the PostgreSQL one's
// answers, kept for the life of the process.
type Memory struct {
	now func() time.Time

	mu       sync.Mutex
	rows     []Failure // by id, the first being 1
	byKey    map[[2]string]int64
	comments map[string]Comment // by fingerprint
}

// NewMemory returns an empty ledger whose record times are now's.
func NewMemory(now func() time.Time) *Memory {
	return &Memory{now: now, byKey: map[[2]string]int64{}, comments: map[string]Comment{}}
}

// Record implements Ledger.
func (l *Memory) Record(_ context.Context, fs []Failure) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range once(fs) {
		k := [2]string{f.Queue, f.EventID}
		if id, ok := l.byKey[k]; ok {
			old := &l.rows[id-1]
			if old.Status == Redriving && f.LastFailureAt.After(old.LastFailureAt) {
				old.Status, old.Occurrences = Unresolved, old.Occurrences+1
				old.Reason, old.Error, old.Fingerprint, old.Attempts = f.Reason, f.Error, f.Fingerprint, f.Attempts
				old.LastFailureAt, old.Headers, old.Body = f.LastFailureAt, f.Headers, f.Body
				n++
			}
			continue
		}
		f.ID = int64(len(l.rows) + 1)
		f.RecordedAt = l.now().UTC()
		l.rows = append(l.rows, f)
		l.byKey[k] = f.ID
		n++
	}
	return n, nil
}

// List implements Ledger.
func (l *Memory) List(_ context.Context, f Filter, page Page) ([]Failure, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := len(l.rows)
	if page.After > 0 {
		last = min(last, int(page.After-1))
	}
	out := []Failure{}
	for i := last - 1; i >= 0 && len(out) < page.limit(); i-- {
		if f.match(l.rows[i]) {
			out = append(out, l.rows[i])
		}
	}
	return out, nil
}

// Get implements Ledger.
func (l *Memory) Get(_ context.Context, id int64) (Failure, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id < 1 || id > int64(len(l.rows)) || l.rows[id-1].Status == pruned {
		return Failure{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return l.rows[id-1], nil
}

// Mark implements Ledger.
func (l *Memory) Mark(_ context.Context, ids []int64, from, to Status) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.change(ids, func(x *Failure) bool {
		if x.Status != from {
			return false
		}
		x.Status = to
		return true
	}), nil
}

// change runs fn on each row of ids that exists, and counts those it
// changed (fn says). l.mu is held.
func (l *Memory) change(ids []int64, fn func(x *Failure) bool) int {
	n := 0
	for _, id := range ids {
		if id >= 1 && id <= int64(len(l.rows)) && l.rows[id-1].Status != pruned && fn(&l.rows[id-1]) {
			n++
		}
	}
	return n
}

// Redrive implements Ledger.
func (l *Memory) Redrive(_ context.Context, ids []int64, redrive int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.change(ids, func(x *Failure) bool {
		if x.Status != Unresolved {
			return false
		}
		x.Status = Redriving
		x.Redrives++
		x.RedriveID = redrive
		return true
	}), nil
}

// Release implements Ledger.
func (l *Memory) Release(_ context.Context, ids []int64, redrive int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.change(ids, func(x *Failure) bool {
		if x.Status != Redriving || x.RedriveID != redrive {
			return false
		}
		x.Status = Unresolved
		x.Redrives--
		return true
	})
	return nil
}

// Edit implements Ledger.
func (l *Memory) Edit(_ context.Context, id int64, e Edition) (Failure, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id < 1 || id > int64(len(l.rows)) || l.rows[id-1].Status == pruned {
		return Failure{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	orig := &l.rows[id-1]
	if orig.Status != Unresolved {
		return Failure{}, fmt.Errorf("%w: failure %d is %s", ErrNotUnresolved, id, orig.Status)
	}
	n := e.edited(*orig)
	n.ID = int64(len(l.rows) + 1)
	n.RecordedAt = l.now().UTC()
	orig.Status, orig.EditedBy = Edited, n.ID
	l.rows = append(l.rows, n)
	l.byKey[[2]string{n.Queue, n.EventID}] = n.ID
	return n, nil
}

// Select implements Ledger.
func (l *Memory) Select(_ context.Context, f Filter) ([]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := []int64{}
	for _, x := range l.rows {
		if f.match(x) {
			ids = append(ids, x.ID)
		}
	}
	return ids, nil
}

// Delete implements Ledger: a deleted row stays as a tombstone, as a
// pruned one does.
func (l *Memory) Delete(_ context.Context, ids []int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.change(ids, func(x *Failure) bool {
		l.forget(x.ID)
		return true
	}), nil
}

// forget makes the row id a tombstone. l.mu is held.
func (l *Memory) forget(id int64) {
	x := &l.rows[id-1]
	k := [2]string{x.Queue, x.EventID}
	if l.byKey[k] == id { // an edited original's key is its edit's
		delete(l.byKey, k)
	}
	*x = Failure{ID: x.ID, Status: pruned}
}

// gone says whether the row id is not held: an edited original whose
// edit is gone may be pruned. l.mu is held.
func (l *Memory) gone(id int64) bool {
	return id < 1 || id > int64(len(l.rows)) || l.rows[id-1].Status == pruned
}

// Unresolved implements Ledger.
func (l *Memory) Unresolved(context.Context) ([]Count, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[[2]string]int{}
	for _, x := range l.rows {
		if x.Status == Unresolved {
			n[[2]string{x.FailedQueue, x.Reason}]++
		}
	}
	out := []Count{}
	for k, c := range n {
		out = append(out, Count{FailedQueue: k[0], Reason: k[1], N: c})
	}
	slices.SortFunc(out, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.FailedQueue, b.FailedQueue), cmp.Compare(a.Reason, b.Reason))
	})
	return out, nil
}

// Prune implements Ledger. Ids are positions here, so a pruned failure's
// row stays as a tombstone that matches no filter.
func (l *Memory) Prune(_ context.Context, cutoff time.Time, batch int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := range l.rows {
		x := &l.rows[i]
		settled := x.Status == Resolved || x.Status == Archived || x.Status == Edited && l.gone(x.EditedBy)
		if n < batch && settled && x.LastFailureAt.Before(cutoff) {
			l.forget(x.ID)
			n++
		}
	}
	return n, nil
}

// Groups implements Ledger.
func (l *Memory) Groups(_ context.Context, f Filter, by GroupBy) ([]Group, error) {
	by, err := ParseGroupBy(string(by))
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[string]*Group{}
	var out []*Group
	for _, x := range l.rows { // by id: the last seen is the latest
		if !f.match(x) {
			continue
		}
		k := by.key(x)
		g := byKey[k]
		if g == nil {
			g = &Group{Key: k, FirstFailureAt: x.FirstFailureAt, LastFailureAt: x.LastFailureAt}
			switch by {
			case ByCause:
				g.Fingerprint, g.Handler, g.Reason = x.Fingerprint, x.Handler, x.Reason
				if c, ok := l.comments[x.Fingerprint]; ok {
					g.Comment = &c
				}
			case ByReason:
				g.Reason = x.Reason
			}
			byKey[k] = g
			out = append(out, g)
		}
		g.Count++
		if by == ByCause {
			g.Error = Normalise(x.Error)
		}
		g.FirstFailureAt = minTime(g.FirstFailureAt, x.FirstFailureAt)
		if x.LastFailureAt.After(g.LastFailureAt) {
			g.LastFailureAt = x.LastFailureAt
		}
		if !slices.Contains(g.Queues, x.FailedQueue) {
			g.Queues = append(g.Queues, x.FailedQueue)
		}
		if !slices.Contains(g.EventNames, x.EventName) {
			g.EventNames = append(g.EventNames, x.EventName)
		}
	}
	groups := make([]Group, len(out))
	for i, g := range out {
		slices.Sort(g.Queues)
		slices.Sort(g.EventNames)
		groups[i] = *g
	}
	slices.SortFunc(groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastFailureAt.Compare(a.LastFailureAt), cmp.Compare(a.Key, b.Key))
	})
	return groups, nil
}

// SetComment implements Ledger.
func (l *Memory) SetComment(_ context.Context, fingerprint, text, who string) (*Comment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.ContainsFunc(l.rows, func(x Failure) bool { return x.Status != pruned && x.Fingerprint == fingerprint }) {
		return nil, fmt.Errorf("%w: no failure of group %s", ErrNotFound, fingerprint)
	}
	if text == "" {
		delete(l.comments, fingerprint)
		return nil, nil
	}
	c := Comment{Text: text, By: who, At: l.now().UTC()}
	l.comments[fingerprint] = c
	return &c, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
