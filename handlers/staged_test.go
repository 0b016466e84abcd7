package handlers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/handlers"
)

// A unit's writes are seen by every repository of that unit, applied when
// it commits, and gone when it rolls back.
func TestStaged(t *testing.T) {
	ctx := context.Background()
	s := handlers.NewStaged[int, string]()
	txr := plugintest.Memory()
	if err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		s.Unit(tx).Put(1, "a")
		if v, ok := s.Unit(tx).Get(1); !ok || v != "a" {
			t.Errorf("the same unit does not see its write: %q %v", v, ok)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rollback := errors.New("roll back")
	if err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		u := s.Unit(tx)
		if v, ok := u.Get(1); !ok || v != "a" {
			t.Errorf("a committed write is not seen: %q %v", v, ok)
		}
		u.Put(2, "b")
		return rollback
	}); !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if all := committed(txr, s); len(all) != 1 || all[1] != "a" {
		t.Errorf("after a rollback: %v", all)
	}
}

// committed is what a new unit of work of txr sees in s.
func committed(txr handlers.Transactor, s *handlers.Staged[int, string]) map[int]string {
	all, _ := handlers.Result(context.Background(), txr, func(_ context.Context, tx handlers.Tx) (map[int]string, error) {
		return s.Unit(tx).All(), nil
	})
	return all
}

// A delete is staged like a write: seen by the unit at once, by others
// once it commits.
func TestStagedDelete(t *testing.T) {
	ctx := context.Background()
	s := handlers.NewStaged[int, string]()
	txr := plugintest.Memory()
	put := func(tx handlers.Tx) { s.Unit(tx).Put(1, "a"); s.Unit(tx).Put(2, "b") }
	if err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error { put(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		u := s.Unit(tx)
		u.Delete(1)
		if _, ok := u.Get(1); ok {
			t.Error("the unit still sees what it deleted")
		}
		if all := u.All(); len(all) != 1 || all[2] != "b" {
			t.Errorf("All after a delete: %v", all)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if all := committed(txr, s); len(all) != 1 || all[2] != "b" {
		t.Errorf("after the delete committed: %v", all)
	}
}

// A Store in memory writes through its Memory repository, and reads what
// committed; its clock is UTC to the microsecond.
func TestStoreInMemory(t *testing.T) {
	ctx := context.Background()
	type repo = *handlers.Unit[int, string]
	s := handlers.NewStore(plugintest.Memory(), func() time.Time { return time.Date(2026, 1, 15, 7, 30, 0, 1500, time.FixedZone("BRT", -3*3600)) },
		func(pgx.Tx) repo { panic("no PostgreSQL in memory") },
		handlers.Memory(func(u repo) repo { return u }))
	if err := s.Write(ctx, func(_ context.Context, r repo) error { r.Put(1, "a"); return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := handlers.Read(ctx, s, func(_ context.Context, r repo) (map[int]string, error) { return r.All(), nil })
	if err != nil || len(got) != 1 || got[1] != "a" {
		t.Errorf("Read = %v, %v; want 1:a", got, err)
	}
	if want := time.Date(2026, 1, 15, 10, 30, 0, 1000, time.UTC); s.Clock() != want {
		t.Errorf("Clock = %v, want %v", s.Clock(), want)
	}
}

// Ids come from one sequence for the store, and a rolled-back unit's id is
// not given again, as with a PostgreSQL sequence.
func TestSequence(t *testing.T) {
	s := handlers.NewStaged[int64, string]()
	txr := plugintest.Memory()
	var ids []int64
	for _, err := range []error{errors.New("roll back"), nil} {
		_ = txr.InTx(context.Background(), func(_ context.Context, tx handlers.Tx) error {
			ids = append(ids, s.Unit(tx).Sequence())
			return err
		})
	}
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Errorf("ids %v, want [1 2]", ids)
	}
}

// The memory transactor's units have no PostgreSQL transaction, so they
// get the memory repository.
func TestRepositoriesInMemory(t *testing.T) {
	repo := handlers.Repositories(
		func(pgx.Tx) string { return "postgres" },
		func(handlers.Tx) string { return "memory" })
	_ = plugintest.Memory().InTx(context.Background(), func(ctx context.Context, tx handlers.Tx) error {
		if got := repo(tx); got != "memory" {
			t.Errorf("repository = %s, want memory", got)
		}
		return nil
	})
}

// Result gives what the unit read once it committed, and nothing when it
// failed.
func TestResult(t *testing.T) {
	ctx := context.Background()
	got, err := handlers.Result(ctx, plugintest.Memory(), func(context.Context, handlers.Tx) (int, error) { return 7, nil })
	if got != 7 || err != nil {
		t.Errorf("Result = %d, %v; want 7", got, err)
	}
	failed := errors.New("failed")
	got, err = handlers.Result(ctx, plugintest.Memory(), func(context.Context, handlers.Tx) (int, error) { return 7, failed })
	if got != 0 || !errors.Is(err, failed) {
		t.Errorf("Result = %d, %v; want 0 and the failure", got, err)
	}
}

func TestList(t *testing.T) {
	if l := handlers.List[int](nil); l == nil || len(l) != 0 {
		t.Fatalf("List(nil) = %#v", l)
	}
	l := []int{1}
	if got := handlers.List(l); &got[0] != &l[0] {
		t.Fatal("List copied a list that was not nil")
	}
}
