// Package faults proves moenda's promise under injected faults: every
// event committed with its business row reaches its subscriber, is handled
// once, and never disappears. Each case runs on the harness (serve
// processes, writers, a history kept outside the system under test); a
// nemesis injects faults; once they are healed and the system has
// drained, the harness's checker compares what was confirmed with what
// came out.
package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"

	"github.com/moenda/moenda/app/harness"
)

// Options set a run of the suite.
type Options struct {
	// Quick runs the cases marked for every change.
	Quick bool
	// Only runs these cases (T03, T11), whatever Quick says.
	Only []string
	// Seed drives every random choice of the schedule: the same seed
	// injects the same faults at the same points of a case.
	Seed uint64
	// ServeBin is the moenda binary the nodes run.
	ServeBin string
	// PostgresURL and AMQPURL name the local servers; each case makes a
	// database and a vhost of its own on them.
	PostgresURL string
	AMQPURL     string
	// Dir keeps each case's history and node logs; a passing case's are
	// removed.
	Dir string
	// Progress gets one line per case as it ends.
	Progress io.Writer
}

// system is what the harness needs of the options.
func (o Options) system() harness.Config {
	return harness.Config{ServeBin: o.ServeBin, PostgresURL: o.PostgresURL, AMQPURL: o.AMQPURL}
}

// Result is one case's outcome.
type Result struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Injected says what the nemesis did.
	Injected string `json:"injected"`
	// NotRun says why the case did not run here; the rest is empty then.
	NotRun     string                  `json:"not_run,omitempty"`
	Pass       bool                    `json:"pass"`
	Counts     map[harness.Outcome]int `json:"counts,omitempty"`
	Report     harness.Report          `json:"report"`
	Latency    harness.Latency         `json:"latency"`
	Recoveries []harness.Recovery      `json:"recoveries,omitempty"`
	Bound      time.Duration           `json:"recovery_bound,omitempty"`
	Problems   []string                `json:"problems,omitempty"`
	Notes      []string                `json:"notes,omitempty"`
	Took       time.Duration           `json:"took"`
	Kept       string                  `json:"kept,omitempty"`
	Extra      map[string]float64      `json:"extra,omitempty"`
	// Clauses are the case's "what must hold", each with its verdict.
	Clauses []Clause `json:"clauses,omitempty"`
}

// Worst is the longest recovery of the case.
func (r Result) Worst() time.Duration {
	var w time.Duration
	for _, rc := range r.Recoveries {
		w = max(w, rc.Took)
	}
	return w
}

// lagBound is the end-to-end lag under which a system counts as
// recovered.
const lagBound = 2 * time.Second

// Run runs the selected cases one after another, each on a database and
// a vhost of its own, and returns their results.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if err := opts.system().CheckLocal(); err != nil {
		return nil, fmt.Errorf("faults: %w, since the suite restarts and kills the servers", err)
	}
	cases, err := selectCases(opts.Quick, opts.Only)
	if err != nil {
		return nil, err
	}
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "faults: seed %d (re-run with --seed %d); failing cases keep their history and logs under %s\n", opts.Seed, opts.Seed, opts.Dir)
	}
	var results []Result
	for _, c := range cases {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		res := Result{ID: c.ID, Title: c.Title, NotRun: c.NotHere}
		if c.NotHere == "" {
			res = runCase(ctx, opts, c)
		}
		results = append(results, res)
		if opts.Progress != nil {
			fmt.Fprintln(opts.Progress, res.Line())
		}
	}
	return results, nil
}

// runCase runs one case: its writers and its nemesis, then heals, drains,
// observes and checks.
func runCase(ctx context.Context, opts Options, c Case) (res Result) {
	res = Result{ID: c.ID, Title: c.Title, Bound: c.bound()}
	start := time.Now()
	defer func() { res.Took = time.Since(start).Round(time.Second) }()
	// A re-run of the seed replaces what an earlier one kept.
	dir := filepath.Join(opts.Dir, fmt.Sprintf("%s-seed%d", c.ID, opts.Seed))
	cfg := opts.system()
	cfg.RabbitNodes, cfg.Standby = c.Rabbits, c.Standby
	s, err := harness.NewSystem(ctx, cfg, dir, c.overlay(opts.Quick), c.Overlay)
	if err != nil {
		res.Problems = append(res.Problems, "set up: "+err.Error())
		return res
	}
	defer s.Close(context.WithoutCancel(ctx))
	s.Ledger = c.Failures
	h := fnv.New64a()
	_, _ = h.Write([]byte(c.ID))
	r := &run{c: c, inboxRepeats: -1, drainBound: cmp.Or(c.Drain, harness.DrainBound), System: s, rng: rand.New(rand.NewPCG(opts.Seed, h.Sum64())), quick: opts.Quick, result: &res, gone: map[*harness.Node]bool{}}
	watch := r.watchConsumers(ctx)
	caseErr := c.Run(ctx, r)
	if _, err := r.stopWriting(); err != nil {
		r.problem("writers: %v", err)
	}
	if caseErr != nil {
		r.problem("%v", caseErr)
	}
	// Heal what the case left down, then let the system drain; a node
	// that will not start leaves nothing to drain.
	up := true
	for _, nd := range s.Nodes {
		if !nd.Running() && !r.gone[nd] {
			if err := s.Restart(ctx, nd); err != nil {
				r.problem("restart %s: %v", nd.Name, err)
				up = false
			}
		}
	}
	var seen harness.Observed
	if up {
		if seen, err = r.observe(ctx); err != nil {
			r.problem("observe: %v", err)
		}
	}
	watch()
	ops, faultLines, err := s.CloseHistory()
	if err != nil {
		r.problem("history: %v", err)
	}
	res.Report = harness.Check(ops, seen)
	if c.Standby == harness.StandbyAsync {
		res.Report.SeparateDatabaseLoss(ops, seen)
	}
	res.Latency = harness.Latencies(ops, seen.Effects)
	res.Recoveries = harness.Recoveries(ops, seen.Effects, faultLines, lagBound, r.consumersBack)
	for _, rc := range res.Recoveries {
		if !rc.Recovered(res.Bound) {
			r.problem("%s: not recovered within %s (took %s)", rc.Fault, res.Bound, fmtTook(rc.Took))
		}
	}
	for _, after := range r.after {
		after(ops, seen)
	}
	res.Pass = r.conclude(c, ops)
	if res.Pass {
		_ = os.RemoveAll(dir)
	} else {
		if err := harness.WriteEffects(filepath.Join(dir, "effects.jsonl"), seen.Effects); err != nil {
			res.Problems = append(res.Problems, err.Error())
		}
		res.Kept = dir
	}
	return res
}

// run is a case in progress: the system, the seeded schedule, and what the
// case found.
type run struct {
	*harness.System
	rng    *rand.Rand
	quick  bool
	result *Result

	writing *harness.Writers
	gone    map[*harness.Node]bool
	after   []func(ops []harness.Op, seen harness.Observed)
	backMu  sync.Mutex
	samples []consumerSample
	// drainBound bounds the wait for quiet after the case.
	drainBound time.Duration
	// judged holds the checks' verdicts on the case's clauses, by key.
	judged map[string]*judgement
	// inboxRepeats counts inbox claims held twice (consumer and event
	// id); -1 when they could not be read.
	inboxRepeats int
	// before is each node's use of goroutines, files and memory when the
	// first fault struck; resourcesAfter compares it with the end.
	before map[*harness.Node]usage
	// consumersAtFault is the consumer count of the probe's queue just
	// before the first fault.
	consumersAtFault int
	// c is the case that runs.
	c Case
}

// conclude judges the clauses every case shares (the checker's criteria,
// and the recovery bound where the case states one), gives each of the
// case's clauses its verdict, and reports whether the case passed: the
// checker's report valid, no problem, and no clause broken.
func (r *run) conclude(c Case, ops []harness.Op) bool {
	res := r.result
	if r.judged == nil {
		r.judged = map[string]*judgement{}
	}
	// The checker's findings are the report's, not problems of their own.
	r.judged[clauseChecker] = &judgement{broken: !res.Report.Valid, detail: []string{checkerSummary(res.Report)}}
	declared := append([]Clause{checkerClean}, c.Holds...)
	for _, cl := range c.Holds {
		if cl.Status != NotChecked {
			r.judgeShared(cl.Key, ops)
		}
	}
	var undeclared []string
	res.Clauses, undeclared = verdicts(declared, r.judged)
	for _, k := range undeclared {
		r.problem("a check judged clause %q, which case %s does not declare", k, c.ID)
	}
	return res.Report.Valid && len(res.Problems) == 0 && count(res.Clauses, Broken) == 0
}

// judgeShared judges the clauses whose verdict comes from the checker's
// report and what every run observes; a case's own clauses are judged by
// its checks.
func (r *run) judgeShared(key string, ops []harness.Op) {
	rep := r.result.Report
	switch key {
	case clauseRecovery:
		r.judgeRecoveries()
	case clauseNoLoss:
		r.judge(key, len(rep.Lost) == 0 && rep.Drained, "lost %d of %d confirmed, drained %v", len(rep.Lost), rep.Confirmed, rep.Drained)
	case clauseNoDuplicate:
		r.judge(key, len(rep.DuplicateEffects) == 0 && len(rep.Lost) == 0, "duplicate effects %d, lost %d; duplicate deliveries %d",
			len(rep.DuplicateEffects), len(rep.Lost), rep.DuplicateDeliveries)
	case clauseDrained:
		r.judge(key, rep.Drained, "every queue empty, nothing unacknowledged, within %s: %v", r.drainBound, rep.Drained)
	case clauseOnce:
		r.judge(key, len(rep.DuplicateEffects) == 0 && r.inboxRepeats == 0, "duplicate effects %d; inbox claims held twice %d", len(rep.DuplicateEffects), r.inboxRepeats)
	case clauseRolledBack:
		r.judge(key, len(rep.Unexpected) == 0 && len(rep.DuplicateEffects) == 0 && len(rep.Lost) == 0,
			"ghosts %d, duplicate effects %d, lost %d; duplicate deliveries %d", len(rep.Unexpected), len(rep.DuplicateEffects), len(rep.Lost), rep.DuplicateDeliveries)
	}
}

// judgeRecoveries judges the recovery clause: every healed fault
// recovered within the case's bound, and there was one to measure.
func (r *run) judgeRecoveries() {
	res := r.result
	if len(res.Recoveries) == 0 {
		r.judge(clauseRecovery, false, "no healed fault to measure a recovery from")
		return
	}
	for _, rc := range res.Recoveries {
		if !rc.Recovered(res.Bound) {
			// runCase has recorded the problem already.
			r.judged[clauseRecovery] = &judgement{broken: true, detail: []string{fmt.Sprintf("%s: took %s, over %s", rc.Fault, fmtTook(rc.Took), res.Bound)}}
			return
		}
	}
	if r.judged[clauseRecovery] == nil {
		r.judge(clauseRecovery, true, "%d recoveries, worst %s (bound %s)", len(res.Recoveries), res.worst(), res.Bound)
	}
}

type consumerSample struct {
	at        time.Time
	consumers int
}

// scale is n in a full run and quick in a quick one.
func (r *run) scale(full, quick int) int {
	if r.quick {
		return quick
	}
	return full
}

// jitter is d give or take a quarter, from the seeded schedule.
func (r *run) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + r.rng.Float64()/2))
}

// problem records a failed case-specific check.
func (r *run) problem(format string, args ...any) {
	r.result.Problems = append(r.result.Problems, fmt.Sprintf(format, args...))
}

// note records a finding that is not a failure.
func (r *run) note(format string, args ...any) {
	r.result.Notes = append(r.result.Notes, fmt.Sprintf(format, args...))
}

// injected says what the case does, for the report.
func (r *run) injected(format string, args ...any) {
	r.result.Injected = fmt.Sprintf(format, args...)
}

// write starts writers that publish the probe's event through the nodes'
// API until stopWriting.
func (r *run) write(ctx context.Context, w harness.Workload) {
	r.writing = r.Write(ctx, w)
}

// stopWriting stops the writers and waits for their last commands.
func (r *run) stopWriting() (map[harness.Outcome]int, error) {
	if r.writing == nil {
		return r.result.Counts, nil
	}
	counts, err := r.writing.Stop()
	r.writing = nil
	r.result.Counts = counts
	return counts, err
}

// wait sleeps d unless ctx ends first.
func (r *run) wait(ctx context.Context, d time.Duration) error {
	if !await.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// inject runs a fault: do, a hold of the fault, then heal, each logged in
// the history. heal runs even when ctx has ended, so that nothing is left
// broken.
func (r *run) inject(ctx context.Context, fault string, hold time.Duration, do, heal func(context.Context) error) error {
	if r.before == nil {
		r.baseline()
	}
	r.Mark(fault, "start")
	err := do(ctx)
	if err == nil && hold > 0 {
		err = r.wait(ctx, hold)
	}
	if heal != nil {
		if herr := heal(context.WithoutCancel(ctx)); herr != nil {
			err = errors.Join(err, fmt.Errorf("heal %s: %w", fault, herr))
		}
	}
	r.Mark(fault, "stop")
	if err != nil {
		return fmt.Errorf("%s: %w", fault, err)
	}
	return nil
}

// watchConsumers samples the consumers of the probe's queue every 250 ms
// until the returned function is called.
func (r *run) watchConsumers(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conn *amqp091.Connection
		defer func() {
			if conn != nil {
				_ = conn.Close()
			}
		}()
		for await.Sleep(ctx, 250*time.Millisecond) {
			n := 0
			if conn == nil || conn.IsClosed() {
				conn, _ = r.DialAMQP()
			}
			if conn != nil && !conn.IsClosed() {
				var ok bool
				if n, ok = consumersOf(conn, harness.ProbeQueues.Work); !ok {
					_ = conn.Close()
					conn = nil
				}
			}
			r.backMu.Lock()
			r.samples = append(r.samples, consumerSample{time.Now(), n})
			r.backMu.Unlock()
		}
	}()
	return func() { cancel(); <-done }
}

// consumersOf reads how many consumers queue has, through conn. A broker
// still starting may accept the connection and leave its requests
// unanswered, and amqp091 waits for an answer for as long as the
// connection lives: after a second, ok is false, and the caller closes
// conn, which ends the wait, and dials again. Without it, the watch
// stopped until the next fault closed the connection, and a recovery
// was charged with the time in between.
func consumersOf(conn *amqp091.Connection, queue string) (n int, ok bool) {
	got := make(chan int, 1)
	go func() {
		n := 0
		if ch, err := conn.Channel(); err == nil {
			if q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err == nil {
				n = q.Consumers
			}
			_ = ch.Close()
		}
		got <- n
	}()
	select {
	case n := <-got:
		return n, true
	case <-time.After(time.Second):
		return 0, false
	}
}

// consumersBack is the first time at or after healed that the probe's
// queue had a consumer; zero if never.
func (r *run) consumersBack(healed time.Time) time.Time {
	r.backMu.Lock()
	defer r.backMu.Unlock()
	for _, s := range r.samples {
		if !s.at.Before(healed) && s.consumers > 0 {
			return s.at
		}
	}
	return time.Time{}
}

// consumersReach is the first time at or after healed that the probe's
// queue had at least n consumers; zero if never.
func (r *run) consumersReach(healed time.Time, n int) time.Time {
	r.backMu.Lock()
	defer r.backMu.Unlock()
	for _, s := range r.samples {
		if !s.at.Before(healed) && s.consumers >= n {
			return s.at
		}
	}
	return time.Time{}
}

// observe waits until the system is quiet, drains the dead-letter and
// unrouted queues, judges the nodes' use of resources before it stops
// them, and reads what the probe applied.
func (r *run) observe(ctx context.Context) (harness.Observed, error) {
	seen, obs, err := r.Observe(ctx, r.drainBound, r.judgeResources)
	r.result.addExtra("drain_seconds", obs.DrainTook.Seconds())
	if obs.SlowestExit > 0 {
		r.result.addExtra("exit_seconds_max", obs.SlowestExit.Seconds())
	}
	for _, p := range obs.Problems {
		r.problem("%s", p)
	}
	if err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM moenda_inbox GROUP BY consumer, event_id HAVING count(*) > 1) d`).Scan(&r.inboxRepeats); err != nil {
		r.inboxRepeats = -1
	}
	return seen, err
}

// channel opens a channel in publisher-confirm mode to the case's vhost,
// on a connection of the checker's own; closeCh closes both.
func (r *run) channel() (ch *amqp091.Channel, closeCh func(), err error) {
	conn, err := r.DialAMQP()
	if err != nil {
		return nil, nil, err
	}
	if ch, err = conn.Channel(); err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return ch, func() { _ = conn.Close() }, nil
}

// addExtra keeps the largest value of a named figure.
func (r *Result) addExtra(name string, v float64) {
	if r.Extra == nil {
		r.Extra = map[string]float64{}
	}
	r.Extra[name] = max(r.Extra[name], v)
}

// Line is the case's result for people, on one line.
func (r Result) Line() string {
	if r.NotRun != "" {
		return fmt.Sprintf("%s  not run  %s: %s", r.ID, r.Title, r.NotRun)
	}
	verdict := "FAIL"
	if r.Pass {
		verdict = "pass"
	}
	rep := r.Report
	line := fmt.Sprintf("%s  %s  %s: attempted %d, confirmed %d (recovered %d), lost %d, ghosts %d, duplicate effects %d, dead letters %d/%d expected, duplicate deliveries %d, p99 %s, worst recovery %s, %s",
		r.ID, verdict, r.Title, rep.Attempted, rep.Confirmed, rep.Recovered, len(rep.Lost), len(rep.Unexpected), len(rep.DuplicateEffects),
		rep.DeadLettered, rep.PoisonConfirmed, rep.DuplicateDeliveries, r.p99(), r.worst(), r.Took)
	if !rep.Drained && r.Report.Attempted > 0 {
		line += "; NOT DRAINED"
	}
	if n := count(r.Clauses, NotChecked); n > 0 {
		line += fmt.Sprintf("; %d of %d clauses not checked here", n, len(r.Clauses))
	}
	for _, c := range r.Broken() {
		line += "\n    clause failed: " + c.Text
	}
	for _, p := range r.Problems {
		line += "\n    " + p
	}
	if r.Kept != "" {
		line += "\n    history and node logs kept in " + r.Kept
	}
	return line
}

// p99 and worst print the case's latency and worst recovery, or "–"
// where it has none.
func (r Result) p99() string {
	if r.Latency.Max == 0 {
		return "–"
	}
	return r.Latency.P99.Round(time.Millisecond).String()
}

func (r Result) worst() string {
	if len(r.Recoveries) == 0 {
		return "–"
	}
	return fmtTook(r.Worst())
}

func fmtTook(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(10 * time.Millisecond).String()
}

// Selected names the cases a run would run, for messages.
func Selected(quick bool, only []string) ([]string, error) {
	cases, err := selectCases(quick, only)
	var ids []string
	for _, c := range cases {
		ids = append(ids, c.ID)
	}
	return ids, err
}

func selectCases(quick bool, only []string) ([]Case, error) {
	all := Cases()
	if len(only) > 0 {
		var out []Case
		for _, id := range only {
			i := slices.IndexFunc(all, func(c Case) bool { return strings.EqualFold(c.ID, strings.TrimSpace(id)) })
			if i < 0 {
				return nil, fmt.Errorf("faults: no case %q; the cases are %s", id, caseRanges(all))
			}
			out = append(out, all[i])
		}
		return out, nil
	}
	if !quick {
		return all, nil
	}
	var out []Case
	for _, c := range all {
		if c.Quick {
			out = append(out, c)
		}
	}
	return out, nil
}

// errOr is err, or an error saying what when err is nil.
func errOr(err error, what string) error {
	if err != nil {
		return err
	}
	return errors.New(what)
}

// caseRanges names the cases by their series: "T01 to T36, W01 to W02".
func caseRanges(cases []Case) string {
	var out []string
	for i := 0; i < len(cases); {
		j := i
		for j+1 < len(cases) && cases[j+1].ID[0] == cases[i].ID[0] {
			j++
		}
		out = append(out, cases[i].ID+" to "+cases[j].ID)
		i = j + 1
	}
	return strings.Join(out, ", ")
}
