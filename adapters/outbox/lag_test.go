package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// TestLagCountsTheBacklogByThePrimaryKey: Lag counts the rows after the
// group's position (all of them before it has one) with the age of the
// oldest, CaughtUp says whether there are any, and PostgreSQL finds them
// through the primary key's range, not by reading every published row.
func TestLagCountsTheBacklogByThePrimaryKey(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_outbox (uuid, payload, metadata, transaction_id, created_at)
		SELECT gen_random_uuid()::text, 'x', '{}', (g / 100)::text::xid8, now() - make_interval(secs => 20000 - g)
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	rows, oldest, err := outbox.Lag(ctx, db.Pool, "g")
	if err != nil || rows != 20000 || oldest < 19990*time.Second {
		t.Fatalf("with no position: %d rows, oldest %v, %v; want 20000, about 19999 s", rows, oldest, err)
	}
	// Published to the end of transaction 190: rows 19100 to 20000
	// remain (transactions 191 to 200), the oldest 900 s old.
	var offset int64
	if err := db.Pool.QueryRow(ctx, `SELECT max("offset") FROM watermill_outbox WHERE transaction_id = '190'`).Scan(&offset); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ('g', $1, '190')`, offset); err != nil {
		t.Fatal(err)
	}
	rows, oldest, err = outbox.Lag(ctx, db.Pool, "g")
	if err != nil || rows != 901 || oldest < 890*time.Second || oldest > 910*time.Second {
		t.Fatalf("after transaction 190: %d rows, oldest %v, %v; want 901, about 900 s", rows, oldest, err)
	}
	if done, err := outbox.CaughtUp(ctx, db.Pool, "g"); err != nil || done {
		t.Fatalf("CaughtUp with 901 rows after the position = %v, %v", done, err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE watermill_offsets_outbox SET (last_processed_transaction_id, offset_acked) =
		(SELECT transaction_id, "offset" FROM watermill_outbox ORDER BY transaction_id DESC, "offset" DESC LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	if done, err := outbox.CaughtUp(ctx, db.Pool, "g"); err != nil || !done {
		t.Fatalf("CaughtUp at the last row = %v, %v", done, err)
	}
	// Whether the planner prefers the index depends on the table's size;
	// whether it can use it does not. With sequential scans priced out, a
	// query whose bound is not a value still scans the table.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	plan, err := tx.Query(ctx, `EXPLAIN (COSTS OFF) `+outbox.LagQuery, "g")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if whole := strings.Join(lines, "\n"); strings.Contains(whole, "Seq Scan on watermill_outbox") || !strings.Contains(whole, "watermill_outbox_pkey") {
		t.Fatalf("Lag reads the outbox otherwise than by its primary key:\n%s", whole)
	}
}
