package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/moenda/moenda/app/bench/procstat"
)

// The processes whose CPU a row reports, by role.
const (
	procMoenda   = "moenda"     // the serve process measured
	procClient   = "raw client" // the raw publisher's process (RawPublish)
	procBench    = "bench"      // this process: the consumer of arrivals
	procBroker   = "rabbitmq"   // every beam.smp
	procKafka    = "kafka"      // the embedded Kafka cluster the bench started (KafkaCluster)
	procPostgres = "postgresql" // every postgres process, with the backends that have exited
)

// The machine's time, all cores together, beside the roles: all of it, and
// what was idle (idle and iowait in /proc/stat).
const (
	machineAll  = "machine"
	machineIdle = "idle"
)

// cpuRoles are the roles in the order a row prints them.
var cpuRoles = []string{procMoenda, procClient, procBench, procBroker, procKafka, procPostgres}

// process is a process the bench started, measured under role.
type process struct {
	role string
	pid  int
}

// cpuSample is the CPU each role's processes had used when it was taken,
// user plus system, with that of their children that exited
// (procstat.Process).
type cpuSample map[string]time.Duration

// sampleCPU reads /proc for this process, measured's (when it has a pid),
// RabbitMQ's and PostgreSQL's.
func sampleCPU(measured process) (cpuSample, error) {
	s := cpuSample{}
	self, err := procstat.Process(os.Getpid())
	if err != nil {
		return nil, err
	}
	s[procBench] = self
	if measured.pid != 0 {
		if s[measured.role], err = procstat.Process(measured.pid); err != nil {
			return nil, err
		}
	}
	m, err := procstat.Machine()
	if err != nil {
		return nil, err
	}
	s[machineAll], s[machineIdle] = m.All, m.Idle
	servers, err := procstat.Named(map[string]string{"beam.smp": procBroker, "postgres": procPostgres})
	if err != nil {
		return nil, err
	}
	for role, used := range servers {
		s[role] = used
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
