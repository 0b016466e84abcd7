package faults

import (
	"strings"
	"testing"
	"time"
)

func TestKnownCases(t *testing.T) {
	if ids, err := Selected(false, []string{"t03", "T11", "w02"}); err != nil || len(ids) != 3 || ids[0] != "T03" || ids[2] != "W02" {
		t.Fatalf("%v %v", ids, err)
	}
	if _, err := Selected(false, []string{"T99"}); err == nil || !strings.Contains(err.Error(), "the cases are T01 to T36, W01 to W02") {
		t.Fatalf("an unknown case: %v", err)
	}
	all, _ := Selected(false, nil)
	quick, _ := Selected(true, nil)
	if len(all) != 38 || len(quick) == 0 || len(quick) >= len(all) {
		t.Fatalf("%d cases, %d quick", len(all), len(quick))
	}
}

// A case that runs the failure ledger turns it on in its nodes'
// configuration, with its own retry schedule; the others keep the
// seed's schedule and no ledger, or the quick set's schedule in it.
func TestTheWorkbenchCasesRunTheLedger(t *testing.T) {
	for _, c := range Cases() {
		if o := c.overlay(true); c.Quick && !strings.Contains(o, "delays: [1s, 2s, 4s]") || !c.Quick && c.ID[0] != 'W' && !strings.Contains(o, "delays: [1s, 5s, 25s]") {
			t.Errorf("%s under --quick runs another schedule than the quick set's (its own case) or the seeds' (the others):\n%s", c.ID, o)
		}
		o := c.overlay(false)
		switch c.ID[0] {
		case 'W':
			if !c.Failures || !strings.Contains(o, "failures: {enabled: true") || !strings.Contains(o, "delays: [1s, 2s]") {
				t.Errorf("%s runs no ledger, or the seed's schedule:\n%s", c.ID, o)
			}
		default:
			if c.Failures || strings.Contains(o, "failures:") || !strings.Contains(o, "delays: [1s, 5s, 25s]") {
				t.Errorf("%s runs the ledger, or not the seed's schedule:\n%s", c.ID, o)
			}
		}
	}
	if o := (Case{Delays: []time.Duration{500 * time.Millisecond}}).overlay(true); !strings.Contains(o, "delays: [500ms]") {
		t.Errorf("a schedule of its own:\n%s", o)
	}
}

// queueDepth reads a queue's count in what rabbitmqctl list_queues prints.
func TestQueueDepth(t *testing.T) {
	out := "faultprobe.effects\t0\nfaultprobe.effects.dlq\t12\n"
	if n := queueDepth(out, "faultprobe.effects.dlq"); n != 12 {
		t.Errorf("depth %d, want 12", n)
	}
	if n := queueDepth(out, "other"); n != -1 {
		t.Errorf("depth of a queue not listed %d, want -1", n)
	}
}
