package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/app/bench/median"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// latency offers a fixed rate of use cases for a while and measures, per
// event, the time from its commit to its handler running: outbox, relay,
// RabbitMQ, router and chain. Each rate runs in rounds, the readers
// alternating within a round so that both meet the machine in the same
// state; a row is the median of its rounds, with their spread. Each
// event's time is split in three: its commit, from the commit to the
// relay handing its batch to the broker (the reader's share), and from
// there to its handler (the broker's and the router's). Once, at the
// rate sizes.foreign, it runs again while a write transaction is open in
// another database of the server for the whole offered load, as a batch
// job's would be: the polling reader waits for it to end, the logical one
// does not. Each round also runs the same load with no relay, the raw
// clients' floor (floorLatencies), beside the readers.
func latency(ctx context.Context, e *env, r *Result) error {
	readers := e.readers()
	write, err := e.rawWrite(ctx) // the floor's unit of work
	if err != nil {
		return err
	}
	for _, rate := range e.sz.rates {
		runs := map[string]latencyRounds{}
		for round := range e.sz.rounds {
			order := append([]string{floor}, readers...)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, path := range order {
				var js journeys
				var err error
				if path == floor {
					js, err = e.floorLatencies(ctx, rate, write)
				} else {
					js, err = e.latencies(ctx, path, rate, false)
				}
				if err != nil {
					return err
				}
				runs[path] = append(runs[path], js)
				e.logger.Debug("bench: latency round", "rate", rate, "path", path, "round", round, "p99", js.percentile(0.99, endToEnd))
			}
		}
		name := fmt.Sprintf("floor: pgx commit, then amqp091 publish with confirm, to a consumer claiming it in the inbox, at %d events/s, commit to handler, ", rate)
		r.add(runs[floor].row(Row{Name: name + "p50", Unit: "ms"}, 0.50, endToEnd), 0, 0)
		r.add(runs[floor].row(Row{Name: name + "p99", Unit: "ms"}, 0.99, endToEnd), 0, 0)
		r.add(runs[floor].committedRow(Row{Name: fmt.Sprintf("floor: transactions committed while %d events/s were offered", rate), Unit: "tx/s"}), 0, 0)
		target := latencyTarget(rate)
		for _, reader := range readers {
			name := fmt.Sprintf("moenda: end-to-end latency at %d events/s, commit to handler, %s reader, ", rate, reader)
			rounds := runs[reader]
			r.add(rounds.row(Row{Name: name + "p50", Unit: "ms"}, 0.50, endToEnd), 0, 0)
			r.add(rounds.row(Row{Name: name + "p95", Unit: "ms"}, 0.95, endToEnd), 0, 0)
			r.add(rounds.row(Row{Name: name + "p99", Unit: "ms", Target: fmt.Sprintf("<= %d ms", target)}, 0.99, endToEnd), 0, float64(target))
			for _, st := range stages {
				r.add(rounds.row(Row{Name: name + "p99 of " + st.name, Unit: "ms"}, 0.99, st.took), 0, 0)
			}
			r.add(rounds.committedRow(Row{Name: fmt.Sprintf("moenda: use cases committed while %d events/s were offered, %s reader", rate, reader), Unit: "tx/s"}), 0, 0)
		}
	}
	rate := e.sz.foreign
	for _, reader := range readers {
		js, err := e.latencies(ctx, reader, rate, true)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("moenda: end-to-end latency at %d events/s with a write transaction open in another database, %s reader, p99", rate, reader)
		r.add(Row{Name: name, Value: js.percentile(0.99, endToEnd), Unit: "ms"}, 0, 0)
	}
	return nil
}

// floor names the latency rounds of the raw clients (floorLatencies)
// beside the readers'.
const floor = "floor"

// latencyTarget is the p99 in milliseconds the latency rows aim at for
// an offered rate.
func latencyTarget(rate int) int {
	if rate <= 1000 {
		return 10
	}
	return 20
}

// journey is one event's times: when its use case asked to commit, when
// the commit returned, when the relay handed its batch to the broker and
// when its handler ran.
type journey struct{ asked, committed, published, handled time.Time }

func endToEnd(j journey) time.Duration { return j.handled.Sub(j.asked) }

// stages split a journey; their p99s need not add up to the whole's.
var stages = []struct {
	name string
	took func(journey) time.Duration
}{
	{"the commit", func(j journey) time.Duration { return j.committed.Sub(j.asked) }},
	{"the commit to the relay's publish", func(j journey) time.Duration { return j.published.Sub(j.committed) }},
	{"the relay's publish to the handler", func(j journey) time.Duration { return j.handled.Sub(j.published) }},
}

// journeys are one run's events, with the span over which their use
// cases committed, and the CPU the machine used for them: every part of
// their path ran in the bench process, beside RabbitMQ and PostgreSQL.
type journeys struct {
	all         []journey
	first, last time.Time // the first and the last commit
	cpu         flow
}

// percentile is the p-th percentile of took over js, in milliseconds.
func (js journeys) percentile(p float64, took func(journey) time.Duration) float64 {
	d := make([]time.Duration, len(js.all))
	for i, j := range js.all {
		d[i] = took(j)
	}
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond)
}

// committedPerSecond is the rate the use cases committed at: the offered
// one, unless the machine could not commit that many.
func (js journeys) committedPerSecond() float64 {
	return float64(len(js.all)-1) / js.last.Sub(js.first).Seconds()
}

// latencyRounds are the rounds of one rate and reader.
type latencyRounds []journeys

// row fills row's Value with the median over the rounds of their p-th
// percentile of took, and its Spread with the lowest and the highest.
func (rs latencyRounds) row(row Row, p float64, took func(journey) time.Duration) Row {
	return withRounds(row, rs, func(js journeys) float64 { return js.percentile(p, took) })
}

// committedRow is row with the rate the rounds' use cases committed at,
// the CPU per 10,000 events of each process and the cores' idle share:
// an offered rate the machine's cores cannot carry shows here.
func (rs latencyRounds) committedRow(row Row) Row {
	row = withRounds(row, rs, journeys.committedPerSecond)
	flows, idle := make([]flow, len(rs)), make([]float64, len(rs))
	for i, js := range rs {
		flows[i], idle[i] = js.cpu, js.cpu.idle()
	}
	row.CPU, row.Idle = medianCPU(flows), median.Of(idle)
	return row
}

// withRounds is row with the median of value over rs, and its spread.
func withRounds(row Row, rs latencyRounds, value func(journeys) float64) Row {
	v := make([]float64, len(rs))
	for i, js := range rs {
		v[i] = value(js)
	}
	row.Value = median.Of(v)
	if len(v) > 1 {
		row.Spread = []float64{slices.Min(v), slices.Max(v)}
	}
	return row
}

// clocks note when each event of a run reached each stage, by event id;
// asked and committed only of the events counted.
type clocks struct {
	asked, committed, published, handled sync.Map
	handledCount                         atomic.Int64 // counted events handled
}

// handle notes that the event id reached its handler, once, if counted:
// events a relay caught up on before the load, or a delivery repeated,
// are not.
func (c *clocks) handle(id string) {
	if _, ours := c.asked.Load(id); !ours {
		return
	}
	if _, dup := c.handled.LoadOrStore(id, time.Now()); !dup {
		c.handledCount.Add(1)
	}
}

// useCase commits one event, ev, under the offered load, calling asked
// when it asks to commit and committed when the commit returned.
type useCase func(ctx context.Context, ev event.Event, asked, committed func()) error

// latencies runs the offered load once with reader at rate, with a write
// transaction open elsewhere when foreign, and returns its events'
// journeys.
func (e *env) latencies(ctx context.Context, reader string, rate int, foreign bool) (journeys, error) {
	var c clocks
	relay, closeRelay, err := e.newRelayTo(reader, func(d outbox.Destination) outbox.Destination {
		return publishClock{Destination: d, at: &c.published}
	})
	if err != nil {
		return journeys{}, err
	}
	defer closeRelay()
	// As in serve, each commit wakes the relay of its process.
	out := outbox.New(e.top.Routable, e.wlog)
	out.Wakes(relay)
	txr := postgres.NewTransactor(e.pool, out)
	rt, closeBroker, err := e.router(func(_ context.Context, ev event.Event) error {
		c.handle(ev.ID)
		return nil
	})
	if err != nil {
		return journeys{}, err
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
		return journeys{}, err
	}
	if err := e.purge(); err != nil {
		return journeys{}, err
	}
	go func() { _ = rt.Run(runCtx) }()
	defer rt.Close()
	<-rt.Running()
	// The transaction elsewhere ends when the offered load is over.
	endForeign := func() {}
	if foreign {
		if endForeign, err = e.openForeignTransaction(ctx); err != nil {
			return journeys{}, err
		}
		defer endForeign()
	}
	return e.offer(ctx, rate, &c, endForeign, moendaUseCase(txr))
}

// moendaUseCase is the bench's use case: a business row and its event,
// through the outbox, in one transaction.
func moendaUseCase(txr *postgres.Transactor) useCase {
	return func(ctx context.Context, ev event.Event, asked, committed func()) error {
		err := txr.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			if _, err := tx.Postgres().Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
				return err
			}
			if err := tx.Publish(ctx, ev); err != nil {
				return err
			}
			asked()
			return nil
		})
		if err == nil {
			committed()
		}
		return err
	}
}

// floorLatencies runs the offered load once with no relay: each use case
// commits the raw client's unit of work (write) with pgx, then publishes its event
// with amqp091 and waits for the broker's confirm, and a raw consumer
// (prefetch 100, manual acks) takes it off the sink queue and claims it in
// the inbox, as the router does. It is the latency this machine gives at
// rate to the same transactions and a broker round trip, with no relay
// between them, measured between moenda's rounds.
func (e *env) floorLatencies(ctx context.Context, rate int, write func(context.Context, pgx.Tx) error) (journeys, error) {
	msg, err := e.relayedMessage(ctx)
	if err != nil {
		return journeys{}, err
	}
	p, err := dialRawPublisher(e.opts.AMQPURL, e.exchange, benchEvent().RoutingKey(), msg)
	if err != nil {
		return journeys{}, err
	}
	defer p.close()
	if err := e.purge(); err != nil {
		return journeys{}, err
	}
	var c clocks
	ch, err := e.channel()
	if err != nil {
		return journeys{}, err
	}
	defer ch.Close()
	if err := ch.Qos(100, 0, false); err != nil {
		return journeys{}, err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, e.sink, "", false, false, false, false, nil)
	if err != nil {
		return journeys{}, err
	}
	// As the router's inbox does, each delivery runs in a transaction
	// that claims the event for the queue, and is acknowledged after its
	// commit; the delivery is handled when the claim is in.
	failed := make(chan error, 1)
	handle := func(d amqp091.Delivery) error {
		claim := func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, claimInbox, e.sink, d.MessageId)
			return err
		}
		if err := e.commitRaw(ctx, claim, func() { c.handle(d.MessageId) }); err != nil {
			return err
		}
		return d.Ack(false)
	}
	go func() {
		for d := range deliveries {
			go func() {
				if err := handle(d); err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			}()
		}
	}()
	js, err := e.offer(ctx, rate, &c, func() {}, func(ctx context.Context, ev event.Event, asked, committed func()) error {
		if err := e.commitRaw(ctx, write, asked); err != nil {
			return err
		}
		committed()
		m := p.msg
		m.MessageId = ev.ID
		c.published.Store(ev.ID, time.Now())
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, p.key, false, false, m)
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
		return nil
	})
	select {
	case err := <-failed:
		return journeys{}, fmt.Errorf("the raw consumer: %w", err)
	default:
		return js, err
	}
}

// offer offers rate use cases a second, each of a new bench event, to a
// pool of writers running do, and returns the journeys of the events
// offered after the first second, once each was handled. ended is called
// when the last use case has returned.
func (e *env) offer(ctx context.Context, rate int, c *clocks, ended func(), do useCase) (journeys, error) {
	// The first second of load is not counted: the consumer's channel,
	// the writers' connections and the relay's first batches start in it.
	warm, n := rate, int(float64(rate)*e.sz.latencyFor.Seconds())
	jobs := make(chan bool, warm+n) // counted
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	// 8 writers up to 1,000/s, 16 above, within the pool's room.
	writers := 8
	if rate > 1000 {
		writers = 16
	}
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for counted := range jobs {
				ev := benchEvent()
				// The clock starts when the use case asks to commit.
				note := func(m *sync.Map) func() {
					if !counted {
						return func() {}
					}
					return func() { m.Store(ev.ID, time.Now()) }
				}
				if err := do(ctx, ev, note(&c.asked), note(&c.committed)); err != nil {
					if failed.Add(1) == 1 {
						firstErr.Store(err)
					}
				}
			}
		}()
	}
	var before cpuSample
	var err error
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for i := range warm + n {
		<-tick.C
		if i == warm {
			if before, err = sampleCPU(process{}); err != nil {
				break
			}
		}
		jobs <- i >= warm
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	ended()
	if err != nil {
		return journeys{}, err
	}
	if n := failed.Load(); n > 0 {
		return journeys{}, fmt.Errorf("%d use cases failed, the first with: %w", n, firstErr.Load().(error))
	}
	if err := await.Until(ctx, time.Minute, "every event handled", func() (bool, error) { return c.handledCount.Load() >= int64(n), nil }); err != nil {
		return journeys{}, fmt.Errorf("handled %d of %d events: %w", c.handledCount.Load(), n, err)
	}
	after, err := sampleCPU(process{})
	if err != nil {
		return journeys{}, err
	}
	js := journeys{cpu: flow{cpu: after.since(before), n: n, own: procBench}}
	c.asked.Range(func(id, at any) bool {
		j := journey{asked: at.(time.Time)}
		cm, _ := c.committed.Load(id)
		p, _ := c.published.Load(id)
		h, _ := c.handled.Load(id)
		j.committed, j.published, j.handled = cm.(time.Time), p.(time.Time), h.(time.Time)
		if js.first.IsZero() || j.committed.Before(js.first) {
			js.first = j.committed
		}
		if j.committed.After(js.last) {
			js.last = j.committed
		}
		js.all = append(js.all, j)
		return true
	})
	return js, nil
}

// publishClock notes when the relay hands each message to the broker: the
// first time, as a batch published again after a failure does not make
// its events later.
type publishClock struct {
	outbox.Destination
	at *sync.Map
}

func (p publishClock) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	now := time.Now()
	for _, msg := range msgs {
		p.at.LoadOrStore(msg.UUID, now)
	}
	return p.Destination.PublishBatch(ctx, keys, msgs)
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
