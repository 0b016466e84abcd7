package router

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers/event"
)

// TestDecodeCountsRedeliveries: a delivery the broker marked as
// redelivered is counted, whatever becomes of it; a first delivery is not.
func TestDecodeCountsRedeliveries(t *testing.T) {
	stats := NewStats(false).Queue("q")
	h := Decode("", nil, 1024, stats, logger)(handlerFunc(func(*message.Message) error { return nil }))
	first := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	again := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	again.Metadata.Set(event.MetaRedelivered, "true")
	_, _ = h(first)
	_, _ = h(again)
	if n := stats.Redelivered.Load(); n != 1 {
		t.Fatalf("%d redeliveries counted, want 1", n)
	}
}

func TestDecode(t *testing.T) {
	valid := func(name string) []byte {
		return []byte(`{"event_id":"550e8400-e29b-41d4-a716-446655440000","event_name":"` + name + `","occurred_at":"2026-01-15T10:30:00Z","correlation_id":"c-1","payload":{}}`)
	}
	tests := []struct {
		name        string
		handles     []string
		body        []byte
		wantReason  string // "" when no error
		wantHandled bool
		wantIgnored bool
	}{
		{"any event when handles is empty", nil, valid("a.b.v7"), "", true, false},
		{"a handled version", []string{"a.b.v1", "a.b.v2"}, valid("a.b.v2"), "", true, false},
		{"another type: ignored", []string{"a.b.v1"}, valid("x.unknown.v1"), "", false, true},
		{"a version not handled", []string{"a.b.v1"}, valid("a.b.v99"), event.ReasonUnknownVersion, false, false},
		{"malformed JSON", nil, []byte(`{"event_id":`), event.ReasonDecode, false, false},
		{"a JSON array", nil, []byte(`[1]`), event.ReasonDecode, false, false},
		{"invalid UTF-8", nil, append(valid("a.b.v1")[:10:10], 0xff, 0xfe), event.ReasonInvalidEncoding, false, false},
		{"missing event_id", nil, []byte(`{"event_name":"a.b.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`), event.ReasonMissingEventID, false, false},
		{"a body over max_message_bytes", nil, append(valid("a.b.v1"), make([]byte, 1024)...), event.ReasonTooLarge, false, false},
		{"event_id not a UUID", nil, []byte(`{"event_id":"42","event_name":"a.b.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`), event.ReasonInvalidEnvelope, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stats := NewStats(true).Queue("q")
			var got event.Event
			handled := false
			_, err := Decode("", tt.handles, 1024, stats, logger)(handlerFunc(func(msg *message.Message) error {
				handled = true
				got, _ = eventOf(msg.Context())
				if event.CorrelationID(msg.Context()) != "c-1" || event.CausationID(msg.Context()) != got.ID {
					t.Errorf("context ids: correlation %q causation %q", event.CorrelationID(msg.Context()), event.CausationID(msg.Context()))
				}
				return nil
			}))(message.NewMessage(watermill.NewUUID(), tt.body))
			if event.ReasonOf(err) != tt.wantReason || (err == nil) != (tt.wantReason == "") {
				t.Fatalf("error = %v (reason %q), want reason %q", err, event.ReasonOf(err), tt.wantReason)
			}
			if handled != tt.wantHandled || (stats.Ignored.Load() == 1) != tt.wantIgnored {
				t.Fatalf("handled %v, ignored %d", handled, stats.Ignored.Load())
			}
		})
	}
}
