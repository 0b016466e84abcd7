package postgres

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lead runs run in one process at a time per database: the one whose
// session holds the advisory lock name. The others wait, trying again
// every retry, and one of them takes over once the holder's session ends
// (its process gone, or its connection cut and ended by the keepalives).
// run's context ends when ctx does, or when the lock's session stops
// answering, checked every retry; run is then started again once the lock
// is held again. led, when set, is told whether this process leads.
func Lead(ctx context.Context, pool *pgxpool.Pool, name string, retry time.Duration, logger *slog.Logger, led func(bool), run func(context.Context) error) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	key := int64(h.Sum64())
	tell := func(leads bool) {
		if led != nil {
			led(leads)
		}
	}
	for ctx.Err() == nil {
		if err := leadOnce(ctx, pool, key, retry, tell, run); err != nil && ctx.Err() == nil {
			logger.Warn("leadership: trying again", "lock", name, "retry_in", retry, "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// leadOnce takes the lock if it is free and runs run while its session
// answers; it returns at once when another session holds the lock.
func leadOnce(ctx context.Context, pool *pgxpool.Pool, key int64, retry time.Duration, tell func(bool), run func(context.Context) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The session that held the lock is closed rather than given back to
	// the pool: closing it is what releases the lock, even mid-query.
	defer func() { _ = conn.Conn().Close(context.WithoutCancel(ctx)); conn.Release() }()
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&locked); err != nil {
		return err
	}
	if !locked {
		return nil
	}
	tell(true)
	defer tell(false)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- run(runCtx) }()
	tick := time.NewTicker(retry)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if err := conn.Ping(ctx); err != nil && ctx.Err() == nil {
				stop()
				return errors.Join(errors.New("the session holding the lock stopped answering"), err, <-done)
			}
		}
	}
}
