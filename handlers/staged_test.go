package handlers_test

import (
	"context"
	"errors"
	"testing"

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
	_ = txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		if all := s.Unit(tx).All(); len(all) != 1 || all[1] != "a" {
			t.Errorf("after a rollback: %v", all)
		}
		return nil
	})
}
