package bench

import (
	"bytes"
	"context"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/router"
)

// TestQuickRun runs the whole harness at smoke size against the real
// services, serve process included, and checks that every figure came out.
// It asserts no timing: a figure that misses its target is a finding for
// BENCHMARKS.md, not a failure.
func TestQuickRun(t *testing.T) {
	opts := quickOptions(t)
	opts.ServeBin = buildMoenda(t)
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// The server's autovacuum moves some figures: the machine says which.
	conn, err := pgx.Connect(context.Background(), opts.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var autovacuum string
	if err := conn.QueryRow(context.Background(), "SHOW autovacuum").Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	if got := res.Machine["autovacuum"]; got != autovacuum && !strings.HasPrefix(got, autovacuum+":") {
		t.Errorf("the machine's autovacuum reads %q, the server's is %s", got, autovacuum)
	}
	if got := res.Machine["contention"]; !strings.HasPrefix(got, "over the run, ") {
		t.Errorf("the machine's contention reads %q", got)
	}
	wantPrefixes := []string{
		"ceiling: amqp091 publish", "ceiling: amqp091 consume",
		"ceiling: pgx business+outbox-sized row per transaction, 1 writers", "moenda: outbox write (use case + event, one transaction), 16 writers",
		"moenda: outbox write, 16 writers, while the logical relay streams",
		"moenda: outbox write, 16 writers, notifying the polling relay after their commits",
		"moenda: relay drain of 2000 rows with confirms, logical reader", "moenda: relay drain of 2000 rows with confirms, poll reader",
		"moenda: relay drain of 2000 rows read from the table at the logical reader's first start",
		"moenda: serve peak RSS", "moenda: idle relay queries, logical reader", "moenda: idle relay queries, poll reader",
		"moenda: relay drain of 4000 rows while retention deletes older rows",
		"moenda: consume through the router", "ceiling: amqp091 + pgx consume, inbox row and effect row",
		"moenda: consume through the router, whole chain with the inbox", "moenda: healthy events with 1 % poisoned",
		"moenda: outbox write with tracing on, against off", "moenda: consume through the router with metrics on",
		"moenda: consume through the router with tracing on",
		"floor: pgx commit, then amqp091 publish with confirm, to a consumer claiming it in the inbox, at 200 events/s, commit to handler, p99",
		"moenda: end-to-end latency at 200 events/s, commit to handler, logical reader, p99",
		"moenda: end-to-end latency at 200 events/s, commit to handler, poll reader, p99",
		"moenda: end-to-end latency at 200 events/s with a write transaction open in another database, logical reader, p99",
		"moenda: end-to-end latency at 200 events/s with a write transaction open in another database, poll reader, p99",
		"ceiling: franz-go producer", "moenda: Kafka relay drain of 2000 rows", "moenda: Kafka relay's reading alone",
		"franz-go's producer, the relay's client, against sarama's SyncProducer",
		"ceiling: pglogrepl reading 2000 rows", "ceiling: pglogrepl read into franz-go's producer",
		"moenda: Kafka relay drain of 2000 rows, logical reader, against pglogrepl read into the raw producer",
		"ceiling: sarama consumer", "moenda: Kafka replay of the analytics projection",
		"moenda: ledger of 20000 failures, first page", "moenda: ledger of 20000 failures, last page by its cursor",
		"moenda: ledger of 20000 failures, first page of one queue", "moenda: ledger of 20000 failures, last page of one queue by its cursor",
		"moenda: ledger of 20000 failures, first page of a text search",
		"moenda: console Overview", "moenda: console Failures",
		"ceiling: amqp091 consume + pgx insert of the same rows", "moenda: failure ingest of 1000 dead letters",
		"ceiling: amqp091 publish of the re-drive's copies", "moenda: re-drive of 400 failures at full speed",
		"moenda: re-drive of 400 failures at 200/s after a canary of 5",
	}
	for _, prefix := range wantPrefixes {
		found := false
		for _, row := range res.Rows {
			if strings.HasPrefix(row.Name, prefix) {
				found = true
				if row.Value <= 0 && !strings.Contains(row.Name, "idle") {
					t.Errorf("%s = %v", row.Name, row.Value)
				}
				switch {
				case len(row.Spread) == 2 && row.Ceiling > 0 && (row.Ratio < row.Spread[0] || row.Ratio > row.Spread[1]):
					t.Errorf("%s: ratio %v outside its spread %v", row.Name, row.Ratio, row.Spread)
				case len(row.Spread) == 2 && row.Ceiling == 0 && (row.Value < row.Spread[0] || row.Value > row.Spread[1]):
					t.Errorf("%s: value %v outside its spread %v", row.Name, row.Value, row.Spread)
				case len(row.Spread) == 0 && row.Ceiling > 0 && row.Ratio != row.Value/row.Ceiling:
					t.Errorf("%s: ratio %v is not value/ceiling", row.Name, row.Ratio)
				}
			}
		}
		if !found {
			t.Errorf("no row %q", prefix)
		}
	}
	// The rows that read CPU name each process's: serve's or the raw
	// client's own, and the servers'.
	for prefix, roles := range map[string][]string{
		"ceiling: amqp091 publish":                                       {procClient, procBench, procBroker, procPostgres},
		"moenda: relay drain of 2000 rows with confirms, poll reader":    {procMoenda, procBench, procBroker, procPostgres},
		"moenda: consume through the router, whole chain with the inbox": {procBench, procBroker, procPostgres},
		"ceiling: franz-go producer":                                     {procBench, procKafka},
		"franz-go's producer, the relay's client, against sarama's":      {procBench, procKafka},
		"moenda: Kafka relay drain of 2000 rows":                         {procBench, procKafka, procPostgres},
		"ceiling: pglogrepl reading 2000 rows":                           {procBench, procPostgres},
		"ceiling: pglogrepl read into franz-go's producer":               {procBench, procKafka, procPostgres},
		"moenda: Kafka relay's reading alone":                            {procBench, procPostgres},
	} {
		for _, row := range res.Rows {
			if !strings.HasPrefix(row.Name, prefix) {
				continue
			}
			for _, role := range roles {
				if _, ok := row.CPU[role]; !ok {
					t.Errorf("%s: no CPU of %s in %v", row.Name, role, row.CPU)
				}
			}
		}
	}
	var table, doc strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteMarkdown(&doc, "moenda bench"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc.String(), "| nproc |") || !strings.Contains(table.String(), "ratio") {
		t.Fatalf("outputs:\n%s\n%s", table.String(), doc.String())
	}
	t.Logf("\n%s", table.String())
}

// buildMoenda builds the moenda binary whose serve processes a test runs.
func buildMoenda(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "moenda")
	if out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput(); err != nil {
		t.Fatalf("build moenda: %v\n%s", err, out)
	}
	return bin
}

// Each round of the first-start row is a first start: serve's relay reads
// the round's backlog from the table, where the slot the round before
// made would have streamed it.
func TestEachFirstStartRoundReadsTheTable(t *testing.T) {
	ctx := context.Background()
	opts := quickOptions(t)
	opts.ServeBin = buildMoenda(t)
	e, err := newEnv(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if e.reader != outbox.ReaderLogical {
		t.Skip("PostgreSQL has no logical decoding (wal_level): no logical relay to start")
	}
	for round := range 2 {
		var before int64
		if err := e.pool.QueryRow(ctx, `SELECT COALESCE(max(transaction_id)::text::bigint, 0) FROM watermill_outbox`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := e.firstStart(ctx, 200); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The read from the table records how far it got.
		var read int64
		if err := e.pool.QueryRow(ctx, `SELECT backfill_transaction_id::text::bigint FROM moenda_outbox_slots WHERE consumer_group = $1`,
			e.set.Outbox.ConsumerGroup).Scan(&read); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if read <= before {
			t.Fatalf("round %d: the relay read the table up to transaction %d, none of the round's rows (after %d): it streamed them from an earlier round's slot", round, read, before)
		}
	}
}

// quickOptions are a --quick run's against the test services, with their
// own vhost.
func quickOptions(t *testing.T) Options {
	vhost := testenv.RabbitMQ(t)
	return Options{
		Quick:       true,
		PostgresURL: testenv.SharePostgres(t),
		AMQPURL:     vhost.URL,
		Settings: Settings{
			AMQP: amqp.Config{URL: vhost.URL, Prefetch: 50},
			Outbox: outbox.Config{ConsumerGroup: "moenda-relay", PollInterval: time.Second, RetryInterval: 100 * time.Millisecond, BatchSize: 1000, ConfirmWindow: 256,
				Reader: outbox.ReaderAuto},
			Router: router.Config{CloseTimeout: 5 * time.Second},
			Failure: topology.FailureConfig{ImmediateRetries: new(int), ImmediateInterval: 10 * time.Millisecond, Delays: []time.Duration{100 * time.Millisecond},
				DeadLetter: topology.DeadLetterConfig{Exchange: "moenda.dlx", Queue: "{queue}.dlq"}},
		},
		Logger: testenv.Logger(),
	}
}

// TestAStepRunsAlone runs one step on its own (--step), as one does to
// measure a change: every step makes what it needs, not an earlier step.
func TestAStepRunsAlone(t *testing.T) {
	opts := quickOptions(t)
	opts.Steps = []string{"end-to-end latency"}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Per reader: p50, p95 and p99, the p99 of each of the three stages,
	// the rate committed, and a p99 beside a transaction elsewhere; the
	// raw clients' floor: p50, p99 and the rate committed.
	if n := len(res.Rows); n != 19 {
		t.Fatalf("the latency step alone gave %d rows, want 19", n)
	}
	for _, row := range res.Rows {
		if row.Value <= 0 {
			t.Errorf("%s = %v", row.Name, row.Value)
		}
	}
}

// TestTheBrokerClosingTheBenchConnectionCostsADial: the bench holds its own
// connection to the broker for the whole run; a broker that closes it, as
// it does an idle one whose heartbeat a busy machine missed, costs a dial
// when the bench next needs it, not the run.
func TestTheBrokerClosingTheBenchConnectionCostsADial(t *testing.T) {
	ctx := context.Background()
	opts := quickOptions(t)
	e, err := newEnv(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	u, err := url.Parse(opts.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", strings.TrimPrefix(u.Path, "/"), "test: the broker closes the bench's connection")
	testenv.Eventually(t, 10*time.Second, "the bench's connection closed", e.conn.IsClosed)
	if err := e.purge(); err != nil {
		t.Fatalf("purge after the broker closed the connection: %v", err)
	}
	ch, err := e.channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(e.sink, true, false, false, false, nil); err != nil {
		t.Fatalf("the sink queue on the connection dialled again: %v", err)
	}
}

// The transactions ceiling does what any writer of an outbox does, as
// moenda's write does: each of its rows is an event of its own, encoded
// from the same payload, about the size of the outbox's row of the bench
// event.
func TestTheRawWriterMakesEachEventItself(t *testing.T) {
	ctx := context.Background()
	e, err := newEnv(ctx, quickOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	write, err := e.rawWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.commitRaw(ctx, write, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	var outboxRow []byte
	if err := e.pool.QueryRow(ctx, `SELECT payload FROM watermill_outbox ORDER BY "offset" DESC LIMIT 1`).Scan(&outboxRow); err != nil {
		t.Fatal(err)
	}
	want, err := event.Decode(outboxRow)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(ctx, `SELECT uuid, payload FROM bench_outbox_raw ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var id string
	var body []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &body}, func() error {
		got, err := event.Decode(body)
		switch {
		case err != nil:
			t.Errorf("the raw writer's row %s is no event: %v", id, err)
		case got.ID != id || seen[id]:
			t.Errorf("the raw writer's row %s holds event %s, after %v: each row must be an event of its own", id, got.ID, seen)
		case got.Name != want.Name || !bytes.Equal(got.Payload, want.Payload):
			t.Errorf("the raw writer's event is %s with %d bytes of payload, the outbox's %s with %d", got.Name, len(got.Payload), want.Name, len(want.Payload))
		}
		if d := float64(len(body)) / float64(len(outboxRow)); d < 0.9 || d > 1.1 {
			t.Errorf("the raw writer's row is %d bytes, the outbox's %d", len(body), len(outboxRow))
		}
		seen[id] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("the raw writer wrote %d rows in two transactions", len(seen))
	}
}
