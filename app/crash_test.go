package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/notificacoes"
	"github.com/moenda/moenda/handlers/tarefas"
)

// TestProbeServeProcess is not a test: it is the process the crash test
// starts and kills. It serves the probe plugin until it is killed, and
// creates the file PROBE_SERVE_READY once its handlers consume.
func TestProbeServeProcess(t *testing.T) {
	ready := testenv.ProcessEnv(t, "PROBE_SERVE_READY", "run by TestKillInsideTheTransactionThenRestart")
	reg, err := handlers.NewRegistry(tarefas.Plugin(), notificacoes.Plugin(), probePlugin(&probeRuns{}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Source{Env: "probe", Files: probeFiles(t), Environ: append(os.Environ(), "MOENDA_HTTP__ADDR=127.0.0.1:0")}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-p.Running()
		_ = os.WriteFile(ready, nil, 0o600)
	}()
	t.Fatal(p.Run(ctx)) // runs until killed
}

// A process killed while its handler is inside the delivery's transaction
// leaves no effect; after a restart the event is handled, exactly once.
func TestKillInsideTheTransactionThenRestart(t *testing.T) {
	s := newProbeStack(t)
	dir := t.TempDir()
	serve := func(name string, extra ...string) *exec.Cmd {
		ready := filepath.Join(dir, name)
		cmd := testenv.StartProcess(t, "TestProbeServeProcess", append(append(s.environ(), extra...), "PROBE_SERVE_READY="+ready)...)
		testenv.Eventually(t, 30*time.Second, name+" consuming", func() bool { _, err := os.Stat(ready); return err == nil })
		return cmd
	}
	first := serve("first")
	inside := filepath.Join(dir, "inside")
	id := uuid.NewString()
	publishRaw(t, testenv.Channel(t, s.vhost.URL), "probe.work.hit", id, envelope(t, id, "probe.work.hit.v1", probeOrder{Hold: inside}), nil)
	testenv.Eventually(t, 10*time.Second, "the handler inside its transaction", func() bool { _, err := os.Stat(inside); return err == nil })
	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = first.Wait()
	if n := s.effects(t, id); n != 0 {
		t.Fatalf("%d effects survived the kill", n)
	}
	serve("second", "PROBE_NO_HOLD=1")
	testenv.Eventually(t, 20*time.Second, "the effect after the restart", func() bool { return s.effects(t, id) == 1 })
	time.Sleep(time.Second) // a second effect would show by now
	var claims int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM moenda_inbox WHERE consumer = 'probe.work' AND event_id = $1`, id).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if n := s.effects(t, id); n != 1 || claims != 1 {
		t.Fatalf("%d effects, %d inbox claims after the restart", n, claims)
	}
}
