package bench

import (
	"math"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSampleCPUCountsThisProcess spins until getrusage counts 200 ms of
// this process's CPU, and checks /proc's count agrees. The two are kept
// apart by the kernel (ticks sampled, against time run scaled to them),
// and differ by a few ticks on a busy machine (28 ms once, in CI): the
// check allows a fifth of the time spun. /proc is read just outside the
// spin, so the process's other work in between (goroutines an earlier
// test left winding down, the collector) counts there: getrusage also
// reads a window around /proc's reads, which bounds /proc's count above.
func TestSampleCPUCountsThisProcess(t *testing.T) {
	self := process{procClient, os.Getpid()}
	outerStart := rusage(t)
	before, err := sampleCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	start := rusage(t)
	for rusage(t)-start < 200*time.Millisecond {
	}
	spun := rusage(t) - start
	after, err := sampleCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	outer := rusage(t) - outerStart
	used := after.since(before)
	for _, role := range []string{procBench, procClient} {
		if used[role] < spun-spun/5 || used[role] > outer+spun/5 {
			t.Errorf("%s: /proc counted %v where getrusage counted %v spinning and %v around /proc's reads", role, used[role], spun, outer)
		}
	}
}

// rusage is this process's user and system time, by getrusage.
func rusage(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestPairedRow(t *testing.T) {
	var p paired
	// Three rounds: moenda's rate and CPU against the raw client's. The
	// second round runs moenda first; round gives each back in its place.
	rounds := []struct{ mine, raw flow }{
		{flow{rate: 800, n: 10000, own: procMoenda, cpu: cpuSample{procMoenda: 2 * time.Second}}, flow{rate: 1000, n: 10000, own: procClient, cpu: cpuSample{procClient: time.Second}}},
		{flow{rate: 900, n: 10000, own: procMoenda, cpu: cpuSample{procMoenda: 3 * time.Second}}, flow{rate: 1000, n: 10000, own: procClient, cpu: cpuSample{procClient: 2 * time.Second}}},
		{flow{rate: 450, n: 10000, own: procMoenda, cpu: cpuSample{procMoenda: 4 * time.Second}}, flow{rate: 500, n: 10000, own: procClient, cpu: cpuSample{procClient: 2 * time.Second}}},
	}
	for _, r := range rounds {
		if err := p.round(func() (flow, error) { return r.raw, nil }, func() (flow, error) { return r.mine, nil }); err != nil {
			t.Fatal(err)
		}
	}
	row := p.row(Row{Name: "x"})
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if row.Value != 800 || row.Ceiling != 1000 || !near(row.Ratio, 0.9) || !near(row.Spread[0], 0.8) || !near(row.Spread[1], 0.9) {
		t.Fatalf("rates: %+v", row)
	}
	if !near(row.CPURatio, 2) || !near(row.CPUSpread[0], 1.5) || !near(row.CPUSpread[1], 2) || !near(row.CPU[procMoenda], 3) {
		t.Fatalf("CPU: %+v", row)
	}
	if !near(row.CoresBound, 0.5) {
		t.Fatalf("cores-bound ratio %v, want the median of 1/2, 2/3 and 2/4", row.CoresBound)
	}
}
