package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/*/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// The processes whose CPU a row reports, by role.
const (
	procMoenda   = "moenda"     // the serve process measured
	procClient   = "raw client" // the raw publisher's process (RawPublish)
	procBench    = "bench"      // this process: the consumer of arrivals
	procBroker   = "rabbitmq"   // every beam.smp
	procPostgres = "postgresql" // every postgres process, with the backends that have exited
)

// The machine's time, all cores together, beside the roles: all of it, and
// what was idle (idle and iowait in /proc/stat).
const (
	machineAll  = "machine"
	machineIdle = "idle"
)

// cpuRoles are the roles in the order a row prints them.
var cpuRoles = []string{procMoenda, procClient, procBench, procBroker, procPostgres}

// process is a process the bench started, measured under role.
type process struct {
	role string
	pid  int
}

// cpuSample is the CPU each role's processes had used when it was taken,
// user plus system. The time of processes that exited and were waited
// for counts in their parent's (cutime and cstime), so a PostgreSQL
// backend that ends between two samples is not lost.
type cpuSample map[string]time.Duration

// sampleCPU reads /proc for this process, measured's (when it has a pid),
// RabbitMQ's and PostgreSQL's.
func sampleCPU(measured process) (cpuSample, error) {
	s := cpuSample{}
	self, err := processCPU(os.Getpid())
	if err != nil {
		return nil, err
	}
	s[procBench] = self
	if measured.pid != 0 {
		if s[measured.role], err = processCPU(measured.pid); err != nil {
			return nil, err
		}
	}
	if s[machineAll], s[machineIdle], err = machineCPU(); err != nil {
		return nil, err
	}
	stats, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		return nil, err
	}
	for _, path := range stats {
		comm, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended
		}
		role := ""
		switch string(bytes.TrimSpace(comm)) {
		case "beam.smp":
			role = procBroker
		case "postgres":
			role = procPostgres
		default:
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if used, err := processCPU(pid); err == nil {
			s[role] += used
		}
	}
	return s, nil
}

// since is what each role used from before to s.
func (s cpuSample) since(before cpuSample) cpuSample {
	d := cpuSample{}
	for role, used := range s {
		d[role] = used - before[role]
	}
	return d
}

// processCPU is the user and system time of pid and of its children that
// it waited for.
func processCPU(pid int) (time.Duration, error) {
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

// machineCPU is the time of every core since boot, and the part idle.
func machineCPU() (all, idle time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("machine CPU: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("machine CPU: /proc/stat begins %q", line)
	}
	for i, f := range fields[1:] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("machine CPU: %w", err)
		}
		if i >= 7 { // guest time is counted in user time already
			break
		}
		all += time.Duration(n) * clockTick
		if i == 3 || i == 4 { // idle, iowait
			idle += time.Duration(n) * clockTick
		}
	}
	return all, idle, nil
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
	return time.Duration(ticks) * clockTick, nil
}

// instructionsCounted says whether this machine's perf counts
// instructions, which noise moves even less than CPU time. Where it does
// not (virtual machines often hide the counters), rows give CPU time
// alone, and say so.
func instructionsCounted(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", "instructions", "true").CombinedOutput()
	switch {
	case err != nil && len(out) == 0:
		return "No row gives instructions per message: perf is not installed (Debian's linux-perf)."
	case bytes.Contains(out, []byte("<not supported>")) || bytes.Contains(out, []byte("<not counted>")) || err != nil:
		return "No row gives instructions per message: this machine's perf counts none (perf stat -e instructions: not supported)."
	default:
		return "perf counts instructions on this machine, but the rows give CPU time: the bench does not read perf."
	}
}
