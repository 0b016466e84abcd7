package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/handlers"
)

// Row names that later steps set their figures against.
const (
	rowPublish = "ceiling: amqp091 publish, confirms pipelined (window 256), consumer attached"
	rowConsume = "ceiling: amqp091 consume, prefetch 100, manual acks"
	rowTx      = "ceiling: pgx business+outbox-sized row per transaction, %d writers"
)

// rawAMQP measures the broker alone. The publish ceiling publishes
// messages the size and shape of a relayed bench event (the relay's body
// and properties) to the durable topic exchange, on a connection of its
// own in a process of its own (RawPublish), with confirms pipelined 256
// deep, while a consumer takes them off
// the sink queue as they arrive: it is timed as the relay drain is
// (arrivals), from the first arrival to the last, so both face the
// same broker work (RabbitMQ confirms a persistent message that a consumer
// already took without writing it to disk). The consume ceiling then
// fills the queue with as many messages and times a consumer with prefetch
// 100 and an ack per message emptying it.
func rawAMQP(ctx context.Context, e *env, r *Result) error {
	n := e.sz.messages
	if err := e.purge(); err != nil {
		return err
	}
	job, err := e.publishJob(ctx, n)
	if err != nil {
		return err
	}
	f, err := e.publishCeiling(ctx, job)
	if err != nil {
		return err
	}
	r.add(Row{Name: rowPublish, Value: f.rate, Unit: "msg/s", CPU: f.perRole()}, 0, 0)

	p, err := dialRawPublisher(job.URL, job.Exchange, job.Key, job.Message)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.publish(ctx, n); err != nil {
		return err
	}
	ch, err := e.channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(100, 0, false); err != nil {
		return err
	}
	began := time.Now()
	deliveries, err := ch.ConsumeWithContext(ctx, e.sink, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for range n {
		select {
		case d := <-deliveries:
			if err := d.Ack(false); err != nil {
				return err
			}
		case <-time.After(30 * time.Second):
			return fmt.Errorf("consume: %w", await.ErrTimeout)
		}
	}
	r.add(Row{Name: rowConsume, Value: float64(n) / time.Since(began).Seconds(), Unit: "msg/s"}, 0, 0)
	return nil
}

// publishCeiling runs the raw publisher of job as a process while the
// consumer of arrivals takes its messages off the sink queue, and returns
// their flow, with the process's CPU as the raw client's.
func (e *env) publishCeiling(ctx context.Context, job RawPublishJob) (flow, error) {
	wait, stop, err := e.arrivals(ctx)
	if err != nil {
		return flow{}, err
	}
	defer stop()
	pid, finish, exited, err := e.startRawPublisher(ctx, job)
	if err != nil {
		return flow{}, err
	}
	defer finish()
	type arrived struct {
		flow
		err error
	}
	done := make(chan arrived, 1)
	go func() {
		f, err := wait(job.Messages, process{procClient, pid})
		done <- arrived{f, err}
	}()
	select {
	case got := <-done:
		finish()
		if err := <-exited; err != nil && got.err == nil {
			got.err = fmt.Errorf("raw publisher: %w", err)
		}
		return got.flow, got.err
	case err := <-exited: // it lives until finish: it failed
		stop() // ends wait
		<-done
		return flow{}, fmt.Errorf("raw publisher ended before its messages arrived: %v", err)
	}
}

// rawPublisher publishes a relayed bench event's message over and over,
// on a connection of its own as the relay has, in confirm mode.
type rawPublisher struct {
	conn     *amqp091.Connection
	ch       *amqp091.Channel
	exchange string
	key      string
	msg      amqp091.Publishing
}

// publishJob is the publish ceiling's: n relayed bench events to the
// bench's exchange.
func (e *env) publishJob(ctx context.Context, n int) (RawPublishJob, error) {
	msg, err := e.relayedMessage(ctx)
	if err != nil {
		return RawPublishJob{}, err
	}
	return RawPublishJob{URL: e.opts.AMQPURL, Exchange: e.exchange, Key: benchEvent().RoutingKey(), Messages: n, Message: msg}, nil
}

// dialRawPublisher returns a raw publisher of msg to exchange with key.
func dialRawPublisher(url, exchange, key string, msg amqp091.Publishing) (*rawPublisher, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &rawPublisher{conn: conn, ch: ch, exchange: exchange, key: key, msg: msg}, nil
}

// publish publishes n messages with up to 256 confirms outstanding and
// returns once all are confirmed.
func (p *rawPublisher) publish(ctx context.Context, n int) error {
	return p.publishEach(ctx, n, func(int) amqp091.Publishing { return p.msg })
}

// publishEach publishes msg(i) for each i below n, as publish does.
func (p *rawPublisher) publishEach(ctx context.Context, n int, msg func(i int) amqp091.Publishing) error {
	const window = 256
	pending := make([]*amqp091.DeferredConfirmation, 0, window)
	for i := range n {
		if len(pending) == window {
			if ok, err := pending[0].WaitContext(ctx); !ok || err != nil {
				return fmt.Errorf("publish not confirmed: %v", err)
			}
			pending = pending[1:]
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, p.key, false, false, msg(i))
		if err != nil {
			return err
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	return nil
}

func (p *rawPublisher) close() { _ = p.conn.Close() }

// transactions sets moenda's unit of work against pgx alone, with 1, 4 and
// 16 writers. The raw ceiling commits one transaction per event that
// inserts a business row and an outbox row of the bench event that it
// makes itself (see rawWrite); moenda's inserts the business row and
// writes one event through the outbox (the watermill-sql publisher bound
// to the pgx transaction).
// The two alternate (see alternate), so a checkpoint or an autovacuum
// falls on both alike; both run in the bench process, one at a time.
func transactions(ctx context.Context, e *env, r *Result) error {
	write, err := e.rawWrite(ctx)
	if err != nil {
		return err
	}
	rawTx := func(ctx context.Context) error { return e.commitRaw(ctx, write, func() {}) }
	moendaTx := func(ctx context.Context) error {
		return e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			if _, err := tx.Postgres().Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
				return err
			}
			return tx.Publish(ctx, benchEvent())
		})
	}
	for _, writers := range []int{1, 4, 16} {
		rounds, err := alternate(e, fmt.Sprintf("transactions, %d writers", writers), e.sz.rounds,
			func() (flow, error) { return transactionRate(ctx, writers, e.sz.txDuration, rawTx) },
			func() (flow, error) { return transactionRate(ctx, writers, e.sz.txDuration, moendaTx) })
		if err != nil {
			return err
		}
		row := rounds.row(Row{Name: fmt.Sprintf("moenda: outbox write (use case + event, one transaction), %d writers", writers), Unit: "tx/s"})
		r.add(Row{Name: fmt.Sprintf(rowTx, writers), Value: row.Ceiling, Unit: "tx/s", CPU: rounds.rawCPU()}, 0, 0)
		if writers == 16 {
			row.Target = "ratio >= 0.85"
			r.add(row, 0.85, 0)
		} else {
			r.add(row, 0, 0)
		}
	}
	return nil
}

// rawWrite returns the raw client's unit of work, done in the transaction
// it is given: a business row and an outbox row of the bench event in a
// table of its own, which it creates if a step before has not. It makes
// the row as a writer without moenda would: an id of its own, and the
// event (the same fields and payload as moenda's, the payload made afresh
// as the use case makes it) encoded by encoding/json in one pass. The
// metadata, moenda's own format, is a real outbox row's, copied.
func (e *env) rawWrite(ctx context.Context) (func(context.Context, pgx.Tx) error, error) {
	if _, err := e.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_outbox_raw (LIKE watermill_outbox INCLUDING ALL)`); err != nil {
		return nil, err
	}
	if err := e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error { return tx.Publish(ctx, benchEvent()) }); err != nil {
		return nil, err
	}
	var meta []byte
	if err := e.pool.QueryRow(ctx, `SELECT metadata::text FROM watermill_outbox LIMIT 1`).Scan(&meta); err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx pgx.Tx) error {
		row := rawEvent{ID: uuid.NewString(), Name: benchEventName, OccurredAt: time.Now().UTC(), Source: "bench", Payload: benchPayload()}
		body, err := json.Marshal(row)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO bench_outbox_raw (uuid, payload, metadata, transaction_id) VALUES ($1, $2, $3, pg_current_xact_id())`, row.ID, body, meta)
		return err
	}, nil
}

// rawEvent is the raw client's event: the fields moenda's envelope
// carries for the bench event, under the same names.
type rawEvent struct {
	ID         string    `json:"event_id"`
	Name       string    `json:"event_name"`
	OccurredAt time.Time `json:"occurred_at"`
	Source     string    `json:"source"`
	Payload    any       `json:"payload"`
}

// commitRaw runs write in a pgx transaction of its own and commits it,
// calling asked just before the commit.
func (e *env) commitRaw(ctx context.Context, write func(context.Context, pgx.Tx) error, asked func()) error {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := write(ctx, tx); err != nil {
		return err
	}
	asked()
	return tx.Commit(ctx)
}

// transactionRate runs fn in a loop on each of writers goroutines for d
// and returns the committed units' flow, with the bench process's CPU.
func transactionRate(ctx context.Context, writers int, d time.Duration, fn func(context.Context) error) (flow, error) {
	return inProcessFor(func() (int, time.Duration, error) {
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
			return 0, 0, err
		default:
		}
		return int(done.Load()), time.Since(began), nil
	})
}
