package harness

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestEventIDsAreTheSameOnEveryRetry(t *testing.T) {
	a := EventID("run-1", 3, 42)
	if a != EventID("run-1", 3, 42) {
		t.Fatal("the same command got two ids")
	}
	for _, other := range []string{EventID("run-2", 3, 42), EventID("run-1", 4, 42), EventID("run-1", 3, 43), EventID("run-1", 34, 2)} {
		if other == a {
			t.Fatalf("two commands share id %s", a)
		}
	}
}

// A history written while operations and faults interleave reads back as
// it was written, and survives the writer's process ending after Close.
func TestHistoryRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	h, err := CreateHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0).UTC()
	written := []Line{
		{Op: Op{Outcome: Invoked, Writer: 1, Seq: 0, EventID: EventID("r", 1, 0), Kind: Good, Aggregate: "a", At: t0}},
		{Fault: "T03 close_all_connections", Phase: "start", Op: Op{At: t0.Add(time.Second)}},
		{Op: Op{Outcome: Indeterminate, Writer: 1, Seq: 0, EventID: EventID("r", 1, 0), Kind: Good, Aggregate: "a", At: t0.Add(2 * time.Second)}},
		{Fault: "T03 close_all_connections", Phase: "stop", Op: Op{At: t0.Add(3 * time.Second)}},
	}
	for _, l := range written {
		if err := h.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateHistory(path); err == nil {
		t.Fatal("a second run wrote over the history of the first")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, faults, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ops, []Op{written[0].Op, written[2].Op}) || !slices.Equal(faults, []Line{written[1], written[3]}) {
		t.Fatalf("read back %+v and %+v", ops, faults)
	}
}
