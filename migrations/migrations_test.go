package migrations_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/migrations"
)

// Two plugins' migrations, each starting at version 1: each keeps its own
// history, so neither shadows the other.
var (
	avisos = fstest.MapFS{
		"00001_avisos.sql": {Data: []byte("-- +goose Up\nCREATE TABLE avisos (id BIGSERIAL PRIMARY KEY);\n-- +goose Down\nDROP TABLE avisos;\n")},
	}
	lembretes = fstest.MapFS{
		"00001_lembretes.sql": {Data: []byte("-- +goose Up\nCREATE TABLE lembretes (id BIGSERIAL PRIMARY KEY);\n-- +goose Down\nDROP TABLE lembretes;\n")},
		"00002_quando.sql":    {Data: []byte("-- +goose Up\nALTER TABLE lembretes ADD COLUMN quando TIMESTAMPTZ;\n-- +goose Down\nALTER TABLE lembretes DROP COLUMN quando;\n")},
	}
)

// Two replicas starting at once: each migration is applied exactly once
// and neither start fails.
func TestConcurrentUpAppliesOnce(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	plugins := []migrations.Set{{Name: "avisos", Files: avisos}, {Name: "lembretes.v2", Files: lembretes}}
	var wg sync.WaitGroup
	applied := make([]int, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			applied[i], errs[i] = migrations.Up(context.Background(), db.Pool, testenv.Logger(), plugins...)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	files, err := filepath.Glob("*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(files) + 3; applied[0]+applied[1] != want {
		t.Fatalf("applied %v migrations, want %d in all", applied, want)
	}
	for _, table := range []string{"watermill_outbox", "watermill_offsets_outbox", "moenda_inbox", "moenda_outbox_parked", "avisos", "lembretes",
		"moenda_migrations_avisos", "moenda_migrations_lembretes_v2"} {
		var exists bool
		if err := db.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || !exists {
			t.Errorf("table %s missing (%v)", table, err)
		}
	}
}

// A database migrated when the platform's own history held the Tarefas
// table (version 2) moves on: the platform skips the versions it
// no longer has, and the plugin's IF NOT EXISTS migrations find the table.
func TestDatabaseFromBeforePluginMigrationsMovesOn(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE goose_db_version (id SERIAL PRIMARY KEY, version_id BIGINT NOT NULL, is_applied BOOLEAN NOT NULL, tstamp TIMESTAMP DEFAULT now());
		INSERT INTO goose_db_version (version_id, is_applied) VALUES (0, true), (1, true), (2, true);
		CREATE TABLE watermill_outbox ("offset" BIGSERIAL, uuid VARCHAR(36) NOT NULL, created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
			payload BYTEA, metadata JSON, transaction_id xid8 NOT NULL, PRIMARY KEY (transaction_id, "offset"));
		CREATE TABLE watermill_offsets_outbox (consumer_group VARCHAR(255) PRIMARY KEY, offset_acked BIGINT, last_processed_transaction_id xid8 NOT NULL);
		CREATE TABLE tarefas (id BIGSERIAL PRIMARY KEY, usuario_id BIGINT NOT NULL, titulo TEXT NOT NULL, concluida BOOLEAN NOT NULL DEFAULT FALSE,
			criada_em TIMESTAMPTZ NOT NULL DEFAULT now(), concluida_em TIMESTAMPTZ, tarefa_pai_id BIGINT REFERENCES tarefas (id));
		INSERT INTO tarefas (usuario_id, titulo) VALUES (1, 'antes')`)
	if err != nil {
		t.Fatal(err)
	}
	tarefas := os.DirFS("../handlers/tarefas/migrations")
	if _, err := migrations.Up(ctx, db.Pool, testenv.Logger(), migrations.Set{Name: "tarefas", Files: tarefas}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM tarefas`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tarefas rows after the move: %d, %v", n, err)
	}
}

// A rolling update runs the previous release beside the new one: a
// process of the previous release that starts (or restarts) after the new
// one migrated must start, finding versions it does not know applied.
func TestThePreviousReleaseStartsOnANewerSchema(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, db.Pool, testenv.Logger(), migrations.Set{Name: "lembretes", Files: lembretes}); err != nil {
		t.Fatal(err)
	}
	previous := fstest.MapFS{"00001_lembretes.sql": lembretes["00001_lembretes.sql"]}
	n, err := migrations.Up(ctx, db.Pool, testenv.Logger(), migrations.Set{Name: "lembretes", Files: previous})
	if err != nil || n != 0 {
		t.Fatalf("the previous release's start: applied %d, %v", n, err)
	}
}
