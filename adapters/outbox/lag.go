package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lag is how far a consumer group's relay is behind the outbox: the rows
// committed after its position, and the age of the oldest of them (zero
// when there is none). It counts the backlog, so read it every few
// seconds, not per request.
func Lag(ctx context.Context, pool *pgxpool.Pool, group string) (rows int64, oldest time.Duration, err error) {
	pos, _, err := groupPosition(ctx, pool, group)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: lag of %s: %w", group, err)
	}
	var secs float64
	err = byThePrimaryKey(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, lagQuery, fmt.Sprint(pos.txID), pos.offset).Scan(&rows, &secs)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: lag of %s: %w", group, err)
	}
	return rows, time.Duration(secs * float64(time.Second)), nil
}

// byThePrimaryKey runs fn, which reads the rows after a position
// (afterPosition), in a read-only transaction that reads them by the
// primary key's range whatever the statistics say. On a table PostgreSQL
// has none for (never analyzed: autovacuum off, or a burst of rows within
// its naptime), the planner expects a third of the rows after any
// position: it scanned the whole outbox, in parallel and JIT-compiled,
// 450 to 900 ms on a million rows with one row after the position, on
// every metrics poll and status read; by the range, 0.4 ms. The range
// costs more only when most of the table lies after the position (1.2 s
// against 0.6 s for a million), when the relay is that far behind.
func byThePrimaryKey(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true),
			set_config('max_parallel_workers_per_gather', '0', true)`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// rowQuerier runs a statement that returns one row: a pool, or the
// polling relay's lock session.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// groupPosition reads group's position through q; while it has none,
// found is false and the position is the outbox's start.
func groupPosition(ctx context.Context, q rowQuerier, group string) (pos position, found bool, err error) {
	err = q.QueryRow(ctx, `SELECT COALESCE(offset_acked, 0), last_processed_transaction_id::text::bigint
		FROM watermill_offsets_outbox WHERE consumer_group = $1`, group).Scan(&pos.offset, &pos.txID)
	if errors.Is(err, pgx.ErrNoRows) {
		return position{}, false, nil
	}
	return pos, err == nil, err
}

// afterPosition selects the outbox rows (o) after the position given as
// $1 (its transaction id) and $2 (its offset), by the primary key's
// range. The position is read first, by a statement of its own: given as
// values, PostgreSQL sees how few rows lie after it. Read in subqueries of
// the same statement, it was unknown when the statement was planned, and
// PostgreSQL guessed a third of the outbox after it and scanned every row,
// published ones included: 480 ms on a million published rows against
// 0.35 ms (BENCHMARKS.md, "Outbox lag"), on every metrics poll and status
// read.
const afterPosition = `(o.transaction_id, o."offset") > ($1::text::xid8, $2)`

// lastRow selects the outbox's last row (l), read from the primary key's
// end. Whether any row lies after a position, or was written at or after
// a transaction id, holds for some row exactly when it holds for the last
// one. Asked with EXISTS over every row, PostgreSQL, when it cannot tell
// how few rows match (no statistics, a generic plan, a value taken from
// another table), expects a third of the outbox to match and scans it
// from its start, where the newest rows come last: 15 to 28 ms a
// statement on 24,000 to 37,000 rows, growing with the outbox
// (BENCHMARKS.md, "End-to-end latency: the outbox scanned for one row").
const lastRow = `(SELECT transaction_id, "offset" FROM watermill_outbox ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) l`

// lagQuery counts the rows after a position and the age of the oldest.
const lagQuery = `SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(o.created_at)), 0)::float8
	FROM watermill_outbox o WHERE ` + afterPosition

// Group is the consumer group whose position the relay keeps.
func (r *Relay) Group() string { return r.cfg.ConsumerGroup }
