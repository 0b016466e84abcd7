package migrations_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/migrations"
)

// Two replicas starting at once: each migration is applied exactly once
// and neither start fails.
func TestConcurrentUpAppliesOnce(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	var wg sync.WaitGroup
	applied := make([]int, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = migrations.Up(context.Background(), db.Pool, testenv.Logger())
		}()
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
	if applied[0]+applied[1] != len(files) {
		t.Fatalf("applied %v migrations, want %d in all", applied, len(files))
	}
	for _, table := range []string{"watermill_outbox", "watermill_offsets_outbox", "tarefas", "moenda_inbox"} {
		var exists bool
		if err := db.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || !exists {
			t.Errorf("table %s missing (%v)", table, err)
		}
	}
}
