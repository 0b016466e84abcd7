package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/await"
)

// wakeChannel is the PostgreSQL notification channel on which writers in
// other processes tell a polling relay that rows were committed.
const wakeChannel = "moenda_outbox"

// notifyGap is the least time between two notifications of one Notifier:
// it bounds what a busy writer costs the server, and what a notification
// adds to the relay's wake-up.
const notifyGap = 5 * time.Millisecond

// Notifier tells a polling relay in another process that rows were
// committed, through PostgreSQL's NOTIFY, so that it does not wait for its
// idle poll. One notification is sent at a time, at most one each
// notifyGap; commits that come meanwhile are folded into the next. A
// logical relay needs none: it streams each commit as it happens.
type Notifier struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	due    chan struct{}
}

// NewNotifier returns a notifier sending on pool's server; Run sends.
func NewNotifier(pool *pgxpool.Pool, logger *slog.Logger) *Notifier {
	return &Notifier{pool: pool, logger: logger, due: make(chan struct{}, 1)}
}

// Signal asks for a notification; it never blocks.
func (n *Notifier) Signal() {
	select {
	case n.due <- struct{}{}:
	default:
	}
}

// Run sends the notifications asked for until ctx ends. A notification
// that fails is dropped: the relay's idle poll still comes round.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.due:
		}
		if _, err := n.pool.Exec(ctx, "SELECT pg_notify($1, '')", wakeChannel); err != nil && ctx.Err() == nil {
			n.logger.Debug("outbox: could not notify the relay; its idle poll will find the rows", "error", err)
		}
		if !await.Sleep(ctx, notifyGap) {
			return
		}
	}
}

// listen wakes the relay whenever a Notifier elsewhere says rows were
// committed, on a connection of its own, until ctx ends; a lost
// connection is opened again after cfg.RetryInterval, and meanwhile the
// idle poll goes on.
func (r *Relay) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.logger.Debug("outbox relay: not listening for commits elsewhere; will try again", "error", err, "retry_in", r.cfg.RetryInterval)
		await.Sleep(ctx, r.cfg.RetryInterval)
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	r.queries.Add(1)
	if _, err := conn.Exec(ctx, "LISTEN "+wakeChannel); err != nil {
		return err
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		r.Wake()
	}
}
