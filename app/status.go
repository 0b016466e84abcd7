package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/httpjson"
	"github.com/moenda/moenda/router"
)

// statusInterval is how long a status is reused: consoles refreshing
// every few seconds, however many, cost one round of queries per
// interval (the relays' lag counts their backlog). It is also the
// shortest window the rates are measured over.
const statusInterval = 2 * time.Second

// statusTimeout bounds one round, whoever waits for it.
const statusTimeout = 5 * time.Second

// Status is the platform at a glance: what GET /v1/admin/status answers,
// and what the console's overview renders, from the same call.
// It is read at most once per statusInterval (see Platform.Status).
type Status struct {
	// At is when it was read.
	At     time.Time     `json:"at"`
	Config ConfigSummary `json:"config"`
	// Readiness is this process's /readyz answer: PostgreSQL and the
	// brokers it talks to, its relays, the failure ingest and the slots.
	Readiness Readiness `json:"readiness"`
	// Relays are the configuration's relay groups, whichever process
	// leads them.
	Relays []RelayStatus `json:"relays"`
	// Queues are the queues the topology's subscriptions consume.
	Queues []QueueStatus `json:"queues"`
	// UnresolvedFailures counts the ledger's unresolved failures by the
	// queue that failed them: every queue, those of no subscription
	// (a foreign dead-letter queue the ledger reads) too.
	UnresolvedFailures map[string]int `json:"unresolved_failures"`
	// Redrives are the re-drives sending now (canary or running), with
	// their counters.
	Redrives []redrive.Redrive `json:"redrives"`
	// Problems name the parts that could not be read; the rest is shown.
	Problems []string `json:"problems"`
}

// ConfigSummary is the part of the configuration an operator needs at a
// glance. Its fields are chosen one by one, none of them a URL, a token
// or a secret, so nothing can leak through it; `moenda config print`
// shows the rest, redacted.
type ConfigSummary struct {
	Env  string    `json:"env"`
	Role ServeRole `json:"role"`
	// Broker is broker.kind; Kafka beside it with analytics.kafka.
	Broker    string `json:"broker"`
	Analytics bool   `json:"analytics_kafka"`
	// OutboxReader is outbox.reader as configured (auto, poll or
	// logical); each relay group's own is in Relays.
	OutboxReader  string          `json:"outbox_reader"`
	Auth          bool            `json:"auth"`
	Metrics       bool            `json:"metrics"`
	Tracing       string          `json:"tracing"`
	FailureLedger bool            `json:"failure_ledger"`
	Plugins       []PluginSummary `json:"plugins"`
}

// PluginSummary is an enabled plugin and the queues it consumes.
type PluginSummary struct {
	Name   string   `json:"name"`
	Queues []string `json:"queues"`
}

// RelayStatus is one relay group: who leads it, how it reads, how far
// behind it is.
type RelayStatus struct {
	ConsumerGroup string `json:"consumer_group"`
	// Reader is the reader the group recorded with its position (poll or
	// logical); empty until a relay has led it.
	Reader string `json:"reader"`
	// Leader is the database session of the leading relay; nil while
	// none leads.
	Leader *outbox.Leader `json:"leader"`
	// LeaderHere: the leading relay is this process's.
	LeaderHere bool `json:"leader_here"`
	// Here is this process's relay of the group, as /readyz shows it;
	// nil in a process that runs none.
	Here *RelayState `json:"here"`
	// LagRows are the rows committed after the group's position, and
	// LagSeconds the age of the oldest of them (0 when caught up).
	LagRows    int64   `json:"lag_rows"`
	LagSeconds float64 `json:"lag_seconds"`
	// ParkedRows are the rows the group's relays parked and no republish
	// has sent yet.
	ParkedRows int64 `json:"parked_rows"`
	// Slot is the group's replication slot, with the WAL it keeps, when
	// the group has one (it reads logical).
	Slot *outbox.Slot `json:"slot"`
}

// QueueStatus is one consumed queue.
type QueueStatus struct {
	Name string `json:"name"`
	// Messages are those ready in the queue and Consumers the
	// subscriptions reading it, from every process, as the broker counts
	// them (an api process asks through a connection of its own); nil
	// where the broker counts none (Kafka, the memory broker), or when the
	// broker could not be asked.
	Messages  *int `json:"messages"`
	Consumers *int `json:"consumers"`
	// DeadLetterQueue is where the queue's failures go, and DeadLetters
	// what waits there (nil as Messages); the failure ledger, when on,
	// empties it into UnresolvedFailures.
	DeadLetterQueue    string `json:"dead_letter_queue,omitempty"`
	DeadLetters        *int   `json:"dead_letters"`
	UnresolvedFailures int    `json:"unresolved_failures"`
	// Handling is what this process's handler of the queue did; nil in a
	// process that does not consume it.
	Handling *Handling `json:"handling"`
}

// Handling counts a handler's runs in this process, from the counters
// moenda_messages_handled_total and moenda_messages_failed_total show.
// The rates are the counters' increase over the window since the
// previous status was read (at least statusInterval; since the process
// started for the first), divided by its length: per process, as
// Prometheus would sum them across processes.
type Handling struct {
	Handled int64 `json:"handled"`
	Failed  int64 `json:"failed"`
	// HandledPerSecond and FailedPerSecond are over WindowSeconds.
	HandledPerSecond float64 `json:"handled_per_second"`
	FailedPerSecond  float64 `json:"failed_per_second"`
	WindowSeconds    float64 `json:"window_seconds"`
}

// rateSample is the handlers' counters at the previous status, from
// which the next one's rates are computed.
type rateSample struct {
	mu     sync.Mutex
	at     time.Time
	counts map[string]router.Counts
}

// since returns the rates of now's counts over the window since the
// previous sample, and keeps now's as the next one's start.
func (r *rateSample) since(now time.Time, counts map[string]router.Counts) map[string]*Handling {
	r.mu.Lock()
	defer r.mu.Unlock()
	window := now.Sub(r.at).Seconds()
	out := make(map[string]*Handling, len(counts))
	for q, c := range counts {
		h := &Handling{Handled: c.Handled, Failed: c.Failed, WindowSeconds: window}
		if window > 0 {
			before := r.counts[q]
			h.HandledPerSecond = float64(c.Handled-before.Handled) / window
			h.FailedPerSecond = float64(c.Failed-before.Failed) / window
		}
		out[q] = h
	}
	r.at, r.counts = now, counts
	return out
}

// Status returns the platform at a glance. However many ask, it is read
// at most once per statusInterval, on a context of its own bounded by
// statusTimeout; it returns ctx's error if ctx ends first. A part that
// cannot be read is named in Problems and the rest is still returned.
func (p *Platform) Status(ctx context.Context) (Status, error) {
	return p.status.get(ctx, p.readStatus)
}

// adminStatus answers GET /v1/admin/status with Platform.Status.
func (p *Platform) adminStatus(w http.ResponseWriter, r *http.Request) {
	s, err := p.Status(r.Context())
	if err != nil {
		httpjson.Error(w, http.StatusServiceUnavailable, "the status was not read before the request ended: "+err.Error())
		return
	}
	httpjson.Write(w, http.StatusOK, s)
}

// readStatus reads every part of the status within ctx.
func (p *Platform) readStatus(ctx context.Context) Status {
	s := Status{At: time.Now().UTC(), Config: p.configSummary(), UnresolvedFailures: map[string]int{}, Relays: []RelayStatus{},
		Queues: []QueueStatus{}, Redrives: []redrive.Redrive{}, Problems: []string{}}
	problem := func(part string, err error) {
		if err != nil {
			s.Problems = append(s.Problems, part+": "+err.Error())
		}
	}
	ready, err := p.ready.get(ctx, p.probeReadiness)
	problem("readiness", err)
	s.Readiness = ready.body
	s.Relays, err = p.relayStatus(ctx)
	problem("relays", err)
	counts, err := p.workbench.ledger.Unresolved(ctx)
	problem("failure ledger", err)
	for _, c := range counts {
		s.UnresolvedFailures[c.FailedQueue] += c.N
	}
	s.Queues, err = p.queueStatus(ctx, s.At, s.UnresolvedFailures)
	problem("queues", err)
	s.Redrives, err = p.runningRedrives(ctx)
	problem("re-drives", err)
	return s
}

// configSummary is the configuration's summary for the status.
func (p *Platform) configSummary() ConfigSummary {
	c := ConfigSummary{Env: p.cfg.Env, Role: p.role, Broker: p.cfg.Broker.Kind, Analytics: p.cfg.Analytics.Kafka.Enabled,
		OutboxReader: p.cfg.Outbox.Reader, Auth: p.cfg.Auth.Enabled, Metrics: p.cfg.Metrics.Enabled, Tracing: p.cfg.Tracing.Exporter,
		FailureLedger: p.cfg.Failures.Enabled, Plugins: []PluginSummary{}}
	for _, ep := range p.cfg.plugins {
		ps := PluginSummary{Name: ep.def.Name, Queues: []string{}}
		for _, sub := range ep.def.Subscriptions {
			ps.Queues = append(ps.Queues, ep.def.Queue(sub))
		}
		c.Plugins = append(c.Plugins, ps)
	}
	return c
}

// relayStatus reads each relay group of the configuration from the
// database, with the functions the metrics poll (outbox.Lag,
// outbox.CountParked) and /readyz reads (outbox.Slots); none without
// PostgreSQL, which has no outbox.
func (p *Platform) relayStatus(ctx context.Context) ([]RelayStatus, error) {
	out := []RelayStatus{}
	if p.pool == nil {
		return out, nil
	}
	var errs []error
	slots, err := outbox.Slots(ctx, p.pool)
	errs = append(errs, err)
	for _, group := range p.cfg.relayGroups() {
		rs := RelayStatus{ConsumerGroup: group}
		st, err := outbox.State(ctx, p.pool, group)
		errs = append(errs, err)
		rs.Reader, rs.Leader = st.Reader, st.Leader
		for _, r := range p.relays {
			if r.Group() == group {
				here := relayStateOf(r)
				rs.Here, rs.LeaderHere = &here, r.Active()
			}
		}
		rows, age, err := outbox.Lag(ctx, p.pool, group)
		errs = append(errs, err)
		rs.LagRows, rs.LagSeconds = rows, age.Seconds()
		rs.ParkedRows, err = outbox.CountParked(ctx, p.pool, group)
		errs = append(errs, err)
		if i := slices.IndexFunc(slots, func(s outbox.Slot) bool { return s.ConsumerGroup == group }); i >= 0 {
			rs.Slot = &slots[i]
		}
		out = append(out, rs)
	}
	return out, errors.Join(errs...)
}

// consumedQueues are the queues handlers read: not the retry,
// dead-letter or alternate queues.
func (p *Platform) consumedQueues() []string {
	var out []string
	for _, q := range p.top.Queues {
		if _, ok := p.top.Policy(q.Name); ok {
			out = append(out, q.Name)
		}
	}
	return out
}

// queueStatus reads the consumed queues and their dead-letter queues from
// the broker (in one round: the same reader as the metrics' depths), the
// unresolved failures of each, and this process's handling of each.
func (p *Platform) queueStatus(ctx context.Context, now time.Time, unresolved map[string]int) ([]QueueStatus, error) {
	out := []QueueStatus{}
	var names []string
	for _, name := range p.consumedQueues() {
		pol, _ := p.top.Policy(name)
		out = append(out, QueueStatus{Name: name, DeadLetterQueue: pol.DeadLetterQueue, UnresolvedFailures: unresolved[name]})
		names = append(names, name)
		if pol.DeadLetterQueue != "" {
			names = append(names, pol.DeadLetterQueue)
		}
	}
	var err error
	var states map[string]transport.QueueState
	if p.counter != nil {
		states, err = p.counter.Queues(ctx, names)
		if errors.Is(err, transport.ErrNoDepths) {
			states, err = nil, nil
		}
	}
	handling := p.sampled.since(now, p.stats.Counts())
	for i := range out {
		q := &out[i]
		if st, ok := states[q.Name]; ok {
			q.Messages, q.Consumers = &st.Messages, &st.Consumers
		}
		if st, ok := states[q.DeadLetterQueue]; ok {
			q.DeadLetters = &st.Messages
		}
		q.Handling = handling[q.Name]
	}
	if err != nil {
		err = fmt.Errorf("the broker's counts: %w", err)
	}
	return out, err
}

// runningRedrives are the re-drives sending now, with their counters.
func (p *Platform) runningRedrives(ctx context.Context) ([]redrive.Redrive, error) {
	ids, err := p.workbench.redrives.Running(ctx)
	if err != nil {
		return []redrive.Redrive{}, err
	}
	out := make([]redrive.Redrive, 0, len(ids))
	var errs []error
	for _, id := range ids {
		rd, err := p.workbench.redrives.Get(ctx, id)
		if errors.Is(err, redrive.ErrNotFound) {
			continue // deleted since
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, rd)
	}
	return out, errors.Join(errs...)
}
