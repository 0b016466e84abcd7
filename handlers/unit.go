package handlers

import (
	"context"

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
