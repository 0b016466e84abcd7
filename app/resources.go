package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/migrations"
)

// resources are what serve and the other commands share: the topology,
// the PostgreSQL pool and the transports, and what closes them. Each
// command opens what it needs through openResources and closes them all
// with Close.
type resources struct {
	cfg    *Resolved
	logger *slog.Logger
	top    *topology.Topology
	pool   *pgxpool.Pool // nil with the memory broker
	// broker is broker.kind's transport; nil until connectTransports, and
	// in a process that talks to no broker.
	broker transport.Transport
	// stream is Kafka beside RabbitMQ (analytics.kafka.enabled), where
	// replayable plugins read; nil otherwise.
	stream transport.Transport
	// embeddedStarted says this process started the embedded Kafka
	// cluster, which is then empty.
	embeddedStarted bool
	closers         []func() error
}

// openResources derives the topology and, when the environment has one,
// connects PostgreSQL (the database created if missing, migrations
// applied).
func openResources(ctx context.Context, cfg *Resolved, logger *slog.Logger) (_ *resources, err error) {
	r := &resources{cfg: cfg, logger: logger}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
		}
	}()
	if r.top, err = cfg.BuildTopology(); err != nil {
		return nil, err
	}
	if cfg.inProcess() {
		return r, nil
	}
	if err := postgres.EnsureDatabase(ctx, cfg.Postgres, logger); err != nil {
		return nil, err
	}
	if r.pool, err = postgres.Connect(ctx, cfg.Postgres); err != nil {
		return nil, err
	}
	pool := r.pool
	r.onClose(func() error { pool.Close(); return nil })
	if _, err = migrations.Up(ctx, pool, logger, cfg.migrations()...); err != nil {
		return nil, err
	}
	return r, nil
}

// onClose adds fn to what Close runs, after everything added later.
func (r *resources) onClose(fn func() error) { r.closers = append(r.closers, fn) }

// Close releases what was opened, in the reverse order.
func (r *resources) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	r.closers = nil
	return errors.Join(errs...)
}
