package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/testenv"
)

// A process killed while its handler is inside the delivery's transaction
// leaves no effect; after a restart the event is handled, exactly once.
func TestKillInsideTheTransactionThenRestart(t *testing.T) {
	s := newProbeStack(t)
	serve := func(extra ...string) *serveProcess {
		return startServe(t, append(append(s.environ(), extra...), "SERVE_PROBE=1")...)
	}
	first := serve()
	inside := filepath.Join(t.TempDir(), "inside")
	id := uuid.NewString()
	publishRaw(t, testenv.Channel(t, s.vhost.URL), "probe.work.hit", id, envelope(t, id, "probe.work.hit.v1", probeOrder{Hold: inside}), nil)
	testenv.Eventually(t, 10*time.Second, "the handler inside its transaction", func() bool { _, err := os.Stat(inside); return err == nil })
	if err := first.kill(); err != nil {
		t.Fatal(err)
	}
	if n := s.effects(t, id); n != 0 {
		t.Fatalf("%d effects survived the kill", n)
	}
	serve("PROBE_NO_HOLD=1")
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
