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

// Three workers' row takes the median of the rounds' ratios to one
// worker's in the same round, not the ratio of the medians.
func TestSummarizePairsEachRoundWithOneWorkersSameRound(t *testing.T) {
	one := []handled{
		{rate: 100, cpu: map[string]float64{"workers": 2, "postgresql": 2}, idle: 0.1},
		{rate: 50, cpu: map[string]float64{"workers": 4, "postgresql": 4}, idle: 0.3},
		{rate: 80, cpu: map[string]float64{"workers": 3, "postgresql": 1}, idle: 0.2},
	}
	three := []handled{
		{rate: 200, cpu: map[string]float64{"workers": 3, "postgresql": 3}, idle: 0.0},
		{rate: 90, cpu: map[string]float64{"workers": 6, "postgresql": 6}, idle: 0.1},
		{rate: 80, cpu: map[string]float64{"workers": 4, "postgresql": 4}, idle: 0.05},
	}
	base := summarize(one, nil)
	if base.Handled != 80 || base.HandledSpread != [2]float64{50, 100} || base.Ratio != 0 || base.CPU["workers"] != 3 || base.CPU["postgresql"] != 2 || base.Idle != 0.2 {
		t.Fatalf("one worker's row: %+v", base)
	}
	row := summarize(three, one)
	// Rates 2, 1.8 and 1 times one worker's; CPU per event 1.5, 1.5 and 2 times.
	if row.Handled != 90 || row.Ratio != 1.8 || row.RatioSpread != [2]float64{1, 2} || row.CPURatio != 1.5 || row.CPURatioSpread != [2]float64{1.5, 2} {
		t.Fatalf("three workers' row: %+v", row)
	}
}
