package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/handlers"
)

// writeWhileRelaying sets the outbox write rate at 16 writers while a
// logical relay streams the outbox against the same while a polling relay
// reads it, alternating three rounds. Logical decoding reads the WAL the
// writers produce, on the same cores: this is what streaming costs the
// writers.
func writeWhileRelaying(ctx context.Context, e *env, r *Result) error {
	if e.reader != outbox.ReaderLogical {
		return nil
	}
	rounds, err := alternate(e, "write while relaying", e.sz.rounds,
		func() (flow, error) { return e.writeWhileRelaying(ctx, e.tx, outbox.ReaderPoll) },
		func() (flow, error) { return e.writeWhileRelaying(ctx, e.tx, outbox.ReaderLogical) })
	if err != nil {
		return err
	}
	r.add(rounds.row(Row{Name: "moenda: outbox write, 16 writers, while the logical relay streams, against while the polling relay reads",
		Unit: "tx/s", Target: "ratio >= 0.95"}), 0.95, 0)
	return nil
}

// writeNotifying sets the outbox write rate at 16 writers whose commits
// notify a polling relay (a Notifier, as an api process's do when the
// relay runs elsewhere), against the same writers not notifying, the
// relay listening and relaying in both, alternating three rounds.
func writeNotifying(ctx context.Context, e *env, r *Result) error {
	notifier := outbox.NewNotifier(e.pool, e.logger)
	nctx, stop := context.WithCancel(ctx)
	defer stop()
	go notifier.Run(nctx)
	out := outbox.New(e.top.Routable, e.wlog)
	out.NotifiesThrough(notifier)
	notifying := postgres.NewTransactor(e.pool, out)
	rounds, err := alternate(e, "write notifying", e.sz.rounds,
		func() (flow, error) { return e.writeWhileRelaying(ctx, e.tx, outbox.ReaderPoll) },
		func() (flow, error) { return e.writeWhileRelaying(ctx, notifying, outbox.ReaderPoll) })
	if err != nil {
		return err
	}
	r.add(rounds.row(Row{Name: "moenda: outbox write, 16 writers, notifying the polling relay after their commits, against not",
		Unit: "tx/s", Target: "ratio >= 0.95"}), 0.95, 0)
	return nil
}

// writeWhileRelaying is the flow of 16 writers using txr while a relay
// with reader, in this process too, relays what they write: its CPU is
// theirs and the relay's, and PostgreSQL's (a WAL sender's included).
func (e *env) writeWhileRelaying(ctx context.Context, txr *postgres.Transactor, reader string) (flow, error) {
	_, stop, err := e.freshRelay(ctx, reader)
	if err != nil {
		return flow{}, err
	}
	defer stop()
	f, err := transactionRate(ctx, 16, e.sz.txDuration, func(ctx context.Context) error {
		return txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			if _, err := tx.Postgres().Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
				return err
			}
			return tx.Publish(ctx, benchEvent())
		})
	})
	if err != nil {
		return flow{}, err
	}
	return f, e.purge()
}

// openSlot creates group's replication slot when the run streams, so the
// rows written next reach its relay through the stream, as they would
// reach a relay that runs all along, rather than through the table read
// of a slot's first start.
func (e *env) openSlot(ctx context.Context, group string) error {
	if e.reader != outbox.ReaderLogical {
		return nil
	}
	cfg := e.set.Outbox
	cfg.ConsumerGroup, cfg.Reader = group, e.reader
	relay, err := outbox.NewRelay(e.pool, discard{}, e.top.Routable, cfg, e.logger)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() { stop(); <-done }()
	return await.Until(ctx, time.Minute, "the slot of "+group, func() (bool, error) { return relay.Active(), nil })
}

// positionAtEnd puts group's relay at the outbox's last row, as if it had
// published every row before it, with a slot of its own when the run
// streams. Stop the group's relay first.
func (e *env) positionAtEnd(ctx context.Context, group string) error {
	if err := outbox.ResetPosition(ctx, e.pool, group); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT $1, "offset", transaction_id FROM watermill_outbox ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`, group); err != nil {
		return fmt.Errorf("position the relay of %s at the outbox's end: %w", group, err)
	}
	return e.openSlot(ctx, group)
}

// discard is a destination that confirms everything at once.
type discard struct{}

func (discard) PublishBatch(context.Context, []string, []*message.Message) error { return nil }
