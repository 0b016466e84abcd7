package memory

import (
	"context"
	"time"

	"github.com/moenda/moenda/handlers"
)

// inboxKey is one consumer's record of one event or idempotency key.
type inboxKey struct{ consumer, key string }

// inboxRow is what the in-memory inbox keeps of a key.
type inboxRow struct {
	at      time.Time
	receipt handlers.Receipt
}

// Once runs fn in one unit of work unless consumer has already processed
// key, and reports whether fn ran and committed; the in-memory twin of the
// PostgreSQL inbox. Units of work run one at a time, so deliveries of one
// event cannot race.
func (t *Transactor) Once(ctx context.Context, consumer, key string, fn func(ctx context.Context) error) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := inboxKey{consumer, key}
	if _, seen := t.inbox[k]; seen {
		return false, nil
	}
	err := t.run(ctx, func(ctx context.Context, x handlers.Tx) error {
		if err := fn(ctx); err != nil {
			return err
		}
		x.OnCommit(func() { t.inbox[k] = inboxRow{at: time.Now()} }) // runs with t.mu held
		return nil
	})
	return err == nil, err
}

// Remember implements handlers.Tx.
func (x *tx) Remember(_ context.Context, r handlers.Receipt) (*handlers.Receipt, error) {
	k := inboxKey{r.Consumer, r.Key}
	if row, seen := x.t.inbox[k]; seen { // t.mu is held for the unit of work
		earlier := row.receipt
		return &earlier, nil
	}
	x.OnCommit(func() { x.t.inbox[k] = inboxRow{at: time.Now(), receipt: r} })
	return nil, nil
}

// Claimed returns those of keys that consumer has processed.
func (t *Transactor) Claimed(_ context.Context, consumer string, keys []string) (map[string]bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for _, k := range keys {
		if _, seen := t.inbox[inboxKey{consumer, k}]; seen {
			out[k] = true
		}
	}
	return out, nil
}

// Claims returns when each consumer that has processed key did.
func (t *Transactor) Claims(_ context.Context, key string) (map[string]time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Time{}
	for k, row := range t.inbox {
		if k.key == key {
			out[k.consumer] = row.at.UTC()
		}
	}
	return out, nil
}

// PruneInbox forgets keys processed before cutoff and returns how many.
func (t *Transactor) PruneInbox(_ context.Context, cutoff time.Time, _ int) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, row := range t.inbox {
		if row.at.Before(cutoff) {
			delete(t.inbox, k)
			n++
		}
	}
	return n, nil
}
