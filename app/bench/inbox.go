package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// rowInbox is the ceiling of the inbox step.
const rowInbox = "ceiling: amqp091 + pgx consume, inbox row and effect row per transaction, prefetch %d"

// insertEffect is the effect every bench handler writes: one row.
const insertEffect = `INSERT INTO bench_effect (event_id, data) VALUES ($1, $2)`

// claimInbox is the raw consumers' claim of an event for the sink queue,
// the row the router's inbox writes.
const claimInbox = `INSERT INTO moenda_inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`

// inboxConsume sets the router, with its whole chain and the inbox, against
// a consumer doing the same work by hand with the raw clients. Each handles
// a backlog of fresh events on the sink queue, with the configured
// prefetch, each delivery on a goroutine of its own, on the bench's pool:
// by hand, one pgx transaction per delivery inserts an inbox row and an
// effect row, commits, then acks; moenda's handler inserts the effect row
// in the unit of work the inbox opened for the delivery. Each is timed
// from the consumer's start to the last commit. Raw and moenda alternate
// (see alternate): each rate is the median of its rounds, and the ratio
// the median of the rounds' ratios. Both run in the bench process, one at
// a time, so its CPU is each one's.
func inboxConsume(ctx context.Context, e *env, r *Result) error {
	if err := e.effectTable(ctx); err != nil {
		return err
	}
	n := e.sz.consumed
	raw := func() (flow, error) {
		if _, err := e.publishEvents(ctx, n); err != nil {
			return flow{}, err
		}
		f, err := inProcess(n, func() (float64, error) { return e.rawInbox(ctx, n) })
		if err != nil {
			return flow{}, fmt.Errorf("raw consumer: %w", err)
		}
		return f, nil
	}
	moenda := func() (flow, error) {
		if _, err := e.publishEvents(ctx, n); err != nil {
			return flow{}, err
		}
		f, err := inProcess(n, func() (float64, error) { return e.routeEffects(ctx, n, nil) })
		if err != nil {
			return flow{}, fmt.Errorf("router: %w", err)
		}
		return f, nil
	}
	if err := e.purge(); err != nil {
		return err
	}
	rounds, err := alternate(e, "inbox", e.sz.rounds, raw, moenda)
	if err != nil {
		return err
	}
	row := rounds.row(Row{Name: fmt.Sprintf("moenda: consume through the router, whole chain with the inbox, effect row in the unit of work, prefetch %d", e.set.AMQP.Prefetch),
		Unit: "msg/s", Target: "ratio >= 0.80"})
	r.add(Row{Name: fmt.Sprintf(rowInbox, e.set.AMQP.Prefetch), Value: row.Ceiling, Unit: "msg/s", CPU: rounds.rawCPU()}, 0, 0)
	r.add(row, 0.80, 0)
	return e.purge()
}

// effectTable creates the table of the bench handlers' effect rows.
func (e *env) effectTable(ctx context.Context) error {
	_, err := e.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_effect (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, data TEXT NOT NULL)`)
	return err
}

// rawInbox consumes n deliveries from the sink queue with amqp091 on a
// connection of its own, with moenda's prefetch, each on a goroutine of its
// own as moenda's subscriber hands them out: one transaction inserts the
// inbox row and the effect row and commits, then the delivery is acked. It
// returns the deliveries per second from the consumer's start to the last
// commit.
func (e *env) rawInbox(ctx context.Context, n int) (float64, error) {
	conn, err := amqp091.Dial(e.opts.AMQPURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Qos(e.set.AMQP.Prefetch, 0, false); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	handle := func(d amqp091.Delivery) error {
		claimAndEffect := func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, claimInbox, e.sink, d.MessageId); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insertEffect, d.MessageId, "pedido")
			return err
		}
		if err := e.commitRaw(ctx, claimAndEffect, func() {}); err != nil {
			return err
		}
		return d.Ack(false)
	}
	var done atomic.Int64
	finished := make(chan struct{})
	failed := make(chan error, 1)
	var running sync.WaitGroup
	began := time.Now()
	deliveries, err := ch.ConsumeWithContext(ctx, e.sink, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for d := range deliveries {
			running.Add(1)
			go func() {
				defer running.Done()
				if err := handle(d); err != nil {
					select {
					case failed <- err:
					default:
					}
					return
				}
				if done.Add(1) == int64(n) {
					close(finished)
				}
			}()
		}
	}()
	var rate float64
	select {
	case <-finished:
		rate = float64(n) / time.Since(began).Seconds()
	case err = <-failed:
	case <-time.After(5 * time.Minute):
		err = fmt.Errorf("handled %d of %d: %w", done.Load(), n, await.ErrTimeout)
	}
	cancel()
	// Closing the channel waits for the broker's answer without a bound,
	// and once hung a run here; the connection closes with a deadline, and
	// its channels and their deliveries with it.
	_ = conn.CloseDeadline(time.Now().Add(10 * time.Second))
	<-reading
	running.Wait()
	return rate, err
}

// routeEffects runs the router over the sink queue, through the whole
// chain with the inbox, with a handler that inserts the effect row in the
// delivery's unit of work, or fails every time for the events in poison.
// It returns once healthy events have committed, with the committed events
// per second from the router's start to the last of them; it does not wait
// for the poisoned ones, which may still be in the retry tier.
func (e *env) routeEffects(ctx context.Context, healthy int, poison map[string]bool) (float64, error) {
	var committed atomic.Int64
	finished := make(chan struct{})
	rt, closeBroker, err := e.router(func(ctx context.Context, ev event.Event) error {
		if poison[ev.ID] {
			return errPoison
		}
		return e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			if _, err := tx.Postgres().Exec(ctx, insertEffect, ev.ID, "pedido"); err != nil {
				return err
			}
			tx.OnCommit(func() {
				if committed.Add(1) == int64(healthy) {
					close(finished)
				}
			})
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	defer closeBroker()
	began := time.Now()
	go func() { _ = rt.Run(context.WithoutCancel(ctx)) }()
	defer rt.Close()
	select {
	case <-finished:
		return float64(healthy) / time.Since(began).Seconds(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("committed %d of %d: %w", committed.Load(), healthy, await.ErrTimeout)
	}
}

// purgeFailures empties the sink's retry queues and dead-letter queue,
// then the sink itself, so that no copy a failing step left waiting comes
// back into a later step. Run it once nothing consumes the sink.
func (e *env) purgeFailures() error {
	pol, ok := e.top.Policy(e.sink)
	if !ok {
		return fmt.Errorf("no policy for %s", e.sink)
	}
	var queues []string
	for _, d := range pol.Delays {
		queues = append(queues, topology.RetryQueue(e.sink, d))
	}
	return e.purge(append(queues, pol.DeadLetterQueue, e.sink)...)
}
