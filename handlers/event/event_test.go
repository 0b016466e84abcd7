package event

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

func TestParseName(t *testing.T) {
	tests := []struct {
		name    string
		base    string
		version int
		wantErr bool
	}{
		{"tarefa.concluida.v1", "tarefa.concluida", 1, false},
		{"processo.submetido.v12", "processo.submetido", 12, false},
		{"canal.web.mensagem-recebida.v2", "canal.web.mensagem-recebida", 2, false},
		{"x.v1", "x", 1, false},
		{"tarefa.concluida", "", 0, true},
		{"tarefa.concluida.v0", "", 0, true},
		{"Tarefa.Concluida.v1", "", 0, true},
		{"tarefa.*.v1", "", 0, true},
		{"tarefa..concluida.v1", "", 0, true},
		{"", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseName(tt.name)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseName(%q) error = %v, wantErr %v", tt.name, err, tt.wantErr)
			}
			if err == nil && (n.Base != tt.base || n.Version != tt.version) {
				t.Fatalf("ParseName(%q) = %+v, want %s v%d", tt.name, n, tt.base, tt.version)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	valid := `{"event_id":"550e8400-e29b-41d4-a716-446655440000","event_name":"processo.submetido.v1",
		"occurred_at":"2026-01-15T10:30:00Z","correlation_id":"req-uuid","payload":{"processo_id":"1"},"extra":true}`
	tests := []struct {
		name    string
		body    string
		wantErr string
	}{
		{"seed 000 example with an unknown field", valid, ""},
		{"not JSON", `{`, "decode envelope"},
		{"missing event_id", `{"event_name":"a.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`, "event_id is missing"},
		{"missing event_name", `{"event_id":"550e8400-e29b-41d4-a716-446655440000","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`, "event_name is missing"},
		{"event_id not a UUID", `{"event_id":"42","event_name":"a.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`, "not a UUID"},
		{"payload null", `{"event_id":"550e8400-e29b-41d4-a716-446655440000","event_name":"a.v1","occurred_at":"2026-01-15T10:30:00Z","payload":null}`, "payload is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Decode([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if e.RoutingKey() != "processo.submetido" || e.CorrelationID != "req-uuid" {
					t.Fatalf("Decode = %+v", e)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Decode error = %v, want it to contain %q", err, tt.wantErr)
			}
			if !IsPermanent(err) {
				t.Fatalf("Decode error %v is not permanent", err)
			}
		})
	}
}

func TestCanonicalJSON(t *testing.T) {
	zone := time.FixedZone("BRT", -3*3600)
	e := Event{
		ID: "550e8400-e29b-41d4-a716-446655440000", Name: "tarefa.concluida.v1",
		OccurredAt: time.Date(2026, 1, 15, 7, 30, 0, 0, zone), Source: "tarefas",
		Payload: json.RawMessage(`{"tarefa_id":1}`),
	}
	got, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"event_id":"550e8400-e29b-41d4-a716-446655440000","event_name":"tarefa.concluida.v1","occurred_at":"2026-01-15T10:30:00Z","source":"tarefas","payload":{"tarefa_id":1}}`
	if string(got) != want {
		t.Fatalf("canonical JSON\n got %s\nwant %s", got, want)
	}
}

func TestStamp(t *testing.T) {
	e, err := New("tarefa.concluida.v1", "tarefas", map[string]int{"tarefa_id": 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := Stamp(context.Background(), e); got.CorrelationID != e.ID {
		t.Fatalf("an event with no correlation starts its own: got %q want %q", got.CorrelationID, e.ID)
	}
	ctx := WithCausation(WithCorrelation(context.Background(), "req-1"), "cause-1")
	got := Stamp(ctx, e)
	if got.CorrelationID != "req-1" || got.CausationID != "cause-1" {
		t.Fatalf("Stamp = %+v", got)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"event_id":"550e8400-e29b-41d4-a716-446655440000","event_name":"a.b.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`))
	f.Add([]byte(`{"event_name":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := Decode(body)
		if err != nil {
			if !IsPermanent(err) {
				t.Fatalf("decode error is not permanent: %v", err)
			}
			return
		}
		// A decoded envelope survives a round trip through its canonical form.
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("canonical form of a valid envelope does not decode: %v\n%s", err, again)
		}
	})
}

func TestAggregateIDTravels(t *testing.T) {
	e, err := New("tarefa.concluida.v1", "tarefas", map[string]int{"tarefa_id": 7})
	if err != nil {
		t.Fatal(err)
	}
	e.AggregateID = "7"
	msg, err := ToMessage(e)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Metadata.Get(MetaAggregateID); got != "7" {
		t.Fatalf("metadata aggregate_id = %q, want 7", got)
	}
	back, err := Decode(msg.Payload)
	if err != nil || back.AggregateID != "7" || back.ID != e.ID {
		t.Fatalf("decoded %+v, %v; want aggregate 7 and id %s", back, err, e.ID)
	}
}

// ParseName must accept exactly what the grammar's regular expression does.
func FuzzParseName(f *testing.F) {
	grammar := regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.v([1-9][0-9]*)$`)
	for _, s := range []string{"tarefa.concluida.v1", "a.v1.v2", "a.v01", "a..b.v1", ".a.v1", "a.v", "v1", ".v1", "a.b.v10", "A.v1", "a-b_c.v3", "a.v1x", "a.v99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		m := grammar.FindStringSubmatch(s)
		if m == nil {
			if err == nil {
				t.Fatalf("%q accepted as %+v; the grammar refuses it", s, n)
			}
			return
		}
		v, verr := strconv.Atoi(m[2])
		if (err != nil) != (verr != nil) || (err == nil && (n.Version != v || n.Base+".v"+m[2] != s)) {
			t.Fatalf("%q: %+v, %v; the grammar says version %s", s, n, err, m[2])
		}
	})
}

func TestDecodeTipoVersaoEnvelope(t *testing.T) {
	body := `{"id":"6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10","tipo":"pedido.criado","versao":1,"ocorridoEm":"2026-11-30T12:00:00Z",
		"origem":"pedidos","dados":{"pedidoId":981,"itens":[{"produtoId":7,"quantidade":2}]},"extra":"ignored"}`
	e, err := DecodeAs(EnvelopeTipoVersao, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != "6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10" || e.Name != "pedido.criado.v1" || e.Source != "pedidos" ||
		!e.OccurredAt.Equal(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)) || !strings.Contains(string(e.Payload), `"pedidoId":981`) {
		t.Fatalf("decoded %+v", e)
	}
	for _, tt := range []struct{ body, reason string }{
		{`{"tipo":"pedido.criado","versao":1,"ocorridoEm":"2026-11-30T12:00:00Z","dados":{}}`, ReasonMissingEventID},
		{`{"id":"6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10","tipo":"pedido.criado","ocorridoEm":"2026-11-30T12:00:00Z","dados":{}}`, ReasonInvalidEnvelope},
		{`{"id":"x","tipo":"pedido.criado","versao":1,"ocorridoEm":"2026-11-30T12:00:00Z","dados":{}}`, ReasonInvalidEnvelope},
		{`not json`, ReasonDecode},
	} {
		if _, err := DecodeAs(EnvelopeTipoVersao, []byte(tt.body), nil); ReasonOf(err) != tt.reason {
			t.Errorf("%s: %v, want reason %s", tt.body, err, tt.reason)
		}
	}
	// moenda's own format is the default.
	if _, err := DecodeAs("", []byte(body), nil); ReasonOf(err) != ReasonMissingEventID {
		t.Errorf("a tipo-versao body read as moenda's: %v", err)
	}
	// A tipo-versao queue reads moenda's envelope too.
	own, _ := New("pedido.criado.v1", "pedidos", map[string]int{"pedidoId": 1})
	raw, _ := own.MarshalJSON()
	if e, err := DecodeAs(EnvelopeTipoVersao, raw, nil); err != nil || e.ID != own.ID || e.Name != own.Name {
		t.Errorf("moenda's envelope on a tipo-versao queue: %+v, %v", e, err)
	}
}

func TestFlatRoundTrip(t *testing.T) {
	e, err := New("rental.requested.v1", "locacoes", map[string]string{"rentalId": "r-1", "userEmail": "ana@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	e.CorrelationID, e.AggregateID = "corr-1", "r-1"
	raw, _ := e.MarshalJSON()
	body := EncodeAs(EnvelopeFlat, raw)
	var flat map[string]any
	if err := json.Unmarshal(body, &flat); err != nil {
		t.Fatal(err)
	}
	if flat["eventId"] != e.ID || flat["rentalId"] != "r-1" || flat["userEmail"] != "ana@example.com" || flat["event_id"] != nil || flat["payload"] != nil {
		t.Fatalf("flat body %s", body)
	}
	if at, _ := time.Parse(time.RFC3339Nano, flat["occurredAt"].(string)); !at.Equal(e.OccurredAt) {
		t.Fatalf("occurredAt %v, want %v", flat["occurredAt"], e.OccurredAt)
	}
	// moenda's publisher sends the name as the AMQP type; the ids too.
	meta := message.Metadata{MetaName: e.Name, MetaCorrelationID: "corr-1", MetaAggregateID: "r-1", MetaDeliveryRoutingKey: "rental.requested"}
	got, err := DecodeAs(EnvelopeFlat, body, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Name != e.Name || !got.OccurredAt.Equal(e.OccurredAt) || got.CorrelationID != "corr-1" || got.AggregateID != "r-1" || !bytes.Equal(got.Payload, body) {
		t.Fatalf("decoded %+v", got)
	}
	if EncodeAs(EnvelopeMoenda, raw) == nil || !bytes.Equal(EncodeAs(EnvelopeMoenda, raw), raw) {
		t.Fatal("moenda's format is not the body as it is")
	}
	// A flat queue reads moenda's envelope too.
	if got, err := DecodeAs(EnvelopeFlat, raw, nil); err != nil || got.ID != e.ID || got.Name != e.Name {
		t.Fatalf("moenda's envelope on a flat queue: %+v, %v", got, err)
	}
	// A payload that is not an object is kept whole, so nothing stalls.
	list, _ := New("rental.requested.v1", "locacoes", []int{1})
	raw, _ = list.MarshalJSON()
	if err := json.Unmarshal(EncodeAs(EnvelopeFlat, raw), &flat); err != nil || flat["eventId"] != list.ID || flat["payload"] == nil {
		t.Fatalf("a list payload: %v %v", flat, err)
	}
}

// What a Spring AMQP publisher sends: no AMQP type, the name in the
// routing key, occurredAt as ISO-8601 or as epoch seconds.
func TestDecodeFlatFromOtherPublishers(t *testing.T) {
	const id = "6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10"
	delivered := message.Metadata{MetaDeliveryRoutingKey: "analysis.completed", "__TypeId__": "com.example.AnalysisCompletedEvent"}
	for _, at := range []string{`"2026-11-30T12:00:00.5Z"`, `1796040000.5`} {
		body := `{"eventId":"` + id + `","occurredAt":` + at + `,"rentalId":"r-1","resultado":"APPROVED","motivo":null}`
		e, err := DecodeAs(EnvelopeFlat, []byte(body), delivered)
		if err != nil {
			t.Fatal(err)
		}
		if e.ID != id || e.Name != "analysis.completed.v1" || !e.OccurredAt.Equal(time.Date(2026, 11, 30, 12, 0, 0, 5e8, time.UTC)) {
			t.Errorf("%s: decoded %+v", at, e)
		}
	}
	// A retry copy comes back with its queue's name as the key.
	retried := message.Metadata{MetaDeliveryRoutingKey: "rental.analysis.completed.queue", HeaderOriginalRoutingKey: "analysis.completed"}
	body := `{"eventId":"` + id + `","occurredAt":"2026-11-30T12:00:00Z"}`
	if e, err := DecodeAs(EnvelopeFlat, []byte(body), retried); err != nil || e.Name != "analysis.completed.v1" {
		t.Errorf("a retry copy: %+v, %v", e, err)
	}
	for _, tt := range []struct{ body, reason string }{
		{`{"occurredAt":"2026-11-30T12:00:00Z"}`, ReasonMissingEventID},
		{`{"eventId":"` + id + `"}`, ReasonInvalidEnvelope},
		{`{"eventId":"` + id + `","occurredAt":"yesterday"}`, ReasonInvalidEnvelope},
		{`{"eventId":"x","occurredAt":"2026-11-30T12:00:00Z"}`, ReasonInvalidEnvelope},
		{`[1]`, ReasonDecode},
		{"\xff", ReasonInvalidEncoding},
	} {
		if _, err := DecodeAs(EnvelopeFlat, []byte(tt.body), delivered); ReasonOf(err) != tt.reason {
			t.Errorf("%s: %v, want reason %s", tt.body, err, tt.reason)
		}
	}
}

// A payload full of <, > and & stays its own size through every encoding
// of the envelope: escaping each as \u003c would make a 200 KB payload
// 1.2 MB on the wire, past a broker's limit.
func TestEncodingKeepsMarkupAsItIs(t *testing.T) {
	text := strings.Repeat("<&>", 70_000)
	e, err := New("tarefa.concluida.v1", "tarefas", map[string]string{"html": text})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ToMessage(e)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"payload": e.Payload, "envelope": msg.Payload, "flat body": EncodeAs(EnvelopeFlat, msg.Payload)} {
		if !bytes.Contains(body, []byte(text)) || len(body) > len(text)+500 {
			t.Errorf("the %s is %d bytes for %d bytes of markup, or escapes it", name, len(body), len(text))
		}
	}
	back, err := Decode(msg.Payload)
	if err != nil || !bytes.Equal(back.Payload, e.Payload) {
		t.Fatalf("decoded %v", err)
	}
}

func TestFormatFormerNames(t *testing.T) {
	for in, want := range map[string]Format{"seed001": EnvelopeTipoVersao, "seed004": EnvelopeFlat, "flat": EnvelopeFlat, "moenda": EnvelopeMoenda, "xml": "xml"} {
		var f Format
		if err := f.UnmarshalText([]byte(in)); err != nil || f != want {
			t.Errorf("%s read as %q (%v), want %q", in, f, err, want)
		}
	}
}

func TestDecodePayload(t *testing.T) {
	type payload struct {
		N int `json:"n"`
	}
	positive := func(p payload) error {
		if p.N <= 0 {
			return errors.New("n is not positive")
		}
		return nil
	}
	e := Event{ID: "e1", Name: "x.criado.v1"}
	for _, tt := range []struct {
		body, err string
	}{
		{`{"n":1}`, ""},
		{`{"n":0}`, "payload of x.criado.v1 e1: n is not positive"},
		{`[1]`, "payload of x.criado.v1 e1: json: cannot unmarshal array into Go value of type event.payload"},
	} {
		e.Payload = json.RawMessage(tt.body)
		var p payload
		err := DecodePayload(e, &p, positive)
		if tt.err == "" {
			if err != nil || p.N != 1 {
				t.Errorf("%s: %+v, %v", tt.body, p, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.err || !IsPermanent(err) {
			t.Errorf("%s: error %v, want %q, permanent", tt.body, err, tt.err)
		}
	}
}

// An aggregate's event carries its id and the instant its rows record, in
// UTC.
func TestNewFor(t *testing.T) {
	at := time.Date(2026, 1, 15, 7, 30, 0, 0, time.FixedZone("BRT", -3*3600))
	e, err := NewFor("pedido.pago.v1", "pedidos", "981", at, map[string]int{"pedidoId": 981})
	if err != nil {
		t.Fatal(err)
	}
	if e.AggregateID != "981" || e.OccurredAt != at.UTC() || e.Source != "pedidos" || string(e.Payload) != `{"pedidoId":981}` {
		t.Fatalf("event %+v", e)
	}
	if _, err := NewFor("pedido.pago", "pedidos", "981", at, nil); err == nil {
		t.Fatal("a name without its version made an event")
	}
}
