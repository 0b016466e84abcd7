package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/app/bench/median"
	"github.com/moenda/moenda/handlers/event"
)

// Settings of the failure workbench's measures.
const (
	// pageCalls is how many times each page is read; the row is the
	// median.
	pageCalls = 20
	// pageLimit is the API's page when none is asked for.
	pageLimit = 50
	// pacedRate and pacedCanary are the re-drive at a set rate.
	pacedRate   = 200
	pacedCanary = 5
)

// failureWorkbench measures the failure ledger and re-drives: reading
// pages of a large ledger, ingesting a dead-letter queue against the raw
// clients doing the same work, and re-driving at full speed and at a set
// rate.
func failureWorkbench(ctx context.Context, e *env, r *Result) error {
	cfg := e.set.Failures
	if cfg.BatchSize == 0 {
		cfg = failures.DefaultConfig()
	}
	template, err := e.deadLetter(0)
	if err != nil {
		return err
	}
	if err := ledgerPages(ctx, e, r, failures.FromMessage(e.deadLetterQueue(), template, time.Now())); err != nil {
		return fmt.Errorf("ledger pages: %w", err)
	}
	if err := ingestRate(ctx, e, r, cfg); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if err := redriveRate(ctx, e, r); err != nil {
		return fmt.Errorf("re-drive at full speed: %w", err)
	}
	if err := redrivePaced(ctx, e, r); err != nil {
		return fmt.Errorf("re-drive at %d/s: %w", pacedRate, err)
	}
	return nil
}

// deadLetterQueue is the sink queue's dead-letter queue.
func (e *env) deadLetterQueue() string {
	pol, _ := e.top.Policy(e.sink)
	return pol.DeadLetterQueue
}

// deadLetter is the dead letter the router makes of a bench event that
// failed on the sink queue: the event's message with moenda's failure
// headers. i varies the error text, as the ids in real errors do.
func (e *env) deadLetter(i int) (*message.Message, error) {
	ev := benchEvent()
	msg, err := event.ToMessage(ev)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for k, v := range map[string]string{
		event.HeaderEventID: ev.ID, event.HeaderCorrelationID: ev.CorrelationID, event.HeaderQueue: e.sink, event.HeaderHandler: "bench",
		event.HeaderReason: event.ReasonRetriesExhausted, event.HeaderAttempts: "4",
		event.HeaderError:          fmt.Sprintf("reserve pedido %d: dial tcp 10.0.3.%d:5432: connect: connection refused", 1000+i, i%250),
		event.HeaderFirstFailureAt: now, event.HeaderLastFailureAt: now,
		event.HeaderOriginalExchange: e.exchange, event.HeaderOriginalRoutingKey: ev.RoutingKey(),
	} {
		msg.Metadata.Set(k, v)
	}
	return msg, nil
}

// ledgerPages fills the ledger with e.sz.ledger failures in one
// statement per chunk, of the size and headers of template and varied as a
// real ledger is (a dozen queues and handlers, four reasons and causes,
// one in ten archived, one in ten resolved, a failure every two seconds),
// then times pages read through the ledger's List, as the API reads them
// (its default page of 50): the first, the last reached by its cursor,
// and the first of a queue and of a text search. Each row is the median
// of pageCalls reads. Then the console's pages over the same ledger.
func ledgerPages(ctx context.Context, e *env, r *Result, template failures.Failure) error {
	headers, err := json.Marshal(template.Headers)
	if err != nil {
		return err
	}
	n := e.sz.ledger
	const chunk = 200000
	for from := 1; from <= n; from += chunk {
		if _, err := e.pool.Exec(ctx, `
			WITH g AS (
				SELECT i, 'bench.q' || (i % 12) AS q, 'plugin' || (i % 12) || '/handle' AS h,
					(ARRAY['retries_exhausted', 'permanent', 'rejected', 'expired'])[1 + i % 4] AS reason,
					(ARRAY['reserve pedido ' || i || ': dial tcp 10.0.3.' || (i % 250) || ':5432: connect: connection refused',
						'reserve pedido ' || i || ': produto "SKU-' || (i % 97) || '" out of stock',
						'notify cliente ' || i || ': context deadline exceeded',
						'decode pedido: invalid payload: missing field cliente'])[1 + (i / 4) % 4] AS err,
					now() - ($2::int - i) * interval '2 seconds' AS t,
					CASE i % 10 WHEN 0 THEN 'archived' WHEN 1 THEN 'resolved' ELSE 'unresolved' END AS status
				FROM generate_series($1::int, least($1::int + $3::int - 1, $2::int)) AS i)
			INSERT INTO moenda_failures (queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error,
				fingerprint, attempts, occurrences, first_failure_at, last_failure_at, recorded_at, status, original_exchange,
				original_routing_key, headers, body)
			SELECT q || '.dlq', md5(i::text), q, h, 'bench.evento.v1', md5((i / 3)::text), reason, err,
				left(md5(h || reason || (i / 4) % 4), 16), 4, 1, t, t, t, status, 'moenda.bench', 'bench.evento.v1',
				$4::jsonb || jsonb_build_object('moenda-event-id', md5(i::text), 'moenda-queue', q, 'moenda-handler', h, 'moenda-reason', reason, 'moenda-error', err),
				$5::bytea
			FROM g ORDER BY i`, from, n, chunk, string(headers), template.Body); err != nil {
			return fmt.Errorf("fill the ledger: %w", err)
		}
		e.logger.Debug("bench: ledger filled", "failures", min(from+chunk-1, n))
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE moenda_failures`); err != nil {
		return err
	}
	l := failures.NewPostgres(e.pool)
	// The last page by its cursor: the id just above the oldest
	// pageLimit failures the filter shows.
	lastCursor := func(f failures.Filter) (int64, error) {
		ids, err := l.Select(ctx, f)
		if err != nil || len(ids) <= pageLimit {
			return 0, err
		}
		return ids[pageLimit], nil
	}
	byQueue := failures.Filter{FailedQueue: "bench.q7"}
	pages := []struct {
		name   string
		filter failures.Filter
		last   bool
	}{
		{"first page", failures.Filter{}, false},
		{"last page by its cursor", failures.Filter{}, true},
		{"first page of one queue (a twelfth)", byQueue, false},
		{"last page of one queue by its cursor", byQueue, true},
		{"first page of a text search (\"out of stock\", a quarter)", failures.Filter{Text: "out of stock"}, false},
	}
	for _, p := range pages {
		page := failures.Page{Limit: pageLimit}
		if p.last {
			if page.After, err = lastCursor(p.filter); err != nil {
				return err
			}
		}
		times := make([]float64, 0, pageCalls)
		for range pageCalls {
			began := time.Now()
			fs, err := l.List(ctx, p.filter, page)
			if err != nil {
				return err
			}
			times = append(times, float64(time.Since(began).Microseconds())/1000)
			if len(fs) != pageLimit {
				return fmt.Errorf("%s: %d failures, want %d", p.name, len(fs), pageLimit)
			}
		}
		r.add(Row{Name: fmt.Sprintf("moenda: ledger of %d failures, %s, %d a page, median of %d", n, p.name, pageLimit, pageCalls),
			Value: median.Of(times), Unit: "ms", Target: "<= 50 ms"}, 0, 50)
	}
	if err := consolePages(ctx, e, r, n); err != nil {
		return fmt.Errorf("console pages: %w", err)
	}
	_, err = e.pool.Exec(ctx, `TRUNCATE moenda_failures`)
	return err
}

// rawLedger is the table the ingest's ceiling writes: moenda_failures'
// columns, defaults, constraints and indexes, without the triggers that
// keep the ledger's counts (migrations/00014), which are moenda's work.
const rawLedger = "moenda_bench_failures"

// rowIngest is the ceiling of the ingest.
const rowIngest = "ceiling: amqp091 consume + pgx insert of the same rows into a copy of the ledger's table without its counts' triggers, prefetch %d, a transaction per batch of %d, ack after commit"

// ingestRate sets failures.Ingest, draining a dead-letter queue of
// e.sz.dead dead letters into the ledger, against the raw clients doing
// the same work: an amqp091 consumer with the same prefetch, batches of
// the same size and linger, one pgx transaction inserting the batch's
// rows (the same columns, ON CONFLICT DO NOTHING) into rawLedger, commit,
// then one ack for the batch. Each run starts from an empty ledger and a
// full queue, and is timed from its start to the last commit; the two
// alternate, and each figure is the median of its rounds.
func ingestRate(ctx context.Context, e *env, r *Result, cfg failures.Config) error {
	n, dlq := e.sz.dead, e.deadLetterQueue()
	if _, err := e.pool.Exec(ctx, `DROP TABLE IF EXISTS `+rawLedger+`; CREATE TABLE `+rawLedger+` (LIKE moenda_failures INCLUDING ALL)`); err != nil {
		return fmt.Errorf("the raw ledger: %w", err)
	}
	defer e.pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+rawLedger) // a leftover goes with the next run
	fill := func() error {
		if _, err := e.pool.Exec(ctx, `TRUNCATE moenda_failures, `+rawLedger); err != nil {
			return err
		}
		if err := e.purge(dlq); err != nil {
			return err
		}
		return e.putDeadLetters(ctx, dlq, n)
	}
	raw := func() (flow, error) {
		if err := fill(); err != nil {
			return flow{}, err
		}
		return inProcess(n, func() (float64, error) { return e.rawIngest(ctx, dlq, n, cfg) })
	}
	moenda := func() (flow, error) {
		if err := fill(); err != nil {
			return flow{}, err
		}
		return inProcess(n, func() (float64, error) { return e.ingest(ctx, dlq, n, cfg) })
	}
	rounds, err := alternate(e, "ingest", e.sz.rounds, raw, moenda)
	if err != nil {
		return err
	}
	prefetch := amqp.DeadLetterPrefetch(e.set.AMQP, e.deadLetterSettings(cfg))
	row := rounds.row(Row{Name: fmt.Sprintf("moenda: failure ingest of %d dead letters into the ledger, prefetch %d, batches of %d (failures.batch_size)", n, prefetch, cfg.BatchSize),
		Unit: "msg/s", Target: "ratio >= 0.80"})
	r.add(Row{Name: fmt.Sprintf(rowIngest, prefetch, cfg.BatchSize), Value: row.Ceiling, Unit: "msg/s", CPU: rounds.rawCPU()}, 0, 0)
	r.add(row, 0.80, 0)
	return nil
}

// putDeadLetters puts n dead letters in queue, with the raw client and
// pipelined confirms, as the router's would be.
func (e *env) putDeadLetters(ctx context.Context, queue string, n int) error {
	pubs := make([]amqp091.Publishing, n)
	for i := range pubs {
		msg, err := e.deadLetter(i)
		if err == nil {
			pubs[i], err = amqp.Marshaler{}.Marshal(msg)
		}
		if err != nil {
			return err
		}
	}
	p, err := dialRawPublisher(e.opts.AMQPURL, "", queue, pubs[0])
	if err != nil {
		return err
	}
	defer p.close()
	return p.publishEach(ctx, n, func(i int) amqp091.Publishing { return pubs[i] })
}

// ingest runs failures.Ingest over queue, as serve configures it, until n
// dead letters are recorded, and returns their rate.
func (e *env) ingest(ctx context.Context, queue string, n int, cfg failures.Config) (float64, error) {
	tr, err := amqp.NewTransport(e.set.AMQP, e.deadLetterSettings(cfg))
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	sub, err := tr.DeadLetters()
	if err != nil {
		return 0, err
	}
	var recorded atomic.Int64
	all := make(chan struct{})
	in := &failures.Ingest{Subscriber: sub, Queues: []string{queue}, Ledger: failures.NewPostgres(e.pool), Batch: cfg.BatchSize,
		Linger: cfg.Linger, Now: time.Now, Logger: e.logger, Recorded: func(k int, _ time.Time) {
			if recorded.Add(int64(k)) == int64(n) {
				close(all)
			}
		}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- in.Run(ctx) }()
	select {
	case <-all:
		rate := float64(n) / time.Since(began).Seconds()
		cancel()
		return rate, <-done
	case err := <-done:
		return 0, fmt.Errorf("ingest stopped: %w", err)
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("recorded %d of %d: %w", recorded.Load(), n, await.ErrTimeout)
	}
}

// deadLetterSettings are the transport's settings as serve gives them to
// the ingest's transport.
func (e *env) deadLetterSettings(cfg failures.Config) transport.Settings {
	return transport.Settings{Topology: e.top, CloseTimeout: e.set.Router.CloseTimeout, DeadLetterBatch: cfg.BatchSize, Logger: e.logger}
}

// rawIngest is ingest's work with the raw clients: see ingestRate.
func (e *env) rawIngest(ctx context.Context, queue string, n int, cfg failures.Config) (float64, error) {
	conn, err := amqp091.Dial(e.opts.AMQPURL)
	if err != nil {
		return 0, err
	}
	defer conn.CloseDeadline(time.Now().Add(10 * time.Second))
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Qos(amqp.DeadLetterPrefetch(e.set.AMQP, e.deadLetterSettings(cfg)), 0, false); err != nil {
		return 0, err
	}
	began := time.Now()
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	for done := 0; done < n; {
		var batch []amqp091.Delivery
		select {
		case d := <-deliveries:
			batch = append(batch, d)
		case <-time.After(time.Minute):
			return 0, fmt.Errorf("recorded %d of %d: %w", done, n, await.ErrTimeout)
		}
		linger := time.After(cfg.Linger)
	collect:
		for len(batch) < cfg.BatchSize {
			select {
			case d := <-deliveries:
				batch = append(batch, d)
			case <-linger:
				break collect
			}
		}
		if err := e.insertRaw(ctx, queue, batch); err != nil {
			return 0, err
		}
		if err := batch[len(batch)-1].Ack(true); err != nil {
			return 0, err
		}
		done += len(batch)
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// insertRaw inserts a row per delivery into rawLedger, in one
// transaction: the columns read from the headers as they are, the
// fingerprint a hash of the cause.
func (e *env) insertRaw(ctx context.Context, queue string, batch []amqp091.Delivery) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, d := range batch {
			h := make(map[string]string, len(d.Headers))
			for k, v := range d.Headers {
				h[k] = fmt.Sprint(v)
			}
			at, _ := time.Parse(time.RFC3339Nano, h[event.HeaderLastFailureAt])
			first, _ := time.Parse(time.RFC3339Nano, h[event.HeaderFirstFailureAt])
			sum := sha256.Sum256([]byte(h[event.HeaderHandler] + "|" + h[event.HeaderReason] + "|" + h[event.HeaderError]))
			b.Queue(`INSERT INTO `+rawLedger+` (queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error,
				fingerprint, attempts, first_failure_at, last_failure_at, original_exchange, original_routing_key, headers, body)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT (queue, event_id) WHERE status <> 'edited' DO NOTHING`,
				queue, d.MessageId, h[event.HeaderQueue], h[event.HeaderHandler], d.Type, d.CorrelationId, h[event.HeaderReason],
				h[event.HeaderError], hex.EncodeToString(sum[:8]), 4, first, at, h[event.HeaderOriginalExchange],
				h[event.HeaderOriginalRoutingKey], h, d.Body)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
}

// rowRedriveCeiling is the ceiling of the re-drive at full speed.
const rowRedriveCeiling = "ceiling: amqp091 publish of the re-drive's copies to the queue through the default exchange, confirms pipelined (window 256), consumer attached"

// redriveRate sets a re-drive at full speed (rate 0, no canary) of
// e.sz.paced of the failures ingestRate left, run by redrive.Runner with the AMQP failure
// sink, against the raw publisher sending as many copies of the same size
// to the same queue through the default exchange. Both are timed alike,
// from the first copy to reach the sink queue's consumer to the last (the
// publish ceiling's consumer, auto-ack, which keeps the queue short); the
// runner counts a copy handled once that consumer has seen it.
func redriveRate(ctx context.Context, e *env, r *Result) error {
	l := failures.NewPostgres(e.pool)
	ids, err := l.Select(ctx, failures.Filter{FailedQueue: e.sink})
	if err != nil {
		return err
	}
	if len(ids) < e.sz.paced {
		return fmt.Errorf("%d failures in the ledger, want %d", len(ids), e.sz.paced)
	}
	// As many as the paced re-drive's: the rate does not depend on it,
	// and the run's time does.
	ids = ids[:e.sz.paced]
	f, err := l.Get(ctx, ids[0])
	if err != nil {
		return err
	}
	copyMsg, err := amqp.Marshaler{}.Marshal(redrive.Copy(f, 1))
	if err != nil {
		return err
	}
	if err := e.purge(); err != nil {
		return err
	}
	ceiling, err := e.publishCeiling(ctx, RawPublishJob{URL: e.opts.AMQPURL, Key: e.sink, Messages: len(ids), Message: copyMsg})
	if err != nil {
		return err
	}
	r.add(Row{Name: rowRedriveCeiling, Value: ceiling.rate, Unit: "msg/s", CPU: ceiling.perRole()}, 0, 0)

	var seen sync.Map
	wait, stop, err := e.arrivalsSeen(ctx, func(d amqp091.Delivery) { seen.Store(d.MessageId, true) })
	if err != nil {
		return err
	}
	defer stop()
	handled := func(_ context.Context, _ string, eventIDs []string) (map[string]bool, error) {
		out := map[string]bool{}
		for _, id := range eventIDs {
			if _, ok := seen.Load(id); ok {
				out[id] = true
			}
		}
		return out, nil
	}
	var rate float64
	err = e.redrive(ctx, ids, redrive.Options{}, handled, nil, func() error {
		f, err := wait(len(ids), process{})
		rate = f.rate
		return err
	})
	if err != nil {
		return err
	}
	r.add(Row{Name: fmt.Sprintf("moenda: re-drive of %d failures at full speed (rate 0), AMQP sink, each copy confirmed before the next, consumer attached", len(ids)),
		Value: rate, Unit: "msg/s", Ceiling: ceiling.rate}, 0, 0)
	return e.purge()
}

// redrivePaced re-drives e.sz.paced failures with a canary, then at
// pacedRate, through the router on the sink queue (the whole chain with
// the inbox): the canary goes on once the router's inbox has claimed each
// copy, as in serve. The figure is the rate of the sends after the
// canary, from the first of them to the last.
func redrivePaced(ctx context.Context, e *env, r *Result) error {
	l := failures.NewPostgres(e.pool)
	ids, err := l.Select(ctx, failures.Filter{FailedQueue: e.sink, AnyStatus: true})
	if err != nil {
		return err
	}
	if len(ids) < e.sz.paced {
		return fmt.Errorf("%d failures in the ledger, want %d", len(ids), e.sz.paced)
	}
	ids = ids[:e.sz.paced]
	rt, closeBroker, err := e.router(func(context.Context, event.Event) error { return nil })
	if err != nil {
		return err
	}
	defer closeBroker()
	go func() { _ = rt.Run(context.WithoutCancel(ctx)) }()
	defer rt.Close()
	<-rt.Running()
	var mu sync.Mutex
	var sent []time.Time
	stamp := func() {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, time.Now())
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(sent)
	}
	err = e.redrive(ctx, ids, redrive.Options{Rate: pacedRate, Canary: pacedCanary}, e.tx.Claimed, stamp, func() error {
		return await.Until(ctx, 5*time.Minute, "every item sent", func() (bool, error) { return count() == len(ids), nil })
	})
	if err != nil {
		return err
	}
	after := sent[pacedCanary:]
	rate := float64(len(after)-1) / after[len(after)-1].Sub(after[0]).Seconds()
	r.addNear(Row{Name: fmt.Sprintf("moenda: re-drive of %d failures at %d/s after a canary of %d, handled by the router with the inbox, rate of the sends after the canary",
		len(ids), pacedRate, pacedCanary), Value: rate, Unit: "items/s", Target: fmt.Sprintf("within 10 %% of %d/s", pacedRate)}, pacedRate, 0.10)
	return nil
}

// redrive makes the failures ids unresolved, plans and starts a re-drive
// of them with o, and runs redrive.Runner over it with the AMQP failure
// sink (telling sent, when set, of each send) until until returns; then
// it stops the runner.
func (e *env) redrive(ctx context.Context, ids []int64, o redrive.Options,
	handled func(ctx context.Context, queue string, eventIDs []string) (map[string]bool, error), sent func(), until func() error) error {
	if _, err := e.pool.Exec(ctx, `UPDATE moenda_failures SET status = 'unresolved', redrive_id = 0 WHERE id = ANY($1)`, ids); err != nil {
		return err
	}
	l, store := failures.NewPostgres(e.pool), redrive.NewPostgres(e.pool)
	plan, err := redrive.MakePlan(ctx, l, ids, o)
	if err != nil {
		return err
	}
	if plan.Send != len(ids) {
		return fmt.Errorf("the plan sends %d of %d: %v", plan.Send, len(ids), plan.Skipped)
	}
	id, err := redrive.Start(ctx, store, plan, o, "bench", map[string]string{"queue": e.sink})
	if err != nil {
		return err
	}
	tr, err := amqp.NewTransport(e.set.AMQP, transport.Settings{Topology: e.top, CloseTimeout: e.set.Router.CloseTimeout, Logger: e.logger})
	if err != nil {
		return err
	}
	defer tr.Close()
	c, err := tr.Consumer()
	if err != nil {
		return err
	}
	runner := &redrive.Runner{Store: store, Ledger: l, Sink: stampedSink{c.Sink, sent}, Handled: handled, Clock: redrive.WallClock{},
		Poll: time.Second, SettleTimeout: time.Hour, Logger: e.logger}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(rctx, id) }()
	waited := make(chan error, 1)
	go func() { waited <- until() }()
	select {
	case err := <-waited:
		// The runner is stopped mid-way: what it says then is no error.
		cancel()
		<-ran
		return err
	case err := <-ran:
		return fmt.Errorf("the runner stopped before the end: %w", err)
	}
}

// stampedSink tells sent of each copy the broker took.
type stampedSink struct {
	redrive.Sink
	sent func()
}

func (s stampedSink) Redeliver(ctx context.Context, queue string, msg *message.Message) error {
	err := s.Sink.Redeliver(ctx, queue, msg)
	if err == nil && s.sent != nil {
		s.sent()
	}
	return err
}
