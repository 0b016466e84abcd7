package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// publishLog records which relay made each PublishBatch call, in order.
type publishLog struct {
	mu sync.Mutex
	by []string
}

func (l *publishLog) add(relay string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by = append(l.by, relay)
}

func (l *publishLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.by...)
}

// namedDestination is a Destination that logs its relay's name on every batch.
type namedDestination struct {
	outbox.Destination
	name string
	log  *publishLog
}

func (d namedDestination) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	d.log.add(d.name)
	return d.Destination.PublishBatch(ctx, keys, msgs)
}

// levelCounts counts log records by level.
type levelCounts struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (c *levelCounts) get(l slog.Level) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[l]
}

// countingHandler counts each record in counts and passes it on.
type countingHandler struct {
	slog.Handler
	counts *levelCounts
}

func (h countingHandler) Handle(ctx context.Context, rec slog.Record) error {
	h.counts.mu.Lock()
	if h.counts.n == nil {
		h.counts.n = map[slog.Level]int{}
	}
	h.counts.n[rec.Level]++
	h.counts.mu.Unlock()
	return h.Handler.Handle(ctx, rec)
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(attrs), h.counts}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.counts}
}

// runRelay runs a relay named name, its batches logged in pubs and its log
// records counted in logs, until the test ends.
func (s *stack) runRelay(t *testing.T, name string, cfg outbox.Config, pubs *publishLog, logs *levelCounts) {
	t.Helper()
	amqpDest := s.publisher(t, "moenda outbox relay "+name, cfg.ConfirmWindow, s.top)
	logger := testenv.Logger().With("relay", name)
	if logs != nil {
		logger = slog.New(countingHandler{logger.Handler(), logs})
	}
	s.run(t, "relay "+name, s.newRelay(t, namedDestination{amqpDest, name, pubs}, s.top.Routable, cfg, logger))
}

// terminateLockHolder ends the backend, in the test's own database, that
// holds the relay lock of group, and returns how many it ended.
func (s *stack) terminateLockHolder(t *testing.T, group string) int {
	t.Helper()
	key := uint64(outbox.LockKey(group))
	var n int
	err := s.db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid) AS ended FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2 AND objsubid = 1
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		) k WHERE ended`, uint32(key>>32), uint32(key)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// commitContinuously concludes tasks, one unit of work after another,
// until the returned function is called; it returns their event ids.
func (s *stack) commitContinuously(t *testing.T) (stop func() map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ids := map[string]bool{}
	var failed error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			id, err := s.commitOne(fmt.Sprintf("c%d", i))
			if err != nil {
				failed = err
				return
			}
			ids[id] = true
		}
	}()
	var once sync.Once
	stop = func() map[string]bool {
		once.Do(func() { cancel(); <-done })
		if failed != nil {
			t.Fatalf("commit: %v", failed)
		}
		return ids
	}
	t.Cleanup(func() { cancel(); <-done })
	return stop
}

// commitOne concludes a task in one unit of work and returns its event id.
func (s *stack) commitOne(titulo string) (string, error) {
	e, err := event.New("tarefa.concluida.v1", "tarefas", map[string]any{"tarefa_id": 1, "usuario_id": 1, "titulo": titulo})
	if err != nil {
		return "", err
	}
	ctx := event.WithCorrelation(context.Background(), "req-"+titulo)
	err = s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		if _, err := tx.Postgres().Exec(ctx, `INSERT INTO tarefas (usuario_id, titulo, concluida) VALUES (1, $1, true)`, titulo); err != nil {
			return err
		}
		return tx.Publish(ctx, e)
	})
	return event.Stamp(ctx, e).ID, err
}

// watchPosition samples the recorded position of group every few
// milliseconds until the returned function is called; that returns how
// many samples were taken and every step backwards seen.
func (s *stack) watchPosition(t *testing.T, group string) (stop func() (samples int, backwards []string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var samples int
	var backwards []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		var prevTx, prevOffset int64
		for ctx.Err() == nil {
			var tx, offset int64
			err := s.db.Pool.QueryRow(ctx, `SELECT last_processed_transaction_id::text::bigint, offset_acked
				FROM watermill_offsets_outbox WHERE consumer_group = $1`, group).Scan(&tx, &offset)
			if err == nil {
				samples++
				if tx < prevTx || tx == prevTx && offset < prevOffset {
					backwards = append(backwards, fmt.Sprintf("(%d, %d) after (%d, %d)", tx, offset, prevTx, prevOffset))
				}
				prevTx, prevOffset = tx, offset
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() (int, []string) {
		cancel()
		<-done
		return samples, backwards
	}
}

// Two replicas relay one outbox while the session holding the relay lock
// is killed again and again under a stream of commits: every event is
// delivered, and the recorded position only moves forward.
func TestRelayLockSessionKilledUnderLoad(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	cfg := testConfig
	// The standby asks for the lock more often than a relay that lost it
	// retries, so the lock changes hands.
	cfg.PollInterval, cfg.RetryInterval = 100*time.Millisecond, 300*time.Millisecond
	pubs := &publishLog{}
	s.runRelay(t, "a", cfg, pubs, nil)
	s.runRelay(t, "b", cfg, pubs, nil)
	positions := s.watchPosition(t, cfg.ConsumerGroup)
	committed := s.commitContinuously(t)

	const kills = 4
	for i := range kills {
		// Two batches after the last kill: the second was read by a relay
		// that holds the lock now.
		n := len(pubs.list())
		testenv.Eventually(t, 30*time.Second, "a relay publishing", func() bool { return len(pubs.list()) >= n+2 })
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("kill %d to end the lock's session", i+1), func() bool {
			return s.terminateLockHolder(t, cfg.ConsumerGroup) == 1
		})
	}
	n := len(pubs.list())
	testenv.Eventually(t, 30*time.Second, "a relay publishing after the last kill", func() bool { return len(pubs.list()) >= n+2 })
	want := committed()

	testenv.Eventually(t, 60*time.Second, "every committed event on the queue", func() bool { return delivered(got(), want) == len(want) })
	samples, backwards := positions()
	if len(backwards) > 0 {
		t.Fatalf("the recorded position went backwards %d times in %d samples: %v", len(backwards), samples, backwards)
	}
	if samples < 50 {
		t.Fatalf("only %d samples of the position", samples)
	}
	by := pubs.list()
	leaders, handovers := map[string]int{}, 0
	for i, name := range by {
		leaders[name]++
		if i > 0 && by[i-1] != name {
			handovers++
		}
	}
	if len(leaders) != 2 {
		t.Fatalf("batches published by each relay: %v; the lock never changed hands", leaders)
	}
	t.Logf("%d events, %d deliveries; %d kills; batches by relay %v, %d handovers; %d position samples",
		len(want), len(got()), kills, leaders, handovers, samples)
}

// Once the session holding relay a's lock is gone and relay b has taken
// the lock, a publishes nothing more, and says so once.
func TestRelayThatLostItsLockPublishesNoMore(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	cfgA, cfgB := testConfig, testConfig
	cfgA.RetryInterval = 2 * time.Second // b, polling, takes the lock before a asks again
	cfgB.PollInterval = 100 * time.Millisecond
	pubs := &publishLog{}
	logsA := &levelCounts{}
	s.runRelay(t, "a", cfgA, pubs, logsA)
	want := map[string]bool{}
	s.commit(t, 10, want)
	testenv.Eventually(t, 10*time.Second, "relay a to publish", func() bool { return delivered(got(), want) == len(want) })
	s.runRelay(t, "b", cfgB, pubs, nil)
	committed := s.commitContinuously(t)
	time.Sleep(300 * time.Millisecond) // b stands by, a relays the stream

	if n := s.terminateLockHolder(t, testConfig.ConsumerGroup); n != 1 {
		t.Fatalf("ended %d lock sessions, want relay a's", n)
	}
	firstB := func() int {
		for i, name := range pubs.list() {
			if name == "b" {
				return i
			}
		}
		return -1
	}
	testenv.Eventually(t, 10*time.Second, "relay b to take the lock and publish", func() bool { return firstB() >= 0 })
	time.Sleep(time.Second) // a relay still publishing would publish the stream alongside b
	for id := range committed() {
		want[id] = true
	}
	testenv.Eventually(t, 60*time.Second, "every committed event on the queue", func() bool { return delivered(got(), want) == len(want) })

	by := pubs.list()
	after := 0
	for _, name := range by[firstB():] {
		if name == "a" {
			after++
		}
	}
	if after > 0 {
		t.Fatalf("relay a published %d batches after relay b took the lock (batches in order: %v)", after, by)
	}
	if n := logsA.get(slog.LevelWarn); n != 1 {
		t.Errorf("relay a logged %d warnings, want one for the lost lock", n)
	}
	if n := logsA.get(slog.LevelError); n != 0 {
		t.Errorf("relay a logged %d errors, want none", n)
	}
	t.Logf("%d events, %d deliveries, %d batches (b's first is #%d)", len(want), len(got()), len(by), firstB())
}

// gated counts the messages it publishes and, while hold is set, holds
// each batch until release. It counts messages, not batches: a logical
// relay may split one transaction's rows across batches, as the stream
// brings them.
type gated struct {
	outbox.Destination
	open    chan struct{}
	once    sync.Once
	hold    atomic.Bool
	sent    atomic.Int32 // messages published
	waiting atomic.Int32 // batches held
}

func (d *gated) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	if d.hold.Load() {
		d.waiting.Add(1)
		<-d.open
	}
	err := d.Destination.PublishBatch(ctx, keys, msgs)
	if err == nil {
		d.sent.Add(int32(len(msgs)))
	}
	return err
}

// release lets every batch held, and every later one, through.
func (d *gated) release() { d.once.Do(func() { close(d.open) }) }

// A relay publishing a batch finds, when it records it, the group's
// position already past the batch (another relay moved it): the position
// stays where it is, and the relay reads on from there. Both readers.
func TestAPositionNeverMovesBackwards(t *testing.T) {
	eachReader(t, func(t *testing.T, cfg outbox.Config) {
		s := newStack(t)
		ctx := context.Background()
		dest := &gated{Destination: s.publisher(t, "gated", 64, s.top), open: make(chan struct{})}
		relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
		s.run(t, "relay", relay)
		t.Cleanup(dest.release) // before the relay stops, which waits for a batch held
		testenv.Eventually(t, 30*time.Second, "the relay to lead", relay.Active)
		// A first transaction goes through, and is recorded: a logical
		// relay also takes a sample of the position to move to later.
		s.commitBulk(t, 5, 5, map[string]bool{})
		s.out.Committed()
		testenv.Eventually(t, 10*time.Second, "the first transaction's rows published", func() bool { return dest.sent.Load() == 5 })
		dest.hold.Store(true)
		s.commitBulk(t, 5, 5, map[string]bool{})
		s.out.Committed()
		testenv.Eventually(t, 10*time.Second, "the second transaction's rows in the relay's hands", func() bool { return dest.waiting.Load() > 0 })

		// Another relay of the group got further meanwhile.
		var ahead, aheadOffset int64
		err := s.db.Pool.QueryRow(ctx, `UPDATE watermill_offsets_outbox SET last_processed_transaction_id = pg_current_xact_id(), offset_acked = 1000000
			WHERE consumer_group = $1 RETURNING last_processed_transaction_id::text::bigint, offset_acked`, cfg.ConsumerGroup).Scan(&ahead, &aheadOffset)
		if err != nil {
			t.Fatal(err)
		}
		watch := s.watchPosition(t, cfg.ConsumerGroup)
		dest.release()
		s.commitBulk(t, 5, 5, map[string]bool{}) // the logical relay samples and settles on the next rows
		s.out.Committed()
		// The relay records the rows after it, a logical one once a sample
		// it takes is confirmed (within its standby reports).
		var tx, offset int64
		testenv.Eventually(t, 40*time.Second, "a position past the one another relay set", func() bool {
			err := s.db.Pool.QueryRow(ctx, `SELECT last_processed_transaction_id::text::bigint, offset_acked FROM watermill_offsets_outbox
				WHERE consumer_group = $1`, cfg.ConsumerGroup).Scan(&tx, &offset)
			return err == nil && tx > ahead
		})
		if samples, backwards := watch(); len(backwards) > 0 {
			t.Fatalf("the position moved backwards in %d samples: %v", samples, backwards)
		}
		if !relay.Active() {
			t.Fatal("the relay no longer leads")
		}
	})
}

// moenda_relay_leader is 1 on the one relay of a group that leads and 0
// on the one that stands by; once the leader stops, the other says 1.
func TestRelayLeaderMetricFollowsTheLeadership(t *testing.T) {
	s := newStack(t)
	cfg := testConfig
	cfg.ConsumerGroup = "leader-metric"
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	a := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	b := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	says := func(r *outbox.Relay, v float64) bool {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(r)
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "moenda_relay_leader" {
				m := f.GetMetric()[0]
				return len(f.GetMetric()) == 1 && m.GetLabel()[0].GetValue() == cfg.ConsumerGroup && m.GetGauge().GetValue() == v
			}
		}
		return false
	}
	stopA := s.run(t, "relay a", a)
	testenv.Eventually(t, 10*time.Second, "relay a leading", func() bool { return says(a, 1) })
	s.run(t, "relay b", b)
	time.Sleep(3 * cfg.PollInterval) // b asks for the lock, and is refused
	if !says(b, 0) || !says(a, 1) {
		t.Fatal("with a leading, b does not say 0 or a does not say 1")
	}
	stopA()
	testenv.Eventually(t, 10*time.Second, "relay b leading once a stopped", func() bool { return says(b, 1) && says(a, 0) })
}

// State names the session of the relay that leads a group and the reader
// it recorded, and no leader once it stops.
func TestStateNamesTheLeadingSession(t *testing.T) {
	s := newStack(t)
	cfg := testConfig
	cfg.ConsumerGroup = "state-leader"
	dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
	a := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
	ctx := context.Background()
	if st, err := outbox.State(ctx, s.db.Pool, cfg.ConsumerGroup); err != nil || st.Leader != nil || st.Reader != "" {
		t.Fatalf("State before any relay ran = %+v, %v; want no leader and no reader", st, err)
	}
	stop := s.run(t, "relay a", a)
	testenv.Eventually(t, 10*time.Second, "relay a leading", a.Active)
	st, err := outbox.State(ctx, s.db.Pool, cfg.ConsumerGroup)
	if err != nil || st.Leader == nil || st.Leader.PID == 0 || st.Leader.Since.IsZero() || st.Reader != outbox.ReaderPoll {
		t.Fatalf("State while a leads = %+v (leader %+v), %v; want its session and reader poll", st, st.Leader, err)
	}
	stop()
	testenv.Eventually(t, 10*time.Second, "no leader once a stopped", func() bool {
		st, err := outbox.State(ctx, s.db.Pool, cfg.ConsumerGroup)
		return err == nil && st.Leader == nil && st.Reader == outbox.ReaderPoll
	})
}
