package outbox

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// decodeMetadata must agree with encoding/json on every input.
func FuzzDecodeMetadata(f *testing.F) {
	for _, seed := range []string{
		`{"event_name":"tarefa.concluida.v1","correlation_id":"c-1","occurred_at":"2026-11-30T12:00:00Z"}`,
		`{"event_name": "a.v1", "routing_key": "a"}`, `{}`, ` { } `, `null`, `{"a":"\u00e9"}`, `{"a":"x\"y"}`,
		`{"a":1}`, `{"a":"b",}`, `{"a":"b"} x`, `{"a":"b","a":"c"}`, "{\"a\":\"\xff\"}", `{"a":"ção"}`, `[]`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want message.Metadata
		wantErr := json.Unmarshal(b, &want)
		got, err := decodeMetadata(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, encoding/json says %v", b, err, wantErr)
		}
		if err == nil && !maps.Equal(got, want) {
			t.Fatalf("%q: %v, encoding/json says %v", b, got, want)
		}
	})
}

func BenchmarkDecodeMetadata(b *testing.B) {
	row := []byte(`{"correlation_id": "0b6f3c1e-8e0a-4f7e-9a51-6b2a4c8d9e10", "event_name": "tarefa.concluida.v1", "occurred_at": "2026-11-30T12:00:00.123456Z", "routing_key": "tarefa.concluida", "aggregate_id": "42"}`)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeMetadata(row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var md message.Metadata
			if err := json.Unmarshal(row, &md); err != nil {
				b.Fatal(err)
			}
		}
	})
}
