package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/moenda/moenda/app/harness"
)

// Summary adds up a run's results.
type Summary struct {
	Passed, Failed, NotRun int
	Attempted, Confirmed   int
	Lost, DuplicateEffects int
	Worst                  time.Duration
	WorstCase              string
	// Held, Broken and NotChecked count the clauses of the cases run.
	Held, Broken, NotChecked int
}

// Summarize adds up results.
func Summarize(results []Result) Summary {
	var s Summary
	for _, r := range results {
		switch {
		case r.NotRun != "":
			s.NotRun++
			continue
		case r.Pass:
			s.Passed++
		default:
			s.Failed++
		}
		s.Attempted += r.Report.Attempted
		s.Confirmed += r.Report.Confirmed
		s.Lost += len(r.Report.Lost)
		s.DuplicateEffects += len(r.Report.DuplicateEffects)
		s.Held += count(r.Clauses, Held)
		s.Broken += count(r.Clauses, Broken)
		s.NotChecked += count(r.Clauses, NotChecked)
		if w := r.Worst(); w > s.Worst {
			s.Worst, s.WorstCase = w, r.ID
		}
	}
	return s
}

// WriteJSON writes one JSON document per case, a line each.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// WriteMarkdown writes RELIABILITY.md: the machine, the seed and the
// command, then a row per case and its findings.
func WriteMarkdown(w io.Writer, results []Result, seed uint64, command string) error {
	s := Summarize(results)
	var b strings.Builder
	fmt.Fprintf(&b, "# Reliability\n\n")
	fmt.Fprintf(&b, "What `moenda faults` found on %s, on a machine with %d cores (%s/%s), against the local PostgreSQL and RabbitMQ. "+
		"Each case ran on a database and a vhost of its own, with moenda serve processes running the fault probe: a consumer whose effect "+
		"(a row without a unique key, and a counter) shows every duplicate. Writers publish through `POST /v1/events` and record every command in a "+
		"history outside the database; after each case's faults are healed and the system has drained, the checker compares the history with "+
		"the effects and the dead letters.\n\n", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "Produced by `%s` (seed %d; the same seed injects the same faults at the same points).\n\n", command, seed)
	fmt.Fprintf(&b, "**%d passed, %d failed, %d not run here.** Events attempted %d, confirmed %d; lost %d; duplicate effects %d; worst recovery %s (%s). "+
		"Clauses: %d held, %d failed, %d not checked here (see [What each case checks](#what-each-case-checks)).\n\n",
		s.Passed, s.Failed, s.NotRun, s.Attempted, s.Confirmed, s.Lost, s.DuplicateEffects, fmtTook(s.Worst), s.WorstCase, s.Held, s.Broken, s.NotChecked)
	b.WriteString("Recovery is from the fault's heal until events committed from then on were applied within 2 s, and kept being so for 10 s (or until the next fault), and the probe's queue had a consumer; " +
		"when the next fault struck before that, to the first recovery after it. Duplicate deliveries are the redeliveries the inbox absorbed (allowed: the price of at-least-once); a node killed takes its own count with it.\n\n")
	b.WriteString("| case | injected | result | attempted | confirmed | lost | ghosts | dup. effects | dead letters / poison | dup. deliveries | p99 | worst recovery (bound) |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		if r.NotRun != "" {
			fmt.Fprintf(&b, "| %s %s | | not run | | | | | | | | | |\n", r.ID, r.Title)
			continue
		}
		verdict := "**fail**"
		if r.Pass {
			verdict = "pass"
		}
		rep := r.Report
		worst := r.worst()
		if len(r.Recoveries) > 0 {
			worst += fmt.Sprintf(" (%s)", r.Bound)
		}
		fmt.Fprintf(&b, "| %s %s | %s | %s | %d | %d | %d | %d | %d | %d / %d | %d | %s | %s |\n", r.ID, r.Title, r.Injected, verdict,
			rep.Attempted, rep.Confirmed, len(rep.Lost), len(rep.Unexpected), len(rep.DuplicateEffects), rep.DeadLettered, rep.PoisonConfirmed,
			rep.DuplicateDeliveries, r.p99(), worst)
	}
	b.WriteString("\n## What each case checks\n\n")
	b.WriteString("Each case lists the clauses of its \"what must hold\" (RELIABILITY-CASES), the checker's shared criteria first, each with its verdict: " +
		"**pass**, the run checked the clause and it held; **fail**, the run checked it and it did not hold, or ended before checking it; " +
		"**not checked here**, the suite does not check it on this machine, for the reason given (a tool, a server setting or a record it lacks, a fault it does not inject), " +
		"with where it is shown instead when it is. " +
		"A clause not checked here is never counted as a pass, and a case passes only when none of its checked clauses failed.\n\n")
	for _, r := range results {
		if r.NotRun != "" || len(r.Clauses) == 0 {
			continue
		}
		fmt.Fprintf(&b, "- **%s %s**: %d checked, %d not checked here\n", r.ID, r.Title, len(r.Clauses)-count(r.Clauses, NotChecked), count(r.Clauses, NotChecked))
		for _, c := range r.Clauses {
			verdict := string(c.Status)
			switch c.Status {
			case Broken:
				verdict = "**fail**"
			case NotChecked:
				verdict = "not checked here"
			}
			fmt.Fprintf(&b, "  - %s: %s", verdict, c.Text)
			if c.Detail != "" {
				fmt.Fprintf(&b, " (%s)", strings.ReplaceAll(c.Detail, "\n", " "))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n## Findings and cases not run here\n\n")
	for _, r := range results {
		switch {
		case r.NotRun != "":
			fmt.Fprintf(&b, "- **%s %s**: %s.\n", r.ID, r.Title, r.NotRun)
		case len(r.Problems) > 0 || len(r.Notes) > 0 || !r.Report.Valid:
			fmt.Fprintf(&b, "- **%s %s**:", r.ID, r.Title)
			for _, p := range r.Problems {
				fmt.Fprintf(&b, " FAIL: %s.", p)
			}
			if !r.Report.Valid {
				fmt.Fprintf(&b, " The checker: %s.", checkerFindings(r.Report))
			}
			for _, n := range r.Notes {
				fmt.Fprintf(&b, " %s.", n)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// checkerSummary says what the checker found, for the checker's clause.
func checkerSummary(r harness.Report) string {
	if !r.Valid {
		return checkerFindings(r)
	}
	return fmt.Sprintf("confirmed %d: lost 0, ghosts 0, duplicate effects 0, %d dead-lettered of %d poison, drained", r.Confirmed, r.DeadLettered, r.PoisonConfirmed)
}

// checkerFindings says what made a report invalid.
func checkerFindings(r harness.Report) string {
	var out []string
	add := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(len(r.Lost), "lost")
	add(len(r.Unexpected), "ghosts")
	add(len(r.DuplicateEffects), "duplicate effects")
	add(len(r.DLQMissing), "poison events not dead-lettered")
	add(len(r.DLQExtra), "good events dead-lettered or poison applied")
	add(len(r.DLQIncomplete), "dead letters without reason, attempts or correlation id")
	add(len(r.OrderViolations), "order violations")
	if r.CounterMismatch {
		out = append(out, "the counter disagrees with the effects")
	}
	if !r.Drained {
		out = append(out, "not drained within the bound")
	}
	return strings.Join(out, ", ")
}
