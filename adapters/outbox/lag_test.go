package outbox_test

import (
	"context"
	"testing"
	"time"

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
	// Caught up, no row lies after the position, and PostgreSQL, given
	// the position's values, knows it: it expects next to none, and reads
	// them by the primary key's range. Read in subqueries of the same
	// statement, the position was unknown when planned; PostgreSQL
	// expected a third of the table after it and, on a million rows,
	// scanned them all (480 ms).
	if _, err := db.Pool.Exec(ctx, `ANALYZE watermill_outbox`); err != nil {
		t.Fatal(err)
	}
	var tx, off string
	if err := db.Pool.QueryRow(ctx, `SELECT last_processed_transaction_id::text, offset_acked::text FROM watermill_offsets_outbox`).Scan(&tx, &off); err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan planNode }
	if err := db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+outbox.LagQuery, tx, off).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	scan := plan[0].Plan.find("watermill_outbox")
	if scan == nil || scan.Type == "Seq Scan" || scan.Index != "watermill_outbox_pkey" || scan.Rows > 10 {
		t.Fatalf("Lag reads the outbox by %+v, want the primary key's range expecting next to no row", scan)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Plan Rows"`
	Plans    []planNode `json:"Plans"`
}

// find is the node, n or under it, that reads relation.
func (n planNode) find(relation string) *planNode {
	if n.Relation == relation {
		return &n
	}
	for _, c := range n.Plans {
		if found := c.find(relation); found != nil {
			return found
		}
	}
	return nil
}
