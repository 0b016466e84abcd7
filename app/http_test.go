package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

func TestEventsEndpointRejectsBadInput(t *testing.T) {
	p := start(t, "memory", "MOENDA_HTTP__MAX_BODY_BYTES=65536")
	tests := []struct {
		name string
		body string
		code int
		want string
	}{
		{"not JSON", `{"event_name":`, http.StatusBadRequest, "not valid JSON"},
		{"not JSON at all", `event`, http.StatusBadRequest, "not valid JSON"},
		{"empty body", ``, http.StatusBadRequest, "body is empty"},
		{"no event_name", `{"payload":{"a":1}}`, http.StatusBadRequest, "event_name is missing"},
		{"unversioned name", `{"event_name":"tarefa.concluida","payload":{"a":1}}`, http.StatusBadRequest, "ending in a version"},
		{"event_id not a UUID", `{"event_id":"7","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, http.StatusBadRequest, `event_id "7" is not a UUID`},
		{"no payload", `{"event_name":"tarefa.concluida.v1"}`, http.StatusBadRequest, "payload is missing"},
		{"wrong type", `{"event_name":7,"payload":{}}`, http.StatusBadRequest, "field event_name must be a string, got a number"},
		{"an array body", `[{"event_name":"tarefa.concluida.v1"}]`, http.StatusBadRequest, "body must be a JSON object, got an array"},
		{"invalid UTF-8 in the payload", "{\"event_name\":\"tarefa.concluida.v1\",\"payload\":{\"titulo\":\"a\xffb\"}}", http.StatusBadRequest, "field payload.titulo is not valid UTF-8"},
		{"NUL in the payload", `{"event_name":"tarefa.concluida.v1","payload":{"items":[{"n":"a"},{"n":"\u0000"}]}}`, http.StatusBadRequest, "field payload.items[1].n contains a NUL character"},
		{"NUL in a field name", `{"event_name":"tarefa.concluida.v1","payload":{"a\u0000":1}}`, http.StatusBadRequest, "a field name in payload contains a NUL character"},
		{"nested 10,000 deep", `{"event_name":"tarefa.concluida.v1","payload":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, http.StatusBadRequest, "more than 100 deep"},
		{"event_id of 37 characters", `{"event_id":"550e8400-e29b-41d4-a716-4466554400000","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, http.StatusBadRequest, "event_id \"550e8400-e29b-41d4-a716-4466554400000\" is not a UUID"},
		{"event_id as a URN", `{"event_id":"urn:uuid:550e8400-e29b-41d4-a716-446655440000","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, http.StatusBadRequest, "event_id \"urn:uuid:"},
		{"event_name over 255 bytes", `{"event_name":"tarefa.` + strings.Repeat("a", 250) + `.v1","payload":{"a":1}}`, http.StatusBadRequest, "event_name is longer than 255 bytes"},
		{"correlation_id that is not an id", `{"event_name":"tarefa.concluida.v1","correlation_id":"<script>","payload":{"a":1}}`, http.StatusBadRequest, "correlation_id is not a valid id"},
		{"causation_id over 128 bytes", `{"event_name":"tarefa.concluida.v1","causation_id":"` + strings.Repeat("c", 129) + `","payload":{"a":1}}`, http.StatusBadRequest, "causation_id is not a valid id"},
		{"date without time", `{"event_name":"tarefa.concluida.v1","occurred_at":"2026-01-15","payload":{"a":1}}`, http.StatusBadRequest, "not an RFC 3339 string"},
		{"time as a number", `{"event_name":"tarefa.concluida.v1","occurred_at":5,"payload":{"a":1}}`, http.StatusBadRequest, "not an RFC 3339 string"},
		{"no exchange carries it", `{"event_name":"fatura.emitida.v1","payload":{"a":1}}`, http.StatusBadRequest, `no exchange carries events with routing key "fatura.emitida"`},
		{"over the size limit", `{"event_name":"tarefa.concluida.v1","payload":{"x":"` + strings.Repeat("a", 70000) + `"}}`, http.StatusRequestEntityTooLarge, "larger than the limit of 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, "POST", p.base+"/v1/events", tt.body)
			if code != tt.code {
				t.Fatalf("status %d, want %d (%v)", code, tt.code, body)
			}
			if msg, _ := body["error"].(string); !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q does not say %q", msg, tt.want)
			}
		})
	}
}

func TestTarefasRejectsBadInput(t *testing.T) {
	p := start(t, "memory")
	tests := []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/tarefas", `{"usuario_id": 1}`, http.StatusBadRequest, "requisição inválida: titulo é obrigatório"},
		{"POST", "/tarefas", `{"usuario_id": 0, "titulo": "x"}`, http.StatusBadRequest, "requisição inválida: usuario_id deve ser um inteiro positivo"},
		{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "x", "titlo": "y"}`, http.StatusBadRequest, `unknown field "titlo"`},
		{"POST", "/tarefas", `{"usuario_id": "1", "titulo": "x"}`, http.StatusBadRequest, "field usuario_id must be a number, got a string"},
		{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "a\u0000b"}`, http.StatusBadRequest, "field titulo contains a NUL character"},
		{"POST", "/tarefas", "{\"usuario_id\": 1, \"titulo\": \"\xc3\x28\"}", http.StatusBadRequest, "field titulo is not valid UTF-8"},
		{"POST", "/tarefas", `[{"usuario_id": 1, "titulo": "x"}]`, http.StatusBadRequest, "body must be a JSON object, got an array"},
		{"PATCH", "/tarefas/1/concluir", `{"usuario_id": 1.5}`, http.StatusBadRequest, "field usuario_id must be a whole number"},
		{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "x", "tarefa_pai_id": 99}`, http.StatusBadRequest, "requisição inválida: tarefa_pai_id 99 não é uma tarefa do usuario_id 1"},
		{"PATCH", "/tarefas/abc/concluir", `{"usuario_id": 1}`, http.StatusBadRequest, "requisição inválida: id no caminho deve ser um inteiro positivo"},
		{"PATCH", "/tarefas/1/concluir", `{}`, http.StatusBadRequest, "requisição inválida: usuario_id deve ser um inteiro positivo"},
	}
	for _, tt := range tests {
		code, body := call(t, tt.method, p.base+tt.path, tt.body)
		if msg, _ := body["error"].(string); code != tt.code || !strings.Contains(msg, tt.want) {
			t.Errorf("%s %s %s = %d %q, want %d %q", tt.method, tt.path, tt.body, code, msg, tt.code, tt.want)
		}
	}
}

func TestHealthReadinessAndCatalog(t *testing.T) {
	p := start(t, "memory")
	if code, body := call(t, "GET", p.base+"/healthz", ""); code != http.StatusOK || body["status"] != "ok" {
		t.Errorf("healthz = %d %v", code, body)
	}
	if code, body := call(t, "GET", p.base+"/readyz", ""); code != http.StatusOK || body["status"] != "ready" {
		t.Errorf("readyz = %d %v", code, body)
	}
	if code, stdout, stderr := run(t, []string{"MOENDA_HTTP__ADDR=" + p.Addr()}, "--env", "memory", "health"); code != 0 || !strings.Contains(stdout, `"ready"`) {
		t.Errorf("moenda health = %d %s%s", code, stdout, stderr)
	}
	if code, _, stderr := run(t, []string{"MOENDA_HTTP__ADDR=127.0.0.1:1"}, "--env", "memory", "health"); code != 1 || !strings.Contains(stderr, "moenda: health: http://127.0.0.1:1/readyz") {
		t.Errorf("moenda health with nothing listening = %d %s", code, stderr)
	}
	code, body := call(t, "GET", p.base+"/v1/catalog", "")
	if code != http.StatusOK {
		t.Fatalf("catalog = %d", code)
	}
	events := body["events"].([]any)
	var names []string
	for _, e := range events {
		names = append(names, e.(map[string]any)["event_name"].(string))
	}
	want := []string{"canal.web.mensagem.v1", "documento.anexado.v1", "pedido.cancelado.v1", "pedido.criado.v1", "pedido.criado.v2", "pedido.pago.v1",
		"processo.regular.v1", "processo.submetido.v1", "tarefa.concluida.v1"}
	if !slices.Equal(names, want) {
		t.Fatalf("catalog events = %v, want %v", names, want)
	}
	e := events[len(events)-1].(map[string]any)
	subs := e["subscribers"].([]any)
	if e["event_name"] != "tarefa.concluida.v1" || e["routing_key"] != "tarefa.concluida" || e["exchange"] != "eventos.dominio" || len(subs) != 2 {
		t.Fatalf("catalog entry = %v", e)
	}
	if s := subs[0].(map[string]any); s["queue"] != "notificacoes.tarefas-concluidas" || s["plugin"] != "notificacoes" || s["handler"] != "tarefas-concluidas" || s["dead_letter_queue"] != "notificacoes.tarefas-concluidas.dlq" {
		t.Fatalf("catalog subscriber = %v", s)
	}
	if s := subs[1].(map[string]any); s["queue"] != "analytics.metricas" || s["plugin"] != "analytics" || s["events"].([]any)[0] != "#" {
		t.Fatalf("catalog subscriber = %v", s)
	}
}

// An event whose payload the handler cannot use reaches the queue's DLQ
// over RabbitMQ, with the reason, and is not retried.
func TestBadPayloadReachesDeadLetterQueueWithReason(t *testing.T) {
	p, vhost := startAMQP(t)
	code, body := call(t, "POST", p.base+"/v1/events", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":1,"titulo":""}}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %v", code, body)
	}
	deliveries, err := testenv.Channel(t, vhost.URL).Consume("notificacoes.tarefas-concluidas.dlq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case d := <-deliveries:
		reason, _ := d.Headers[event.HeaderReason].(string)
		text, _ := d.Headers[event.HeaderError].(string)
		if d.MessageId != body["event_id"] || reason != event.ReasonPermanent || !strings.Contains(text, "lacks usuario_id or titulo") || d.Headers[event.HeaderAttempts] != "1" {
			t.Fatalf("DLQ message %s with headers %v, want event %v", d.MessageId, d.Headers, body["event_id"])
		}
	case <-ctx.Done():
		t.Fatal("nothing reached notificacoes.tarefas-concluidas.dlq")
	}
	if st := p.stats.Queue("notificacoes.tarefas-concluidas"); st.Failed.Load() != 1 || st.RetriedImmediately.Load() != 0 || st.RetriedLater.Load() != 0 {
		t.Errorf("a permanent error was retried: %d runs failed, %d retried at once, %d later", st.Failed.Load(), st.RetriedImmediately.Load(), st.RetriedLater.Load())
	}
}

// send makes a request with the given headers and returns the answer and
// its raw body.
func send(t *testing.T, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// Text PostgreSQL cannot store, and ids the outbox and the broker cannot
// carry, are refused with 400 before they reach either.
func TestBadTextAndIdsNeverReachPostgres(t *testing.T) {
	p, _ := startAMQP(t)
	tests := []struct {
		path, body string
		want       string
	}{
		{"/tarefas", `{"usuario_id": 1, "titulo": "\u0000"}`, "field titulo contains a NUL character"},
		{"/v1/events", "{\"event_name\":\"tarefa.concluida.v1\",\"payload\":{\"titulo\":\"\xff\"}}", "field payload.titulo is not valid UTF-8"},
		{"/v1/events", `{"event_name":"tarefa.concluida.v1","payload":{"titulo":"\ud800"}}`, "field payload.titulo is not valid UTF-8"},
		{"/v1/events", `{"event_id":"550e8400-e29b-41d4-a716-4466554400000","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, "event_id"},
		{"/v1/events", `{"event_id":"urn:uuid:550e8400-e29b-41d4-a716-446655440000","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, "event_id"},
		{"/v1/events", `{"event_id":"` + strings.Repeat("7", 300) + `","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, "event_id"},
		{"/v1/events", `{"event_name":"tarefa.concluida.v1","correlation_id":"` + strings.Repeat("c", 300) + `","payload":{"a":1}}`, "correlation_id"},
	}
	for _, tt := range tests {
		code, body := call(t, "POST", p.base+tt.path, tt.body)
		if msg, _ := body["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, tt.want) {
			t.Errorf("POST %s %.80q = %d %q, want 400 naming %s", tt.path, tt.body, code, msg, tt.want)
		}
	}
	if strings.Contains(p.logs.String(), "request failed") {
		t.Errorf("bad input reached the database:\n%s", p.logs.String())
	}
}

func TestCorrelationIDIsKeptOnlyWhenPlain(t *testing.T) {
	p := start(t, "memory")
	long := strings.Repeat("a", 300)
	tests := []struct {
		name   string
		header string // "" sends none
		kept   bool
	}{
		{"absent", "", false},
		{"plain", "req-7f3a", true},
		{"every allowed character", "AZaz09._:-", true},
		{"128 characters", strings.Repeat("a", 128), true},
		{"129 characters", strings.Repeat("a", 129), false},
		{"markup", "<script>alert(1)</script>", false},
		{"a blank", "req 1", false},
		{"a tab", "req\t1", false},
		{"not ASCII", "requisição", false},
		{"long", long, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := map[string]string{}
			if tt.header != "" {
				header[CorrelationHeader] = tt.header
			}
			resp, raw := send(t, "POST", p.base+"/v1/events", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":1,"titulo":"x"}}`, header)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST /v1/events = %d %s", resp.StatusCode, raw)
			}
			got := resp.Header.Get(CorrelationHeader)
			if tt.kept && got != tt.header {
				t.Fatalf("correlation id %q answered as %q", tt.header, got)
			}
			if !tt.kept {
				if _, err := uuid.Parse(got); err != nil || got == tt.header {
					t.Fatalf("correlation id %q answered as %q, want a new UUID", tt.header, got)
				}
			}
			if !bytes.Contains(raw, []byte(`"correlation_id":"`+got+`"`)) {
				t.Fatalf("the event carries another correlation id than the answer's %q: %s", got, raw)
			}
			replaced := "rejected=" + strconv.Quote(strconv.Quote(cutBytes(tt.header, 128))) + " correlation_id=" + got
			if logged := strings.Contains(p.logs.String(), replaced); logged != (!tt.kept && tt.header != "") {
				t.Fatalf("log has %q: %v\n%s", replaced, logged, p.logs.String())
			}
		})
	}
	if strings.Contains(p.logs.String(), "<script>") && !strings.Contains(p.logs.String(), `\"<script>`) {
		t.Errorf("a rejected id was logged unquoted:\n%s", p.logs.String())
	}
	if strings.Contains(p.logs.String(), strings.Repeat("a", 129)) {
		t.Errorf("a rejected id was logged beyond 128 bytes")
	}
}

// everyEnvironment runs f on the platform in memory and over PostgreSQL
// and RabbitMQ; outboxRows counts the outbox rows of an event, or is nil in
// memory, which has no outbox table.
func everyEnvironment(t *testing.T, f func(t *testing.T, p running, outboxRows func(id string) int)) {
	t.Run("memory", func(t *testing.T) { f(t, start(t, "memory"), nil) })
	t.Run("amqp", func(t *testing.T) {
		p, _ := startAMQP(t)
		f(t, p, func(id string) int {
			var n int
			if err := p.pool.QueryRow(context.Background(), "SELECT count(*) FROM watermill_outbox WHERE uuid = $1", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		})
	})
}

// eventBody is a tarefa.concluida.v1 envelope with id and title.
func eventBody(id, titulo string) string {
	return fmt.Sprintf(`{"event_id":%q,"event_name":"tarefa.concluida.v1","source":"test","payload":{"tarefa_id":1,"usuario_id":1,"titulo":%q}}`, id, titulo)
}

// A client may repeat POST /v1/events after a cut connection: the same
// event_id and event answer 200 with the first answer and publish nothing
// twice; another event under that id answers 409.
func TestRepeatedEventIDAnswersTheFirstAnswer(t *testing.T) {
	everyEnvironment(t, func(t *testing.T, p running, outboxRows func(string) int) {
		id := uuid.NewString()
		first, firstBody := send(t, "POST", p.base+"/v1/events", eventBody(id, "x"), map[string]string{CorrelationHeader: "first"})
		if first.StatusCode != http.StatusAccepted {
			t.Fatalf("first POST = %d %s", first.StatusCode, firstBody)
		}
		repeats := []struct {
			name, body string
		}{
			{"the same request, with another correlation id", eventBody(id, "x")},
			{"the same event, spaced out", strings.ReplaceAll(eventBody(id, "x"), `,"payload":{"tarefa_id":1,`, `, "payload": { "tarefa_id" : 1 ,`)},
		}
		for _, r := range repeats {
			resp, body := send(t, "POST", p.base+"/v1/events", r.body, map[string]string{CorrelationHeader: "retry"})
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, firstBody) {
				t.Fatalf("%s = %d %s, want 200 %s", r.name, resp.StatusCode, body, firstBody)
			}
		}
		code, body := call(t, "POST", p.base+"/v1/events", eventBody(id, "another"))
		if msg, _ := body["error"].(string); code != http.StatusConflict || !strings.Contains(msg, "event_id "+id+" was already used for another event") {
			t.Fatalf("another event under the id = %d %q, want 409", code, msg)
		}
		if outboxRows != nil {
			if n := outboxRows(id); n != 1 {
				t.Fatalf("%d outbox rows for event %s, want 1", n, id)
			}
		}
	})
}

// Two requests with the same new event_id at once: one publishes (202),
// the other waits for it and answers its answer (200).
func TestConcurrentRepeatsOfOneEventPublishOnce(t *testing.T) {
	everyEnvironment(t, func(t *testing.T, p running, outboxRows func(string) int) {
		for range 5 {
			id := uuid.NewString()
			type answer struct {
				code int
				body []byte
			}
			answers := make([]answer, 2)
			var ready, wg sync.WaitGroup
			ready.Add(1)
			for i := range answers {
				wg.Go(func() {
					ready.Wait()
					resp, body := send(t, "POST", p.base+"/v1/events", eventBody(id, "x"), nil)
					answers[i] = answer{resp.StatusCode, body}
				})
			}
			ready.Done()
			wg.Wait()
			codes := []int{answers[0].code, answers[1].code}
			slices.Sort(codes)
			if !slices.Equal(codes, []int{http.StatusOK, http.StatusAccepted}) || !bytes.Equal(answers[0].body, answers[1].body) {
				t.Fatalf("answers %d %s and %d %s, want 202 and 200 with one body", answers[0].code, answers[0].body, answers[1].code, answers[1].body)
			}
			if outboxRows != nil {
				if n := outboxRows(id); n != 1 {
					t.Fatalf("%d outbox rows for event %s, want 1", n, id)
				}
			}
		}
	})
}

// databaseAdmin changes a test's database from a session on another one,
// as an operator would.
type databaseAdmin struct {
	conn *pgx.Conn
	name string // as pg_database holds it
}

// newDatabaseAdmin opens an admin session for the database of pool; it
// closes when the test ends.
func newDatabaseAdmin(t *testing.T, pool *pgxpool.Pool) databaseAdmin {
	t.Helper()
	ctx := context.Background()
	var name string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, testenv.SharePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return databaseAdmin{conn: conn, name: name}
}

func (a databaseAdmin) exec(change string) error {
	_, err := a.conn.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{a.name}.Sanitize()+" "+change)
	return err
}

// alter runs ALTER DATABASE with change.
func (a databaseAdmin) alter(t *testing.T, change string) {
	t.Helper()
	if err := a.exec(change); err != nil {
		t.Fatal(err)
	}
}

// undoAtEnd runs ALTER DATABASE with change when the test ends, before
// the platforms it started stop and the database is dropped.
func (a databaseAdmin) undoAtEnd(t *testing.T, change string) {
	t.Cleanup(func() {
		if err := a.exec(change); err != nil {
			t.Errorf("give the database back: %v", err)
		}
	})
}

// readOnly makes the database of pool take no writes, as a primary
// demoted by a failover does, until writable is called or the test ends.
// New sessions of pool take the setting at once.
func readOnly(t *testing.T, pool *pgxpool.Pool) (writable func()) {
	t.Helper()
	admin := newDatabaseAdmin(t, pool)
	admin.undoAtEnd(t, "RESET default_transaction_read_only")
	admin.alter(t, "SET default_transaction_read_only = on")
	pool.Reset()
	return func() {
		admin.alter(t, "RESET default_transaction_read_only")
		pool.Reset()
	}
}

// A database that is away answers 503 with Retry-After on every route
// that runs a unit of work, and the platform recovers when it is back. The
// test takes its own database away, not the shared server.
func TestUnitsOfWorkAnswer503WhileTheDatabaseIsAway(t *testing.T) {
	p, _ := startAMQP(t)
	code, task := call(t, "POST", p.base+"/tarefas", `{"usuario_id": 1, "titulo": "x"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /tarefas = %d %v", code, task)
	}
	admin := newDatabaseAdmin(t, p.pool)
	admin.undoAtEnd(t, "ALLOW_CONNECTIONS true")
	ctx := context.Background()
	// Open a few connections first: background work (metrics, pruning)
	// may hold one while the next request needs another.
	var held []*pgxpool.Conn
	for range 3 {
		c, err := p.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	admin.alter(t, "ALLOW_CONNECTIONS false")
	// The pool's open connections still serve; this one is then cut, with
	// too little idle time for the pool to ping it before handing it out.
	if code, body := call(t, "POST", p.base+"/tarefas", `{"usuario_id": 1, "titulo": "w"}`); code != http.StatusCreated {
		t.Fatalf("POST /tarefas on an open connection = %d %v", code, body)
	}
	if _, err := admin.conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
		admin.name); err != nil {
		t.Fatal(err)
	}

	requests := []struct{ method, path, body string }{
		{"POST", "/v1/events", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":1,"titulo":"x"}}`},
		{"POST", "/v1/events", eventBody(uuid.NewString(), "x")},
		{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "y"}`},
		{"PATCH", fmt.Sprintf("/tarefas/%d/concluir", int(task["id"].(float64))), `{"usuario_id": 1}`},
	}
	for round := range 3 { // the cut connection first, then refused new ones
		for _, r := range requests {
			resp, raw := send(t, r.method, p.base+r.path, r.body, nil)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
				resp.Header.Get("Content-Type") != "application/json" || !bytes.Contains(raw, []byte(`"error":`)) {
				t.Errorf("round %d: %s %s = %d Retry-After %q %s, want 503 with Retry-After 1 and a JSON error",
					round, r.method, r.path, resp.StatusCode, resp.Header.Get("Retry-After"), raw)
			}
		}
	}

	admin.alter(t, "ALLOW_CONNECTIONS true")
	testenv.Eventually(t, 10*time.Second, "POST /tarefas to succeed again", func() bool {
		code, _ := call(t, "POST", p.base+"/tarefas", `{"usuario_id": 1, "titulo": "z"}`)
		return code == http.StatusCreated
	})
}

// A client that dribbles its headers, or its body, loses the connection
// to http.read_header_timeout and http.read_timeout, whatever it still
// sends: it cannot hold a connection, a goroutine and a file for ever
// (slowloris, slowhttptest -H and -B).
func TestSlowClientsAreClosedByTheServerTimeouts(t *testing.T) {
	p := start(t, "memory", "MOENDA_HTTP__READ_HEADER_TIMEOUT=300ms", "MOENDA_HTTP__READ_TIMEOUT=600ms", "MOENDA_HTTP__WRITE_TIMEOUT=2s")
	for _, c := range []struct {
		name, head, dribble string
		// within bounds the time from the first byte until the server
		// closes the connection.
		within time.Duration
	}{
		{"slow headers", "POST /v1/events HTTP/1.1\r\nHost: moenda\r\nX-Slow: ", "a", time.Second},
		{"slow body", "POST /v1/events HTTP/1.1\r\nHost: moenda\r\nContent-Type: application/json\r\nContent-Length: 8192\r\n\r\n{", " ", 1500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			at := time.Now()
			if _, err := io.WriteString(conn, c.head); err != nil {
				t.Fatal(err)
			}
			// Dribble a byte every 100 ms, as slowhttptest does, until
			// the server closes the connection or 5 s pass.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := io.WriteString(conn, c.dribble); err != nil {
							return
						}
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			// The server's close reads as the end of the stream, or as a
			// reset when it closed with our bytes unread; only our own
			// deadline means it held the connection.
			answer, err := io.ReadAll(conn)
			took := time.Since(at)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the connection was still open after %s (%v); the server must close it", took.Round(time.Millisecond), err)
			}
			if took > c.within {
				t.Fatalf("closed after %s, not within %s", took.Round(time.Millisecond), c.within)
			}
			t.Logf("closed after %s (%v); answer %.60q", took.Round(time.Millisecond), err, answer)
		})
	}
}

// A database that takes no writes, as a primary demoted by a failover
// does until its address moves (25006), answers 503 with Retry-After: the
// client retries, the request is not at fault. The test makes its own
// database read-only.
func TestARouteAnswers503WhileTheDatabaseIsReadOnly(t *testing.T) {
	p, _ := startAMQP(t)
	writable := readOnly(t, p.pool)
	resp, raw := send(t, "POST", p.base+"/tarefas", `{"usuario_id": 1, "titulo": "x"}`, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !bytes.Contains(raw, []byte(`"error":`)) {
		t.Fatalf("POST /tarefas on a read-only database = %d Retry-After %q %s, want 503 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	writable()
	if code, body := call(t, "POST", p.base+"/tarefas", `{"usuario_id": 1, "titulo": "y"}`); code != http.StatusCreated {
		t.Fatalf("POST /tarefas once writable = %d %v", code, body)
	}
}
