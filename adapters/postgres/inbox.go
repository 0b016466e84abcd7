package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// errSeen ends a unit of work whose event the consumer has processed before.
var errSeen = errors.New("event already processed")

// Once runs fn in one unit of work unless consumer has already processed
// the event key, and reports whether fn ran and committed. The unit claims
// the key in moenda_inbox first, with fn's writes and events after it, so
// a redelivery after a commit is skipped and one after a rollback runs
// again.
//
// Two deliveries of one event meet on the claim's unique key: the second's
// insert waits for the first's transaction, then finds its claim (and
// skips) or, after a rollback, takes the key itself. A handler writing
// one row makes it four round trips (begin, claim, the row, commit), as a
// consumer writing its own claim does. A claim written last needs a lock
// and a check before fn too, one round trip more: it held the chain with
// the inbox at 0.80 of such a consumer's rate, against 0.95 (BENCHMARKS.md,
// "Inbox: the claim first"). The claim takes the unit's transaction id at
// its start, so a unit that waits (on another service, say) holds back a
// polling outbox reader meanwhile: such waits belong in the handler's
// prepare step.
//
// A data error from PostgreSQL (class 22: a NUL character, a malformed
// value) is permanent: no retry of the same event can store it.
func (t *Transactor) Once(ctx context.Context, consumer, key string, fn func(ctx context.Context) error) (bool, error) {
	err := t.run(ctx, func(ctx context.Context, x handlers.Tx) error {
		tag, err := x.Postgres().Exec(ctx, `INSERT INTO moenda_inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, consumer, key)
		if err != nil {
			return fmt.Errorf("inbox: claim %s for %s: %w", key, consumer, err)
		}
		if tag.RowsAffected() == 0 {
			return errSeen
		}
		return fn(ctx)
	})
	switch {
	case errors.Is(err, errSeen):
		return false, nil
	case err != nil:
		return false, dataError(err)
	}
	return true, nil
}

// dataError marks a PostgreSQL data exception as permanent.
func dataError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") && !event.IsPermanent(err) {
		return event.Reject(event.ReasonInvalidData, err)
	}
	return err
}

// Remember implements handlers.Tx. A concurrent unit of work remembering
// the same key waits for this one to end, then returns its receipt.
func (t *tx) Remember(ctx context.Context, r handlers.Receipt) (*handlers.Receipt, error) {
	tag, err := t.tx.Exec(ctx, `INSERT INTO moenda_inbox (consumer, event_id, fingerprint, answer) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, r.Consumer, r.Key, r.Fingerprint, string(r.Answer))
	if err != nil {
		return nil, fmt.Errorf("inbox: remember %s for %s: %w", r.Key, r.Consumer, err)
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	earlier := handlers.Receipt{Consumer: r.Consumer, Key: r.Key}
	var answer *string
	if err := t.tx.QueryRow(ctx, `SELECT fingerprint, answer::text FROM moenda_inbox WHERE consumer = $1 AND event_id = $2`,
		r.Consumer, r.Key).Scan(&earlier.Fingerprint, &answer); err != nil {
		return nil, fmt.Errorf("inbox: read receipt %s for %s: %w", r.Key, r.Consumer, err)
	}
	if answer != nil {
		earlier.Answer = []byte(*answer)
	}
	return &earlier, nil
}

// ForgetConsumer deletes every claim of consumer, so that it handles
// again the events it meets; a replay does so before reading the log again.
func (t *Transactor) ForgetConsumer(ctx context.Context, consumer string) error {
	if _, err := t.pool.Exec(ctx, `DELETE FROM moenda_inbox WHERE consumer = $1`, consumer); err != nil {
		return fmt.Errorf("inbox: forget %s: %w", consumer, unavailable(err))
	}
	return nil
}

// Claimed returns those of keys that consumer has processed: their
// claims are in the inbox.
func (t *Transactor) Claimed(ctx context.Context, consumer string, keys []string) (map[string]bool, error) {
	rows, err := t.pool.Query(ctx, `SELECT event_id FROM moenda_inbox WHERE consumer = $1 AND event_id = ANY($2)`, consumer, keys)
	if err != nil {
		return nil, fmt.Errorf("inbox: claimed by %s: %w", consumer, unavailable(err))
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("inbox: claimed by %s: %w", consumer, unavailable(err))
	}
	out := make(map[string]bool, len(got))
	for _, k := range got {
		out[k] = true
	}
	return out, nil
}

// Claims returns when each consumer that has processed key did.
func (t *Transactor) Claims(ctx context.Context, key string) (map[string]time.Time, error) {
	return Claims(ctx, t.pool, key)
}

// Claims returns when each consumer that has processed key did, from the
// inbox of pool's database.
func Claims(ctx context.Context, pool *pgxpool.Pool, key string) (map[string]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT consumer, processed_at FROM moenda_inbox WHERE event_id = $1`, key)
	if err != nil {
		return nil, fmt.Errorf("inbox: claims of %s: %w", key, unavailable(err))
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var consumer string
		var at time.Time
		if err := rows.Scan(&consumer, &at); err != nil {
			return nil, fmt.Errorf("inbox: claims of %s: %w", key, err)
		}
		out[consumer] = at.UTC()
	}
	return out, rows.Err()
}

// PruneInbox deletes inbox rows processed before cutoff, batch rows per
// transaction so that no statement holds locks or a snapshot for long, and
// returns how many it deleted. Every api and worker process calls it; the
// one that holds the prune lock at the time prunes, and the others leave
// it to that one and return 0.
func (t *Transactor) PruneInbox(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: prune: %w", unavailable(err))
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, pruneLock).Scan(&locked); err != nil {
		return 0, fmt.Errorf("inbox: prune: %w", unavailable(err))
	}
	if !locked {
		return 0, nil
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, pruneLock); uerr != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // the lock ends with the session
		}
	}()
	total := 0
	for {
		tag, err := conn.Exec(ctx, `DELETE FROM moenda_inbox WHERE ctid IN (
			SELECT ctid FROM moenda_inbox WHERE processed_at < $1 ORDER BY processed_at LIMIT $2)`, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", unavailable(err))
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// pruneLock is the advisory lock key of inbox pruning in a database.
var pruneLock = func() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("moenda inbox prune"))
	return int64(h.Sum64())
}()
