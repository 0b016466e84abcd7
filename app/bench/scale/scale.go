// Package scale measures moenda scaled out: separate serve processes of
// each role (serve --role api|worker|relay) on a database and a vhost of
// their own, from the harness the fault cases run on, with the same
// writers through the API and the same checker at the end, so its
// figures come with lost and duplicated effects counted. `moenda bench
// scale` runs it.
package scale

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/app/bench/median"
	"github.com/moenda/moenda/app/bench/procstat"
	"github.com/moenda/moenda/app/harness"
	"github.com/moenda/moenda/handlers/faultprobe"
)

// Setup is one configuration the measurement runs: how many
// deliveries each worker handles at once (amqp.prefetch), and how the
// relay reads the outbox.
type Setup struct {
	Prefetch int    `json:"prefetch"`
	Reader   string `json:"reader"`
}

// Setups are the configurations measured: one delivery at a time per
// worker, where the handler's 10 ms bound each worker and more workers
// add throughput, and the default prefetch, where one worker already
// runs 50 handlers at once and the machine's cores are the bound; the
// default again with the polling relay, for the latency across processes
// without logical replication's stream.
var Setups = []Setup{{1, "auto"}, {50, "auto"}, {50, "poll"}}

// Workers are the worker counts measured on one system, the first the
// one the others are compared with.
var Workers = []int{1, 3}

// Rounds is how many times each worker count handles a backlog, the
// counts taking turns and the order alternating between rounds, so that
// each figure is the median of its rounds and each ratio the median of
// the rounds' ratios, with their spread, as in `moenda bench`: one run's
// rates of the same code moved by a half.
const Rounds = 5

// HandlerWork is what the measured handler waits per event, as a call to
// a slow service would, in its prepare step: before its unit of work
// opens, as the README tells such a handler to wait.
const HandlerWork = 10 * time.Millisecond

// Row is one configuration with a number of workers: the backlog
// they handled and how fast, and the end-to-end latency at a steady rate.
type Row struct {
	Setup
	Workers int `json:"workers"`
	// Backlog is how many events waited in the outbox when the relay
	// started; Handled is how many the workers applied per second, from
	// the first effect to the last, the median of Rounds, and
	// HandledSpread the lowest and highest.
	Backlog       int        `json:"backlog"`
	Handled       float64    `json:"handled_per_second"`
	HandledSpread [2]float64 `json:"handled_spread"`
	// Ratio is Handled over the first of Workers' in the same round, and
	// CPURatio every process's CPU per event over its: each the median of
	// the rounds' ratios, with their spread; zero for the first of Workers.
	Ratio          float64    `json:"ratio,omitempty"`
	RatioSpread    [2]float64 `json:"ratio_spread,omitzero"`
	CPURatio       float64    `json:"cpu_ratio,omitempty"`
	CPURatioSpread [2]float64 `json:"cpu_ratio_spread,omitzero"`
	// Rate is the steady load of the latency phase, in acknowledged
	// events per second, and Latency its acknowledgement to effect.
	Rate    float64         `json:"rate"`
	Latency harness.Latency `json:"latency"`
	// CPU is the CPU seconds, user plus system, each role's processes
	// used per 10,000 events of the backlog, from the relay's start to the
	// last effect (the workers summed), and Idle the share of the
	// machine's cores idle meanwhile: whether the machine or moenda
	// bounded the rate. Each is the median of the rounds.
	CPU  map[string]float64 `json:"cpu_per_10k,omitempty"`
	Idle float64            `json:"idle"`
}

// Stop is one SIGTERM under load: the role stopped, how long the process
// took to exit, the handlers in flight finishing first, and how many
// deliveries RabbitMQ handed out again once it was started again.
type Stop struct {
	Setup
	Role string        `json:"role"`
	Took time.Duration `json:"took"`
	// Rate is the load while it stopped, in acknowledged events per
	// second.
	Rate float64 `json:"rate"`
	// Redelivered counts the deliveries the workers received marked as
	// redelivered from the signal until stopLoadFor after the restart
	// (moenda_messages_redelivered_total): work in hand that the stop cut
	// off and that ran again, and the deliveries RabbitMQ had pushed to a
	// stopping worker that no handler had started, which it sends back at
	// once. It is not a failure of the run: the checker judges the
	// effects.
	Redelivered int `json:"redelivered"`
}

// Check is the checker's verdict on one configuration's run.
type Check struct {
	Setup
	Report harness.Report `json:"report"`
}

// Result is the whole measurement.
type Result struct {
	Rows  []Row  `json:"rows"`
	Stops []Stop `json:"stops"`
	// Checks are the checker's verdicts, one per configuration.
	Checks   []Check  `json:"checks"`
	Problems []string `json:"problems,omitempty"`
}

// Valid reports whether every configuration lost nothing and applied
// nothing twice, and nothing went wrong.
func (s Result) Valid() bool {
	if len(s.Problems) > 0 {
		return false
	}
	for _, c := range s.Checks {
		if !c.Report.Valid {
			return false
		}
	}
	return true
}

// Options set a measurement.
type Options struct {
	// ServeBin is the moenda binary the nodes run.
	ServeBin string
	// PostgresURL and AMQPURL name the local servers; each configuration
	// makes a database and a vhost of its own on them.
	PostgresURL string
	AMQPURL     string
	// Dir keeps each configuration's history and node logs; a valid
	// one's are removed.
	Dir string
	// Progress gets a line per phase.
	Progress io.Writer
}

// Run measures each of Setups with one api, one relay and each
// of Workers workers, then stops a worker, the relay and the api
// with SIGTERM under load (a second api and a standby relay take over),
// and checks that nothing was lost or applied twice.
func Run(ctx context.Context, opts Options) (Result, error) {
	var out Result
	if err := opts.system().CheckLocal(); err != nil {
		return out, fmt.Errorf("bench scale: %w", err)
	}
	for _, setup := range Setups {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "scale: prefetch %d, reader %s\n", setup.Prefetch, setup.Reader)
		}
		if err := scaleSetup(ctx, opts, setup, &out); err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("prefetch %d, reader %s: %v", setup.Prefetch, setup.Reader, err))
		}
	}
	return out, nil
}

// system is what the harness needs of the options.
func (o Options) system() harness.Config {
	return harness.Config{ServeBin: o.ServeBin, PostgresURL: o.PostgresURL, AMQPURL: o.AMQPURL}
}

// scaleOverlay is the configuration of the measured nodes.
func scaleOverlay(s Setup) string {
	return fmt.Sprintf(`log: {level: warn, format: json}
handlers: {enabled: [%s]}
amqp: {prefetch: %d}
outbox: {reader: %s}
router: {close_timeout: 10s}
`, faultprobe.Name, s.Prefetch, s.Reader)
}

// scaleSetup measures one configuration on a system of its own.
func scaleSetup(ctx context.Context, opts Options, setup Setup, out *Result) (err error) {
	dir := filepath.Join(opts.Dir, fmt.Sprintf("scale-prefetch%d-%s", setup.Prefetch, setup.Reader))
	s, err := harness.NewSystem(ctx, opts.system(), dir, scaleOverlay(setup), "")
	if err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	m := &measure{System: s, setup: setup, progress: opts.Progress}
	if err := m.phases(ctx); err != nil {
		_, _ = m.stopWriting()
		out.Rows = append(out.Rows, m.rows...) // what was measured before, without latencies
		return err
	}
	if _, err := m.stopWriting(); err != nil {
		return fmt.Errorf("writers: %w", err)
	}
	seen, obs, err := s.Observe(ctx, harness.DrainBound, nil)
	m.problems = append(m.problems, obs.Problems...)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	ops, _, err := s.CloseHistory()
	if err != nil {
		return err
	}
	report := harness.Check(ops, seen)
	out.Checks = append(out.Checks, Check{Setup: setup, Report: report})
	for i := range m.rows {
		m.rows[i].Latency = harness.Latencies(within(ops, m.windows[i]), seen.Effects)
	}
	out.Rows = append(out.Rows, m.rows...)
	out.Stops = append(out.Stops, m.stops...)
	out.Problems = append(out.Problems, m.problems...)
	if report.Valid && len(m.problems) == 0 {
		_ = os.RemoveAll(dir)
	} else {
		out.Problems = append(out.Problems, "kept "+dir)
	}
	return nil
}

// window is a span of the run whose acknowledged events are measured.
type window struct{ from, to time.Time }

// within returns the operations acknowledged in w.
func within(ops []harness.Op, w window) []harness.Op {
	var in []harness.Op
	for _, op := range ops {
		if !op.At.Before(w.from) && op.At.Before(w.to) {
			in = append(in, op)
		}
	}
	return in
}

// measure is one configuration's measurement in progress.
type measure struct {
	*harness.System
	setup    Setup
	progress io.Writer
	writing  *harness.Writers
	problems []string
	rows     []Row
	windows  []window // each row's latency phase
	phase    int      // the writers' phases so far: each writes events of its own
	stops    []Stop
}

// Loads of the measurement: the backlog is written as fast as the
// writers go; the latency phase is a steady rate that one worker with one
// delivery at a time keeps up with.
const (
	backlogWriters  = 8
	steadyWriters   = 2
	steadyInterval  = 40 * time.Millisecond
	latencyDuration = 15 * time.Second
	stopLoadFor     = 5 * time.Second
)

// phases measures each of Workers in Rounds, the latency at a steady
// rate once for each, then the stops.
func (m *measure) phases(ctx context.Context) error {
	if _, err := m.StartRole(ctx, "api", 1); err != nil {
		return err
	}
	relays, err := m.StartRole(ctx, "relay", 1)
	if err != nil {
		return err
	}
	relay := relays[0]
	rounds := map[int][]handled{}
	steady := map[int]float64{}
	for round := range Rounds {
		order := slices.Clone(Workers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, workers := range order {
			if err := m.runWorkers(ctx, workers); err != nil {
				return err
			}
			h, err := m.handle(ctx, relay, workers)
			if err != nil {
				return err
			}
			rounds[workers] = append(rounds[workers], h)
			if m.progress != nil {
				fmt.Fprintf(m.progress, "scale: round %d, %d workers: %d events at %.0f/s\n", round+1, workers, m.backlog(workers), h.rate)
			}
			if round > 0 {
				continue
			}
			w, acked, err := m.steadyLoad(ctx)
			if err != nil {
				return err
			}
			steady[workers] = float64(acked) / w.to.Sub(w.from).Seconds()
			m.windows = append(m.windows, w)
		}
	}
	for _, workers := range Workers {
		var base []handled
		if workers != Workers[0] {
			base = rounds[Workers[0]]
		}
		row := summarize(rounds[workers], base)
		row.Setup, row.Workers, row.Backlog, row.Rate = m.setup, workers, m.backlog(workers), steady[workers]
		m.rows = append(m.rows, row)
	}
	if err := m.runWorkers(ctx, slices.Max(Workers)); err != nil {
		return err
	}
	return m.stopUnderLoad(ctx)
}

// handled is one backlog handled: its rate, each role's CPU seconds per
// 10,000 of its events, and the share of the cores idle meanwhile.
type handled struct {
	rate float64
	cpu  map[string]float64
	idle float64
}

// handle measures the running workers handling one backlog.
func (m *measure) handle(ctx context.Context, relay *harness.Node, workers int) (handled, error) {
	// With the relay stopped, the events wait in the outbox; once it
	// starts, it fills the queue far faster than the handlers empty it.
	if _, err := m.Stop(relay, time.Minute); err != nil {
		return handled{}, err
	}
	backlog := m.backlog(workers)
	from := time.Now()
	if err := m.writeUntil(ctx, backlog); err != nil {
		return handled{}, err
	}
	target := m.Acknowledged()
	before, err := m.sampleCPU(nil)
	if err != nil {
		return handled{}, err
	}
	if err := m.Restart(ctx, relay); err != nil {
		return handled{}, err
	}
	if err := m.awaitApplied(ctx, target); err != nil {
		return handled{}, err
	}
	// The relay is a new process: all of its CPU is the phase's.
	after, err := m.sampleCPU(relay)
	if err != nil {
		return handled{}, err
	}
	h := handled{}
	if h.rate, err = m.handledRate(ctx, from, target); err != nil {
		return handled{}, err
	}
	h.cpu, h.idle = after.since(before, backlog)
	return h, nil
}

// runWorkers leaves the first n worker nodes running and the others
// stopped, starting new nodes if there are fewer than n.
func (m *measure) runWorkers(ctx context.Context, n int) error {
	have := 0
	for _, nd := range m.Nodes {
		if nd.Role != "worker" {
			continue
		}
		switch {
		case have < n && !nd.Running():
			if err := m.Restart(ctx, nd); err != nil {
				return err
			}
		case have >= n && nd.Running():
			if _, err := m.Stop(nd, time.Minute); err != nil {
				return err
			}
		}
		have++
	}
	if have < n {
		_, err := m.StartRole(ctx, "worker", n-have)
		return err
	}
	return nil
}

// summarize is the row of rounds: the medians of their rates, CPU and
// idle, and, against base's rounds, round by round (none for the first
// of Workers), the medians of their ratios.
func summarize(rounds, base []handled) Row {
	var rates, idle, ratios, cpuRatios []float64
	perRole := map[string][]float64{}
	for i, h := range rounds {
		rates, idle = append(rates, h.rate), append(idle, h.idle)
		for role, v := range h.cpu {
			perRole[role] = append(perRole[role], v)
		}
		if base != nil {
			ratios = append(ratios, h.rate/base[i].rate)
			cpuRatios = append(cpuRatios, total(h.cpu)/total(base[i].cpu))
		}
	}
	row := Row{Handled: median.Of(rates), HandledSpread: spread(rates), Idle: median.Of(idle), CPU: map[string]float64{}}
	for role, v := range perRole {
		row.CPU[role] = median.Of(v)
	}
	if len(ratios) > 0 {
		row.Ratio, row.RatioSpread = median.Of(ratios), spread(ratios)
		row.CPURatio, row.CPURatioSpread = median.Of(cpuRatios), spread(cpuRatios)
	}
	return row
}

// spread is the lowest and highest of v.
func spread(v []float64) [2]float64 { return [2]float64{slices.Min(v), slices.Max(v)} }

// total is the CPU of every role.
func total(per10k map[string]float64) float64 {
	var t float64
	for _, v := range per10k {
		t += v
	}
	return t
}

// cpuSample is the CPU each role had used when it was read, with the
// machine's time, all cores together, and its idle part.
type cpuSample struct {
	roles     map[string]time.Duration
	all, idle time.Duration
}

// sampleCPU reads /proc for the running workers, relay (when not nil),
// RabbitMQ and PostgreSQL.
func (m *measure) sampleCPU(relay *harness.Node) (cpuSample, error) {
	roles, err := procstat.Named(map[string]string{"beam.smp": "rabbitmq", "postgres": "postgresql"})
	if err != nil {
		return cpuSample{}, err
	}
	for _, nd := range m.Nodes {
		if nd.Role == "worker" && nd.Running() {
			used, err := procstat.Process(nd.PID())
			if err != nil {
				return cpuSample{}, err
			}
			roles["workers"] += used
		}
	}
	if relay != nil {
		if roles["relay"], err = procstat.Process(relay.PID()); err != nil {
			return cpuSample{}, err
		}
	}
	t, err := procstat.Machine()
	return cpuSample{roles: roles, all: t.All, idle: t.Idle}, err
}

// since is each role's CPU seconds per 10,000 of n events from before to
// s, and the share of the cores idle meanwhile.
func (s cpuSample) since(before cpuSample, n int) (map[string]float64, float64) {
	per10k := map[string]float64{}
	for role, used := range s.roles {
		per10k[role] = (used - before.roles[role]).Seconds() * 10000 / float64(n)
	}
	idle := 0.0
	if all := s.all - before.all; all > 0 {
		idle = float64(s.idle-before.idle) / float64(all)
	}
	return per10k, idle
}

// backlog is how many events a phase measures: ten seconds of what the
// workers could do at most (prefetch handlers at once, each taking
// HandlerWork), from 1,500 to 10,000.
func (m *measure) backlog(workers int) int {
	most := workers * m.setup.Prefetch * int(time.Second/HandlerWork)
	return min(max(10*most, 1500), 10000)
}

// writeUntil writes events as fast as the writers go until n more are
// acknowledged.
func (m *measure) writeUntil(ctx context.Context, n int) error {
	target := m.Acknowledged() + n
	m.writing = m.Write(ctx, m.workload(backlogWriters, 0))
	for m.Acknowledged() < target {
		if !await.Sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	_, err := m.stopWriting()
	return err
}

// workload is the writers of a new phase of the measurement: good events,
// each taking the handler HandlerWork.
func (m *measure) workload(writers int, interval time.Duration) harness.Workload {
	m.phase++
	return harness.Workload{RunID: fmt.Sprintf(":phase%d", m.phase), Writers: writers, Interval: interval, Payload: func(writer, seq int, _ harness.Kind) any {
		return faultprobe.Payload{Writer: writer, Seq: seq, WorkMillis: int(HandlerWork / time.Millisecond)}
	}}
}

// awaitApplied waits until the probe's counter has counted target
// applications. It sums the counter's rows, not the effects: counting the
// effects' distinct ids sorts every row of every phase so far (23 ms at
// 16,000 rows), five times a second, on the PostgreSQL whose CPU per event
// the phase measures.
func (m *measure) awaitApplied(ctx context.Context, target int) error {
	return poll(ctx, func() (bool, string, error) {
		var applied int
		err := m.Pool.QueryRow(ctx, `SELECT sum(n)::bigint FROM faultprobe_counter`).Scan(&applied)
		return applied >= target, fmt.Sprintf("%d of %d events applied", applied, target), err
	})
}

// handledRate waits until every event acknowledged so far (target) is
// applied, and returns how many of those applied since from were applied
// per second, from the first to the last. After awaitApplied it reads the
// effects once, unless an event applied twice made the counter run ahead.
func (m *measure) handledRate(ctx context.Context, from time.Time, target int) (float64, error) {
	var rate float64
	err := poll(ctx, func() (bool, string, error) {
		var applied, n int
		var span float64
		err := m.Pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT event_id) FROM faultprobe_effects), count(*),
			COALESCE(extract(epoch FROM max(applied_at) - min(applied_at)), 0)::float8
			FROM faultprobe_effects WHERE applied_at >= $1`, from).Scan(&applied, &n, &span)
		if err != nil || applied < target {
			return false, fmt.Sprintf("%d of %d events applied", applied, target), err
		}
		if span <= 0 {
			return false, "", fmt.Errorf("%d events applied in no measurable time", n)
		}
		rate = float64(n-1) / span
		return true, "", nil
	})
	return rate, err
}

// poll calls check every 200 ms until it is done, fails, or 5 minutes
// pass; it then fails with how far check got.
func poll(ctx context.Context, check func() (done bool, got string, err error)) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done, got, err := check()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after 5 minutes", got)
		}
		if !await.Sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// steadyLoad runs the steady writers for latencyDuration and returns the
// window and how many events were acknowledged in it.
func (m *measure) steadyLoad(ctx context.Context) (window, int, error) {
	before := m.Acknowledged()
	w := window{from: time.Now()}
	m.writing = m.Write(ctx, m.workload(steadyWriters, steadyInterval))
	if err := wait(ctx, latencyDuration); err != nil {
		return w, 0, err
	}
	_, err := m.stopWriting()
	w.to = time.Now()
	return w, m.Acknowledged() - before, err
}

// stopUnderLoad starts a second api and a standby relay, then, under a
// load of half what the workers were measured to handle, stops a worker,
// the active relay and the first api with SIGTERM, one after the other,
// timing each exit, and starts each again, as a deploy does, counting the
// deliveries redelivered meanwhile.
func (m *measure) stopUnderLoad(ctx context.Context) error {
	if _, err := m.StartRole(ctx, "api", 1); err != nil {
		return err
	}
	if _, err := m.StartRole(ctx, "relay", 1); err != nil {
		return err
	}
	before, began := m.Acknowledged(), time.Now()
	handled := m.rows[len(m.rows)-1].Handled
	m.writing = m.Write(ctx, m.workload(backlogWriters, time.Duration(float64(backlogWriters)/(handled/2)*float64(time.Second))))
	for _, role := range []string{"worker", "relay", "api"} {
		if err := wait(ctx, stopLoadFor); err != nil {
			return err
		}
		nd := m.first(role)
		rate := float64(m.Acknowledged()-before) / time.Since(began).Seconds()
		counted := m.redelivered()
		took, err := m.Stop(nd, time.Minute)
		if err != nil {
			return err
		}
		if _, err := m.StartRole(ctx, role, 1); err != nil {
			return err
		}
		if err := wait(ctx, stopLoadFor); err != nil {
			return err
		}
		again := 0
		for n, c := range m.redelivered() {
			again += c - counted[n]
		}
		m.stops = append(m.stops, Stop{Setup: m.setup, Role: role, Took: took, Rate: rate, Redelivered: again})
	}
	return nil
}

// redelivered reads moenda_messages_redelivered_total from each running
// worker.
func (m *measure) redelivered() map[*harness.Node]int {
	counts := map[*harness.Node]int{}
	for _, nd := range m.Nodes {
		if nd.Role != "worker" || !nd.Running() {
			continue
		}
		metrics, err := nd.Metrics()
		if err != nil {
			m.problems = append(m.problems, fmt.Sprintf("%s: metrics: %v", nd.Name, err))
			continue
		}
		counts[nd] = int(metrics["moenda_messages_redelivered_total"])
	}
	return counts
}

// stopWriting stops the phase's writers, if any, and waits for their
// last commands.
func (m *measure) stopWriting() (map[harness.Outcome]int, error) {
	if m.writing == nil {
		return nil, nil
	}
	w := m.writing
	m.writing = nil
	return w.Stop()
}

// wait sleeps d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if !await.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// first is the first running node of role.
func (m *measure) first(role string) *harness.Node {
	for _, nd := range m.Nodes {
		if nd.Role == role && nd.Running() {
			return nd
		}
	}
	return nil
}

// Markdown writes the measurement as a section of BENCHMARKS.md.
func Markdown(w io.Writer, res Result, command string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Scale-out\n\nGenerated by `%s`, which rewrites this section only. ", command)
	fmt.Fprintf(&b, "Separate `serve` processes on this machine: one `--role api`, one `--role relay`, and 1 or 3 `--role worker` in turn, "+
		"whose handler waits %s per event before its unit of work opens (its prepare step, as a call to a slow service would), then writes its effect. **handled/s** is a backlog of events, written while the relay was stopped, applied by the workers "+
		"(first effect to last), in %d rounds in which the worker counts take turns, the order alternating: the median of the rounds, with their spread; "+
		"**ratio** is the median of the rounds' ratios to one worker's in the same round, with their spread; "+
		"**p50/p99** are acknowledgement (the API's 202) to effect at the steady rate shown, across the three processes, measured once.\n\n", HandlerWork, Rounds)
	b.WriteString("**CPU** is each process's user and system seconds per 10,000 events of the backlog, from the relay's start to the last effect, " +
		"the workers summed, the median of the rounds; **CPU ratio** is every process's CPU per event over one worker's in the same round, the median and spread of the rounds; " +
		"**idle** is the share of the machine's cores idle meanwhile: near 0, the machine bounded the rate, not the workers.\n\n")
	b.WriteString("| prefetch | reader | workers | backlog | handled/s | spread | ratio | spread | idle | CPU s per 10k | CPU ratio | spread | steady rate/s | e2e p50 | e2e p99 | e2e max |\n" +
		"|--:|---|--:|--:|--:|---|--:|---|--:|---|--:|---|--:|--:|--:|--:|\n")
	for _, r := range res.Rows {
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %.0f | %.0f–%.0f | %s | %s | %.0f %% | %s | %s | %s | %.0f | %s | %s | %s |\n",
			r.Prefetch, r.Reader, r.Workers, r.Backlog, r.Handled, r.HandledSpread[0], r.HandledSpread[1], ratio(r.Ratio), ratioSpread(r.RatioSpread),
			100*r.Idle, cpu(r.CPU), ratio(r.CPURatio), ratioSpread(r.CPURatioSpread), r.Rate, ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Latency.Max))
	}
	fmt.Fprintf(&b, "\nThen SIGTERM under load, one process after the other, with a second api and a standby relay running and writers going on at about half "+
		"what the three workers handled, each process started again once it exited, as a deploy does; **exit** is from the signal to the process's end, "+
		"the handlers in flight finishing first; **redelivered** counts the deliveries the workers received again from the signal until %s after the restart "+
		"(`moenda_messages_redelivered_total`): work in hand that the stop cut off, and any delivery RabbitMQ had just pushed to the stopping worker "+
		"that no handler had started, which the stop sends straight back:\n\n", stopLoadFor)
	b.WriteString("| prefetch | reader | role stopped | load/s | exit | redelivered |\n|--:|---|---|--:|--:|--:|\n")
	for _, s := range res.Stops {
		fmt.Fprintf(&b, "| %d | %s | %s | %.0f | %s | %d |\n", s.Prefetch, s.Reader, s.Role, s.Rate, ms(s.Took), s.Redelivered)
	}
	b.WriteString("\n| prefetch | reader | events acknowledged | lost | duplicate effects | duplicate deliveries absorbed | valid |\n|--:|---|--:|--:|--:|--:|---|\n")
	for _, c := range res.Checks {
		rep := c.Report
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %d | %d | %t |\n", c.Prefetch, c.Reader, rep.Confirmed, len(rep.Lost), len(rep.DuplicateEffects), rep.DuplicateDeliveries, rep.Valid)
	}
	for _, p := range res.Problems {
		fmt.Fprintf(&b, "\nProblem: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cpu prints the CPU seconds per 10,000 events of each role, in a fixed
// order.
func cpu(per10k map[string]float64) string {
	var parts []string
	for _, role := range []string{"workers", "relay", "rabbitmq", "postgresql"} {
		if v, ok := per10k[role]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", role, v))
		}
	}
	return strings.Join(parts, " · ")
}

// ratio prints a ratio to one worker's; the row of one worker has none.
func ratio(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// ratioSpread prints the lowest and highest of a ratio's rounds.
func ratioSpread(s [2]float64) string {
	if s == [2]float64{} {
		return ""
	}
	return fmt.Sprintf("%.2f–%.2f", s[0], s[1])
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
