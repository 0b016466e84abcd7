package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/migrations"
	"github.com/moenda/moenda/router"
)

// Settings are the moenda settings measured: those of the configuration
// the command was run with.
type Settings struct {
	AMQP    amqp.Config
	Outbox  outbox.Config
	Router  router.Config
	Failure topology.FailureConfig
	// Failures are the failure ledger's (failures.*): the ingest's batch.
	Failures failures.Config
}

// env is what one run owns: a database, an exchange with one sink queue,
// and the connections to them. close removes them all.
type env struct {
	opts   Options
	set    Settings
	sz     sizes
	logger *slog.Logger
	wlog   watermill.LoggerAdapter
	dbName string
	dbURL  string
	pool   *pgxpool.Pool
	// conn is the bench's own connection to the broker, for its queues'
	// upkeep and its raw consumers; channel opens a channel on it.
	conn       *amqp091.Connection
	connClosed chan *amqp091.Error
	exchange   string
	sink       string // the queue every bench event reaches
	top        *topology.Topology
	tx         *postgres.Transactor
	// reader is how the relays of the run read the outbox, as serve
	// chose it for the configuration; the reader rows measure both.
	reader string
	// timed and tracer set how the router observes its messages: the
	// observability step turns them on; every other step runs with both
	// off.
	timed  bool
	tracer trace.Tracer
}

func newEnv(ctx context.Context, opts Options) (_ *env, err error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	e := &env{opts: opts, set: opts.Settings, sz: opts.sizes(), logger: opts.Logger, wlog: watermill.NewSlogLogger(opts.Logger)}
	defer func() {
		if err != nil {
			e.close()
		}
	}()

	admin, err := pgx.Connect(ctx, e.onDatabase("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL's maintenance database on the postgres.url server: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	e.dbName = "moenda_bench_" + id
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+e.dbName); err != nil {
		e.dbName = ""
		return nil, fmt.Errorf("create the bench database (the user needs CREATEDB): %w", err)
	}
	e.dbURL = e.onDatabase(e.dbName)
	pc, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 24 // 16 writers, the relay, and room
	if e.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, e.pool, slog.New(slog.DiscardHandler)); err != nil {
		return nil, err
	}
	// The business table of the use cases that several steps run, so that
	// each step also runs alone (--step).
	if _, err := e.pool.Exec(ctx, `CREATE TABLE bench_business (id BIGSERIAL PRIMARY KEY, data TEXT NOT NULL)`); err != nil {
		return nil, err
	}
	if e.reader, err = outbox.ChooseReader(ctx, e.pool, e.set.Outbox.Reader, opts.Logger); err != nil {
		return nil, err
	}

	if err := e.dial(); err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ (amqp.url): %w", err)
	}
	e.exchange = "moenda.bench." + id
	e.sink = e.exchange + ".sink"
	if e.top, err = topology.Build(e.topologyConfig(), []topology.Subscription{{Queue: e.sink, Patterns: []string{"bench.#"}}}); err != nil {
		return nil, err
	}
	if err := amqp.Declare(ctx, []string{opts.AMQPURL}, e.top); err != nil {
		return nil, err
	}
	e.tx = postgres.NewTransactor(e.pool, outbox.New(e.top.Routable, e.wlog))
	return e, nil
}

// onDatabase is postgres.url with another database.
func (e *env) onDatabase(name string) string {
	u, err := url.Parse(e.opts.PostgresURL)
	if err != nil {
		return e.opts.PostgresURL // validated by the configuration
	}
	u.Path = "/" + name
	return u.String()
}

func (e *env) topologyConfig() topology.Config {
	return topology.Config{
		Exchanges: []topology.ExchangeConfig{{Name: e.exchange, Events: []string{"bench.#"},
			Failure: topology.FailureConfig{DeadLetter: topology.DeadLetterConfig{Exchange: e.exchange + ".dlx", Queue: "{queue}.dlq"}}}},
		Failure: e.set.Failure,
	}
}

// leftClean fails the run if a step left behind what would skew the
// steps after it: a parked row (every row the bench writes is an event, so
// a parked one is a step's mistake, and the relay that parked it was timed
// on work it did not do), or the slot of a group other than the relay's
// (PostgreSQL keeps WAL for it until the run ends).
func (e *env) leftClean(ctx context.Context) error {
	parked, total, err := outbox.ListParked(ctx, e.pool, 1)
	if err != nil {
		return err
	}
	if total > 0 {
		return fmt.Errorf("relays parked %d of the rows the run wrote, the first for %s: %s", total, parked[0].Reason, parked[0].Detail)
	}
	slots, err := outbox.Slots(ctx, e.pool)
	if err != nil {
		return err
	}
	for _, s := range slots {
		if s.ConsumerGroup != e.set.Outbox.ConsumerGroup {
			return fmt.Errorf("a step left the slot %s of the group %q, keeping %d bytes of WAL", s.Name, s.ConsumerGroup, s.RetainedBytes)
		}
	}
	return nil
}

func (e *env) close() {
	if e.conn != nil && e.top != nil {
		if ch, err := e.channel(); err == nil {
			for _, q := range e.top.Queues {
				_, _ = ch.QueueDelete(q.Name, false, false, false)
			}
			for _, x := range e.top.Exchanges {
				_ = ch.ExchangeDelete(x.Name, false, false)
			}
			_ = ch.Close()
		}
	}
	if e.conn != nil {
		_ = e.conn.Close()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.dbName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if admin, err := pgx.Connect(ctx, e.onDatabase("postgres")); err == nil {
			// The relays' slots go first: a database with one cannot be
			// dropped. Every relay of the run has stopped.
			_, _ = admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, e.dbName)
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)")
			_ = admin.Close(ctx)
		}
	}
}

func (e *env) dial() error {
	conn, err := amqp091.Dial(e.opts.AMQPURL)
	if err != nil {
		return err
	}
	e.conn, e.connClosed = conn, conn.NotifyClose(make(chan *amqp091.Error, 1))
	return nil
}

// channel opens a channel on the bench's connection, dialing it again
// if the broker closed it: the connection is held for the whole run, in
// which a busy machine can miss a heartbeat of an idle one, and that
// costs a warning, not the run.
func (e *env) channel() (*amqp091.Channel, error) {
	if e.conn.IsClosed() {
		reason := "closed by the client library"
		if err := <-e.connClosed; err != nil {
			reason = err.Error()
		}
		e.logger.Warn("bench: the bench's own connection to the broker was closed; dialing it again", "reason", reason)
		if err := e.dial(); err != nil {
			return nil, fmt.Errorf("dial the broker again after its connection was closed (%s): %w", reason, err)
		}
	}
	return e.conn.Channel()
}

// purge empties the named queues, the sink when none is named.
func (e *env) purge(queues ...string) error {
	if len(queues) == 0 {
		queues = []string{e.sink}
	}
	ch, err := e.channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueuePurge(q, false); err != nil {
			return fmt.Errorf("purge %s: %w", q, err)
		}
	}
	return nil
}

// benchEvent is a moenda event of about 1 KiB on the wire.
func benchEvent() event.Event {
	ev, err := event.New(benchEventName, "bench", benchPayload())
	if err != nil {
		panic(err) // a constant, valid name
	}
	return ev
}

// benchEventName is the bench event's name.
const benchEventName = "bench.evento.v1"

// benchPayload is the bench event's data, made afresh for each event as a
// use case makes its own.
func benchPayload() map[string]string { return map[string]string{"data": strings.Repeat("x", 800)} }

// machine describes where the run happened.
func (e *env) machine(ctx context.Context) map[string]string {
	m := map[string]string{
		"date":         time.Now().UTC().Format(time.RFC3339),
		"nproc":        fmt.Sprint(runtime.NumCPU()),
		"go":           runtime.Version(),
		"mode":         map[bool]string{true: "quick (smoke, not a measurement)", false: "full"}[e.opts.Quick],
		"instructions": instructionsCounted(ctx),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		m["memory"] = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
	}
	var v string
	if err := e.pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err == nil {
		m["postgresql"] = v
	}
	// Off, the server never analyzes the tables the run fills, which
	// moves some figures (BENCHMARKS.md, "End-to-end latency: the outbox
	// scanned for one row"); production servers run it.
	if err := e.pool.QueryRow(ctx, "SHOW autovacuum").Scan(&v); err == nil {
		m["autovacuum"] = map[bool]string{true: "on", false: "off: the tables the run fills are never vacuumed or analyzed, unlike on a production server"}[v == "on"]
	}
	if v, ok := e.conn.Properties["version"].(string); ok {
		m["rabbitmq"] = v
	}
	m["kafka"] = strings.Join(e.opts.Kafka.Brokers, ",")
	if e.opts.Kafka.Embedded || len(e.opts.Kafka.Brokers) == 0 {
		m["kafka"] = "embedded (kfake, in a process of its own that the bench starts)"
	}
	return m
}

// relayedMessage is what the relay publishes for a bench event: the same
// body and properties (message id, type, correlation id, timestamp,
// persistent JSON), so the raw ceilings move messages of a relayed event's
// size.
func (e *env) relayedMessage(ctx context.Context) (amqp091.Publishing, error) {
	msg, _, err := outbox.Prepare(ctx, benchEvent(), e.top.Routable)
	if err != nil {
		return amqp091.Publishing{}, err
	}
	return amqp.Marshaler{}.Marshal(msg)
}
