package amqp

import (
	"testing"

	"github.com/moenda/moenda/adapters/transport"
)

// The dead letters' subscriber lets a whole ingest batch through before
// any is answered: the larger of amqp.prefetch and the batch.
func TestDeadLetterPrefetchHoldsABatch(t *testing.T) {
	for _, c := range []struct{ prefetch, batch, want int }{
		{prefetch: 50, batch: 100, want: 100},
		{prefetch: 200, batch: 100, want: 200},
		{prefetch: 50, batch: 0, want: 50},
	} {
		got := DeadLetterPrefetch(Config{Prefetch: c.prefetch}, transport.Settings{DeadLetterBatch: c.batch})
		if got != c.want {
			t.Errorf("prefetch %d, batch %d: %d, want %d", c.prefetch, c.batch, got, c.want)
		}
	}
}
