package failures_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

func TestNormalise(t *testing.T) {
	tests := []struct{ in, want string }{
		{`insert tarefa 42: duplicate key "tarefas_pkey"`, `insert tarefa <n>: duplicate key "…"`},
		{"dial tcp 10.1.2.3:5432: connect: connection refused", "dial tcp <addr>: connect: connection refused"},
		{"dial tcp [::1]:5432: refused", "dial tcp <addr>: refused"},
		{"lookup db.internal:5432 failed", "lookup <addr> failed"},
		{"GET https://api.example.com/v1/x?id=9 answered 503", "GET <url> answered <n>"},
		{"no user ana.souza+1@example.com.br", "no user <email>"},
		{"processo 550e8400-e29b-41d4-a716-446655440000 missing", "processo <uuid> missing"},
		{"object 5f3c9a1b2e not found; 0xdeadbeef1", "object <n> not found; <n>"},
		{"took 1.5s, then 200ms", "took <n>s, then <n>ms"},
		{"version v2 unknown", "version v<n> unknown"},
		{"  spaces\tfold\n here ", "spaces fold here"},
		{"a face is not a hex id", "a face is not a hex id"},
		{"but deadbeefcafe is", "but <n> is"},
	}
	for _, tt := range tests {
		if got := failures.Normalise(tt.in); got != tt.want {
			t.Errorf("Normalise(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if failures.Fingerprint("h", "permanent", "x 1") != failures.Fingerprint("h", "permanent", "x 22") {
		t.Error("texts that differ by a number have different fingerprints")
	}
	for _, other := range [][3]string{{"h2", "permanent", "x 1"}, {"h", "retries_exhausted", "x 1"}, {"h", "permanent", "y 1"}} {
		if failures.Fingerprint("h", "permanent", "x 1") == failures.Fingerprint(other[0], other[1], other[2]) {
			t.Errorf("%v shares the fingerprint of h/permanent/x: handler, reason and text each part groups", other)
		}
	}
}

// moenda's dead letter tells its story in its headers.
func TestFromMessageReadsMoendasHeaders(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	msg := message.NewMessage("ev-1", []byte(`{"x":1}`))
	for k, v := range map[string]string{
		event.HeaderEventID: "ev-1", event.HeaderQueue: "estoque.pedidos", event.HeaderHandler: "estoque.pedidos",
		event.HeaderReason: event.ReasonRetriesExhausted, event.HeaderError: "reserve 12: timeout", event.HeaderAttempts: "4",
		event.HeaderFirstFailureAt: "2026-12-01T10:00:00Z", event.HeaderLastFailureAt: "2026-12-01T10:05:00.5Z",
		event.HeaderOriginalExchange: "pedidos", event.HeaderOriginalRoutingKey: "pedido.criado",
		event.HeaderCorrelationID: "corr-9", event.MetaName: "pedido.criado.v2",
		event.MetaDeliveryExchange: "pedidos.dlx", event.MetaDeliveryRoutingKey: "estoque.pedidos",
	} {
		msg.Metadata.Set(k, v)
	}
	f := failures.FromMessage("estoque.pedidos.dlq", msg, now)
	want := failures.Failure{
		Queue: "estoque.pedidos.dlq", EventID: "ev-1", FailedQueue: "estoque.pedidos", Handler: "estoque.pedidos",
		EventName: "pedido.criado.v2", CorrelationID: "corr-9", Reason: "retries_exhausted", Error: "reserve 12: timeout",
		Fingerprint: failures.Fingerprint("estoque.pedidos", "retries_exhausted", "reserve 12: timeout"),
		Attempts:    4, Occurrences: 1, Status: failures.Unresolved,
		FirstFailureAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), LastFailureAt: time.Date(2026, 12, 1, 10, 5, 0, 5e8, time.UTC),
		OriginalExchange: "pedidos", OriginalRoutingKey: "pedido.criado",
	}
	if f.Headers[event.HeaderError] != "reserve 12: timeout" || f.Headers[event.MetaDeliveryExchange] != "" || string(f.Body) != `{"x":1}` {
		t.Errorf("headers %v, body %q: every header but the delivery's, and the body as it was", f.Headers, f.Body)
	}
	f.Headers, f.Body = nil, nil
	if !reflect.DeepEqual(f, want) {
		t.Errorf("FromMessage =\n%+v\nwant\n%+v", f, want)
	}
}

// A message the broker dead-lettered itself, or a foreign one with no id
// and bytes PostgreSQL's text cannot hold, is recorded all the same.
func TestFromMessageReadsWhatTheBrokerSays(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	msg := message.NewMessage("", []byte("not json \x00"))
	msg.Metadata.Set("x-first-death-reason", "delivery_limit")
	msg.Metadata.Set("x-first-death-queue", "rental.events")
	msg.Metadata.Set("x-first-death-exchange", "rental")
	msg.Metadata.Set("x-delivery-count", "20")
	msg.Metadata.Set("foreign", "nul \x00 and \xff bad utf-8")
	msg.Metadata.Set(event.MetaDeliveryRoutingKey, "rental.created")
	f := failures.FromMessage("rental.dlq", msg, now)
	if f.Reason != "delivery_limit" || f.FailedQueue != "rental.events" || f.Attempts != 20 ||
		f.OriginalExchange != "rental" || f.OriginalRoutingKey != "rental.created" ||
		f.Error != "dead-lettered by the broker: delivery_limit at queue rental.events" || !f.LastFailureAt.Equal(now) {
		t.Errorf("FromMessage = %+v", f)
	}
	if len(f.EventID) != len("sha256:")+64 {
		t.Errorf("event id %q: a message with none is named by its content", f.EventID)
	}
	if f.Headers["foreign"] != "nul \uFFFD and \uFFFD bad utf-8" {
		t.Errorf("header %q: NUL and bytes that are not UTF-8 are replaced", f.Headers["foreign"])
	}
	l := failures.NewPostgres(testenv.Postgres(t).Pool)
	if n, err := l.Record(context.Background(), []failures.Failure{f}); err != nil || n != 1 {
		t.Fatalf("Record = %d, %v", n, err)
	}
}
