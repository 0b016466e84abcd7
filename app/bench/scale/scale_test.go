package scale

import (
	"math"
	"testing"
	"time"
)

func TestCPUSinceIsPer10kEvents(t *testing.T) {
	before := cpuSample{roles: map[string]time.Duration{"workers": time.Second, "rabbitmq": 2 * time.Second}, all: 10 * time.Second, idle: 4 * time.Second}
	after := cpuSample{roles: map[string]time.Duration{"workers": 3 * time.Second, "rabbitmq": 3 * time.Second, "relay": time.Second}, all: 20 * time.Second, idle: 5 * time.Second}
	per10k, idle := after.since(before, 5000)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// 2 s, 1 s and the new relay's 1 s over 5,000 events; 1 s idle of 10.
	if !near(per10k["workers"], 4) || !near(per10k["rabbitmq"], 2) || !near(per10k["relay"], 2) || !near(idle, 0.1) {
		t.Fatalf("since = %v, idle %v", per10k, idle)
	}
	if got := cpu(per10k); got != "workers 4.00 · relay 2.00 · rabbitmq 2.00" {
		t.Fatalf("cpu printed %q", got)
	}
}
