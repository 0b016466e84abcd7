package app

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

func TestEventsEndpointRejectsBadInput(t *testing.T) {
	p := start(t, "memory", "MOENDA_HTTP__MAX_BODY_BYTES=2048")
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
		{"wrong type", `{"event_name":7,"payload":{}}`, http.StatusBadRequest, "field event_name must be string"},
		{"date without time", `{"event_name":"tarefa.concluida.v1","occurred_at":"2026-01-15","payload":{"a":1}}`, http.StatusBadRequest, "not an RFC 3339 string"},
		{"time as a number", `{"event_name":"tarefa.concluida.v1","occurred_at":5,"payload":{"a":1}}`, http.StatusBadRequest, "not an RFC 3339 string"},
		{"no exchange carries it", `{"event_name":"pedido.criado.v1","payload":{"a":1}}`, http.StatusBadRequest, `no exchange carries events with routing key "pedido.criado"`},
		{"over the size limit", `{"event_name":"tarefa.concluida.v1","payload":{"x":"` + strings.Repeat("a", 4096) + `"}}`, http.StatusRequestEntityTooLarge, "larger than the limit of 2048 bytes"},
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
		{"POST", "/tarefas", `{"usuario_id": 1}`, http.StatusBadRequest, "titulo is required"},
		{"POST", "/tarefas", `{"usuario_id": 0, "titulo": "x"}`, http.StatusBadRequest, "usuario_id must be a positive integer"},
		{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "x", "titlo": "y"}`, http.StatusBadRequest, `unknown field "titlo"`},
		{"POST", "/tarefas", `{"usuario_id": "1", "titulo": "x"}`, http.StatusBadRequest, "field usuario_id must be int64"},
		{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "x", "tarefa_pai_id": 99}`, http.StatusBadRequest, "tarefa_pai_id 99 is not a task of usuario 1"},
		{"PATCH", "/tarefas/abc/concluir", `{"usuario_id": 1}`, http.StatusBadRequest, "id in the path"},
		{"PATCH", "/tarefas/1/concluir", `{}`, http.StatusBadRequest, "usuario_id must be a positive integer"},
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
	if len(events) != 1 {
		t.Fatalf("catalog events = %v", events)
	}
	e := events[0].(map[string]any)
	subs := e["subscribers"].([]any)
	if e["event_name"] != "tarefa.concluida.v1" || e["routing_key"] != "tarefa.concluida" || e["exchange"] != "eventos.dominio" || len(subs) != 1 {
		t.Fatalf("catalog entry = %v", e)
	}
	if s := subs[0].(map[string]any); s["queue"] != "notificacoes.tarefas-concluidas" || s["plugin"] != "notificacoes" || s["handler"] != "tarefas-concluidas" || s["dead_letter_queue"] != "notificacoes.tarefas-concluidas.dlq" {
		t.Fatalf("catalog subscriber = %v", s)
	}
}

// An event whose payload the handler cannot use reaches the queue's DLQ
// over RabbitMQ, with the reason, and is not retried.
func TestBadPayloadReachesDeadLetterQueueWithReason(t *testing.T) {
	p, vhost := startAMQP(t)
	code, body := call(t, "POST", p.base+"/v1/events", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1}}`)
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
		reason, _ := d.Headers["reason_poisoned"].(string)
		if d.MessageId != body["event_id"] || !strings.Contains(reason, "lacks usuario_id or titulo") {
			t.Fatalf("DLQ message %s with reason %q, want event %v", d.MessageId, reason, body["event_id"])
		}
	case <-ctx.Done():
		t.Fatal("nothing reached notificacoes.tarefas-concluidas.dlq")
	}
	if strings.Count(p.logs.String(), "handler failed") != 1 {
		t.Errorf("a permanent error was retried:\n%s", p.logs.String())
	}
}
