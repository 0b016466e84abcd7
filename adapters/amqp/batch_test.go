package amqp

import (
	"strings"
	"testing"

	"github.com/moenda/moenda/adapters/topology"
)

// A publisher that could not work is refused when it is made, not on its
// first batch.
func TestNewBatchPublisherRefusesWhatCannotWork(t *testing.T) {
	top := &topology.Topology{}
	tests := []struct {
		name   string
		url    string
		window int
		top    *topology.Topology
		want   string
	}{
		{"no confirm window", "amqp://guest:guest@127.0.0.1:5672/", 0, top, "confirm window must be at least 1"},
		{"not an AMQP URL", "http://127.0.0.1/", 1, top, "url"},
		{"no topology", "amqp://guest:guest@127.0.0.1:5672/", 1, nil, "no topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewBatchPublisher([]string{tt.url}, "test", tt.window, tt.top); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to say %q", err, tt.want)
			}
		})
	}
	if _, err := NewBatchPublisher([]string{"amqp://guest:guest@127.0.0.1:5672/"}, "test", 1, top); err != nil {
		t.Fatal(err)
	}
}
