package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/testenv"
)

// PostgreSQL builds the snapshot it exports with a new slot from the WAL:
// its xmin is the oldest transaction still running at the consistent
// point, but its xmax only moves past transactions it saw commit. A
// transaction that takes an id and rolls back while the slot is being
// created leaves xmin above xmax ("c:b:"), a snapshot pg_snapshot's input
// refuses. The relay backfills with it all the same: every row committed
// before the slot (A's, committed while the slot waited for it) once, then
// streams the later ones (C's, open at the consistent point), and never
// B's. A commit elsewhere on the server while the slot is created moves
// xmax past B: the test then checks the ordinary snapshot instead.
func TestBackfillSnapshotWithXminAboveXmax(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	ctx := context.Background()
	want := map[string]bool{}
	s.commit(t, 3, want) // before the slot

	// open begins a transaction with an outbox row, and returns its id and
	// its transaction id (as pg_locks shows it).
	open := func(titulo string) (pgx.Tx, string, string) {
		t.Helper()
		tx, err := s.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		id := s.insertEvent(t, ctx, tx, titulo)
		var xid string
		if err := tx.QueryRow(ctx, "SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text").Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return tx, id, xid
	}
	// awaited waits until the slot's creation waits for the transaction xid
	// to end.
	awaited := func(xid string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, "the slot's creation to wait for transaction "+xid, func() bool {
			return s.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND transactionid::text = '`+xid+`' AND NOT granted`) > 0
		})
	}
	end := func(tx pgx.Tx, commit bool) {
		t.Helper()
		var err error
		if commit {
			err = tx.Commit(ctx)
			s.out.Committed()
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	a, idA, xa := open("A")
	cfg := logical(testConfig)
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	s.run(t, "relay", relay)
	awaited(xa) // the slot's first record of running transactions holds A
	b, idB, xb := open("B")
	end(a, true)
	want[idA] = true
	awaited(xb) // the next one holds B, which started after the first
	c, idC, _ := open("C")
	end(b, false) // B's id ends without a commit: the snapshot's xmax stays below it
	testenv.Eventually(t, 20*time.Second, "the relay to lead", relay.Active)
	var snapshot string
	if err := s.db.Pool.QueryRow(ctx, `SELECT COALESCE(backfill::text, '') FROM moenda_outbox_slots`).Scan(&snapshot); err != nil {
		t.Fatal(err)
	}
	t.Logf("A %s, B %s; backfill snapshot recorded %q", xa, xb, snapshot)
	end(c, true)
	want[idC] = true
	s.commit(t, 3, want) // streamed

	testenv.Eventually(t, 20*time.Second, "every committed event", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	time.Sleep(200 * time.Millisecond) // a repeat would come at once
	for _, d := range got() {
		if d.MessageId == idB {
			t.Fatal("published B, which rolled back")
		}
	}
	if n, total := distinct(got(), want); total != n {
		t.Fatalf("%d deliveries of %d events: some went out twice", total, n)
	}
}
