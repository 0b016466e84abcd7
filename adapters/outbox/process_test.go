package outbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// TestRelayProcess is not a test: it is the relay process the tests
// below start and kill. It relays RELAY_DB's outbox to RELAY_AMQP, or to
// the Kafka cluster at RELAY_KAFKA (its brokers, comma-separated) under
// RELAY_KAFKA_PREFIX, with RELAY_READER (the logical reader by default),
// batches of RELAY_BATCH and, when set, RELAY_WINDOW confirms
// outstanding, and creates RELAY_ACTIVE once it leads.
func TestRelayProcess(t *testing.T) {
	active := testenv.ProcessEnv(t, "RELAY_ACTIVE", "started by the tests that kill a relay")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("RELAY_DB"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := logical(testConfig)
	if reader := os.Getenv("RELAY_READER"); reader != "" {
		cfg.Reader = reader
	}
	cfg.BatchSize, _ = strconv.Atoi(os.Getenv("RELAY_BATCH"))
	if w, err := strconv.Atoi(os.Getenv("RELAY_WINDOW")); err == nil {
		cfg.ConfirmWindow = w
	}
	top := stackTopology(t)
	var dest outbox.Destination
	if brokers := os.Getenv("RELAY_KAFKA"); brokers != "" {
		kcfg := kafka.DefaultConfig()
		kcfg.Brokers, kcfg.TopicPrefix = strings.Split(brokers, ","), os.Getenv("RELAY_KAFKA_PREFIX")
		dest, err = kafka.NewProducer(kcfg, top, nil, "moenda outbox relay", testenv.Logger())
	} else {
		dest, err = amqp.NewBatchPublisher([]string{os.Getenv("RELAY_AMQP")}, "moenda outbox relay", cfg.ConfirmWindow, top)
	}
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, dest, top.Routable, cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for !relay.Active() {
			time.Sleep(10 * time.Millisecond)
		}
		_ = os.WriteFile(active, nil, 0o600)
	}()
	t.Fatal(relay.Run(ctx)) // runs until killed
}

// relayProcess starts a logical relay process for the stack and returns
// it with the file it creates once it streams; extra adds to its
// environment (RELAY_READER, RELAY_WINDOW).
func (s *stack) relayProcess(t *testing.T, name string, batch int, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	active := filepath.Join(t.TempDir(), name)
	env := []string{"RELAY_DB=" + s.db.URL, "RELAY_AMQP=" + s.vhost.URL, "RELAY_ACTIVE=" + active, "RELAY_BATCH=" + strconv.Itoa(batch)}
	return testenv.StartProcess(t, "TestRelayProcess", append(env, extra...)...), active
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// kill ends cmd with SIGKILL.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// commitBulk writes n events, perTx to a transaction, adding their ids
// to want.
func (s *stack) commitBulk(t *testing.T, n, perTx int, want map[string]bool) {
	t.Helper()
	s.commitBulkIn(context.Background(), t, n, perTx, want)
}

// commitBulkIn is commitBulk in ctx, whose trace, if any, the events carry.
func (s *stack) commitBulkIn(ctx context.Context, t *testing.T, n, perTx int, want map[string]bool) {
	t.Helper()
	ob := outbox.New(s.top.Routable, s.wlog)
	for done := 0; done < n; done += perTx {
		tx, err := s.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events := make([]event.Event, min(perTx, n-done))
		for i := range events {
			if events[i], err = event.New("tarefa.criada.v1", "tarefas", map[string]any{"tarefa_id": done + i, "usuario_id": 1, "titulo": "t"}); err != nil {
				t.Fatal(err)
			}
			want[events[i].ID] = true
		}
		if err := ob.Publish(ctx, tx, events...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A logical relay killed with SIGKILL while it drains 50,000 rows that
// committed before its slot existed, which it reads from the table, loses
// none: the next one resumes from the progress recorded after each batch.
// (TestRelayKilledMidTransactionRepeatsAtMostTheBatchInHand kills one
// while it streams.) Its slot exists only once every write transaction on
// the server has ended, which other tests' never all do: run alone, with
// TEST_POSTGRES_ALONE=1 (.ci/test).
func TestLogicalRelayKilledWhileDrainingLosesNothing(t *testing.T) {
	testenv.PostgresAlone(t)
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	const rows, batch = 50_000, 256
	s.commitBulk(t, rows, 1000, want)

	first, active := s.relayProcess(t, "first", batch)
	started := time.Now()
	testenv.Eventually(t, 60*time.Second, "the first relay streaming", func() bool { return exists(active) })
	streaming := time.Since(started)
	// A fifth takes 5 to 15 s alone under the race detector; the bound is
	// wide for a server still busy with the tests before (its log is
	// printed if it is reached).
	testenv.Eventually(t, 3*time.Minute, "a fifth of the rows out", func() bool { return len(got()) >= rows/5 })
	kill(t, first)
	atKill := len(got())
	t.Logf("the first relay streamed after %s and was killed %s later", streaming.Round(time.Millisecond), (time.Since(started) - streaming).Round(time.Millisecond))
	if atKill >= rows {
		t.Fatalf("all %d rows were out before the kill: it did not land mid-drain", atKill)
	}

	s.relayProcess(t, "second", batch)
	testenv.Eventually(t, 120*time.Second, "every row after the restart", func() bool { n, _ := distinct(got(), want); return n == rows })
	time.Sleep(500 * time.Millisecond) // a late repeat would show by now
	n, total := distinct(got(), want)
	if n != rows || total != len(got()) {
		t.Fatalf("%d of %d events out, %d deliveries of rows never written", n, rows, len(got())-total)
	}
	dups := total - rows
	t.Logf("killed after %d of %d; %d repeated (batch %d)", atKill, rows, dups, batch)
	if dups > 2*batch {
		t.Fatalf("%d events repeated after the kill, more than the two batches that can be in flight (%d)", dups, 2*batch)
	}
}

// Two relay processes of one group: exactly one streams. Killed, it
// hands over to the other within a few seconds, and nothing is lost.
func TestLogicalRelayStandbyTakesOverWhenTheLeaderIsKilled(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	a, activeA := s.relayProcess(t, "a", 100)
	b, activeB := s.relayProcess(t, "b", 100)
	testenv.Eventually(t, 60*time.Second, "one relay streaming", func() bool { return exists(activeA) || exists(activeB) })
	time.Sleep(3 * testConfig.PollInterval) // the other asks for the slot meanwhile
	if exists(activeA) && exists(activeB) {
		t.Fatal("both relays stream")
	}
	streaming := func() int {
		return s.count(t, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND active`)
	}
	if n := streaming(); n != 1 {
		t.Fatalf("%d slots streamed", n)
	}
	s.commitBulk(t, 500, 10, want)
	testenv.Eventually(t, 30*time.Second, "the events", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	if n := len(got()); n != len(want) {
		t.Fatalf("%d deliveries of %d events while two relays ran", n, len(want))
	}

	leader, standbyActive := a, activeB
	if exists(activeB) {
		leader, standbyActive = b, activeA
	}
	kill(t, leader)
	killed := time.Now()
	s.commitBulk(t, 500, 10, want) // while the leadership changes hands
	testenv.Eventually(t, 10*time.Second, "the standby streaming", func() bool { return exists(standbyActive) })
	took := time.Since(killed)
	testenv.Eventually(t, 30*time.Second, "every event", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	t.Logf("the standby took over %s after the kill; %d deliveries of %d events", took.Round(time.Millisecond), len(got()), len(want))
}

// tally counts the deliveries of a queue, cheaply enough to be read every
// millisecond while tens of thousands arrive.
type tally struct {
	n     atomic.Int64
	mu    sync.Mutex
	times map[string]int
}

func newTally(t *testing.T, url, queue string) *tally {
	t.Helper()
	deliveries, err := testenv.Channel(t, url).Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &tally{times: map[string]int{}}
	go func() {
		for d := range deliveries {
			c.mu.Lock()
			c.times[d.MessageId]++
			c.mu.Unlock()
			c.n.Add(1)
		}
	}()
	return c
}

// count returns how many of want arrived, and how many deliveries in all
// (of want or not).
func (c *tally) count(want map[string]bool) (found, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.times {
		if want[id] {
			found++
		}
	}
	return found, int(c.n.Load())
}

// crashMidTransaction waits until the deliveries stand well inside one of
// the backlog's transactions of perTx rows (between 30 % and 70 % of it),
// then crashes the relay, and returns how many had arrived.
func crashMidTransaction(t *testing.T, c *tally, rows, perTx int, crash func()) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := int(c.n.Load())
		if at := n % perTx; n >= rows/5 && at >= perTx*3/10 && at <= perTx*7/10 {
			crash()
			return n
		}
		if n >= rows*9/10 || time.Now().After(deadline) {
			t.Fatalf("%d of %d rows out and no crash yet: the drain was too fast to land in a transaction", n, rows)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// settleDuplicates waits until every one of want arrived, and a little
// longer for late repeats, then fails unless each arrived, and returns
// how many arrived more than once.
func settleDuplicates(t *testing.T, c *tally, want map[string]bool) int {
	t.Helper()
	// The count walks every delivery under the tally's lock, which holds
	// back its consumer: only once enough have arrived is it worth it.
	testenv.Eventually(t, 3*time.Minute, "every row after the crash", func() bool {
		if int(c.n.Load()) < len(want) {
			return false
		}
		n, _ := c.count(want)
		return n == len(want)
	})
	time.Sleep(time.Second) // a late repeat would show by now
	n, total := c.count(want)
	if n != len(want) {
		t.Fatalf("%d of %d events out", n, len(want))
	}
	return total - len(want)
}

// The crash tests drain crashRows rows committed crashPerTx to a
// transaction, in batches and a confirm window of crashWindow.
const crashRows, crashPerTx, crashWindow = 50_000, 2_000, 256

// eachReaderCrash runs drain once on each reader, with a stack, a tally of
// its auditoria.tarefas queue and a set to add the drained events' ids
// to; drain commits them, crashes (what) in the middle of a transaction
// and returns how many had arrived then. It fails unless every event
// arrives, and arrives once but for at most a window.
func eachReaderCrash(t *testing.T, what string, drain func(t *testing.T, reader string, s *stack, c *tally, want map[string]bool) int) {
	for _, reader := range []string{outbox.ReaderPoll, outbox.ReaderLogical} {
		t.Run(reader, func(t *testing.T) {
			s := newStack(t)
			c := newTally(t, s.vhost.URL, "auditoria.tarefas")
			want := map[string]bool{}
			at := drain(t, reader, s, c, want)
			dups := settleDuplicates(t, c, want)
			t.Logf("%s: %s after %d of %d deliveries; %d repeated (batch and confirm window %d)", reader, what, at, crashRows, dups, crashWindow)
			if dups > crashWindow {
				t.Fatalf("%d events repeated after %s, more than the batch in hand and the confirm window (%d)", dups, what, crashWindow)
			}
		})
	}
}

// A relay killed with SIGKILL in the middle of a drain of 50,000 rows,
// inside one of its transactions of 2,000, repeats at most the batch it
// had in hand, on either reader: what it published before that batch is
// recorded, the rows of a transaction only partly published included.
func TestRelayKilledMidTransactionRepeatsAtMostTheBatchInHand(t *testing.T) {
	eachReaderCrash(t, "the relay was killed", func(t *testing.T, reader string, s *stack, c *tally, want map[string]bool) int {
		return s.killRelayMidDrain(t, c, want, "RELAY_READER="+reader, "RELAY_WINDOW="+strconv.Itoa(crashWindow))
	})
}

// killRelayMidDrain commits a backlog of crashRows into want, kills the
// relay process draining it (run with env) inside one of its
// transactions, and starts another to finish; it returns how many
// deliveries c had counted at the kill.
func (s *stack) killRelayMidDrain(t *testing.T, c *tally, want map[string]bool, env ...string) int {
	t.Helper()
	// A relay that led once and stopped: a logical one leaves its slot,
	// so the backlog below is streamed, not read from the table as the
	// rows committed before a slot existed are.
	zero, active := s.relayProcess(t, "zero", crashWindow, env...)
	testenv.Eventually(t, 60*time.Second, "a relay leading once", func() bool { return exists(active) })
	kill(t, zero)
	s.commitBulk(t, crashRows, crashPerTx, want)
	first, active := s.relayProcess(t, "first", crashWindow, env...)
	testenv.Eventually(t, 60*time.Second, "the first relay leading", func() bool { return exists(active) })
	atKill := crashMidTransaction(t, c, crashRows, crashPerTx, func() { kill(t, first) })
	s.relayProcess(t, "second", crashWindow, env...)
	return atKill
}

// PostgreSQL crashing (pg_ctlcluster restart -m immediate) in the middle
// of a drain of 50,000 rows makes either reader repeat at most the batch
// it had in hand. A logical relay's slot comes back as PostgreSQL last
// saved it, which may be far behind what the relay published: the
// relay's own record of its position decides where it resumes. It
// restarts the server: run alone, with TEST_POSTGRES_ALONE=1 (.ci/test).
func TestPostgresCrashMidDrainRepeatsAtMostTheBatchInHand(t *testing.T) {
	testenv.PostgresAlone(t)
	eachReaderCrash(t, "PostgreSQL crashed", func(t *testing.T, reader string, s *stack, c *tally, want map[string]bool) int {
		cfg := testConfig
		cfg.Reader, cfg.BatchSize, cfg.ConfirmWindow = reader, crashWindow, crashWindow
		dest := s.publisher(t, "moenda outbox relay", crashWindow, s.top)
		// The relay leads once and stops first: a logical one keeps
		// its slot, so the backlog is streamed, not read from the
		// table as the rows committed before a slot existed are.
		once := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
		stop := s.run(t, "relay", once)
		testenv.Eventually(t, 60*time.Second, "a relay leading once", once.Active)
		stop()
		s.commitBulk(t, crashRows, crashPerTx, want)
		relay := s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger())
		s.run(t, "relay", relay)
		testenv.Eventually(t, 60*time.Second, "the relay leading", relay.Active)
		return crashMidTransaction(t, c, crashRows, crashPerTx, func() { restartPostgres(t, "immediate") })
	})
}

// restartPostgres restarts the local cluster with pg_ctlcluster in mode
// (immediate: a crash, then recovery).
func restartPostgres(t *testing.T, mode string) {
	t.Helper()
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		t.Fatalf("find the local PostgreSQL cluster in /etc/postgresql: %v", err)
	}
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", versions[0].Name(), "main", "restart", "-m", mode).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_ctlcluster restart -m %s: %v: %s", mode, err, out)
	}
}
