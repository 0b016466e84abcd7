package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/handlers"
)

// Row names that later steps set their figures against.
const (
	rowPublish = "ceiling: amqp091 publish, confirms pipelined (window 256)"
	rowConsume = "ceiling: amqp091 consume, prefetch 100, manual acks"
	rowTx      = "ceiling: pgx business+outbox-sized row per transaction, %d writers"
)

// rawAMQP publishes 1 KiB persistent messages to the durable topic
// exchange with confirms pipelined 256 deep, then consumes them with
// prefetch 100 and an ack per message.
func rawAMQP(ctx context.Context, e *env, r *Result) error {
	n := e.sz.messages
	if err := e.purge(); err != nil {
		return err
	}
	ch, err := e.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	const window = 256
	began := time.Now()
	pending := make([]*amqp091.DeferredConfirmation, 0, window)
	for i := range n {
		if len(pending) == window {
			if ok, err := pending[0].WaitContext(ctx); !ok || err != nil {
				return fmt.Errorf("publish not confirmed: %v", err)
			}
			pending = pending[1:]
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, "bench.raw", false, false, rawMessage)
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		_ = i
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	r.add(Row{Name: rowPublish, Value: float64(n) / time.Since(began).Seconds(), Unit: "msg/s"}, 0, 0)

	if err := ch.Qos(100, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, e.sink, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	began = time.Now()
	for range n {
		select {
		case d := <-deliveries:
			if err := d.Ack(false); err != nil {
				return err
			}
		case <-time.After(30 * time.Second):
			return fmt.Errorf("consume: %w", errTimeout)
		}
	}
	r.add(Row{Name: rowConsume, Value: float64(n) / time.Since(began).Seconds(), Unit: "msg/s"}, 0, 0)
	return nil
}

// transactions sets moenda's unit of work against pgx alone, with 1, 4 and
// 16 writers. The raw ceiling commits one transaction per event that
// inserts a business row and an outbox-sized row (the payload and metadata
// of a real outbox row of the bench event, copied); moenda's inserts the
// business row and writes one event through the outbox (the watermill-sql
// publisher bound to the pgx transaction).
// The two alternate, three rounds each, and each figure is the median of
// its rounds, so a checkpoint or an autovacuum falls on both alike.
func transactions(ctx context.Context, e *env, r *Result) error {
	if _, err := e.pool.Exec(ctx, `
		CREATE TABLE bench_business (id BIGSERIAL PRIMARY KEY, data TEXT NOT NULL);
		CREATE TABLE bench_outbox_raw (LIKE watermill_outbox INCLUDING ALL)`); err != nil {
		return err
	}
	if err := e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error { return tx.Publish(ctx, benchEvent()) }); err != nil {
		return err
	}
	var body, meta []byte
	if err := e.pool.QueryRow(ctx, `SELECT payload, metadata::text FROM watermill_outbox LIMIT 1`).Scan(&body, &meta); err != nil {
		return err
	}
	rawTx := func(ctx context.Context) error {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO bench_outbox_raw (uuid, payload, metadata, transaction_id) VALUES ($1, $2, $3, pg_current_xact_id())`, "00000000-0000-0000-0000-000000000000", body, meta); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	moendaTx := func(ctx context.Context) error {
		return e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			if _, err := tx.Postgres().Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
				return err
			}
			return tx.Publish(ctx, benchEvent())
		})
	}
	for _, writers := range []int{1, 4, 16} {
		var raws, moendas []float64
		for range 3 {
			raw, err := transactionRate(ctx, writers, e.sz.txDuration, rawTx)
			if err != nil {
				return err
			}
			m, err := transactionRate(ctx, writers, e.sz.txDuration, moendaTx)
			if err != nil {
				return err
			}
			raws, moendas = append(raws, raw), append(moendas, m)
		}
		ceiling := median(raws)
		r.add(Row{Name: fmt.Sprintf(rowTx, writers), Value: ceiling, Unit: "tx/s"}, 0, 0)
		row := Row{Name: fmt.Sprintf("moenda: outbox write (use case + event, one transaction), %d writers", writers),
			Value: median(moendas), Unit: "tx/s", Ceiling: ceiling}
		if writers == 16 {
			row.Target = "ratio >= 0.85"
			r.add(row, 0.85, 0)
		} else {
			r.add(row, 0, 0)
		}
	}
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// transactionRate runs fn in a loop on each of writers goroutines for d
// and returns the committed units per second.
func transactionRate(ctx context.Context, writers int, d time.Duration, fn func(context.Context) error) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	began := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := fn(ctx); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(done.Load()) / time.Since(began).Seconds(), nil
}
