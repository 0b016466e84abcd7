package faults

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/app/harness"
)

// Each clause gets its verdict: a clause the suite cannot check stays
// "not checked", one a check broke stays broken whatever later checks
// say, and one nobody judged is broken, never a pass.
func TestVerdicts(t *testing.T) {
	declared := []Clause{
		must("a", "judged and held"),
		must("b", "broken, then judged ok"),
		must("c", "never judged"),
		notHere("cannot be checked", "no tool for it here"),
	}
	judged := map[string]*judgement{
		"a":     {detail: []string{"seen fine"}},
		"b":     {broken: true, detail: []string{"seen broken", "summary"}},
		"stray": {},
	}
	got, undeclared := verdicts(declared, judged)
	want := []Status{Held, Broken, Broken, NotChecked}
	for i, c := range got {
		if c.Status != want[i] {
			t.Errorf("%s: %s, want %s", c.Text, c.Status, want[i])
		}
	}
	if got[1].Detail != "seen broken; summary" || !strings.Contains(got[2].Detail, "not judged") || got[3].Detail != "no tool for it here" {
		t.Errorf("details: %+v", got)
	}
	if !slices.Equal(undeclared, []string{"stray"}) {
		t.Errorf("undeclared: %v", undeclared)
	}
}

// A case passes only when the checker's report is valid, no problem was
// found, and none of its clauses broke: a clause the run never judged
// fails the case even when everything else is clean.
func TestConcludeFailsWhatWasNotShown(t *testing.T) {
	valid := harness.Report{Valid: true, Drained: true, Confirmed: 10}
	cases := []struct {
		name   string
		report harness.Report
		holds  []Clause
		judge  func(r *run)
		pass   bool
		broken []string
	}{
		{"clean, every clause judged", valid, []Clause{must("x", "x holds")}, func(r *run) { r.judge("x", true, "fine") }, true, nil},
		{"a clause never judged", valid, []Clause{must("x", "x holds")}, func(*run) {}, false, []string{"x holds"}},
		{"a clause broken", valid, []Clause{must("x", "x holds")}, func(r *run) { r.judge("x", false, "seen broken") }, false, []string{"x holds"}},
		{"a clause broken, then judged ok", valid, []Clause{must("x", "x holds")},
			func(r *run) { r.judge("x", false, "first"); r.judge("x", true, "summary") }, false, []string{"x holds"}},
		{"not checked is no failure, and no pass", valid, []Clause{notHere("y", "why")}, func(*run) {}, true, nil},
		{"found uncheckable at run time", valid, []Clause{must("x", "x holds")}, func(r *run) { r.cannotCheck("x", "a setting is off") }, true, nil},
		{"the checker's report invalid", harness.Report{Lost: []string{"e1"}, Drained: true}, nil, func(*run) {}, false, []string{checkerClean.Text}},
		{"lost events break the no-loss clause", harness.Report{Valid: false, Lost: []string{"e1"}, Drained: true},
			[]Clause{must(clauseNoLoss, "without loss")}, func(*run) {}, false, []string{checkerClean.Text, "without loss"}},
		{"not drained breaks the drained clause", harness.Report{Valid: false}, []Clause{must(clauseDrained, "drains")}, func(*run) {}, false, []string{checkerClean.Text, "drains"}},
		{"recovery clause without any fault healed", valid, []Clause{recoveredWithin("within 15 s")}, func(*run) {}, false, []string{"within 15 s"}},
		{"recovery over its bound", valid, []Clause{recoveredWithin("within 15 s")},
			func(r *run) { r.result.Recoveries = []harness.Recovery{{Fault: "f", Took: 19 * time.Second}} }, false, []string{"within 15 s"}},
		{"recovery within its bound", valid, []Clause{recoveredWithin("within 15 s")},
			func(r *run) { r.result.Recoveries = []harness.Recovery{{Fault: "f", Took: 3 * time.Second}} }, true, nil},
		{"a judgement of a clause the case does not declare", valid, nil, func(r *run) { r.judged = map[string]*judgement{"typo": {}} }, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := &Result{Report: c.report, Bound: 15 * time.Second}
			r := &run{result: res, c: Case{ID: "T99", Holds: c.holds}}
			c.judge(r)
			if pass := r.conclude(r.c, nil); pass != c.pass {
				t.Fatalf("pass = %v, want %v; clauses %+v, problems %v", pass, c.pass, res.Clauses, res.Problems)
			}
			var broken []string
			for _, cl := range res.Broken() {
				broken = append(broken, cl.Text)
			}
			if !slices.Equal(broken, c.broken) {
				t.Errorf("broken clauses %q, want %q", broken, c.broken)
			}
		})
	}
}

// Every case that runs names its clauses with keys its checks can judge,
// and every clause it cannot check says why.
func TestEveryCaseStatesItsClauses(t *testing.T) {
	for _, c := range Cases() {
		if c.NotHere != "" {
			continue
		}
		if len(c.Holds) == 0 {
			t.Errorf("%s states no clause beyond the checker's", c.ID)
		}
		keys := map[string]bool{}
		for _, cl := range c.Holds {
			switch {
			case cl.Status == NotChecked && (cl.Detail == "" || cl.Key != ""):
				t.Errorf("%s: %q is not checked without a reason", c.ID, cl.Text)
			case cl.Status != NotChecked && (cl.Key == "" || cl.Status != ""):
				t.Errorf("%s: %q has no key for its check", c.ID, cl.Text)
			case keys[cl.Key] && cl.Key != "":
				t.Errorf("%s: two clauses share key %q", c.ID, cl.Key)
			}
			keys[cl.Key] = true
		}
	}
}

// The server must close slowhttptest's connections before the test's
// time limit: a run that ends on the limit with connections open fails,
// whatever else it says.
func TestSlowClosed(t *testing.T) {
	for _, c := range []struct {
		name, out string
		ok        bool
	}{
		{"slow headers closed by the header timeout", "\x1b[0mslow HTTP test status on 15th second:\n\ninitializing:        0\npending:             0\nconnected:           12\nerror:               0\nclosed:              488\nservice available:   YES\n\x1b[0mTue Dec  1 02:14:05 2026:\x1b[0m Test ended on 15th second\nExit status: No open connections left\n", true},
		{"slow bodies held to the end", "slow HTTP test status on 60th second:\n\ninitializing:        0\npending:             0\nconnected:           500\nerror:               0\nclosed:              0\nservice available:   YES\nTue Dec  1 02:15:26 2026: Test ended on 61th second\nExit status: Hit test time limit\n", false},
		{"some closed, some held to the end", "pending: 0\nconnected: 40\nerror: 0\nclosed: 460\nExit status: Hit test time limit\n", false},
		{"no status at all", "slowhttptest: cannot connect\n", false},
	} {
		ok, detail := slowClosed("-B", []byte(c.out))
		if ok != c.ok {
			t.Errorf("%s: %v (%s), want %v", c.name, ok, detail, c.ok)
		}
	}
}

// A node that holds more goroutines, files or memory at the end than
// when the first fault struck, past the slack, leaked.
func TestLeaked(t *testing.T) {
	before := usage{goroutines: 80, fds: 30, rss: 60 << 20}
	if l := leaked(before, usage{goroutines: 120, fds: 45, rss: 150 << 20}); l != "" {
		t.Errorf("within the slack, yet %q", l)
	}
	if l := leaked(before, usage{goroutines: 200, fds: 45, rss: 200 << 20}); !strings.Contains(l, "goroutines 80 → 200") || !strings.Contains(l, "RSS") || strings.Contains(l, "open files") {
		t.Errorf("%q", l)
	}
}

// The quick set, which CI runs, kills a quorum queue's leader on a
// cluster (T31) and crashes a consumer mid-handler (T08):
// its recovery is measured so that the machine's own slow spells do not
// count against it.
func TestQuickSetCrashesAConsumer(t *testing.T) {
	quick, _ := Selected(true, nil)
	if !slices.Contains(quick, "T08") || !slices.Contains(quick, "T31") {
		t.Fatalf("quick set %v lacks T08 or T31", quick)
	}
}

// The quick set restarts no broker and runs no workbench case: W01
// restarts RabbitMQ, and W02, a re-drive under a consumer crash, would
// take CI near its 20 minutes (TestARedriveSurvivesAKill kills a re-drive
// in go test).
func TestQuickSetLeavesTheWorkbenchCasesOut(t *testing.T) {
	quick, _ := Selected(true, nil)
	if slices.Contains(quick, "W01") || slices.Contains(quick, "W02") {
		t.Fatalf("quick set %v: want neither W01 nor W02", quick)
	}
}
