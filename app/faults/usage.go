package faults

import (
	"fmt"
	"strings"

	"github.com/moenda/moenda/app/harness"
)

// usage is what a node holds: goroutines, open files and resident
// memory, from its /metrics (Go's and the process's collectors).
type usage struct {
	goroutines, fds int
	rss             int64
}

// readUsage reads nd's /metrics.
func readUsage(nd *harness.Node) (usage, error) {
	m, err := nd.Metrics()
	if err != nil {
		return usage{}, err
	}
	_, g := m["go_goroutines"]
	_, f := m["process_open_fds"]
	_, r := m["process_resident_memory_bytes"]
	if !g || !f || !r {
		return usage{}, fmt.Errorf("node %s: /metrics lacks go_goroutines, process_open_fds or process_resident_memory_bytes", nd.Name)
	}
	return usage{goroutines: int(m["go_goroutines"]), fds: int(m["process_open_fds"]), rss: int64(m["process_resident_memory_bytes"])}, nil
}

// Bounds on what a node may hold at the end of a case, once drained,
// beyond what it held when the first fault struck. A leak per reconnect,
// per fault or per request grows past them; the ordinary ebb and flow
// of work does not.
const (
	goroutineSlack = 50
	fdSlack        = 20
	rssSlack       = 100 << 20
)

// leaked says what grew past its bound from before to after; "" when
// nothing did.
func leaked(before, after usage) string {
	var out []string
	if after.goroutines > before.goroutines+goroutineSlack {
		out = append(out, fmt.Sprintf("goroutines %d → %d (more than %d more)", before.goroutines, after.goroutines, goroutineSlack))
	}
	if after.fds > before.fds+fdSlack {
		out = append(out, fmt.Sprintf("open files %d → %d (more than %d more)", before.fds, after.fds, fdSlack))
	}
	if after.rss > before.rss+rssSlack {
		out = append(out, fmt.Sprintf("RSS %s → %s (more than %s more)", mib(before.rss), mib(after.rss), mib(rssSlack)))
	}
	return strings.Join(out, ", ")
}

// baseline records what each running node holds, and the probe queue's
// consumers, as the first fault strikes.
func (r *run) baseline() {
	r.before = map[*harness.Node]usage{}
	for _, nd := range r.Nodes {
		if !nd.Running() {
			continue
		}
		if u, err := readUsage(nd); err == nil {
			r.before[nd] = u
		}
	}
	r.backMu.Lock()
	if n := len(r.samples); n > 0 {
		r.consumersAtFault = r.samples[n-1].consumers
	}
	r.backMu.Unlock()
}

// judgeResources judges the resources clause, where the case has it:
// each node that ran from the first fault to the end holds no more
// goroutines, files and memory than its bounds allow. A node restarted
// meanwhile is a new process, and not compared.
func (r *run) judgeResources() {
	if !r.declares(clauseResources) {
		return
	}
	if len(r.before) == 0 {
		r.judge(clauseResources, false, "no node's use was read when the first fault struck")
		return
	}
	for _, nd := range r.Nodes {
		before, ok := r.before[nd]
		if !ok || !nd.Running() || nd.Restarted() {
			continue
		}
		after, err := readUsage(nd)
		if err != nil {
			r.judge(clauseResources, false, "%v", err)
			continue
		}
		if l := leaked(before, after); l != "" {
			r.judge(clauseResources, false, "node %s: %s", nd.Name, l)
			continue
		}
		r.judge(clauseResources, true, "node %s: goroutines %d → %d, open files %d → %d, RSS %s → %s", nd.Name,
			before.goroutines, after.goroutines, before.fds, after.fds, mib(before.rss), mib(after.rss))
	}
}

// declares reports whether the running case has a clause key it checks.
func (r *run) declares(key string) bool {
	for _, c := range r.c.Holds {
		if c.Key == key && c.Status != NotChecked {
			return true
		}
	}
	return false
}
