package procstat

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as a process may
	// give itself; utime 120, stime 30, cutime 7, cstime 3 ticks.
	line := []byte("4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 1183 0 0 0 120 30 7 3 20 0 9 0 1966 1262329856 5467 18446744073709551615\n")
	got, err := statCPU(line)
	if err != nil || got != 160*ClockTick {
		t.Fatalf("statCPU = %v, %v; want %v", got, err, 160*ClockTick)
	}
	if _, err := statCPU([]byte("4242 (short) S 1 2 3")); err == nil {
		t.Fatal("a truncated line was read")
	}
}

// TestNamedCountsThisProcess spins until /proc counts some of this
// process's CPU, then finds it again by its command name.
func TestNamedCountsThisProcess(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	var used time.Duration
	for deadline := time.Now().Add(10 * time.Second); used < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("/proc counted %v of this process's CPU after 10 s of spinning", used)
		}
		if used, err = Process(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	named, err := Named(map[string]string{strings.TrimSpace(string(comm)): "me"})
	if err != nil {
		t.Fatal(err)
	}
	if named["me"] < used {
		t.Fatalf("Named counted %v for this process's name, less than its own %v", named["me"], used)
	}
	m, err := Machine()
	if err != nil || m.All <= 0 || m.Idle < 0 || m.Idle > m.All {
		t.Fatalf("Machine = %+v, %v", m, err)
	}
}

func TestMachineTimes(t *testing.T) {
	// user 100, nice 1, system 20, idle 300, iowait 40, irq 2, softirq
	// 3, steal 50, guest 9 (counted in user already), guest_nice 0.
	got, err := machineTimes([]byte("cpu  100 1 20 300 40 2 3 50 9 0"))
	want := Times{All: 466 * ClockTick, Idle: 340 * ClockTick, IOWait: 40 * ClockTick, Steal: 50 * ClockTick}
	if err != nil || got != want {
		t.Fatalf("machineTimes = %+v, %v; want %+v", got, err, want)
	}
	if _, err := machineTimes([]byte("cpu0 1 2 3 4 5")); err == nil {
		t.Fatal("a core's line was read as the machine's")
	}
}
