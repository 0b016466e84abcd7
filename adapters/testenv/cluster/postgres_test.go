package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/testenv"
)

// The pair's standby has every commit of the synchronous primary; once
// the primary is killed and the standby promoted, the pair's multi-host
// URL reaches the new primary, which takes writes. A logical replication
// slot of the old primary is not there: PostgreSQL 15 does not carry
// slots to a standby, which is what the logical relay meets after a
// failover.
func TestAPromotedStandbyHasEveryCommitButNoSlot(t *testing.T) {
	pair := testenv.PostgresPair(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pair.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`CREATE TABLE kept (n int PRIMARY KEY)`,
		`INSERT INTO kept SELECT generate_series(1, 1000)`,
		`SELECT pg_create_logical_replication_slot('relay', 'pgoutput')`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Close(ctx)
	if err := pair.Kill(ctx, pair.Primary); err != nil {
		t.Fatal(err)
	}
	if err := pair.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, pair.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, slots, port int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM pg_replication_slots),
		current_setting('port')::int`).Scan(&n, &slots, &port); err != nil {
		t.Fatal(err)
	}
	if n != 1000 || slots != 0 || port != pair.Standby.Port {
		t.Fatalf("after the failover: %d rows, %d slots, on port %d; want 1000, 0, on the standby's %d", n, slots, port, pair.Standby.Port)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO kept VALUES (1001)`); err != nil {
		t.Fatalf("the promoted standby refuses a write: %v", err)
	}
}
