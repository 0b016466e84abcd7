package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/app/harness"
)

// RELIABILITY.md carries every case: a passing one's counts, a failing
// one's findings, and the reason a case did not run.
func TestWriteMarkdown(t *testing.T) {
	results := []Result{
		{ID: "T01", Title: "ok case", Injected: "a fault", Pass: true, Report: harness.Report{Valid: true, Attempted: 10, Confirmed: 10, Drained: true},
			Recoveries: []harness.Recovery{{Fault: "f", Took: 2 * time.Second}}, Bound: 15 * time.Second,
			Clauses: []Clause{{Key: clauseChecker, Text: "checker clean", Status: Held, Detail: "lost 0"},
				{Text: "no bypass through a header", Status: NotChecked, Detail: "no allowlist here"}}},
		{ID: "T02", Title: "bad case", Injected: "another", Report: harness.Report{Attempted: 5, Confirmed: 5, Lost: []string{"x"}, Drained: true},
			Problems: []string{"something broke"}, Clauses: []Clause{{Key: "slow", Text: "slow connections closed", Status: Broken, Detail: "500 connected at the end"}}},
		{ID: "T03", Title: "elsewhere", NotRun: "needs a cluster"},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, results, 7, "go run . faults --seed 7"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"seed 7", "**1 passed, 1 failed, 1 not run here.**", "| T01 ok case | a fault | pass | 10 | 10 | 0 |",
		"2s (15s)", "| T02 bad case | another | **fail**", "FAIL: something broke.", "1 lost", "**T03 elsewhere**: needs a cluster.",
		"Clauses: 1 held, 1 failed, 1 not checked here", "**not checked here**, the suite does not check it on this machine",
		"- **T01 ok case**: 1 checked, 1 not checked here\n  - pass: checker clean (lost 0)\n  - not checked here: no bypass through a header (no allowlist here)\n",
		"  - **fail**: slow connections closed (500 connected at the end)"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if s := Summarize(results); s.Lost != 1 || s.Worst != 2*time.Second || s.WorstCase != "T01" {
		t.Errorf("%+v", s)
	}
}
