package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// latency offers a fixed rate of use cases for a while and measures, per
// event, the time from its commit to its handler running: outbox, relay,
// RabbitMQ, router and chain. It does so with each reader, and again while
// a write transaction is open in another database of the server for the
// whole offered load, as a batch job's would be: the polling reader waits
// for it to end, the logical one does not.
func latency(ctx context.Context, e *env, r *Result) error {
	for _, foreign := range []bool{false, true} {
		for _, reader := range e.readers() {
			lat, err := e.latencies(ctx, reader, foreign)
			if err != nil {
				return err
			}
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
			name := fmt.Sprintf("moenda: end-to-end latency at %d events/s, commit to handler, %s reader, ", e.sz.rate, reader)
			if foreign {
				name = fmt.Sprintf("moenda: end-to-end latency at %d events/s with a write transaction open in another database, %s reader, ", e.sz.rate, reader)
				r.add(Row{Name: name + "p99", Value: pct(0.99), Unit: "ms"}, 0, 0)
				continue
			}
			r.add(Row{Name: name + "p50", Value: pct(0.50), Unit: "ms"}, 0, 0)
			r.add(Row{Name: name + "p95", Value: pct(0.95), Unit: "ms"}, 0, 0)
			r.add(Row{Name: name + "p99", Value: pct(0.99), Unit: "ms", Target: "<= 10 ms"}, 0, 10)
		}
	}
	return nil
}

// latencies runs the offered load once with reader, with a write
// transaction open elsewhere when foreign, and returns the sorted
// latencies.
func (e *env) latencies(ctx context.Context, reader string, foreign bool) ([]time.Duration, error) {
	relay, closeRelay, err := e.newRelay(reader)
	if err != nil {
		return nil, err
	}
	defer closeRelay()
	// As in serve, each commit wakes the relay of its process.
	out := outbox.New(e.top.Routable, e.wlog)
	out.Wakes(relay)
	txr := postgres.NewTransactor(e.pool, out)
	// The clock starts when the use case asks to commit (its function
	// returns) and stops when the handler runs.
	var committing, handled sync.Map // event id -> time
	var count atomic.Int64
	rt, closeBroker, err := e.router(func(_ context.Context, ev event.Event) error {
		// Events the relay caught up on before the load are not counted.
		if _, ours := committing.Load(ev.ID); !ours {
			return nil
		}
		if _, dup := handled.LoadOrStore(ev.ID, time.Now()); !dup {
			count.Add(1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer closeBroker()
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(runCtx) }()
	defer func() { stop(); <-relayDone }()
	// The load starts once the relay has caught up, as in a serve that
	// has been up a while.
	if err := e.waitCaughtUp(ctx, relay, reader); err != nil {
		return nil, err
	}
	if err := e.purge(); err != nil {
		return nil, err
	}
	go func() { _ = rt.Run(runCtx) }()
	defer rt.Close()
	<-rt.Running()
	endForeign := func() {}
	if foreign {
		if endForeign, err = e.openForeignTransaction(ctx); err != nil {
			return nil, err
		}
		defer endForeign()
	}

	total := int(float64(e.sz.rate) * e.sz.latencyFor.Seconds())
	jobs := make(chan struct{}, total)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				ev := benchEvent()
				err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
					if _, err := tx.Postgres().Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
						return err
					}
					if err := tx.Publish(ctx, ev); err != nil {
						return err
					}
					committing.Store(ev.ID, time.Now())
					return nil
				})
				if err != nil && failed.Add(1) == 1 {
					firstErr.Store(err)
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(e.sz.rate))
	for range total {
		<-tick.C
		jobs <- struct{}{}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return nil, fmt.Errorf("%d use cases failed, the first with: %w", n, firstErr.Load().(error))
	}
	if foreign {
		endForeign() // the offered load is over: the transaction ends
	}
	if err := await.Until(ctx, time.Minute, "every event handled", func() (bool, error) { return count.Load() >= int64(total), nil }); err != nil {
		return nil, fmt.Errorf("handled %d of %d events: %w", count.Load(), total, err)
	}
	var lat []time.Duration
	committing.Range(func(id, at any) bool {
		if done, ok := handled.Load(id); ok {
			lat = append(lat, done.(time.Time).Sub(at.(time.Time)))
		}
		return true
	})
	slices.Sort(lat)
	return lat, nil
}

// openForeignTransaction opens a transaction that holds a transaction id
// in the server's maintenance database, and returns what ends it.
func (e *env) openForeignTransaction(ctx context.Context) (func(), error) {
	conn, err := pgx.Connect(ctx, e.onDatabase("postgres"))
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "BEGIN; SELECT pg_current_xact_id()"); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = conn.Close(context.WithoutCancel(ctx)) }) }, nil
}
