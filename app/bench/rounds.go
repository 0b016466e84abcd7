package bench

import (
	"slices"
	"time"

	"github.com/moenda/moenda/app/bench/median"
)

// flow is what one side of a round measured: a rate, and the CPU each
// process used over the same span (arrivals' from the first arrival to
// the last).
type flow struct {
	rate float64
	cpu  cpuSample
	n    int    // messages counted from the first arrival on
	own  string // the role of the process that did the work measured
}

// per10k is the CPU seconds of role per 10,000 messages of f.
func (f flow) per10k(role string) float64 {
	if f.n == 0 {
		return 0
	}
	return f.cpu[role].Seconds() * 10000 / float64(f.n)
}

// perRole is f's CPU seconds per 10,000 messages by role.
func (f flow) perRole() map[string]float64 {
	out := make(map[string]float64, len(f.cpu))
	for _, role := range cpuRoles {
		if _, ok := f.cpu[role]; ok {
			out[role] = f.per10k(role)
		}
	}
	return out
}

// total is the CPU seconds per 10,000 messages of f of every process
// measured: the whole work the machine did for them.
func (f flow) total() float64 {
	var sum float64
	for _, v := range f.perRole() {
		sum += v
	}
	return sum
}

// idle is the share of the machine's cores idle during f.
func (f flow) idle() float64 {
	if f.cpu[machineAll] <= 0 {
		return 0
	}
	return float64(f.cpu[machineIdle]) / float64(f.cpu[machineAll])
}

// paired gathers the rounds of a figure measured in pairs, moenda's and
// the raw client's one after the other, so that both meet the machine in
// the same state; a round's ratio is taken within it.
type paired struct {
	mine, raw []flow
}

// alternate runs rounds paired rounds of raw and mine (see paired.round),
// and returns them.
func alternate(e *env, step string, rounds int, raw, mine func() (flow, error)) (*paired, error) {
	p := &paired{}
	for i := range rounds {
		if err := p.round(raw, mine); err != nil {
			return nil, err
		}
		raw, mine := p.raw[i], p.mine[i]
		e.logger.Debug("bench: round", "step", step, "round", i, "raw", raw.rate, "mine", mine.rate,
			"raw_cpu_per_10k", raw.per10k(raw.own), "mine_cpu_per_10k", mine.per10k(mine.own))
	}
	return p, nil
}

// inProcess runs fn, which handles n messages in this process and
// returns their rate, and returns its flow, with the bench process's CPU
// meanwhile as its own.
func inProcess(n int, fn func() (float64, error)) (flow, error) {
	before, err := sampleCPU(process{})
	if err != nil {
		return flow{}, err
	}
	rate, err := fn()
	if err != nil {
		return flow{}, err
	}
	after, err := sampleCPU(process{})
	return flow{rate: rate, cpu: after.since(before), n: n, own: procBench}, err
}

// inProcessFor is inProcess for fn that counts its messages as it goes,
// such as a loop run for a set time.
func inProcessFor(fn func() (n int, took time.Duration, err error)) (flow, error) {
	var n int
	f, err := inProcess(0, func() (float64, error) {
		var took time.Duration
		var err error
		n, took, err = fn()
		return float64(n) / took.Seconds(), err
	})
	f.n = n
	return f, err
}

// timed is inProcessFor for work timed from its start to its end, which
// returns how many messages it handled.
func timed(work func() (int, error)) (flow, error) {
	return inProcessFor(func() (int, time.Duration, error) {
		began := time.Now()
		n, err := work()
		return n, time.Since(began), err
	})
}

// round runs one round: raw then mine, or mine then raw on odd rounds,
// so neither always runs on what the other left (a checkpoint, a warm
// cache).
func (p *paired) round(raw, mine func() (flow, error)) error {
	first, second := raw, mine
	odd := len(p.mine)%2 == 1
	if odd {
		first, second = mine, raw
	}
	a, err := first()
	if err != nil {
		return err
	}
	b, err := second()
	if err != nil {
		return err
	}
	if odd {
		a, b = b, a
	}
	p.raw, p.mine = append(p.raw, a), append(p.mine, b)
	return nil
}

// row fills row's Value and Ceiling with the medians of the rounds, its
// Ratio with the median of their ratios and Spread with the lowest and
// highest, and its CPU with the median of each role's over moenda's
// rounds. Its CPU ratio is moenda's own process (serve, or the bench
// process where moenda ran in it) over the raw client's. CoresBound is
// the ratio the rates would have if the cores were all that bounded
// them: the raw round's CPU per message, every process's, over moenda's.
func (p *paired) row(row Row) Row {
	var rates, ceilings, ratios, cpuRatios, bound, idle []float64
	for i, mine := range p.mine {
		raw := p.raw[i]
		rates, ceilings = append(rates, mine.rate), append(ceilings, raw.rate)
		ratios = append(ratios, mine.rate/raw.rate)
		if client := raw.per10k(raw.own); client > 0 {
			cpuRatios = append(cpuRatios, mine.per10k(mine.own)/client)
		}
		if mine.total() > 0 {
			bound = append(bound, raw.total()/mine.total())
			idle = append(idle, mine.idle())
		}
	}
	row.Value, row.Ceiling = median.Of(rates), median.Of(ceilings)
	row.Ratio, row.Spread = median.Of(ratios), []float64{slices.Min(ratios), slices.Max(ratios)}
	row.CPU = medianCPU(p.mine)
	if len(bound) > 0 {
		row.CoresBound, row.Idle = median.Of(bound), median.Of(idle)
	}
	if len(cpuRatios) > 0 {
		row.CPURatio, row.CPUSpread = median.Of(cpuRatios), []float64{slices.Min(cpuRatios), slices.Max(cpuRatios)}
	}
	return row
}

// rawCPU is the CPU of the raw client's rounds, as row gives moenda's.
func (p *paired) rawCPU() map[string]float64 { return medianCPU(p.raw) }

// medianCPU is each role's median CPU seconds per 10,000 messages over
// flows; nil when they read none.
func medianCPU(flows []flow) map[string]float64 {
	perRole := map[string][]float64{}
	for _, f := range flows {
		for role, v := range f.perRole() {
			perRole[role] = append(perRole[role], v)
		}
	}
	if len(perRole) == 0 {
		return nil
	}
	out := make(map[string]float64, len(perRole))
	for role, v := range perRole {
		out[role] = median.Of(v)
	}
	return out
}
