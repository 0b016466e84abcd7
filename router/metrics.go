package router

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// handlerBuckets are the handler duration histogram's bounds, in seconds:
// from a handler that only writes a row to one waiting on a slow service.
var handlerBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// time runs fn, timing it when the stats are timed.
func (q *QueueStats) time(fn func() error) error {
	if q.duration == nil {
		return fn()
	}
	start := time.Now()
	err := fn()
	q.duration.Observe(time.Since(start).Seconds())
	return err
}

// Describe implements prometheus.Collector. It describes nothing: the
// queues are known only as routes are added, which makes Stats an
// unchecked collector.
func (s *Stats) Describe(chan<- *prometheus.Desc) {}

var (
	descHandled      = prometheus.NewDesc("moenda_messages_handled_total", "Handler runs that succeeded.", []string{"queue", "handler"}, nil)
	descFailed       = prometheus.NewDesc("moenda_messages_failed_total", "Handler runs that failed.", []string{"queue", "handler"}, nil)
	descRetried      = prometheus.NewDesc("moenda_messages_retried_total", "Retries: immediate ones in the consumer, delayed ones through the broker's retry tier.", []string{"queue", "handler", "tier"}, nil)
	descDeadLettered = prometheus.NewDesc("moenda_messages_dead_lettered_total", "Messages sent to the dead-letter queue, by reason class.", []string{"queue", "handler", "reason"}, nil)
	descDuplicates   = prometheus.NewDesc("moenda_messages_deduplicated_total", "Deliveries of an event the queue had processed, acknowledged without running the handler.", []string{"queue", "handler"}, nil)
	descIgnored      = prometheus.NewDesc("moenda_messages_ignored_total", "Events of a type the handler does not handle, acknowledged.", []string{"queue", "handler"}, nil)
	descRedelivered  = prometheus.NewDesc("moenda_messages_redelivered_total", "Deliveries the broker had handed out before: to a consumer that stopped or crashed with them in hand, or that requeued them.", []string{"queue", "handler"}, nil)
)

// Collect implements prometheus.Collector: the counters are read when
// Prometheus scrapes, so counting costs the chain an atomic add.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	queues := maps.Clone(s.queues)
	s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		q := queues[name]
		counter := func(d *prometheus.Desc, v int64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name, q.handler}, labels...)...)
		}
		counter(descHandled, q.Handled.Load())
		counter(descFailed, q.Failed.Load())
		counter(descRetried, q.RetriedImmediately.Load(), "immediate")
		counter(descRetried, q.RetriedLater.Load(), "delayed")
		counter(descDuplicates, q.Duplicates.Load())
		counter(descIgnored, q.Ignored.Load())
		counter(descRedelivered, q.Redelivered.Load())
		for reason, n := range q.DeadLettered() {
			counter(descDeadLettered, n, reason)
		}
		if q.duration != nil {
			q.duration.Collect(ch)
		}
	}
}
