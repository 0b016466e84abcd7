package cluster

import "testing"

// The partitions of the cluster status each node gave, measured on
// 3.10.8, after rabbit1 had been frozen past net_ticktime and resumed:
// rabbit1 alone sees itself cut off from both others, so it alone is not
// asked.
func TestInMajorityAfterAFrozenNodeCameBack(t *testing.T) {
	const (
		r1 = "rabbit1-4ce382@localhost"
		r2 = "rabbit2-4ce382@localhost"
		r3 = "rabbit3-4ce382@localhost"
	)
	for _, c := range []struct {
		node, status string
		want         bool
	}{
		{r1, `{"alarms":[],"partitions":{"` + r1 + `":["` + r2 + `","` + r3 + `"]},"running_nodes":[]}`, false},
		{r2, `{"alarms":[],"partitions":{"` + r2 + `":["` + r1 + `"]},"running_nodes":[]}`, true},
		{r3, `{"alarms":[],"partitions":{"` + r2 + `":["` + r1 + `"]},"running_nodes":[]}`, true},
		{r1, `{"alarms":[],"partitions":{},"running_nodes":[]}`, true},
		{r1, `rabbitmqctl said something else`, false},
	} {
		if got := inMajority(c.status, c.node, 3); got != c.want {
			t.Errorf("%s with %s: in the majority %v, want %v", c.node, c.status, got, c.want)
		}
	}
}
