package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// poison posts, with token (none when ""), n tarefa.concluida events that
// notificacoes refuses at once (their titulo is empty), and
// returns their ids.
func poison(t *testing.T, p running, n int, token string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for range n {
		resp, raw := send(t, "POST", p.base+"/v1/events", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":1,"titulo":""}}`, bearer(token))
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", resp.StatusCode, raw)
		}
		ids[body["event_id"].(string)] = true
	}
	return ids
}

// ledgerHolds waits until GET /v1/admin/failures, asked with token (none
// when ""), lists n failures, and returns them.
func ledgerHolds(t *testing.T, p running, n int, token string) []map[string]any {
	t.Helper()
	var got []map[string]any
	err := await.Until(context.Background(), 60*time.Second, fmt.Sprintf("%d failures in the ledger", n), func() (bool, error) {
		code, body := ask(t, "GET", p.base+"/v1/admin/failures", token)
		if code != http.StatusOK {
			return false, fmt.Errorf("GET /v1/admin/failures = %d %v", code, body)
		}
		got = nil
		for _, f := range body["failures"].([]any) {
			got = append(got, f.(map[string]any))
		}
		return len(got) >= n, nil
	})
	if err != nil {
		// Which arrived names which did not.
		held := make([]string, len(got))
		for i, f := range got {
			held[i] = fmt.Sprintf("%v from %v (%v)", f["queue"], f["failed_queue"], f["reason"])
		}
		t.Fatalf("%v; the ledger holds %d: %s", err, len(got), strings.Join(held, "; "))
	}
	if len(got) != n {
		t.Fatalf("the ledger holds %d failures, want %d", len(got), n)
	}
	return got
}

// The ledger on, a dead letter leaves its queue for the ledger, once,
// with its story; the API and the command line read it there, and the
// metrics count it.
func TestTheLedgerTakesEveryDeadLetter(t *testing.T) {
	p, _ := startAMQP(t, "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms", "MOENDA_METRICS__POLL_INTERVAL=1s")
	ids := poison(t, p, 3, "")
	const queue = "notificacoes.tarefas-concluidas"
	got := ledgerHolds(t, p, 3, "")
	for _, f := range got {
		if !ids[f["event_id"].(string)] || f["failed_queue"] != queue || f["queue"] != queue+".dlq" || f["reason"] != event.ReasonPermanent ||
			f["status"] != "unresolved" || !strings.Contains(f["error"].(string), "lacks usuario_id or titulo") || f["handler"] == "" {
			t.Errorf("failure %v", f)
		}
	}
	if d, err := p.broker.Depths(context.Background(), []string{queue + ".dlq"}); err != nil || d[queue+".dlq"] != 0 {
		t.Errorf("the dead-letter queue holds %v (%v), want 0: the ledger holds its dead letters", d, err)
	}

	code, body := call(t, "GET", p.base+"/v1/admin/failures/groups", "")
	groups, _ := body["groups"].([]any)
	if code != http.StatusOK || len(groups) != 1 || groups[0].(map[string]any)["count"] != 3.0 {
		t.Errorf("GET /v1/admin/failures/groups = %d %v, want one group of 3", code, body)
	}
	id := fmt.Sprint(got[0]["id"])
	if code, body := call(t, "GET", p.base+"/v1/admin/failures/"+id, ""); code != http.StatusOK || body["event_id"] != got[0]["event_id"] || body["body"] == "" {
		t.Errorf("GET /v1/admin/failures/%s = %d %v", id, code, body)
	}
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/v1/admin/failures/999999", http.StatusNotFound, "no failure 999999 in the ledger"},
		{"/v1/admin/failures/x", http.StatusBadRequest, "the failure id in the path must be a positive whole number"},
		{"/v1/admin/failures?queue=" + queue + "&limit=2", http.StatusOK, ""},
		{"/v1/admin/failures?limit=0&since=yesterday", http.StatusBadRequest, "since must be an RFC 3339 time like 2026-12-01T10:00:00Z, got \"yesterday\"\nlimit must be 1 to 500, got \"0\""},
		{"/v1/admin/failures?qeue=x", http.StatusBadRequest, `unknown parameter "qeue"`},
		{"/v1/admin/failures/groups?status=lost", http.StatusBadRequest, `status must be unresolved, redriving, resolved, archived or edited, got "lost"`},
	} {
		code, body := call(t, "GET", p.base+c.path, "")
		if code != c.code || !strings.HasPrefix(fmt.Sprint(body["error"]), c.want) && c.want != "" {
			t.Errorf("GET %s = %d %v, want %d %q", c.path, code, body, c.code, c.want)
		}
		if c.code == http.StatusOK && (len(body["failures"].([]any)) != 2 || body["next"] == 0.0) {
			t.Errorf("GET %s = %v: want a page of 2 and the next one's cursor", c.path, body)
		}
	}
	if _, body := call(t, "GET", p.base+"/readyz", ""); body["failure_ingest"] != "leading" {
		t.Errorf("/readyz = %v, want failure_ingest leading", body)
	}
	metric := fmt.Sprintf(`moenda_failures_unresolved{queue=%q,reason="permanent"} 3`, queue)
	testenv.Eventually(t, 30*time.Second, "the unresolved failures counted", func() bool {
		resp, raw := send(t, "GET", p.base+"/metrics", "", nil)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(raw), metric)
	})

	environ := []string{"MOENDA_POSTGRES__URL=" + p.cfg.Postgres.URL}
	code, out, stderr := run(t, environ, "--env", "test", "failures", "list", "--json", "--queue", queue)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("failures list --json = %d, %q %s", code, out, stderr)
	}
	var first struct {
		EventID string `json:"event_id"`
		Status  string `json:"status"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || !ids[first.EventID] || first.Status != "unresolved" {
		t.Errorf("a line of failures list --json: %s (%v)", lines[0], err)
	}
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "groups"); code != 0 || !strings.Contains(out, queue) || !strings.Contains(out, "permanent") {
		t.Errorf("failures groups = %d %q %s", code, out, stderr)
	}
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "show", id); code != 0 || !strings.Contains(out, "event id:") || !strings.Contains(out, `"tarefa_id": 1`) {
		t.Errorf("failures show %s = %d %q %s", id, code, out, stderr)
	}
	if code, _, stderr := run(t, environ, "--env", "test", "failures", "list", "--since", "yesterday"); code != 1 || !strings.Contains(stderr, "since must be an RFC 3339 time") {
		t.Errorf("failures list --since yesterday = %d %s", code, stderr)
	}
}

// In the memory environment the ledger is in the process, read the same
// way; the command line, another process, says where to ask.
func TestTheLedgerInMemory(t *testing.T) {
	p := start(t, "memory", "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms", "MOENDA_HANDLERS__ENABLED=tarefas,notificacoes")
	ids := poison(t, p, 2, "")
	for _, f := range ledgerHolds(t, p, 2, "") {
		if !ids[f["event_id"].(string)] || f["reason"] != event.ReasonPermanent {
			t.Errorf("failure %v", f)
		}
	}
	code, _, stderr := run(t, nil, "--env", "memory", "failures", "list")
	if code != 1 || !strings.Contains(stderr, "GET /v1/admin/failures") {
		t.Errorf("failures list in memory = %d %s", code, stderr)
	}
}

// ask makes a request with token (none when "") and returns the answer's
// status and JSON body.
func ask(t *testing.T, method, url, token string) (int, map[string]any) {
	t.Helper()
	resp, raw := send(t, method, url, "", bearer(token))
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s %s: %d %q is not a JSON object", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, body
}

// Archiving, unarchiving and deleting take a frozen selection, are an
// admin's, and each lands in the audit with its outcome, refusals too;
// the command line does the same as cli:$USER.
func TestFailureActionsAreAudited(t *testing.T) {
	const publisher, viewer, admin = "pub-61f0aa", "view-8c01d2", "adm-2b9e47"
	p, _ := startAMQP(t, "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms", "MOENDA_AUTH__ENABLED=true",
		"MOENDA_AUTH__TOKENS=publisher:"+hashOf(publisher)+",viewer:vera:"+hashOf(viewer)+",admin:ana:"+hashOf(admin))
	poison(t, p, 3, publisher)
	got := ledgerHolds(t, p, 3, viewer)
	id := fmt.Sprint(got[0]["id"])
	const queue = "notificacoes.tarefas-concluidas"
	for _, c := range []struct {
		name, token, path string
		code              int
		want              string
	}{
		{"a viewer archives", viewer, "/v1/admin/failures/archive?queue=" + queue, http.StatusForbidden, `"the token of vera lacks the admin role"`},
		{"no selection", admin, "/v1/admin/failures/archive", http.StatusBadRequest, `"name the failures to take`},
		{"archive one", admin, "/v1/admin/failures/archive?ids=" + id, http.StatusOK, `{"changed":1,"selected":1}`},
		{"archive it again", admin, "/v1/admin/failures/archive?ids=" + id, http.StatusOK, `{"changed":0,"selected":0}`},
		{"unarchive it", admin, "/v1/admin/failures/unarchive?ids=" + id, http.StatusOK, `{"changed":1,"selected":1}`},
		{"delete it", admin, "/v1/admin/failures/delete?ids=" + id, http.StatusOK, `{"changed":1,"selected":1}`},
		{"a misspelt selection", admin, "/v1/admin/failures/delete?queu=x", http.StatusBadRequest, `unknown parameter`},
	} {
		resp, raw := send(t, "POST", p.base+c.path, "", bearer(c.token))
		if resp.StatusCode != c.code || !strings.Contains(string(raw), c.want) {
			t.Errorf("%s: POST %s = %d %s, want %d %s", c.name, c.path, resp.StatusCode, raw, c.code, c.want)
		}
	}
	ledgerHolds(t, p, 2, viewer)

	environ := []string{"MOENDA_POSTGRES__URL=" + p.cfg.Postgres.URL, "USER=tester"}
	if code, out, stderr := run(t, environ, "--env", "test", "failures", "archive", "--queue", queue); code != 0 || out != "2 selected, 2 archived\n" {
		t.Errorf("failures archive = %d %q %s", code, out, stderr)
	}
	if code, _, stderr := run(t, environ, "--env", "test", "failures", "delete", "--queue", queue); code != 1 || !strings.Contains(stderr, "add --yes") {
		t.Errorf("failures delete without --yes = %d %s", code, stderr)
	}
	ledgerHolds(t, p, 0, viewer)

	code, body := ask(t, "GET", p.base+"/v1/admin/audit", viewer)
	entries, _ := body["entries"].([]any)
	var seen []string
	for _, e := range entries {
		e := e.(map[string]any)
		seen = append(seen, fmt.Sprint(e["actor"], " ", e["action"], " ", e["outcome"]))
	}
	want := []string{
		"cli:tester failures.archive done",
		"ana failures.delete done",
		"ana failures.unarchive done",
		"ana failures.archive done",
		"ana failures.archive done",
		"ana failures.archive failed",
		"vera POST /v1/admin/failures/archive refused",
	}
	if code != http.StatusOK || strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("GET /v1/admin/audit = %d:\n%s\nwant (the misspelt request is refused before it is an action):\n%s", code, strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	if code, out, stderr := run(t, environ, "--env", "test", "audit", "--actor", "cli:tester", "--json"); code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"selection":{"queue":"`+queue+`"}`) {
		t.Errorf("audit --actor cli:tester --json = %d %q %s", code, out, stderr)
	}
}

// Killed with SIGKILL while 10,000 dead letters arrive, the ingesting
// process loses none and doubles none: after a restart the ledger holds
// each once, and the dead-letter queue is empty.
func TestIngestSurvivesAKill(t *testing.T) {
	const n = 10000
	s := newProbeStack(t)
	env := append(s.environ(), "SERVE_PROBE=1", "MOENDA_FAILURES__ENABLED=true", "MOENDA_FAILURES__LINGER=20ms")
	first := startServe(t, env...)
	recorded := func() (total, distinct int) {
		if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT event_id) FROM moenda_failures`).Scan(&total, &distinct); err != nil {
			t.Fatal(err)
		}
		return total, distinct
	}
	ch := testenv.Channel(t, s.vhost.URL)
	const dlq = "probe.work.dlq"
	published := make(chan error, 1)
	go func() {
		for i := range n {
			id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
			err := ch.Publish("", dlq, false, false, amqp091.Publishing{MessageId: id, Body: []byte(`{}`), DeliveryMode: amqp091.Persistent,
				Headers: amqp091.Table{event.HeaderEventID: id, event.HeaderQueue: "probe.work", event.HeaderReason: event.ReasonRetriesExhausted,
					event.HeaderError: fmt.Sprintf("run %d: boom", i)}})
			if err != nil {
				published <- err
				return
			}
			if i%500 == 0 {
				time.Sleep(100 * time.Millisecond) // 10,000 over a few seconds: the kill comes while they arrive
			}
		}
		published <- nil
	}()
	testenv.Eventually(t, 60*time.Second, "some dead letters recorded", func() bool { total, _ := recorded(); return total >= 1000 })
	if err := first.kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	before, _ := recorded()
	t.Logf("%d of %d recorded when the ingesting process was killed", before, n)
	startServe(t, env...)
	testenv.Eventually(t, 120*time.Second, "every dead letter recorded", func() bool { total, _ := recorded(); return total >= n })
	total, distinct := recorded()
	q, err := ch.QueueDeclarePassive(dlq, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if total != n || distinct != n || q.Messages != 0 {
		t.Fatalf("after the kill (at %d recorded) and a restart: %d rows, %d events, %d left in %s; want %d, %d, 0", before, total, distinct, q.Messages, dlq, n, n)
	}
}
