package event

import (
	"strings"
	"testing"
)

// BenchmarkToMessage is the envelope's encoding, which every event
// written to the outbox pays inside its use case's transaction.
func BenchmarkToMessage(b *testing.B) {
	e, err := New("bench.evento.v1", "bench", map[string]string{"data": strings.Repeat("x", 800)})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ToMessage(e); err != nil {
			b.Fatal(err)
		}
	}
}
