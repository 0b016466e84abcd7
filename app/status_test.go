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
