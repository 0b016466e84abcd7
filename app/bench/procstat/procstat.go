// Package procstat reads the CPU time Linux counts in /proc, for a
// process, for every process of a name, and for the machine: what the
// bench reports beside its rates, since a rate moves when another process
// takes a core and CPU per message does not.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of /proc's CPU times: USER_HZ, 100 on every
// Linux architecture Go supports.
const ClockTick = 10 * time.Millisecond

// Process is the user and system time of pid and of its children that it
// waited for: the time of a child that exited counts in its parent's
// (cutime and cstime), so a PostgreSQL backend that ends between two
// readings is not lost.
func Process(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU of process %d: %w", pid, err)
	}
	used, err := statCPU(b)
	if err != nil {
		return 0, fmt.Errorf("CPU of process %d: /proc/%d/stat: %w", pid, pid, err)
	}
	return used, nil
}

// Named is the CPU time of every process whose command name is a key of
// roles, summed by the role it maps to. A process that ends while it is
// read is left out.
func Named(roles map[string]string) (map[string]time.Duration, error) {
	comms, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	for _, path := range comms {
		comm, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended
		}
		role, ok := roles[string(bytes.TrimSpace(comm))]
		if !ok {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if used, err := Process(pid); err == nil {
			out[role] += used
		}
	}
	return out, nil
}

// Times is the time of every core since boot, by where it went.
type Times struct {
	All    time.Duration // every state but steal
	Idle   time.Duration // idle and iowait
	IOWait time.Duration // idle with a disk read or write outstanding
	// Steal is the time the hypervisor ran other machines while this
	// one had work: a rate falls then with no process to blame.
	Steal time.Duration
}

// Machine reads the machine's Times from /proc/stat.
func Machine() (Times, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Times{}, fmt.Errorf("machine CPU: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	t, err := machineTimes(line)
	if err != nil {
		return Times{}, fmt.Errorf("machine CPU: /proc/stat: %w", err)
	}
	return t, nil
}

// machineTimes reads /proc/stat's first line: user, nice, system, idle,
// iowait, irq, softirq, steal, then guest times, which user time counts
// already.
func machineTimes(line []byte) (Times, error) {
	fields := strings.Fields(string(line))
	if len(fields) < 6 || fields[0] != "cpu" {
		return Times{}, fmt.Errorf("it begins %q", line)
	}
	var t Times
	for i, f := range fields[1:min(len(fields), 9)] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Times{}, err
		}
		d := time.Duration(n) * ClockTick
		switch i {
		case 3:
			t.Idle += d
		case 4:
			t.Idle += d
			t.IOWait = d
		case 7:
			t.Steal = d
			continue
		}
		t.All += d
	}
	return t, nil
}

// statCPU reads fields 14 to 17 of a /proc/pid/stat line: utime, stime,
// cutime and cstime. The command name, field 2, is in parentheses and may
// hold spaces and parentheses: fields are counted from the last ')'.
func statCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	fields := strings.Fields(string(b[i+1:])) // field 3 first
	if len(fields) < 15 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 15", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:15] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * ClockTick, nil
}
