package faults

import (
	"fmt"
	"strings"
)

// Status is the verdict on one clause of a case.
type Status string

const (
	// Held: the run checked the clause and it held.
	Held Status = "pass"
	// Broken: the run checked the clause and it did not hold, or the run
	// ended before its check could judge it.
	Broken Status = "fail"
	// NotChecked: the suite cannot check the clause on this machine; the
	// detail says why, and where it is shown instead. Never a pass.
	NotChecked Status = "not checked"
)

// Clause is one thing a case's "what must hold" says, and what the run
// made of it.
type Clause struct {
	// Key names the clause within its case; the check that judges it
	// refers to it.
	Key  string `json:"key"`
	Text string `json:"clause"`
	// Status is empty in a case's definition of a clause the run must
	// judge, and NotChecked for one it cannot.
	Status Status `json:"status"`
	// Detail is what the run saw, or why the clause is not checked.
	Detail string `json:"detail,omitempty"`
}

// must is a clause the run judges.
func must(key, text string) Clause { return Clause{Key: key, Text: text} }

// notHere is a clause the suite cannot check on this machine, and why.
func notHere(text, why string) Clause { return Clause{Text: text, Status: NotChecked, Detail: why} }

// The clauses every case that runs has: the checker's shared criteria,
// and the recovery bound after each healed fault.
const (
	clauseChecker  = "checker"
	clauseRecovery = "recovery"
)

// checkerClean is the pass criterion RELIABILITY-CASES shares with every
// case.
var checkerClean = must(clauseChecker, "checker clean: lost 0, ghosts 0, duplicate effects 0, dead-letter set = poison set, drained")

// recoveredWithin is the recovery clause, in the words of a case.
func recoveredWithin(text string) Clause { return must(clauseRecovery, text) }

// judgement is a verdict a check gave on a clause.
type judgement struct {
	broken    bool
	unchecked bool // the run found it could not check the clause here
	detail    []string
}

// verdicts gives each of a case's clauses its status: a clause the
// suite cannot check stays NotChecked; one the run judged holds unless a
// check found it broken; one the run never judged is broken, since a
// clause nobody checked must not pass. It also returns the keys judged
// that the case does not declare, which are mistakes of the case.
func verdicts(declared []Clause, judged map[string]*judgement) (out []Clause, undeclared []string) {
	known := map[string]bool{}
	for _, c := range declared {
		known[c.Key] = c.Status != NotChecked
		if c.Status == NotChecked {
			out = append(out, c)
			continue
		}
		j, ok := judged[c.Key]
		switch {
		case !ok:
			c.Status, c.Detail = Broken, "not judged: the run ended before its check"
		case j.broken:
			c.Status, c.Detail = Broken, strings.Join(j.detail, "; ")
		case j.unchecked:
			c.Status, c.Detail = NotChecked, strings.Join(j.detail, "; ")
		default:
			c.Status, c.Detail = Held, strings.Join(j.detail, "; ")
		}
		out = append(out, c)
	}
	for k := range judged {
		if !known[k] {
			undeclared = append(undeclared, k)
		}
	}
	return out, undeclared
}

// Broken lists the clauses that did not hold.
func (r Result) Broken() []Clause {
	var out []Clause
	for _, c := range r.Clauses {
		if c.Status == Broken {
			out = append(out, c)
		}
	}
	return out
}

// count is how many of the clauses have status s.
func count(clauses []Clause, s Status) int {
	n := 0
	for _, c := range clauses {
		if c.Status == s {
			n++
		}
	}
	return n
}

// cannotCheck records that the clause key cannot be checked on this
// machine, and why (a server setting found at run time): it ends as not
// checked here, never as a pass, unless a check broke it.
func (r *run) cannotCheck(key string, format string, args ...any) {
	r.judge(key, true, format, args...)
	r.judged[key].unchecked = true
}

// judge records a check's verdict on the clause key: ok, or broken,
// with what was seen. A clause stays broken once a check broke it. A
// broken clause is also a problem of the case, so the case fails.
func (r *run) judge(key string, ok bool, format string, args ...any) {
	if r.judged == nil {
		r.judged = map[string]*judgement{}
	}
	j := r.judged[key]
	if j == nil {
		j = &judgement{}
		r.judged[key] = j
	}
	detail := fmt.Sprintf(format, args...)
	if detail != "" {
		j.detail = append(j.detail, detail)
	}
	if !ok {
		j.broken = true
		r.problem("%s", detail)
	}
}
