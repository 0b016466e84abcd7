package router

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats counts what the chain did with each queue's messages. It is safe
// for concurrent use; the metrics endpoint and tests read it.
type Stats struct {
	mu     sync.Mutex
	queues map[string]*QueueStats
	timed  bool
}

// NewStats returns empty statistics. timed adds a histogram of handler
// durations per route: a clock reading and an observation per message.
func NewStats(timed bool) *Stats { return &Stats{queues: map[string]*QueueStats{}, timed: timed} }

// Queue returns the counters of one queue, made on first use.
func (s *Stats) Queue(name string) *QueueStats { return s.route(name, "") }

// route is Queue for the route whose handler is named handler.
func (s *Stats) route(name, handler string) *QueueStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[name]
	if !ok {
		q = &QueueStats{deadLettered: map[string]int64{}}
		s.queues[name] = q
	}
	if handler != "" && q.handler == "" {
		q.handler = handler
	}
	if handler != "" && s.timed && q.duration == nil {
		q.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "moenda_handler_duration_seconds",
			Help:        "How long the handler ran, inside its unit of work.",
			Buckets:     handlerBuckets,
			ConstLabels: prometheus.Labels{"queue": name, "handler": handler},
		})
	}
	return q
}

// Counts are the handled and failed runs of one queue's handler so far.
type Counts struct {
	Handled, Failed int64
}

// Counts returns the counters of every queue this process's routes read,
// by queue, without making any: the status page reads them, and a queue
// it asks about that no route reads must not become a metric series.
func (s *Stats) Counts() map[string]Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Counts, len(s.queues))
	for name, q := range s.queues {
		out[name] = Counts{Handled: q.Handled.Load(), Failed: q.Failed.Load()}
	}
	return out
}

// QueueStats are one queue's counters.
type QueueStats struct {
	// Handled and Failed count handler runs that returned nil or an error.
	Handled, Failed atomic.Int64
	// RetriedImmediately counts immediate retries; RetriedLater the
	// messages handed to the retry tier of the broker.
	RetriedImmediately, RetriedLater atomic.Int64
	// Duplicates are deliveries of an event the queue had processed.
	Duplicates atomic.Int64
	// Ignored are events of a type the handler does not handle.
	Ignored atomic.Int64
	// Redelivered are deliveries the broker had handed out before
	// (event.MetaRedelivered).
	Redelivered atomic.Int64

	// handler names the route's handler, and duration times its runs;
	// both are set when the route is added.
	handler  string
	duration prometheus.Histogram

	mu           sync.Mutex
	deadLettered map[string]int64 // by reason class
}

// DeadLettered returns the dead letters by reason class.
func (q *QueueStats) DeadLettered() map[string]int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.deadLettered)
}

func (q *QueueStats) deadLetter(reason string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deadLettered[reason]++
}
