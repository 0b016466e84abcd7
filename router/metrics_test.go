package router

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The counters read at scrape time, with the route's labels, and the
// handler durations only when the stats are timed.
func TestStatsAsMetrics(t *testing.T) {
	s := NewStats(true)
	q := s.route("q", "p/h")
	q.Handled.Add(2)
	q.RetriedLater.Add(1)
	q.deadLetter("permanent")
	_ = q.time(func() error { return nil })
	_ = q.time(func() error { return errors.New("x") })
	want := `
# HELP moenda_messages_handled_total Handler runs that succeeded.
# TYPE moenda_messages_handled_total counter
moenda_messages_handled_total{handler="p/h",queue="q"} 2
# HELP moenda_messages_retried_total Retries: immediate ones in the consumer, delayed ones through the broker's retry tier.
# TYPE moenda_messages_retried_total counter
moenda_messages_retried_total{handler="p/h",queue="q",tier="delayed"} 1
moenda_messages_retried_total{handler="p/h",queue="q",tier="immediate"} 0
# HELP moenda_messages_dead_lettered_total Messages sent to the dead-letter queue, by reason class.
# TYPE moenda_messages_dead_lettered_total counter
moenda_messages_dead_lettered_total{handler="p/h",queue="q",reason="permanent"} 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "moenda_messages_handled_total", "moenda_messages_retried_total", "moenda_messages_dead_lettered_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(s, "moenda_handler_duration_seconds"); n != 1 {
		t.Fatalf("%d duration histograms, want 1", n)
	}
	untimed := NewStats(false)
	_ = untimed.route("q", "p/h").time(func() error { return nil })
	if n := testutil.CollectAndCount(untimed, "moenda_handler_duration_seconds"); n != 0 {
		t.Fatalf("untimed stats have %d duration histograms", n)
	}
}

// Counts reads the counters the metrics show, and makes no series for a
// queue no route reads.
func TestCountsReadWithoutMakingSeries(t *testing.T) {
	s := NewStats(false)
	q := s.route("q", "p/h")
	q.Handled.Add(3)
	q.Failed.Add(1)
	got := s.Counts()
	if len(got) != 1 || got["q"] != (Counts{Handled: 3, Failed: 1}) {
		t.Fatalf("Counts = %v, want q alone with 3 handled and 1 failed", got)
	}
	if _, ok := s.Counts()["other"]; ok {
		t.Fatal("Counts made a queue")
	}
	if n := testutil.CollectAndCount(s, "moenda_messages_handled_total"); n != 1 {
		t.Fatalf("%d handled series after Counts, want 1", n)
	}
}

// BenchmarkHandlerTiming is what metrics add to each message: a clock
// reading and a histogram observation around the handler. The bench's
// consume rows spend about 270 µs of CPU per message in the whole chain,
// so the metrics-on row cannot move by more than this share of it.
func BenchmarkHandlerTiming(b *testing.B) {
	for _, timed := range []bool{false, true} {
		b.Run(fmt.Sprintf("timed=%v", timed), func(b *testing.B) {
			q := NewStats(timed).route("queue", "handler")
			handle := func() error { return nil }
			for b.Loop() {
				_ = q.time(handle)
			}
		})
	}
}
