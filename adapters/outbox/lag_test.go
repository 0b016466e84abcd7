package outbox_test

import (
	"context"
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
	// Caught up, no row lies after the position, and PostgreSQL reads
	// the rows after it by the primary key's range, expecting next to
	// none: with no statistics on the table, as it has now (never
	// analyzed), and with them. Read in subqueries of the same
	// statement, the position was unknown when planned, and on a million
	// rows PostgreSQL scanned them all (480 ms); given as values to a
	// table with no statistics, it expected a third of the table after
	// the position, and scanned them all too (860 ms).
	var tx, off string
	if err := db.Pool.QueryRow(ctx, `SELECT last_processed_transaction_id::text, offset_acked::text FROM watermill_offsets_outbox`).Scan(&tx, &off); err != nil {
		t.Fatal(err)
	}
	var unanalyzed bool
	if err := db.Pool.QueryRow(ctx, `SELECT reltuples < 0 FROM pg_class WHERE relname = 'watermill_outbox'`).Scan(&unanalyzed); err != nil {
		t.Fatal(err)
	}
	if !unanalyzed {
		t.Fatal("the test's outbox has statistics already: the case without them is not tested")
	}
	if scan := lagPlan(t, db.Pool.QueryRow, tx, off); scan.Type != "Seq Scan" {
		t.Logf("without statistics, the planner alone reads the outbox by %+v, not a whole scan", scan)
	}
	checkPlan := func(when string) {
		t.Helper()
		err := outbox.ByThePrimaryKey(ctx, db.Pool, func(q pgx.Tx) error {
			scan := lagPlan(t, q.QueryRow, tx, off)
			if !scan.uses("watermill_outbox_pkey") {
				t.Errorf("%s, Lag reads the outbox by %+v, want the primary key's range", when, scan)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checkPlan("with no statistics")
	if _, err := db.Pool.Exec(ctx, `ANALYZE watermill_outbox`); err != nil {
		t.Fatal(err)
	}
	checkPlan("analyzed")
	if scan := lagPlan(t, db.Pool.QueryRow, tx, off); !scan.uses("watermill_outbox_pkey") || scan.Rows > 10 {
		t.Fatalf("analyzed, the planner alone reads the outbox by %+v, want the primary key's range expecting next to no row", scan)
	}
}

// TestRelayLooksAtTheOutboxFromItsEnd: three of the relay's statements ask
// whether some row lies past a point: rows after the position (the
// polling reader, once woken), rows held back behind an open transaction
// (the same, naming it), rows written since the stream's sample (the
// logical reader, at a batch's record). Planned as PostgreSQL plans a
// prepared statement after its fifth run (generically), on an outbox it
// has no statistics for, each reads the outbox by the primary key from
// its end. Asked with EXISTS over every row, the same question scanned
// the whole table, at every batch and every empty read.
func TestRelayLooksAtTheOutboxFromItsEnd(t *testing.T) {
	ctx := context.Background()
	db := testenv.Postgres(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_outbox (uuid, payload, metadata, transaction_id)
		SELECT gen_random_uuid()::text, convert_to(repeat('x', 800), 'UTF8'), '{}', (g / 100)::text::xid8
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	reads := func(name, statement, args string) []planNode {
		t.Helper()
		if _, err := conn.Exec(ctx, `PREPARE `+name+` AS `+statement); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []struct{ Plan planNode }
		if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE `+name+`(`+args+`)`).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		scans := plan[0].Plan.all("watermill_outbox")
		if len(scans) == 0 {
			t.Fatalf("%s reads no watermill_outbox: %+v", name, plan)
		}
		return scans
	}
	var scanned bool
	for _, s := range reads("every_row", `SELECT EXISTS (SELECT 1 FROM watermill_outbox WHERE (transaction_id, "offset") > ($1::text::xid8, $2))`, `'190', 19000`) {
		scanned = scanned || s.Type == "Seq Scan"
	}
	if !scanned {
		t.Fatal("EXISTS over every row reads the outbox by its index here too: the case the statements are written against is not tested")
	}
	for _, c := range []struct{ name, statement, args string }{
		{"pending", outbox.PendingQuery, `'190', 19000`},
		{"held", outbox.HeldQuery, `'190', 19000`},
		{"settle", outbox.SettleQuery, `'g', 's', 1, '0/0', true, false, '0/0', '0', 0, '{}', '{}', '{}', '{}', '{}', '{}', '{}'`},
	} {
		for _, s := range reads(c.name, c.statement, c.args) {
			if !s.uses("watermill_outbox_pkey") || s.Type == "Seq Scan" {
				t.Errorf("%s reads the outbox by %+v, want its primary key", c.name, s)
			}
		}
	}
}

// lagPlan is the node of Lag's plan, run through query, that reads the
// outbox.
func lagPlan(t *testing.T, query func(context.Context, string, ...any) pgx.Row, tx, off string) *planNode {
	t.Helper()
	var plan []struct{ Plan planNode }
	if err := query(context.Background(), `EXPLAIN (FORMAT JSON) `+outbox.LagQuery, tx, off).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	scans := plan[0].Plan.all("watermill_outbox")
	if len(scans) == 0 {
		t.Fatalf("Lag's plan reads no watermill_outbox: %+v", plan)
	}
	return &scans[0]
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Plan Rows"`
	Plans    []planNode `json:"Plans"`
}

// all is every node, n or under it, that reads relation.
func (n planNode) all(relation string) []planNode {
	var found []planNode
	if n.Relation == relation {
		found = append(found, n)
	}
	for _, c := range n.Plans {
		found = append(found, c.all(relation)...)
	}
	return found
}

// uses says whether n reads by index, itself or through a bitmap of it.
func (n *planNode) uses(index string) bool {
	if n.Index == index {
		return true
	}
	for _, c := range n.Plans {
		if c.uses(index) {
			return true
		}
	}
	return false
}
