// Package bench measures moenda against the raw clients on the same
// machine, in one run: the raw clients give each ceiling, moenda's figure
// is set against it as a ratio. Absolute numbers depend on the machine;
// ratios measured side by side do much less. `moenda bench` runs it.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/app/bench/procstat"
)

// Options size a run.
type Options struct {
	// Quick shrinks every measure to seconds: a smoke run that keeps the
	// harness working, not a measurement.
	Quick bool
	// ServeBin is the moenda binary whose serve is measured as a process.
	ServeBin string
	// PostgresURL and AMQPURL name the servers; the run creates its own
	// database and its own exchange and queues, and removes them.
	PostgresURL, AMQPURL string
	// Settings are moenda's, as the configuration sets them.
	Settings Settings
	// Kafka is the cluster of the Kafka measures (started when embedded);
	// the run puts its topics under a prefix of its own and deletes them.
	// Without brokers the run starts an embedded cluster of its own.
	Kafka kafka.Config
	// Steps, when set, are the names of the only steps to run (see
	// steps); a step's rows set against another step's then have no
	// ceiling.
	Steps  []string
	Logger *slog.Logger
}

// sizes are the amounts of work of each measure.
type sizes struct {
	messages   int           // raw publish and consume, router consume
	consumed   int           // each run of the inbox and poison steps
	rounds     int           // alternating rounds of the inbox and poison steps
	txDuration time.Duration // each transaction-rate measure
	backlog    int           // relay drain
	// kafkaBacklog is the Kafka relay drain's: a round of the raw producer
	// takes half a second at 50,000 records, short enough for a collection
	// or a scheduling hiccup to move it by a third.
	kafkaBacklog int
	bigBacklog   int           // relay drain, flatness check; 0 skips it
	latencyFor   time.Duration // end-to-end latency at a fixed rate
	rates        []int         // offered loads for latency, events/s
	foreign      int           // the one offered beside a transaction elsewhere
	idleFor      time.Duration // idle relay query count
	ledger       int           // failures the ledger's pages are read from
	renders      int           // renders of each console page timed
	dead         int           // dead letters ingested, then re-driven at full speed
	paced        int           // failures re-driven at a set rate
}

func (o Options) sizes() sizes {
	if o.Quick {
		return sizes{messages: 2000, consumed: 1000, rounds: 1, txDuration: 500 * time.Millisecond, backlog: 2000, kafkaBacklog: 2000, latencyFor: 2 * time.Second, rates: []int{200}, foreign: 200, idleFor: 2 * time.Second,
			ledger: 20000, renders: 3, dead: 1000, paced: 400}
	}
	return sizes{messages: 50000, consumed: 20000, rounds: 5, txDuration: 3 * time.Second, backlog: 50000, kafkaBacklog: 200000, bigBacklog: 500000, latencyFor: 10 * time.Second, rates: []int{500, 1000, 3000}, foreign: 1000, idleFor: 10 * time.Second,
		ledger: 1000000, renders: 15, dead: 20000, paced: 5000}
}

// Row is one figure. Ceiling is the raw client's figure it is set against
// (0 when there is none) and Ratio is Value/Ceiling, or Value against the
// row named in the target.
type Row struct {
	Name    string  `json:"name"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Ceiling float64 `json:"ceiling"`
	Ratio   float64 `json:"ratio"`
	// Target is the goal in words, such as "ratio >= 0.60"; Met says
	// whether this run reached it.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	// Spread is the lowest and the highest ratio of the row's paired
	// rounds, when Ratio is their median; or, for a row without a
	// ceiling, of its value, when Value is their median.
	Spread []float64 `json:"spread,omitempty"`
	// CPU is the CPU seconds, user plus system, that each process used
	// per 10,000 of the row's messages, by role (cpu.go).
	CPU map[string]float64 `json:"cpu_per_10k,omitempty"`
	// CPURatio is the CPU per message of moenda's own process over the
	// raw client's doing the same work, the median of the rounds, and
	// CPUSpread their lowest and highest. Unlike a rate, it does not move
	// when another process takes a core.
	CPURatio  float64   `json:"cpu_ratio,omitempty"`
	CPUSpread []float64 `json:"cpu_spread,omitempty"`
	// CoresBound is the ratio the row would have if the machine's cores
	// bounded both sides: the ceiling's CPU per message, every process's,
	// over moenda's. Where Ratio comes near it and Idle is near 0, the
	// cores are the limit, and what moenda could gain is in CPU.
	CoresBound float64 `json:"cores_bound_ratio,omitempty"`
	// Idle is the share of the machine's cores idle in moenda's rounds.
	Idle float64 `json:"idle,omitempty"`
}

// Result is a whole run.
type Result struct {
	Machine map[string]string `json:"machine"`
	Rows    []Row             `json:"rows"`
}

// measure is one step of the run: it reads earlier rows (ceilings) from
// r and appends its own. Adding a figure is adding a step to steps.
type measure struct {
	name string
	run  func(ctx context.Context, e *env, r *Result) error
}

// steps run in this order; a step may use the rows of those before it.
var steps = []measure{
	{"raw AMQP publish and consume", rawAMQP},
	{"transactions: raw pgx and the outbox", transactions},
	{"outbox write while each reader relays", writeWhileRelaying},
	{"outbox write notifying a polling relay", writeNotifying},
	{"relay drain and serve memory", relayDrain},
	{"Watermill's forwarder, for comparison", stockForwarder},
	{"idle relay", idleRelay},
	{"consume through the whole chain with the inbox", inboxConsume},
	{"1 % poisoned events", poisonConsume},
	{"what metrics and tracing cost", observability},
	{"end-to-end latency", latency},
	{"Kafka: relay drain and analytics replay", kafkaStream},
	{"failure workbench", failureWorkbench},
}

// Run runs every step, or those opts.Steps names, and returns the rows.
func Run(ctx context.Context, opts Options) (*Result, error) {
	run, err := chosen(opts.Steps)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer e.close()
	before, err := procstat.Machine()
	if err != nil {
		return nil, err
	}
	res := &Result{Machine: e.machine(ctx)}
	defer func() {
		res.Machine["contention"] = contention(before)
		opts.Logger.Info("bench: " + res.Machine["contention"])
	}()
	for _, m := range run {
		opts.Logger.Info("bench: " + m.name)
		if err := m.run(ctx, e, res); err != nil {
			return res, fmt.Errorf("bench: %s: %w", m.name, err)
		}
	}
	if err := e.leftClean(ctx); err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	return res, nil
}

// contention says what the machine's cores lost since before: time the
// hypervisor gave other machines, and time idle waiting on the disk.
// Either moves rates in a way no process's CPU shows, so a run that had
// much of it is noisier than one that had none.
func contention(before procstat.Times) string {
	now, err := procstat.Machine()
	if err != nil {
		return err.Error()
	}
	all := (now.All + now.Steal) - (before.All + before.Steal)
	if all <= 0 {
		return "not measured: /proc/stat did not move"
	}
	share := func(d time.Duration) float64 { return 100 * float64(d) / float64(all) }
	return fmt.Sprintf("over the run, %.1f %% of the cores' time went to other machines (steal) and %.1f %% to waiting on the disk (iowait)",
		share(now.Steal-before.Steal), share(now.IOWait-before.IOWait))
}

// chosen returns the steps named, in the run's order; none is every step.
func chosen(names []string) ([]measure, error) {
	if len(names) == 0 {
		return steps, nil
	}
	var out []measure
	known := make([]string, len(steps))
	for i, m := range steps {
		known[i] = fmt.Sprintf("%q", m.name)
		if slices.Contains(names, m.name) {
			out = append(out, m)
		}
	}
	for _, name := range names {
		if !slices.ContainsFunc(steps, func(m measure) bool { return m.name == name }) {
			return nil, fmt.Errorf("bench: no step %q; the steps are %s", name, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// add appends a row, computing its ratio against ceiling unless the row
// has one, and checking
// target (ratio >= min, or value <= max when max > 0).
func (r *Result) add(row Row, minRatio, maxValue float64) {
	if row.Ceiling > 0 && row.Ratio == 0 { // a step may give the median of its rounds' ratios
		row.Ratio = row.Value / row.Ceiling
	}
	if minRatio > 0 || maxValue > 0 {
		met := (minRatio == 0 || row.Ratio >= minRatio) && (maxValue == 0 || row.Value <= maxValue)
		row.Met = &met
	}
	r.Rows = append(r.Rows, row)
}

// addNear appends a row whose target is a value: met when the row's
// value is within tolerance (a fraction) of want.
func (r *Result) addNear(row Row, want, tolerance float64) {
	met := math.Abs(row.Value-want)/want <= tolerance
	row.Met = &met
	r.Rows = append(r.Rows, row)
}

// value returns the value of the row named name, or 0.
func (r *Result) value(name string) float64 {
	for _, row := range r.Rows {
		if row.Name == name {
			return row.Value
		}
	}
	return 0
}

// WriteTable prints the rows as an aligned table.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "name\tvalue\tunit\tceiling\tratio\tspread\ttarget\tmet\tCPU ratio\tcores-bound ratio\tidle\tCPU s per 10k\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", row.Name, num(row.Value), row.Unit, num(row.Ceiling), ratio(row.Ratio), spread(row.Spread),
			row.Target, met(row.Met), strings.TrimSpace(ratio(row.CPURatio)+" "+spread(row.CPUSpread)), ratio(row.CoresBound), percent(row), cpu(row.CPU))
	}
	return tw.Flush()
}

// WriteJSON prints the rows as a JSON list.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Rows)
}

// WriteMarkdown writes the BENCHMARKS.md document: machine, then rows.
func (r *Result) WriteMarkdown(w io.Writer, command string) error {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Generated by `" + command + "`. Each ceiling is the raw client (amqp091-go, pgx, franz-go, sarama) doing the same work on the\n")
	b.WriteString("same machine in the same run; the ratio is moenda's figure over it. Absolute figures vary with the\n")
	b.WriteString("machine; compare ratios. What each row measures is in the README, section Benchmarks.\n\n")
	b.WriteString("## Machine\n\n| | |\n|---|---|\n")
	for _, k := range []string{"date", "cpu", "nproc", "memory", "go", "postgresql", "autovacuum", "rabbitmq", "kafka", "mode", "contention"} {
		fmt.Fprintf(&b, "| %s | %s |\n", k, r.Machine[k])
	}
	b.WriteString("\n## Results\n\n")
	b.WriteString("Spread is the lowest and highest ratio of a row's paired rounds, whose median is the ratio (for a row without a\n")
	b.WriteString("ceiling, such as a latency, the lowest and highest value of its rounds, whose median is the value). CPU is user\n")
	b.WriteString("plus system seconds per 10,000 messages, from /proc: moenda's serve process, the raw publisher's process, the\n")
	b.WriteString("bench process (the consumer of what a relay or the raw publisher sent; or the router, or the raw consumer, where\n")
	b.WriteString("the row runs them in it, one at a time), RabbitMQ's beam.smp, the embedded Kafka cluster's process and\n")
	b.WriteString("PostgreSQL's processes. The CPU ratio is the CPU per message of moenda's process over the raw client's doing the\n")
	b.WriteString("same work, with its spread: unlike a rate, it does not move when another process takes a core. The cores-bound\n")
	b.WriteString("ratio is the ratio the rates would have if the machine's cores bounded both sides: the ceiling's CPU per\n")
	b.WriteString("message, every process's, over moenda's; idle is the share of the cores idle in moenda's rounds. A ratio near\n")
	b.WriteString("its cores-bound ratio, with little idle, is the machine's limit: what moenda can gain there is CPU per message. " + r.Machine["instructions"] + "\n\n")
	b.WriteString("| name | value | unit | ceiling | ratio | spread | target | met | CPU ratio | cores-bound ratio | idle | CPU s per 10k |\n|---|--:|---|--:|--:|---|---|---|---|--:|--:|---|\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.Name, num(row.Value), row.Unit, num(row.Ceiling), ratio(row.Ratio), spread(row.Spread),
			row.Target, met(row.Met), strings.TrimSpace(ratio(row.CPURatio)+" "+spread(row.CPUSpread)), ratio(row.CoresBound), percent(row), cpu(row.CPU))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	switch {
	case v == 0:
		return ""
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// percent prints a row's idle share, when it has a cores-bound ratio or
// an idle share of its own.
func percent(row Row) string {
	if row.CoresBound == 0 && row.Idle == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f %%", 100*row.Idle)
}

// spread prints a row's lowest and highest ratio, as "0.81–0.90".
func spread(s []float64) string {
	if len(s) != 2 {
		return ""
	}
	if s[1] >= 100 {
		return fmt.Sprintf("%.0f–%.0f", s[0], s[1])
	}
	return fmt.Sprintf("%.2f–%.2f", s[0], s[1])
}

// cpu prints the CPU seconds per 10,000 messages of each role, in the
// order of cpuRoles.
func cpu(per10k map[string]float64) string {
	var parts []string
	for _, role := range cpuRoles {
		if v, ok := per10k[role]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", role, v))
		}
	}
	return strings.Join(parts, " · ")
}

func met(m *bool) string {
	switch {
	case m == nil:
		return ""
	case *m:
		return "yes"
	default:
		return "NO"
	}
}
