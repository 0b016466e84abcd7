package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/tarefas"
	"github.com/moenda/moenda/migrations"
)

// testConfig is the relay configuration of configs/test.yaml, with small
// batches and the polling reader; logical sets the logical one.
var testConfig = outbox.Config{ConsumerGroup: "moenda-relay", PollInterval: 200 * time.Millisecond, RetryInterval: 50 * time.Millisecond, BatchSize: 100, ConfirmWindow: 64,
	Reader: outbox.ReaderPoll}

// logical is cfg with the logical reader.
func logical(cfg outbox.Config) outbox.Config {
	cfg.Reader = outbox.ReaderLogical
	return cfg
}

// stack is the outbox path against the real services: a migrated
// database, a vhost with the topology declared, and the AMQP broker.
type stack struct {
	db    testenv.Database
	vhost testenv.VHost
	top   *topology.Topology
	tx    *postgres.Transactor
	// out is the outbox tx writes; the relays run woken by its commits,
	// as serve's are.
	out  *outbox.Outbox
	wlog watermill.LoggerAdapter
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	s := &stack{db: testenv.Postgres(t), vhost: testenv.RabbitMQ(t), wlog: watermill.NewSlogLogger(testenv.Logger())}
	// The business rows of these tests are the Tarefas plugin's.
	_, err := migrations.Up(ctx, s.db.Pool, testenv.Logger(), migrations.Set{Name: "tarefas", Files: tarefas.Plugin().Migrations})
	if err != nil {
		t.Fatal(err)
	}
	s.top = stackTopology(t)
	if err := amqp.Declare(ctx, []string{s.vhost.URL}, s.top); err != nil {
		t.Fatal(err)
	}
	s.out = outbox.New(s.top.Routable, s.wlog)
	s.tx = postgres.NewTransactor(s.db.Pool, s.out)
	return s
}

// stackTopology is the stack's topology: the Tarefas events, an audit
// queue that takes them all, and a notification queue.
func stackTopology(t *testing.T) *topology.Topology {
	t.Helper()
	return tarefasTopology(t, []string{"tarefa.#"},
		topology.Subscription{Queue: "notificacoes.tarefas-concluidas", Patterns: []string{"tarefa.concluida"}},
		topology.Subscription{Queue: "auditoria.tarefas", Patterns: []string{"tarefa.#"}})
}

// tarefasTopology is the stack's layout with events on eventos.dominio
// and subs: no retries, dead letters on notificacoes.dlx, and an
// alternate exchange keeping what no binding matched.
func tarefasTopology(t *testing.T, events []string, subs ...topology.Subscription) *topology.Topology {
	t.Helper()
	top, err := topology.Build(topology.Config{
		Exchanges: []topology.ExchangeConfig{{Name: "eventos.dominio", Events: events}},
		Failure: topology.FailureConfig{ImmediateRetries: new(int), Delays: []time.Duration{},
			DeadLetter: topology.DeadLetterConfig{Exchange: "notificacoes.dlx", Queue: "{queue}.dlq"}},
		Unrouted: "{exchange}.unrouted",
	}, subs)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// auditedBulk starts reading the audit queue (auditoria.tarefas), then
// commits n events, perTx to a transaction; it returns what the queue
// received so far and the events' ids.
func (s *stack) auditedBulk(t *testing.T, n, perTx int) (got func() []amqp091.Delivery, want map[string]bool) {
	t.Helper()
	got = testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want = map[string]bool{}
	s.commitBulk(t, n, perTx, want)
	return got, want
}

// publisher returns a confirm publisher to the stack's vhost, closed when
// the test ends.
func (s *stack) publisher(t *testing.T, name string, window int, top *topology.Topology) *amqp.BatchPublisher {
	t.Helper()
	dest, err := amqp.NewBatchPublisher([]string{s.vhost.URL}, name, window, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	return dest
}

// newRelay returns a relay over the stack's database.
func (s *stack) newRelay(t *testing.T, dest outbox.Destination, routable func(string) error, cfg outbox.Config, logger *slog.Logger) *outbox.Relay {
	t.Helper()
	relay, err := outbox.NewRelay(s.db.Pool, dest, routable, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// startRelay runs a relay with cfg until the returned stop function is
// called.
func (s *stack) startRelay(t *testing.T, cfg outbox.Config) (stop func()) {
	t.Helper()
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	return s.run(t, "relay", s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger()))
}

// run runs relay, woken with the stack's commits, until the returned stop
// function is called or the test ends.
func (s *stack) run(t *testing.T, name string, relay *outbox.Relay) (stop func()) {
	t.Helper()
	s.out.Wakes(relay)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// conclude writes a task row and its event in one unit of work; fail makes
// fn return an error after both writes, so the unit rolls back.
func (s *stack) conclude(t *testing.T, titulo string, fail bool) (event.Event, error) {
	t.Helper()
	e, err := event.New("tarefa.concluida.v1", "tarefas", map[string]any{"tarefa_id": 1, "usuario_id": 1, "titulo": titulo})
	if err != nil {
		t.Fatal(err)
	}
	ctx := event.WithCorrelation(context.Background(), "req-"+titulo)
	err = s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		if _, err := tx.Postgres().Exec(ctx, `INSERT INTO tarefas (usuario_id, titulo, concluida) VALUES (1, $1, true)`, titulo); err != nil {
			return err
		}
		if err := tx.Publish(ctx, e); err != nil {
			return err
		}
		if fail {
			return errors.New("use case failed after writing")
		}
		return nil
	})
	return event.Stamp(ctx, e), err
}

// commit concludes n tasks, one unit of work each, adding their event ids to ids.
func (s *stack) commit(t *testing.T, n int, ids map[string]bool) {
	t.Helper()
	for range n {
		e, err := s.conclude(t, "t", false)
		if err != nil {
			t.Fatal(err)
		}
		ids[e.ID] = true
	}
}

func (s *stack) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := s.db.Pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRollbackPublishesNothingCommitDeliversToEveryBoundQueue(t *testing.T) {
	s := newStack(t)
	s.startRelay(t, testConfig)
	notified := testenv.Consume(t, s.vhost.URL, "notificacoes.tarefas-concluidas")
	audited := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")

	if _, err := s.conclude(t, "desfeita", true); err == nil {
		t.Fatal("the failing unit of work returned no error")
	}
	if n := s.count(t, `SELECT count(*) FROM tarefas`); n != 0 {
		t.Fatalf("rolled-back unit left %d task rows", n)
	}
	if n := s.count(t, `SELECT count(*) FROM watermill_outbox`); n != 0 {
		t.Fatalf("rolled-back unit left %d outbox rows", n)
	}

	want, err := s.conclude(t, "feita", false)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the committed event on both queues", func() bool {
		return len(notified()) >= 1 && len(audited()) >= 1
	})
	time.Sleep(200 * time.Millisecond) // anything else the relay sends arrives by now
	for queue, got := range map[string][]amqp091.Delivery{"notificacoes.tarefas-concluidas": notified(), "auditoria.tarefas": audited()} {
		if len(got) != 1 {
			t.Fatalf("%s received %d messages, want only the committed event", queue, len(got))
		}
		checkDelivery(t, got[0], want)
	}
}

// checkValidate fails the test unless cfg.Validate accepts cfg (want "")
// or refuses it with an error containing want.
func checkValidate(t *testing.T, cfg outbox.Config, want string) {
	t.Helper()
	err := cfg.Validate()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want %q", err, want)
	}
}

// checkDelivery checks the envelope and its AMQP properties.
func checkDelivery(t *testing.T, d amqp091.Delivery, want event.Event) {
	t.Helper()
	checks := []struct {
		name      string
		got, want any
	}{
		{"exchange", d.Exchange, "eventos.dominio"},
		{"routing key", d.RoutingKey, "tarefa.concluida"},
		{"message_id", d.MessageId, want.ID},
		{"type", d.Type, "tarefa.concluida.v1"},
		{"content_type", d.ContentType, "application/json"},
		{"correlation_id", d.CorrelationId, "req-feita"},
		{"delivery_mode", d.DeliveryMode, amqp091.Persistent},
		{"timestamp", d.Timestamp.Unix(), want.OccurredAt.Unix()},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	got, err := event.Decode(d.Body)
	if err != nil {
		t.Fatalf("body is not an envelope: %v\n%s", err, d.Body)
	}
	if got.ID != want.ID || got.Name != want.Name || got.CorrelationID != "req-feita" || got.Source != "tarefas" || !got.OccurredAt.Equal(want.OccurredAt) {
		t.Errorf("envelope = %+v, want %+v", got, want)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(d.Body, &raw)
	for _, field := range []string{"event_id", "event_name", "occurred_at", "correlation_id", "source", "payload"} {
		if _, ok := raw[field]; !ok {
			t.Errorf("envelope lacks %s: %s", field, d.Body)
		}
	}
}

func TestRelayStoppedMidStreamLosesNothing(t *testing.T) {
	eachReader(t, func(t *testing.T, base outbox.Config) {
		s := newStack(t)
		got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
		const before, during = 1500, 300
		want := map[string]bool{}
		s.commit(t, before, want)

		// Small batches, so that stopping lands mid-stream.
		slow := base
		slow.BatchSize, slow.ConfirmWindow = 5, 5
		stop := s.startRelay(t, slow)
		testenv.Eventually(t, 30*time.Second, "the relay to start moving rows", func() bool { return len(got()) >= 100 })
		stop()
		atStop := len(got())
		if atStop >= before {
			t.Fatalf("the relay had moved all %d rows before it was stopped; the test did not stop it mid-stream", atStop)
		}
		s.commit(t, during, want) // the application keeps committing while the relay is down

		s.startRelay(t, base)
		distinct := func() map[string]bool {
			ids := map[string]bool{}
			for _, d := range got() {
				ids[d.MessageId] = true
			}
			return ids
		}
		testenv.Eventually(t, 60*time.Second, "every committed event on the queue", func() bool { return len(distinct()) >= len(want) })
		ids := distinct()
		for id := range want {
			if !ids[id] {
				t.Fatalf("event %s never reached the queue", id)
			}
		}
		if len(ids) != len(want) {
			t.Fatalf("%d distinct event ids out, %d in", len(ids), len(want))
		}
		// The stopped relay finished the batch in hand and recorded it, so
		// the next one published nothing again.
		if n := len(got()); n != len(want) {
			t.Fatalf("%d deliveries for %d events: the stop left %d published but unrecorded", n, len(want), n-len(want))
		}
		t.Logf("stopped after %d of %d; %d deliveries for %d events", atStop, before, len(got()), len(want))
	})
}

// Two replicas run the relay: one holds the lock, the other waits, so each
// event is published once.
func TestOneRelayActivePerConsumerGroup(t *testing.T) {
	eachReader(t, func(t *testing.T, base outbox.Config) {
		s := newStack(t)
		got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
		s.startRelay(t, base)
		s.startRelay(t, base)
		want := map[string]bool{}
		s.commit(t, 300, want)
		testenv.Eventually(t, 30*time.Second, "every event", func() bool { return len(got()) >= len(want) })
		time.Sleep(300 * time.Millisecond) // a second copy would arrive by now
		if n := len(got()); n != len(want) {
			t.Fatalf("%d deliveries for %d events: both relays published", n, len(want))
		}
	})
}

// A row whose routing key no exchange carries any more (the configuration
// changed after it was written) is parked, and the rows behind it flow.
func TestRelaySkipsRowsNoExchangeCarries(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	s.commit(t, 1, want)
	cfg := testConfig
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	refuseFirst := map[string]bool{}
	for id := range want {
		refuseFirst[id] = true
	}
	s.commit(t, 5, want)
	for id := range refuseFirst {
		delete(want, id)
	}
	seen := 0
	routable := func(key string) error {
		seen++
		if seen == 1 {
			return topology.ErrUnroutable
		}
		return nil
	}
	relay := s.newRelay(t, dest, routable, cfg, testenv.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 10*time.Second, "the rows behind the skipped one", func() bool {
		ids := map[string]bool{}
		for _, d := range got() {
			ids[d.MessageId] = true
		}
		for id := range want {
			if !ids[id] {
				return false
			}
		}
		for id := range refuseFirst {
			if ids[id] {
				t.Fatalf("the unroutable row %s was published", id)
			}
		}
		return true
	})
}

// An idle relay sleeps: after its first looks it reads nothing more until
// its idle poll (here a minute) comes round, and a commit in the same
// process wakes it long before that.
func TestIdleRelaySleeps(t *testing.T) {
	s := newStack(t)
	cfg := testConfig
	cfg.PollInterval = time.Minute
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	s.out.Wakes(relay)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Its first looks are done once it has queried and then holds still
	// for half a second: on a busy machine they take longer than that.
	var before uint64
	testenv.Eventually(t, 20*time.Second, "the relay's first looks", func() bool {
		n := relay.Queries()
		time.Sleep(500 * time.Millisecond)
		before = relay.Queries()
		return n > 0 && before == n
	})
	time.Sleep(3 * time.Second)
	if n := relay.Queries() - before; n > 0 {
		t.Fatalf("an idle relay sent %d queries in 3 s", n)
	}
	// A row wakes it.
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	s.commit(t, 1, map[string]bool{})
	testenv.Eventually(t, 10*time.Second, "the event, well before the idle poll", func() bool { return len(got()) == 1 })
}

// A relay that could not work is refused when it is made: a zero batch
// would read nothing, a zero poll interval would spin.
func TestNewRelayRefusesWhatCannotWork(t *testing.T) {
	s := newStack(t)
	dest := s.publisher(t, "test", 1, s.top)
	for name, change := range map[string]func(*outbox.Config){
		"zero batch":         func(c *outbox.Config) { c.BatchSize = 0 },
		"zero poll interval": func(c *outbox.Config) { c.PollInterval = 0 },
		"no consumer group":  func(c *outbox.Config) { c.ConsumerGroup = "" },
	} {
		cfg := testConfig
		change(&cfg)
		if _, err := outbox.NewRelay(s.db.Pool, dest, s.top.Routable, cfg, testenv.Logger()); err == nil {
			t.Errorf("%s: NewRelay accepted it", name)
		}
	}
}

// Rows carry their routing key in the metadata as the relay of the version
// before reads it, so such a relay running beside this one during a
// rolling update skips nothing; this relay does not send it on.
func TestRowsKeepTheKeyTheRelayBeforeRead(t *testing.T) {
	s := newStack(t)
	want := map[string]bool{}
	s.commit(t, 1, want)
	if n := s.count(t, `SELECT count(*) FROM watermill_outbox WHERE metadata->>'routing_key' = 'tarefa.concluida'`); n != 1 {
		t.Fatalf("%d rows carry routing_key", n)
	}
	// A row without it is routed by its event's name.
	s.commit(t, 1, want)
	if _, err := s.db.Pool.Exec(context.Background(), `UPDATE watermill_outbox SET metadata = (metadata::jsonb - 'routing_key')::json
		WHERE "offset" = (SELECT max("offset") FROM watermill_outbox)`); err != nil {
		t.Fatal(err)
	}
	s.startRelay(t, testConfig)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	testenv.Eventually(t, 10*time.Second, "both events", func() bool { return len(got()) == 2 })
	for _, d := range got() {
		if _, ok := d.Headers["routing_key"]; ok || d.RoutingKey != "tarefa.concluida" {
			t.Fatalf("delivered with key %q and headers %v", d.RoutingKey, d.Headers)
		}
	}
}

// A polling relay hears commits made in another process through a
// Notifier there, long before its idle poll would come round.
func TestACommitElsewhereWakesAPollingRelay(t *testing.T) {
	s := newStack(t)
	cfg := testConfig
	cfg.PollInterval = time.Minute
	relay := s.newRelay(t, s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), s.top.Routable, cfg, testenv.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The writer is not in the relay's process: its commits reach the
	// relay only through the notifier.
	notifier := outbox.NewNotifier(s.db.Pool, testenv.Logger())
	go notifier.Run(ctx)
	out := outbox.New(s.top.Routable, s.wlog)
	out.NotifiesThrough(notifier)
	s.tx = postgres.NewTransactor(s.db.Pool, out)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	time.Sleep(500 * time.Millisecond) // the relay has read the empty outbox and sleeps its minute
	for i := range 3 {
		s.commit(t, 1, map[string]bool{})
		testenv.Eventually(t, 10*time.Second, "the event, well before the idle poll", func() bool { return len(got()) == i+1 })
		time.Sleep(200 * time.Millisecond) // asleep again
	}
}
