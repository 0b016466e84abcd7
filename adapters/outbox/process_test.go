package outbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// TestRelayProcess is not a test: it is the relay process the tests
// below start and kill. It relays RELAY_DB's outbox to RELAY_AMQP with the
// logical reader, and creates RELAY_ACTIVE once it streams.
func TestRelayProcess(t *testing.T) {
	active := os.Getenv("RELAY_ACTIVE")
	if active == "" {
		t.Skip("started by the tests that kill a relay")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("RELAY_DB"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := logical(testConfig)
	cfg.BatchSize, _ = strconv.Atoi(os.Getenv("RELAY_BATCH"))
	top := stackTopology(t)
	dest, err := amqp.NewBatchPublisher([]string{os.Getenv("RELAY_AMQP")}, "moenda outbox relay", cfg.ConfirmWindow, top)
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
// it with the file it creates once it streams.
func (s *stack) relayProcess(t *testing.T, name string, batch int) (*exec.Cmd, string) {
	t.Helper()
	active := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RELAY_DB="+s.db.URL, "RELAY_AMQP="+s.vhost.URL, "RELAY_ACTIVE="+active, "RELAY_BATCH="+strconv.Itoa(batch))
	cmd.Stdout, cmd.Stderr = testenv.LogWriter(), testenv.LogWriter()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, active
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
	ctx := context.Background()
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

// A logical relay killed with SIGKILL while it drains 50,000 rows loses
// none: the next one resumes from the slot, and repeats at most the
// batches that were in flight (the one being published, and in a window
// of microseconds the one before it, confirmed by the broker but not yet
// told to PostgreSQL).
func TestLogicalRelayKilledWhileDrainingLosesNothing(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	want := map[string]bool{}
	const rows, batch = 50_000, 256
	s.commitBulk(t, rows, 1000, want)

	first, active := s.relayProcess(t, "first", batch)
	testenv.Eventually(t, 60*time.Second, "the first relay streaming", func() bool { return exists(active) })
	testenv.Eventually(t, 60*time.Second, "a fifth of the rows out", func() bool { return len(got()) >= rows/5 })
	kill(t, first)
	atKill := len(got())
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
