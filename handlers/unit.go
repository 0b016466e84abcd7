package handlers

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Repositories gives each unit of work its repository: postgres over the
// unit's PostgreSQL transaction, or memory in an environment without
// PostgreSQL (the memory one), where Tx.Postgres is nil.
func Repositories[R any](postgres func(pgx.Tx) R, memory func(Tx) R) func(Tx) R {
	return func(tx Tx) R {
		if ptx := tx.Postgres(); ptx != nil {
			return postgres(ptx)
		}
		return memory(tx)
	}
}

// Result runs fn in one unit of work of txr and returns what fn returned
// once the unit has committed; the zero value when it failed.
func Result[T any](ctx context.Context, txr Transactor, fn func(ctx context.Context, tx Tx) (T, error)) (T, error) {
	var out T
	err := txr.InTx(ctx, func(ctx context.Context, tx Tx) error {
		var err error
		out, err = fn(ctx, tx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// Store is what a plugin's use cases share: its units of work, the
// repository R of each (see Repositories), and its clock.
type Store[R any] struct {
	Tx   Transactor
	Repo func(Tx) R
	Now  func() time.Time
}

// NewStore returns a Store whose repository is chosen per unit of work:
// postgres over the unit's transaction, or memory, one store kept for the
// Store's life (the memory environment).
func NewStore[R any](tx Transactor, now func() time.Time, postgres func(pgx.Tx) R, memory func(Tx) R) Store[R] {
	return Store[R]{Tx: tx, Repo: Repositories(postgres, memory), Now: now}
}

// Clock is the time now as both stores keep it: UTC, to the microsecond.
func (s Store[R]) Clock() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// Write runs fn in one unit of work (a handler's joins its delivery's)
// with that unit's repository.
func (s Store[R]) Write(ctx context.Context, fn func(context.Context, R) error) error {
	return s.Tx.InTx(ctx, func(ctx context.Context, tx Tx) error { return fn(ctx, s.Repo(tx)) })
}

// Read returns what fn read with the repository of one unit of work of
// s, once the unit has committed.
func Read[R, T any](ctx context.Context, s Store[R], fn func(context.Context, R) (T, error)) (T, error) {
	return Result(ctx, s.Tx, func(ctx context.Context, tx Tx) (T, error) { return fn(ctx, s.Repo(tx)) })
}

// List is l, or an empty list when l is nil: an answer's lists read [] in
// JSON, never null, whatever the store gave.
func List[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}
