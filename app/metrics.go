package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/transport"
)

// MetricsConfig sets the Prometheus endpoint, GET /metrics.
type MetricsConfig struct {
	// Enabled serves /metrics and times handlers and requests.
	Enabled bool `koanf:"enabled"`
	// PollInterval is how often the gauges that cost a query are read:
	// dead-letter and unrouted queue depths, relay lag and parked rows. A scrape
	// never queries the broker or the database.
	PollInterval time.Duration `koanf:"poll_interval"`
}

func (m MetricsConfig) validate() error {
	if m.Enabled && m.PollInterval < time.Second {
		return fmt.Errorf("metrics.poll_interval must be at least 1s, got %s", m.PollInterval)
	}
	return nil
}

// metrics are the platform's Prometheus metrics. The chain's counters
// live in router.Stats and the relays' in outbox.Relay; they are read at
// scrape time. What costs a query is polled (poll).
type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	depth    *prometheus.GaugeVec // dead-letter queues
	// unavailable is 1 for a consumed queue the broker cannot serve.
	unavailable *prometheus.GaugeVec
	unrouted    *prometheus.GaugeVec // alternate-exchange queues
	lagRows     *prometheus.GaugeVec
	lagAge      *prometheus.GaugeVec
	parked      *prometheus.GaugeVec // outbox rows the relays moved past
	// The failure ledger, on the processes that ingest.
	unresolved *prometheus.GaugeVec
	ingestLag  prometheus.Gauge
	// The logical relays' replication slots (watchSlots).
	slotRetained *prometheus.GaugeVec
	slotLag      *prometheus.GaugeVec
}

func newMetrics(cs ...prometheus.Collector) *metrics {
	m := &metrics{
		registry:    prometheus.NewRegistry(),
		requests:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "moenda_http_requests_total", Help: "HTTP requests by route pattern, method and status."}, []string{"route", "method", "code"}),
		duration:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "moenda_http_request_duration_seconds", Help: "HTTP request duration by route pattern and method.", Buckets: prometheus.DefBuckets}, []string{"route", "method"}),
		depth:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_dead_letter_messages", Help: "Messages waiting in a dead-letter queue, read every metrics.poll_interval."}, []string{"queue"}),
		unavailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_queue_unavailable", Help: "1 while the broker cannot serve a consumed queue (a classic queue whose node is down), read every metrics.poll_interval."}, []string{"queue"}),
		unrouted:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_unrouted_messages", Help: "Messages no binding matched, kept in the exchange's alternate queue, read every metrics.poll_interval."}, []string{"exchange"}),
		lagRows:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_relay_lag_rows", Help: "Outbox rows committed after the relay's position."}, []string{"consumer_group"}),
		lagAge:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_relay_lag_seconds", Help: "Age of the oldest outbox row the relay has not published; 0 when caught up."}, []string{"consumer_group"}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_outbox_parked_rows",
			Help: "Outbox rows the group's relays parked (no event named, no exchange for the routing key, or refused by the broker) and `moenda outbox republish` has not sent yet."}, []string{"consumer_group"}),
		unresolved: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_failures_unresolved",
			Help: "Unresolved failures in the failure ledger by failed queue and reason, read every metrics.poll_interval."}, []string{"queue", "reason"}),
		ingestLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "moenda_failures_ingest_lag_seconds",
			Help: "From the oldest failure of the last batch of dead letters to its record in the ledger."}),
		slotRetained: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_relay_slot_retained_bytes",
			Help: "WAL PostgreSQL keeps for a logical relay's replication slot."}, []string{"consumer_group", "slot"}),
		slotLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "moenda_relay_slot_lag_bytes",
			Help: "WAL written since a logical relay last confirmed its slot."}, []string{"consumer_group", "slot"}),
	}
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.depth, m.unavailable, m.unrouted, m.lagRows, m.lagAge, m.parked, m.unresolved, m.ingestLag, m.slotRetained, m.slotLag)
	m.registry.MustRegister(cs...)
	return m
}

// handler serves the registry.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// measure counts and times each request by its route pattern, so
// /tarefas/1 and /tarefas/2 are one series.
func (m *metrics) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		method := methodLabel(r.Method)
		m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the method as a metric label: net/http takes any token
// as a method, so a client making methods up would make up series too.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// poll reads the gauges that cost a query every interval until ctx ends.
func (p *Platform) pollMetrics(ctx context.Context) {
	// The queues' depths are the workers' to report: an api process talks
	// to no broker, and some brokers count no depths.
	depths := p.role.worker() && p.broker != nil
	dlqs, alternates := p.watchedQueues()
	consumed := p.consumedQueues()
	watched := slices.Concat(dlqs, slices.Collect(maps.Values(alternates)), consumed)
	tick := time.NewTicker(p.cfg.Metrics.PollInterval)
	defer tick.Stop()
	for {
		var errs []error
		if depths {
			got, err := p.broker.Queues(ctx, watched)
			depths = !errors.Is(err, transport.ErrNoDepths)
			if depths {
				errs = append(errs, err)
				for _, q := range dlqs {
					p.metrics.depth.WithLabelValues(q).Set(float64(got[q].Messages))
				}
				for x, q := range alternates {
					p.metrics.unrouted.WithLabelValues(x).Set(float64(got[q].Messages))
				}
				if err == nil {
					for _, q := range consumed {
						down := 0.0
						if got[q].Unavailable != "" {
							down = 1
						}
						p.metrics.unavailable.WithLabelValues(q).Set(down)
					}
				}
			}
		}
		for _, r := range p.relays {
			rows, age, err := outbox.Lag(ctx, p.pool, r.Group())
			errs = append(errs, err)
			if err == nil {
				p.metrics.lagRows.WithLabelValues(r.Group()).Set(float64(rows))
				p.metrics.lagAge.WithLabelValues(r.Group()).Set(age.Seconds())
			}
			parked, err := outbox.CountParked(ctx, p.pool, r.Group())
			errs = append(errs, err)
			if err == nil {
				p.metrics.parked.WithLabelValues(r.Group()).Set(float64(parked))
			}
		}
		if p.ingests() {
			errs = append(errs, p.pollFailures(ctx))
		}
		if err := errors.Join(errs...); err != nil && ctx.Err() == nil {
			p.logger.Warn("metrics: a gauge could not be read; will try again", "error", err, "retry_in", p.cfg.Metrics.PollInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// watchedQueues are the dead-letter queues of the consumed queues, and
// each exchange's alternate queue (named as its alternate exchange).
func (p *Platform) watchedQueues() (dlqs []string, alternates map[string]string) {
	dlqs = p.top.DeadLetterQueues()
	alternates = map[string]string{}
	for _, x := range p.top.Exchanges {
		if alt := p.top.AlternateOf(x.Name); alt != "" {
			alternates[x.Name] = alt
		}
	}
	return dlqs, alternates
}

// pollFailures reads the ledger's gauges: the counts of unresolved
// failures (a count gone to zero leaves its series at 0 rather than
// removing it, so an alert on an increase sees the fall too), and the
// ingest's lag.
func (p *Platform) pollFailures(ctx context.Context) error {
	p.ingest.mu.Lock()
	p.metrics.ingestLag.Set(p.ingest.lag)
	p.ingest.mu.Unlock()
	counts, err := p.workbench.ledger.Unresolved(ctx)
	if err != nil {
		return err
	}
	seen := map[[2]string]bool{}
	for _, c := range counts {
		seen[[2]string{c.FailedQueue, c.Reason}] = true
		p.metrics.unresolved.WithLabelValues(c.FailedQueue, c.Reason).Set(float64(c.N))
	}
	for k := range p.ingest.counted {
		if !seen[k] {
			p.metrics.unresolved.WithLabelValues(k[0], k[1]).Set(0)
		}
	}
	p.ingest.counted = seen
	return nil
}
