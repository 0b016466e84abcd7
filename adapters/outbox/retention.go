package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/await"
)

// Prune deletes the outbox rows that every consumer group in groups has
// published and that were written before cutoff, except parked rows, and
// returns how many it deleted. A group with no position yet has published
// nothing, so then nothing is deleted.
//
// It walks the primary key from the table's start up to the lowest of the
// groups' positions, batch rows a statement, each its own short
// transaction, and stops at the first batch holding a row not older than
// cutoff (rows leave in transaction-id order, which is nearly the order of
// created_at; an old row behind a newer one goes on a later pass). A relay
// reads only rows after its position, so the two never touch the same
// rows. A delete still takes a transaction id, and while it runs the
// visibility rule holds back rows of transactions that began after it:
// small batches keep that short. After each batch it rests pruneRest
// times as long as the batch took, so it never competes with the relays
// for long. Each batch is idempotent, so two processes pruning at once
// only share the work.
func Prune(ctx context.Context, pool *pgxpool.Pool, groups []string, cutoff time.Time, batch int) (int, error) {
	groups = slices.Compact(slices.Sorted(slices.Values(groups)))
	if len(groups) == 0 || batch < 1 {
		return 0, errors.New("outbox: prune: at least one consumer group and a batch of at least 1 row are required")
	}
	end, ok, err := lowestPosition(ctx, pool, groups)
	if err != nil || !ok {
		return 0, err
	}
	total := 0
	var from position
	for {
		began := time.Now()
		var deleted, read int
		var allOld bool
		var last position
		err := pool.QueryRow(ctx, `WITH batch AS (
				SELECT transaction_id, "offset", created_at < $5::timestamptz AS old FROM watermill_outbox
				WHERE (transaction_id, "offset") > ($1::text::xid8, $2) AND (transaction_id, "offset") <= ($3::text::xid8, $4)
				ORDER BY transaction_id, "offset" LIMIT $6
			), gone AS (
				DELETE FROM watermill_outbox o USING batch b
				WHERE b.old AND o.transaction_id = b.transaction_id AND o."offset" = b."offset"
				  AND NOT EXISTS (SELECT 1 FROM moenda_outbox_parked p WHERE p.transaction_id = o.transaction_id AND p."offset" = o."offset")
				RETURNING 1
			), tail AS (
				SELECT transaction_id::text::bigint AS tx_id, "offset" FROM batch ORDER BY transaction_id DESC, "offset" DESC LIMIT 1
			)
			SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM batch), (SELECT COALESCE(bool_and(old), true) FROM batch),
				COALESCE((SELECT tx_id FROM tail), 0), COALESCE((SELECT "offset" FROM tail), 0)`,
			fmt.Sprint(from.txID), from.offset, fmt.Sprint(end.txID), end.offset, cutoff, batch).Scan(&deleted, &read, &allOld, &last.txID, &last.offset)
		if err != nil {
			return total, fmt.Errorf("outbox: prune: %w", err)
		}
		total += deleted
		if read < batch || !allOld || ctx.Err() != nil {
			return total, ctx.Err()
		}
		from = last
		if !await.Sleep(ctx, pruneRest*time.Since(began)) {
			return total, ctx.Err()
		}
	}
}

// pruneRest is how many times as long as a batch took Prune waits before
// the next: it works a tenth of the time. Without rest, pruning slowed a
// relay draining beside it; with this rest it still deletes faster than
// the outbox can be written, and the drain keeps its pace (see
// BENCHMARKS.md, "Outbox retention: the rest between prune batches").
const pruneRest = 9

// lowestPosition returns the position of the group in groups that is
// furthest behind, and false when one of them has none yet.
func lowestPosition(ctx context.Context, pool *pgxpool.Pool, groups []string) (position, bool, error) {
	var pos position
	var found int
	err := pool.QueryRow(ctx, `SELECT last_processed_transaction_id::text::bigint, COALESCE(offset_acked, 0), count(*) OVER ()
		FROM watermill_offsets_outbox WHERE consumer_group = ANY($1::text[])
		ORDER BY last_processed_transaction_id, COALESCE(offset_acked, 0) LIMIT 1`, groups).Scan(&pos.txID, &pos.offset, &found)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return pos, false, nil
	case err != nil:
		return pos, false, fmt.Errorf("outbox: prune: the relays' positions: %w", err)
	}
	return pos, found == len(groups), nil
}
