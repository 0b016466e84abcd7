package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// eachReader runs test once with the polling reader and once with the
// logical one.
func eachReader(t *testing.T, test func(t *testing.T, cfg outbox.Config)) {
	for _, cfg := range []outbox.Config{testConfig, logical(testConfig)} {
		t.Run(cfg.Reader, func(t *testing.T) { test(t, cfg) })
	}
}

// ids lists the distinct message ids of the deliveries got returns, in
// the order they first arrived.
func ids(got []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range got {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// deliveredIDs lists the message ids of ds, in order.
func deliveredIDs(ds []amqp091.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

// insertEvent writes one outbox row for a tarefa.concluida event inside tx
// and returns its id.
func (s *stack) insertEvent(t *testing.T, ctx context.Context, tx pgx.Tx, titulo string) string {
	t.Helper()
	e, err := event.New("tarefa.concluida.v1", "tarefas", map[string]any{"tarefa_id": 1, "usuario_id": 1, "titulo": titulo})
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.New(s.top.Routable, s.wlog).Publish(ctx, tx, e); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// startActiveRelay starts a relay and waits until it relays: a logical
// one creates its slot first, which waits for every transaction open on
// the server to end.
func (s *stack) startActiveRelay(t *testing.T, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	s.run(t, "relay", relay)
	testenv.Eventually(t, 30*time.Second, "the relay to lead", relay.Active)
	return relay
}

// Transaction A takes its id first and commits last; B starts later and
// commits first. The logical reader delivers B first, as it committed.
// The polling reader delivers in transaction-id order (A first) and still
// delivers both: A's row sits below the position it had reached with B.
func TestCommitOrderAndALateLowerTransactionID(t *testing.T) {
	eachReader(t, func(t *testing.T, cfg outbox.Config) {
		s := newStack(t)
		got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
		s.startActiveRelay(t, cfg)
		ctx := context.Background()

		a, err := s.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = a.Rollback(ctx) }()
		if _, err := a.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil { // A takes its id
			t.Fatal(err)
		}
		b, err := s.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		idB := s.insertEvent(t, ctx, b, "B")
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		s.out.Committed()
		if cfg.Reader == outbox.ReaderLogical {
			testenv.Eventually(t, 10*time.Second, "B, while A is open", func() bool { return len(got()) == 1 })
		} else {
			time.Sleep(3 * cfg.PollInterval) // the polling reader waits for A
		}
		idA := s.insertEvent(t, ctx, a, "A")
		if err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		s.out.Committed()
		testenv.Eventually(t, 10*time.Second, "both events", func() bool { return len(got()) >= 2 })
		order := ids(deliveredIDs(got()))
		want := []string{idB, idA}
		if cfg.Reader == outbox.ReaderPoll {
			want = []string{idA, idB}
		}
		if !slices.Equal(order, want) {
			t.Fatalf("delivered %v, want %v (B committed first)", order, want)
		}
	})
}

// distinct counts the distinct message ids in ds that want holds, and
// the deliveries in all.
func distinct(ds []amqp091.Delivery, want map[string]bool) (found, total int) {
	seen := map[string]bool{}
	for _, d := range ds {
		if want[d.MessageId] && !seen[d.MessageId] {
			seen[d.MessageId] = true
			found++
		}
	}
	return found, len(ds)
}

// Switching from the polling reader to the logical one and back, each
// time with rows waiting, skips nothing: the logical relay first reads
// from the table what committed before its slot existed, and hands back a
// position the polling relay can start from; switching back drops the
// slot.
func TestSwitchingReadersLosesNothing(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	ctx := context.Background()
	slots := func() int {
		return s.count(t, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`)
	}
	drain := func(label string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, label, func() bool { n, _ := distinct(got(), want); return n == len(want) })
	}

	cfg := testConfig
	cfg.BatchSize = 50
	stop := s.startRelay(t, cfg)
	s.commit(t, 100, want)
	drain("the polling relay's events")
	stop()

	s.commit(t, 300, want) // waiting for whichever reader comes next
	stop = s.startRelay(t, logical(cfg))
	s.commit(t, 100, want) // while it backfills or streams
	drain("every event after switching to logical")
	if n := slots(); n != 1 {
		t.Fatalf("%d replication slots while streaming, want 1", n)
	}
	testenv.Eventually(t, 10*time.Second, "the logical relay's position in the table", func() bool {
		done, err := outbox.CaughtUp(ctx, s.db.Pool, cfg.ConsumerGroup)
		return err == nil && done
	})
	stop()

	s.commit(t, 300, want)
	stop = s.startRelay(t, cfg)
	s.commit(t, 100, want)
	drain("every event after switching back to polling")
	if n := slots(); n != 0 {
		t.Fatalf("%d replication slots after switching to polling, want 0: it would keep WAL forever", n)
	}
	stop()

	s.commit(t, 100, want)
	s.startRelay(t, logical(cfg))
	drain("every event after switching to logical again")
	n, total := distinct(got(), want)
	t.Logf("%d events, %d deliveries over three switches", n, total)
}

// A write transaction open in another database of the server holds back
// nothing on the logical reader: events committed meanwhile, one every
// 20 ms for STALL_SECONDS (3 by default), arrive within milliseconds. The
// polling reader would deliver none of them before it ends.
func TestAnOpenTransactionElsewhereDoesNotHoldBackTheLogicalReader(t *testing.T) {
	testenv.PostgresAlone(t)
	s := newStack(t)
	arrived := arrivals(t, s.vhost.URL, "auditoria.tarefas")
	s.startActiveRelay(t, logical(testConfig))
	openElsewhere(t)
	seconds := 3
	if v, err := strconv.Atoi(os.Getenv("STALL_SECONDS")); err == nil {
		seconds = v
	}
	committed := map[string]time.Time{}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(end); <-tick.C {
		e, err := s.conclude(t, "t", false)
		if err != nil {
			t.Fatal(err)
		}
		committed[e.ID] = time.Now()
		s.out.Committed()
	}
	testenv.Eventually(t, 10*time.Second, "every event while the other transaction is open", func() bool { return len(arrived()) >= len(committed) })
	var latencies []time.Duration
	for id, at := range arrived() {
		if c, ok := committed[id]; ok {
			latencies = append(latencies, at.Sub(c))
		}
	}
	slices.Sort(latencies)
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	t.Logf("%d events over %ds with a write transaction open elsewhere: p50 %s, p99 %s, max %s",
		len(latencies), seconds, p(0.5).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), latencies[len(latencies)-1].Round(10*time.Microsecond))
	if p(0.99) > time.Second {
		t.Fatalf("p99 %s: the open transaction held the relay back", p(0.99))
	}
}

// openElsewhere opens a transaction that holds a transaction id in
// another database of the server, and returns its backend's pid and what
// ends it (the test's end does too).
func openElsewhere(t *testing.T) (pid int32, end func()) {
	t.Helper()
	ctx := context.Background()
	open, err := testenv.EmptyPostgres(t).Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end = func() { _ = open.Rollback(ctx) }
	t.Cleanup(end)
	if err := open.QueryRow(ctx, "SELECT pg_backend_pid(), pg_current_xact_id()::text").Scan(&pid, new(string)); err != nil {
		t.Fatal(err)
	}
	return pid, end
}

// arrivals consumes queue and returns when each message id first arrived.
func arrivals(t *testing.T, url, queue string) func() map[string]time.Time {
	t.Helper()
	deliveries, err := testenv.Channel(t, url).Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	at := map[string]time.Time{}
	go func() {
		for d := range deliveries {
			now := time.Now()
			mu.Lock()
			if _, ok := at[d.MessageId]; !ok {
				at[d.MessageId] = now
			}
			mu.Unlock()
		}
	}()
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(at)
	}
}

// A slot that is gone while its relay is down (dropped by hand here;
// invalidated by PostgreSQL in the next test) is created again, and the
// rows after the group's position are read from the table: some events
// go out twice, none is lost.
func TestDroppedSlotIsCreatedAgainFromTheTable(t *testing.T) {
	s := newStack(t)
	slotGone(t, s, func(slot string) {
		if _, err := s.db.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			t.Fatal(err)
		}
	})
}

// TestInvalidatedSlotIsCreatedAgainFromTheTable makes PostgreSQL remove
// WAL a slot needs (max_slot_wal_keep_size), which invalidates every
// slot of the server that lags.
func TestInvalidatedSlotIsCreatedAgainFromTheTable(t *testing.T) {
	testenv.PostgresAlone(t)
	s := newStack(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := s.db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	slotGone(t, s, func(slot string) {
		exec(`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
		t.Cleanup(func() {
			_, _ = s.db.Pool.Exec(ctx, `ALTER SYSTEM RESET max_slot_wal_keep_size`)
			_, _ = s.db.Pool.Exec(ctx, `SELECT pg_reload_conf()`)
		})
		exec(`SELECT pg_reload_conf()`)
		exec(`CREATE TABLE wal_filler (b bytea)`)
		testenv.Eventually(t, 60*time.Second, "PostgreSQL to invalidate the slot", func() bool {
			exec(`INSERT INTO wal_filler SELECT decode(repeat('ab', 4096), 'hex') FROM generate_series(1, 1000)`)
			exec(`SELECT pg_switch_wal()`)
			exec(`CHECKPOINT`)
			var status string
			if err := s.db.Pool.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&status); err != nil {
				t.Fatal(err)
			}
			return status == "lost"
		})
		exec(`ALTER SYSTEM RESET max_slot_wal_keep_size`)
		exec(`SELECT pg_reload_conf()`)
	})
}

// slotGone streams some events, stops the relay, commits more, lets
// remove take the slot away, and checks that a new relay delivers every
// event.
func slotGone(t *testing.T, s *stack, remove func(slot string)) {
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	cfg := logical(testConfig)
	stop := s.startRelay(t, cfg)
	s.commit(t, 50, want)
	testenv.Eventually(t, 30*time.Second, "the first events", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	stop()
	s.commit(t, 50, want)
	var slot string
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT slot_name FROM moenda_outbox_slots`).Scan(&slot); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the slot released", func() bool {
		return s.count(t, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND active`) == 0
	})
	remove(slot)
	logs := newRecords(slog.LevelInfo)
	s.run(t, "relay", s.newRelay(t, s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), s.top.Routable, cfg, slog.New(logs)))
	s.commit(t, 50, want)
	err := await.Until(context.Background(), 30*time.Second, "every event", func() (bool, error) { n, _ := distinct(got(), want); return n == len(want), nil })
	if err != nil {
		n, _ := distinct(got(), want)
		slots, serr := outbox.Slots(context.Background(), s.db.Pool)
		t.Fatalf("%v: %d of %d events out; slots %+v %v; the new relay logged %v", err, n, len(want), slots, serr, logs.all())
	}
	t.Logf("%d deliveries of %d events", len(got()), len(want))
}

// warnings keeps the records a logger writes at a level or above (WARN
// unless said), with their attributes.
type warnings struct {
	slog.Handler
	level slog.Level
	mu    *sync.Mutex
	list  *[]map[string]any
}

func newWarnings() warnings { return newRecords(slog.LevelWarn) }

func newRecords(level slog.Level) warnings {
	return warnings{Handler: testenv.Logger().Handler(), level: level, mu: &sync.Mutex{}, list: &[]map[string]any{}}
}

func (w warnings) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= w.level {
		attrs := map[string]any{"msg": rec.Message, "time": rec.Time.Format(time.StampMilli), "level": rec.Level}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
		w.mu.Lock()
		*w.list = append(*w.list, attrs)
		w.mu.Unlock()
	}
	return w.Handler.Handle(ctx, rec)
}

func (w warnings) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnings{w.Handler.WithAttrs(attrs), w.level, w.mu, w.list}
}

func (w warnings) all() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(*w.list)
}

// A polling relay held back by a write transaction open in another
// database names that transaction's backend in a WARN, once, and
// A commit wakes a polling relay even when its row is still held back by
// a transaction open elsewhere on the server at that moment: the relay
// looks again until the row can be read, instead of sleeping its idle
// poll (here a minute) after the first empty reads.
func TestAWokenRelayWaitsOutAnOpenTransaction(t *testing.T) {
	testenv.PostgresAlone(t)
	s := newStack(t)
	cfg := testConfig
	cfg.PollInterval = time.Minute
	relay := s.newRelay(t, s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), s.top.Routable, cfg, testenv.Logger())
	s.run(t, "relay", relay)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	time.Sleep(500 * time.Millisecond) // the relay has read the empty outbox and sleeps its minute
	_, end := openElsewhere(t)
	want := map[string]bool{}
	s.commit(t, 1, want) // wakes the relay, which cannot read the row yet
	time.Sleep(300 * time.Millisecond)
	if n, _ := distinct(got(), want); n != 0 {
		t.Fatal("the event was out while the transaction was open: the polling reader did not wait")
	}
	end()
	testenv.Eventually(t, 10*time.Second, "the event, well before the idle poll", func() bool { n, _ := distinct(got(), want); return n == 1 })
}

// delivers as soon as it ends.
func TestPollingReaderNamesTheTransactionHoldingItBack(t *testing.T) {
	testenv.PostgresAlone(t)
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	logs := newWarnings()
	dest := s.publisher(t, "moenda outbox relay", testConfig.ConfirmWindow, s.top)
	s.run(t, "relay", s.newRelay(t, dest, s.top.Routable, testConfig, slog.New(logs)))
	pid, end := openElsewhere(t)
	want := map[string]bool{}
	s.commit(t, 5, want)
	named := func() int {
		n := 0
		for _, w := range logs.all() {
			if w["blocking_pid"] == int64(pid) {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, "a WARN naming the open transaction's backend", func() bool { return named() > 0 })
	if n, _ := distinct(got(), want); n != 0 {
		t.Fatalf("%d events out while the transaction was open: the polling reader did not wait", n)
	}
	time.Sleep(6 * time.Second) // another check, still held back by the same backend
	end()
	testenv.Eventually(t, 10*time.Second, "the events once it ended", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	if n := named(); n != 1 {
		t.Fatalf("%d WARNs named backend %d, want 1", n, pid)
	}
}

// auto streams where the server allows it; as a role that may not
// replicate, it polls and says why in one WARN, and logical refuses to
// start, naming the fix.
func TestChooseReader(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	if got, err := outbox.ChooseReader(ctx, db.Pool, outbox.ReaderAuto, testenv.Logger()); err != nil || got != outbox.ReaderLogical {
		t.Fatalf("auto as postgres = %q, %v; want logical", got, err)
	}
	role, plain := db.NoReplicationRole(t)
	logs := newWarnings()
	if got, err := outbox.ChooseReader(ctx, plain.Pool, outbox.ReaderAuto, slog.New(logs)); err != nil || got != outbox.ReaderPoll {
		t.Fatalf("auto as %s = %q, %v; want poll", role, got, err)
	}
	if w := logs.all(); len(w) != 1 || !strings.Contains(w[0]["msg"].(string), "WITH REPLICATION") {
		t.Fatalf("auto as %s warned %v, want one WARN naming the fix", role, w)
	}
	if _, err := outbox.ChooseReader(ctx, plain.Pool, outbox.ReaderLogical, slog.New(logs)); err == nil ||
		!strings.Contains(err.Error(), "outbox.reader is logical, but the database role may not replicate: ALTER ROLE ... WITH REPLICATION") {
		t.Fatalf("logical as %s: %v", role, err)
	}
	if got, err := outbox.ChooseReader(ctx, plain.Pool, outbox.ReaderPoll, slog.New(logs)); err != nil || got != outbox.ReaderPoll || len(logs.all()) != 1 {
		t.Fatalf("poll = %q, %v, with %d warnings", got, err, len(logs.all()))
	}
}

// halfFailing publishes the first half of each of its first failures
// batches, then fails the batch, as a broker that confirmed some messages
// and then went away; after that it publishes.
type halfFailing struct {
	outbox.Destination
	mu       sync.Mutex
	failures int
}

func (d *halfFailing) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	d.mu.Lock()
	fail := d.failures > 0
	d.failures--
	d.mu.Unlock()
	if !fail {
		return d.Destination.PublishBatch(ctx, keys, msgs)
	}
	half := len(msgs) / 2
	if err := d.Destination.PublishBatch(ctx, keys[:half], msgs[:half]); err != nil {
		return err
	}
	return errors.New("the broker went away mid-batch")
}

// A batch the broker did not wholly confirm is published again, never
// skipped: a relay that recorded its position before the broker confirmed,
// or went on after a failed publish, would lose the rest of the batch.
func TestAFailedPublishIsRepeatedNotSkipped(t *testing.T) {
	eachReader(t, func(t *testing.T, cfg outbox.Config) {
		s := newStack(t)
		got, want := s.auditedBulk(t, 400, 20)
		cfg.BatchSize = 50
		dest := &halfFailing{Destination: s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), failures: 3}
		s.run(t, "relay", s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger()))
		s.commitBulk(t, 100, 20, want)
		testenv.Eventually(t, 30*time.Second, "every event", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	})
}

// After its last rows, a logical relay that goes idle still moves the
// group's position past them: retention, the lag metrics and a polling
// relay taking over read that position. Here a transaction that took its
// id before the rows ends after them, without rows of its own, so the
// position first moves to that transaction's id only, and the relay
// needs a sample after it. PostgreSQL streams no empty transaction and
// sends no keepalive of its own to a stream that reports, so an idle
// relay asks for one.
func TestAnIdleLogicalRelayMovesThePositionPastItsLastRows(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	s.startActiveRelay(t, logical(testConfig))
	if _, err := s.db.Pool.Exec(ctx, `CREATE TABLE scratch (x int)`); err != nil {
		t.Fatal(err)
	}
	early, err := s.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx)
	if _, err := early.Exec(ctx, `INSERT INTO scratch VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	s.commit(t, 20, want)
	testenv.Eventually(t, 30*time.Second, "every event", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	testenv.Eventually(t, 45*time.Second, "the position past the last rows", func() bool {
		done, err := outbox.CaughtUp(ctx, s.db.Pool, testConfig.ConsumerGroup)
		return err == nil && done
	})
	t.Logf("the position passed the last rows %s after the early transaction ended", time.Since(at).Round(time.Millisecond))
}

// An idle logical relay in a database whose other tables are written
// fast answers the server's positions a few times a second, not after
// each wake-up of the WAL sender, and still confirms the stream past
// those writes within a gap or two, not at the next standby report.
func TestALogicalRelayConfirmsOtherTablesWritesInFewReports(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	relay := s.startActiveRelay(t, logical(testConfig))
	if _, err := s.db.Pool.Exec(ctx, `CREATE TABLE scratch (x int)`); err != nil {
		t.Fatal(err)
	}
	const writers, each = 2, 500
	before, start := relay.Reports(), time.Now()
	lsns := make([]string, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				// The WAL's insert position before this commit: the stream
				// passes it once it has passed the commit.
				if err := s.db.Pool.QueryRow(ctx, `INSERT INTO scratch VALUES (1) RETURNING pg_current_wal_insert_lsn()::text`).Scan(&lsns[w]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	testenv.Eventually(t, 5*time.Second, "the slot confirmed past the last writes", func() bool {
		var past bool
		err := s.db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= greatest($1::pg_lsn, $2::pg_lsn)
			FROM pg_replication_slots WHERE database = current_database()`, lsns[0], lsns[1]).Scan(&past)
		return err == nil && past
	})
	took := time.Since(start)
	reports := relay.Reports() - before
	t.Logf("%d commits of another table in %s, confirmed after %s in %d reports", writers*each, wrote.Round(time.Millisecond), took.Round(time.Millisecond), reports)
	if most := uint64(took/outbox.ServerEndGap) + 3; reports > most {
		t.Fatalf("%d reports in %s, more than %d: the relay answers each of the server's positions", reports, took.Round(time.Millisecond), most)
	}
}

// Two consumer groups whose names differ only in punctuation stream one
// database from slots of their own: neither takes, drops or resumes from
// the other's. Writers run while the first group's relay is stopped and
// started twice, and every event reaches both groups' destinations.
func TestGroupsAlikeButForPunctuationKeepSlotsApart(t *testing.T) {
	s := newStack(t)
	other := testenv.RabbitMQ(t)
	if err := amqp.Declare(context.Background(), []string{other.URL}, s.top); err != nil {
		t.Fatal(err)
	}
	gotA := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	gotB := testenv.Consume(t, other.URL, "auditoria.tarefas")
	start := func(group string, url string) (*outbox.Relay, func()) {
		cfg := logical(testConfig)
		cfg.ConsumerGroup = group
		dest, err := amqp.NewBatchPublisher([]string{url}, "moenda outbox relay", cfg.ConfirmWindow, s.top)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dest.Close() })
		relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
		stop := s.run(t, group, relay)
		testenv.Eventually(t, 30*time.Second, group+" to lead", relay.Active)
		return relay, stop
	}
	_, stopA := start("grupo-a", s.vhost.URL)
	start("grupo_a", other.URL)

	want := map[string]bool{}
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for ctx.Err() == nil {
			e, err := s.conclude(t, "t", false)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			want[e.ID] = true
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for range 2 {
		time.Sleep(300 * time.Millisecond)
		stopA()
		time.Sleep(300 * time.Millisecond) // events commit while grupo-a is away
		_, stopA = start("grupo-a", s.vhost.URL)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-writing
	for name, got := range map[string]func() []amqp091.Delivery{"grupo-a": gotA, "grupo_a": gotB} {
		testenv.Eventually(t, 30*time.Second, "every event at "+name+"'s destination", func() bool {
			n, _ := distinct(got(), want)
			return n == len(want)
		})
	}
	slots := s.count(t, `SELECT count(DISTINCT slot_name) FROM moenda_outbox_slots`)
	if slots != 2 {
		t.Fatalf("%d replication slots recorded for two groups", slots)
	}
	t.Logf("%d events reached both groups", len(want))
}

// A group never drops a slot that another group's record names, even one
// under the name it would make for itself (a slot named the way an older
// release named them).
func TestAGroupLeavesAnotherGroupsSlotAlone(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	cfg := logical(testConfig)
	cfg.ConsumerGroup = "newcomer"
	name := outbox.SlotName(s.db.Pool.Config().ConnConfig.Database, cfg.ConsumerGroup)
	if _, err := s.db.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.db.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name) })
	if _, err := s.db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_slots (consumer_group, slot_name) VALUES ('veteran', $1)`, name); err != nil {
		t.Fatal(err)
	}
	logs := newWarnings()
	relay := s.newRelay(t, s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), s.top.Routable, cfg, slog.New(logs))
	s.run(t, "newcomer", relay)
	testenv.Eventually(t, 10*time.Second, "the refusal in the log", func() bool {
		for _, w := range logs.all() {
			if strings.Contains(fmt.Sprint(w["error"]), `is consumer group "veteran"'s`) {
				return true
			}
		}
		return false
	})
	if relay.Active() {
		t.Fatal("the newcomer streams the veteran's slot")
	}
	if n := s.count(t, `SELECT count(*) FROM moenda_outbox_slots WHERE consumer_group = 'veteran'`); n != 1 {
		t.Fatal("the veteran's record is gone")
	}
	if n := s.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = '`+name+`'`); n != 1 {
		t.Fatal("the veteran's slot was dropped")
	}
}

// buildingAhead builds each batch apart from sending it
// (outbox.PreparingDestination), and counts the batches sent once the
// next one was built: each send waits for the next build, a second at
// most. It records the ids it sent, in order.
type buildingAhead struct {
	outbox.Destination
	mu    sync.Mutex
	built int
	grew  chan struct{} // closed at the next build
	ahead int
	sent  []string
}

func newBuildingAhead(dest outbox.Destination) *buildingAhead {
	return &buildingAhead{Destination: dest, grew: make(chan struct{})}
}

func (d *buildingAhead) Prepare(keys []string, msgs []*message.Message) (outbox.Prepared, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.built++
	close(d.grew)
	d.grew = make(chan struct{})
	return builtBatch{d: d, n: d.built, keys: keys, msgs: msgs}, nil
}

// awaitBuild waits a second at most for the n-th build, counting the
// batch sent ahead once it came.
func (d *buildingAhead) awaitBuild(ctx context.Context, n int) error {
	timeout := time.After(time.Second)
	for {
		d.mu.Lock()
		built, grew := d.built >= n, d.grew
		if built {
			d.ahead++
		}
		d.mu.Unlock()
		if built {
			return nil
		}
		select {
		case <-grew:
		case <-timeout:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// builtBatch is the n-th batch a buildingAhead built.
type builtBatch struct {
	d    *buildingAhead
	n    int
	keys []string
	msgs []*message.Message
}

func (b builtBatch) Publish(ctx context.Context) error {
	d := b.d
	if err := d.awaitBuild(ctx, b.n+1); err != nil {
		return err
	}
	if err := d.PublishBatch(ctx, b.keys, b.msgs); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, msg := range b.msgs {
		d.sent = append(d.sent, msg.UUID)
	}
	return nil
}

// Under load the logical relay builds the next batch while the last one
// is sent, as a raw client reading on one goroutine and sending on
// another does; the load still gathers in batches, and they go out in
// commit order.
func TestALogicalRelayBuildsTheNextBatchWhileTheLastIsSent(t *testing.T) {
	s := newStack(t)
	cfg := logical(testConfig)
	cfg.BatchSize = 50
	dest := newBuildingAhead(s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top))
	relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	s.run(t, "relay", relay)
	testenv.Eventually(t, 30*time.Second, "the relay to lead", relay.Active)
	want := map[string]bool{}
	s.commitBulk(t, 400, 20, want)
	testenv.Eventually(t, 60*time.Second, "every event confirmed", func() bool {
		dest.mu.Lock()
		defer dest.mu.Unlock()
		return len(ids(dest.sent)) >= len(want)
	})

	rows, err := s.db.Pool.Query(context.Background(), `SELECT uuid FROM watermill_outbox ORDER BY transaction_id, "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	dest.mu.Lock()
	defer dest.mu.Unlock()
	t.Logf("%d batches built, %d sent once the next was built", dest.built, dest.ahead)
	if dest.ahead == 0 {
		t.Fatalf("none of %d batches was sent once the next was built: the relay builds each batch only after the last was sent", dest.built)
	}
	// The first transaction goes alone, the rest gather while each batch
	// waits to be sent: 400 rows make 9 batches or so, not one for each
	// of the 20 transactions.
	if most := 1 + 400/cfg.BatchSize + 1; dest.built > most {
		t.Fatalf("%d batches built, more than %d: the relay took each transaction as it ended rather than a batch of them", dest.built, most)
	}
	if !slices.Equal(ids(dest.sent), committed) {
		t.Fatalf("sent %d events out of commit order (%d committed)", len(dest.sent), len(committed))
	}
}

// heldFirst builds each batch apart from sending it, telling built the
// size of each build, and holds the send of the first batch until
// release is closed.
type heldFirst struct {
	outbox.Destination
	built   chan int
	release chan struct{}
	first   sync.Once
}

func (d *heldFirst) Prepare(keys []string, msgs []*message.Message) (outbox.Prepared, error) {
	d.built <- len(msgs)
	return heldBatch{d: d, keys: keys, msgs: msgs}, nil
}

type heldBatch struct {
	d    *heldFirst
	keys []string
	msgs []*message.Message
}

func (b heldBatch) Publish(ctx context.Context) error {
	b.d.first.Do(func() { <-b.d.release })
	return b.d.PublishBatch(ctx, b.keys, b.msgs)
}

// A batch the logical relay built while the one before it was sent, and
// never sent because the relay stopped meanwhile, ends its messages'
// publish spans as not sent rather than leaving them open; its rows go
// out from the next session.
func TestABatchBuiltButNeverSentEndsItsSpans(t *testing.T) {
	s := newStack(t)
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	cfg := logical(testConfig)
	cfg.BatchSize = 10
	dest := &heldFirst{Destination: s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top),
		built: make(chan int, 2), release: make(chan struct{})}
	relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	relay.Trace(tracer)
	stop := s.run(t, "relay", relay)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(dest.release) }) }) // before stop's
	testenv.Eventually(t, 30*time.Second, "the relay to lead", relay.Active)

	// One transaction of two batches: a transaction's end between them
	// would be an item of its own, which the relay cannot build ahead of
	// while the first send is held.
	ctx, write := tracer.Start(context.Background(), "write")
	s.commitBulkIn(ctx, t, 20, 20, map[string]bool{})
	write.End()
	var sizes [2]int
	for i := range sizes {
		select {
		case sizes[i] = <-dest.built:
		case <-time.After(30 * time.Second):
			t.Fatal("the relay did not build the second batch while it sent the first")
		}
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	// The second batch is dropped once the relay is told to stop; the
	// first is then sent, and the session ends.
	testenv.Eventually(t, 10*time.Second, "the batch never sent to end its spans", func() bool { return len(rec.Ended()) >= 1+sizes[1] })
	release.Do(func() { close(dest.release) })
	<-stopped

	var sent, dropped int
	for _, span := range rec.Ended() {
		if !strings.HasPrefix(span.Name(), "publish ") {
			continue
		}
		switch span.Status().Code {
		case codes.Ok, codes.Unset:
			sent++
		case codes.Error:
			if !strings.Contains(span.Status().Description, "not sent") {
				t.Errorf("span %s ended with %q", span.Name(), span.Status().Description)
			}
			dropped++
		}
	}
	if open := len(rec.Started()) - len(rec.Ended()); open != 0 || sent != sizes[0] || dropped != sizes[1] {
		t.Fatalf("%d publish spans sent and %d dropped, want %d and %d; %d spans left open", sent, dropped, sizes[0], sizes[1], open)
	}
}
