package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// TestShutdownLetsTheHandlerInFlightFinish: a handler waits 500 ms on its
// context, then writes its effect; the platform stops 100 ms into it. The
// effect is written, the delivery acknowledged, and the next start
// receives nothing again.
func TestShutdownLetsTheHandlerInFlightFinish(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	id := publish(t, p, "probe.work.hit.v1", probeOrder{WaitMillis: 500})
	testenv.Eventually(t, 15*time.Second, "the handler's start", func() bool { return len(s.runs.of(id)) == 1 })
	time.Sleep(time.Until(s.runs.of(id)[0].Add(100 * time.Millisecond)))
	at := time.Now()
	p.stop()
	took := time.Since(at)
	if n := s.effects(t, id); n != 1 {
		t.Fatalf("%d effects after the stop, want the one the handler in flight wrote", n)
	}
	if took < 300*time.Millisecond {
		t.Errorf("the platform stopped in %s, before the handler's 400 ms left", took)
	}
	if n := testenv.ReadyMessages(t, s.vhost.URL, "probe.work"); n != 0 {
		t.Fatalf("%d messages back in probe.work after the stop, want 0: the delivery was not acknowledged", n)
	}
	again := s.start(t)
	time.Sleep(time.Second)
	st := again.stats.Queue("probe.work")
	if runs, n := len(s.runs.of(id)), s.effects(t, id); runs != 1 || n != 1 || st.Duplicates.Load() != 0 || st.Redelivered.Load() != 0 {
		t.Fatalf("after the restart: %d runs, %d effects, %d duplicates, %d redeliveries; want 1, 1, 0, 0", runs, n, st.Duplicates.Load(), st.Redelivered.Load())
	}
}

// TestShutdownCancelsAHandlerAtTheEndOfItsGrace: a handler that would
// wait a minute on its context has it cancelled at nine tenths of
// router.close_timeout (5 s here); its message goes back to its queue, the
// platform exits within the close timeout, and the next start applies the
// event once.
func TestShutdownCancelsAHandlerAtTheEndOfItsGrace(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	id := publish(t, p, "probe.work.hit.v1", probeOrder{WaitMillis: 60_000})
	testenv.Eventually(t, 15*time.Second, "the handler's start", func() bool { return len(s.runs.of(id)) == 1 })
	at := time.Now()
	p.stop()
	took := time.Since(at)
	if took < 4*time.Second || took > 5500*time.Millisecond {
		t.Errorf("the platform stopped in %s; want the grace of 4.5 s and at most the close timeout of 5 s", took)
	}
	if n := s.effects(t, id); n != 0 {
		t.Fatalf("%d effects after the stop, want 0: the handler was cancelled", n)
	}
	if n := testenv.ReadyMessages(t, s.vhost.URL, "probe.work"); n != 1 {
		t.Fatalf("%d messages back in probe.work after the stop, want the cancelled one", n)
	}
	again := s.start(t)
	testenv.Eventually(t, 15*time.Second, "the event's effect after the restart", func() bool { return s.effects(t, id) == 1 })
	if runs := len(s.runs.of(id)); runs != 2 {
		t.Fatalf("%d runs, want 2: the cancelled one and the one after the restart", runs)
	}
	if n := again.stats.Queue("probe.work").Redelivered.Load(); n != 1 {
		t.Fatalf("%d redeliveries counted after the restart, want 1", n)
	}
}

// TestAWebhookInFlightAtShutdownIsCalledOnce: a tarefa's webhook is in
// flight (the receiver answers after 2 s) when the platform stops. The
// call finishes, and the platform started again on the same database and
// vhost does not call it a second time.
func TestAWebhookInFlightAtShutdownIsCalledOnce(t *testing.T) {
	var calls atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.ReadAll(r.Body)
		time.Sleep(2 * time.Second)
	}))
	defer hook.Close()
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL,
		"MOENDA_HANDLERS__NOTIFICACOES__NOTIFIER=webhook", "MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URL=" + hook.URL}
	p := start(t, "test", environ...)
	code, task := call(t, "POST", p.base+"/tarefas", `{"usuario_id": 7, "titulo": "Lenta"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /tarefas = %d %v", code, task)
	}
	if code, body := call(t, "PATCH", fmt.Sprintf("%s/tarefas/%d/concluir", p.base, int(task["id"].(float64))), `{"usuario_id": 7}`); code != http.StatusOK {
		t.Fatalf("PATCH = %d %v", code, body)
	}
	testenv.Eventually(t, 20*time.Second, "the webhook call", func() bool { return calls.Load() == 1 })
	time.Sleep(100 * time.Millisecond)
	p.stop()
	start(t, "test", environ...)
	time.Sleep(3 * time.Second)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the webhook was called %d times, want once", n)
	}
}

// TestShutdownDuringARetryBackoffRequeues: a handler fails, and its
// message waits in the immediate retries' backoff (3 s, then 6 s) when
// the platform stops. The retry at 3 s runs within the grace period and
// fails again; the grace ends (4.5 s) in the next backoff, and the message
// goes back to its queue, not lost: the next start applies it once.
func TestShutdownDuringARetryBackoffRequeues(t *testing.T) {
	s := newProbeStack(t)
	s.extra = []string{"MOENDA_TOPOLOGY__FAILURE__IMMEDIATE_INTERVAL=3s"}
	p := s.start(t)
	id := publish(t, p, "probe.work.hit.v1", probeOrder{Fail: 2})
	testenv.Eventually(t, 15*time.Second, "the first failed run", func() bool { return len(s.runs.of(id)) == 1 })
	time.Sleep(100 * time.Millisecond)
	p.stop()
	if runs := len(s.runs.of(id)); runs != 2 {
		t.Fatalf("%d runs before the stop ended, want 2: the retry due within the grace period runs", runs)
	}
	if n := testenv.ReadyMessages(t, s.vhost.URL, "probe.work"); n != 1 {
		t.Fatalf("%d messages back in probe.work after the stop, want the one cut off in its backoff", n)
	}
	s.start(t)
	testenv.Eventually(t, 15*time.Second, "the event's effect after the restart", func() bool { return s.effects(t, id) == 1 })
}
