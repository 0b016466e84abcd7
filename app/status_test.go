package app

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/router"
)

// The rates are the counters' increase over the window since the
// previous read, and the first window starts with the process.
func TestRatesAreOverTheWindowSinceTheLastRead(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := rateSample{at: start}
	got := r.since(start.Add(2*time.Second), map[string]router.Counts{"q": {Handled: 10, Failed: 2}})
	if h := got["q"]; h == nil || *h != (Handling{Handled: 10, Failed: 2, HandledPerSecond: 5, FailedPerSecond: 1, WindowSeconds: 2}) {
		t.Fatalf("first read = %+v, want 10 handled and 2 failed over the 2 s since the start", h)
	}
	got = r.since(start.Add(6*time.Second), map[string]router.Counts{"q": {Handled: 18, Failed: 2}, "new": {Handled: 4}})
	if h := got["q"]; h == nil || *h != (Handling{Handled: 18, Failed: 2, HandledPerSecond: 2, WindowSeconds: 4}) {
		t.Fatalf("second read = %+v, want 8 more handled and none failed over 4 s", h)
	}
	if h := got["new"]; h == nil || h.HandledPerSecond != 1 {
		t.Fatalf("a queue first counted in the window = %+v, want its 4 over 4 s", h)
	}
}

// statusOf reads GET /v1/admin/status with token (none when "").
func statusOf(t *testing.T, p running, token string) (int, Status, string) {
	t.Helper()
	resp, raw := send(t, "GET", p.base+"/v1/admin/status", "", bearer(token))
	var s Status
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("GET /v1/admin/status: %v: %s", err, raw)
		}
	}
	return resp.StatusCode, s, string(raw)
}

// queueOf is the status of queue, or fails the test.
func queueOf(t *testing.T, s Status, queue string) QueueStatus {
	t.Helper()
	for _, q := range s.Queues {
		if q.Name == queue {
			return q
		}
	}
	t.Fatalf("the status lists no queue %s: %+v", queue, s.Queues)
	return QueueStatus{}
}

// In memory there is no database and no broker to count: the status
// answers all the same, with the handlers' counts and no relay.
func TestStatusInMemory(t *testing.T) {
	p := start(t, "memory")
	const queue = "notificacoes.tarefas-concluidas"
	for range 3 {
		if resp, raw := send(t, "POST", p.base+"/v1/events", eventBody(uuid.NewString(), "x"), nil); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", resp.StatusCode, raw)
		}
	}
	testenv.Eventually(t, 10*time.Second, "3 events handled", func() bool {
		return p.stats.Counts()[queue].Handled == 3
	})
	time.Sleep(statusInterval) // past the status kept from any earlier read
	code, s, raw := statusOf(t, p, "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/admin/status = %d %s", code, raw)
	}
	q := queueOf(t, s, queue)
	if q.Messages != nil || q.Consumers != nil || q.DeadLetters != nil {
		t.Errorf("queue %+v: the memory broker counts nothing, want nulls", q)
	}
	if q.Handling == nil || q.Handling.Handled != 3 || q.Handling.Failed != 0 || q.Handling.HandledPerSecond <= 0 || q.Handling.WindowSeconds <= 0 {
		t.Errorf("handling of %s = %+v, want 3 handled at a rate over a window", queue, q.Handling)
	}
	if s.Config.Env != "memory" || s.Config.Role != ServeAll || s.Config.Broker != "memory" || len(s.Config.Plugins) == 0 {
		t.Errorf("config = %+v", s.Config)
	}
	if len(s.Relays) != 0 || s.Readiness.Status != "ready" || len(s.Problems) != 0 || s.At.IsZero() {
		t.Errorf("status = %s, want no relay, ready, no problem", raw)
	}
	for _, key := range []string{`"relays":[]`, `"redrives":[]`, `"unresolved_failures":{}`, `"messages":null`} {
		if !strings.Contains(raw, key) {
			t.Errorf("the answer lacks %s: %s", key, raw)
		}
	}
	// The method the handler calls answers the same, from the kept read.
	direct, err := p.Status(context.Background())
	if err != nil || !direct.At.Equal(s.At) {
		t.Errorf("Status = %v at %v, want the read the handler answered, at %v", err, direct.At, s.At)
	}
}

// The status counts what is real: events wait in their queue while no
// worker runs, with no consumer; once one runs they are handled, and the
// one it cannot handle is an unresolved failure of that queue. The relay
// group shows its leader, caught up. A viewer reads it; no token and a
// publisher's token do not. Processes of three roles share the database
// and the vhost, as in compose.
func TestStatusCountsWhatWaitsAndWhatFailed(t *testing.T) {
	const publisher, viewer, admin, queue = "pub-2f81c0", "view-c3d9e4", "adm-7d0e15", "notificacoes.tarefas-concluidas"
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	startAs := func(role ServeRole) running {
		cfg, err := Load(Source{Env: "test", Files: configs.FS, Environ: []string{"MOENDA_HTTP__ADDR=127.0.0.1:0",
			"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL, "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms",
			"MOENDA_AUTH__ENABLED=true", "MOENDA_AUTH__TOKENS=publisher:" + hashOf(publisher) + ",viewer:vera:" + hashOf(viewer) + ",admin:ana:" + hashOf(admin)}}, registry(t))
		if err != nil {
			t.Fatal(err)
		}
		return startResolved(t, cfg, WithRole(role))
	}
	relay, api := startAs(ServeRelay), startAs(ServeAPI)
	const waiting = 4
	for range waiting - 1 {
		if resp, raw := send(t, "POST", api.base+"/v1/events", eventBody(uuid.NewString(), "x"), bearer(publisher)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", resp.StatusCode, raw)
		}
	}
	poison(t, api, 1, publisher)

	var s Status
	testenv.Eventually(t, 30*time.Second, "the events waiting in their queue", func() bool {
		var code int
		code, s, _ = statusOf(t, relay, viewer)
		q := queueOf(t, s, queue)
		return code == http.StatusOK && q.Messages != nil && *q.Messages == waiting && len(s.Relays) == 1 && s.Relays[0].LagRows == 0
	})
	if _, a, _ := statusOf(t, api, viewer); queueOf(t, a, queue).Messages == nil || *queueOf(t, a, queue).Messages != waiting {
		t.Errorf("the api process's status counts %v messages in %s, want %d: it counts through a connection of its own", queueOf(t, a, queue).Messages, queue, waiting)
	}
	q := queueOf(t, s, queue)
	if q.Consumers == nil || *q.Consumers != 0 || q.Handling != nil || q.DeadLetterQueue != queue+".dlq" || q.DeadLetters == nil || *q.DeadLetters != 0 {
		t.Errorf("queue %+v, want no consumer, no handling in a relay process, an empty dead-letter queue", q)
	}
	g := s.Relays[0]
	if g.ConsumerGroup != relay.cfg.Outbox.ConsumerGroup || g.Reader != "poll" || !g.LeaderHere || g.Here == nil || g.Here.State != "leading" ||
		g.Leader == nil || g.Leader.PID == 0 || !strings.HasPrefix(g.Leader.Application, "moenda ") || g.LagSeconds != 0 || g.ParkedRows != 0 || g.Slot != nil {
		t.Errorf("relay group %+v (leader %+v), want this process leading by polling, caught up", g, g.Leader)
	}
	if s.Readiness.Status != "ready" || s.Readiness.Checks["postgres"] != "ok" || s.Readiness.Checks["broker"] != "ok" || len(s.Problems) != 0 {
		t.Errorf("readiness %+v, problems %v", s.Readiness, s.Problems)
	}
	if s.Config.Role != ServeRelay || !s.Config.Auth || !s.Config.FailureLedger {
		t.Errorf("config %+v", s.Config)
	}
	for _, who := range []struct {
		token string
		code  int
	}{{"", http.StatusUnauthorized}, {publisher, http.StatusForbidden}} {
		if code, _, raw := statusOf(t, relay, who.token); code != who.code {
			t.Errorf("GET /v1/admin/status with token %q = %d %s, want %d", who.token, code, raw, who.code)
		}
	}
	if _, _, raw := statusOf(t, relay, viewer); strings.Contains(raw, db.URL) || strings.Contains(raw, vhost.URL) || strings.Contains(raw, hashOf(viewer)) {
		t.Errorf("the status shows a URL or a token's hash: %s", raw)
	}

	worker := startAs(ServeWorker)
	testenv.Eventually(t, 60*time.Second, "the queue drained and its poisoned event an unresolved failure", func() bool {
		_, s, _ = statusOf(t, relay, viewer)
		q := queueOf(t, s, queue)
		return q.Messages != nil && *q.Messages == 0 && s.UnresolvedFailures[queue] == 1 && q.UnresolvedFailures == 1
	})
	if q := queueOf(t, s, queue); q.Consumers == nil || *q.Consumers < 1 {
		t.Errorf("queue %+v, want the worker's consumer", q)
	}
	w, err := worker.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h := queueOf(t, w, queue).Handling; h == nil || h.Handled != waiting-1 || h.Failed != 1 || h.HandledPerSecond <= 0 {
		t.Errorf("the worker's handling of %s = %+v, want %d handled and 1 failed, at a rate", queue, h, waiting-1)
	}
	if g := w.Relays[0]; g.Here != nil || g.LeaderHere || g.Leader == nil {
		t.Errorf("the worker's view of the relay group = %+v: the relay process leads it", g)
	}

	// With the worker gone, a re-drive of the failure is sent and waits
	// in the queue, unsettled: it is running, and the status shows it.
	worker.stop()
	if resp, raw := send(t, "POST", relay.base+"/v1/admin/redrives?queue="+queue, "", bearer(admin)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/admin/redrives = %d %s", resp.StatusCode, raw)
	}
	testenv.Eventually(t, 30*time.Second, "the re-drive running, its failure sent", func() bool {
		_, s, _ = statusOf(t, relay, viewer)
		return len(s.Redrives) == 1 && s.Redrives[0].Counters.Sent == 1
	})
	if rd := s.Redrives[0]; rd.State != "running" || rd.Actor != "ana" || rd.Counters.Planned != 1 {
		t.Errorf("re-drive %+v, want ana's, running, one planned", rd)
	}
}
