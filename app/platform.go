package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/router"
)

// Platform is serve: the HTTP server, the router running plugin
// handlers, the outbox relays and the background loops, over the
// resources they share.
type Platform struct {
	*resources
	role  ServeRole
	tx    handlers.Transactor
	inbox inbox
	// out is the outbox the transactor writes, nil with the memory broker;
	// its commits wake the relays.
	out   *outbox.Outbox
	stats *router.Stats
	// metrics is nil unless metrics.enabled.
	metrics *metrics
	// tracer is nil unless tracing.exporter asks for spans.
	tracer trace.Tracer
	router *message.Router // nil unless the role runs handlers
	// relays move outbox rows to RabbitMQ, Kafka, or both; none with the
	// memory broker.
	relays []*outbox.Relay
	reader string // how the relays read the outbox, once chosen
	// notifier wakes polling relays in other processes; nil when the
	// relays stream, or this process writes no events.
	notifier *outbox.Notifier
	// publishing says why the broker blocks the relay's publishing (a
	// RabbitMQ alarm), or ""; nil without a relay to the broker.
	publishing func() string
	// workbench holds the failure ledger and the audit; ingest, what
	// /readyz and the metrics say of the process's reading of the
	// dead-letter queues into the ledger.
	workbench *workbench
	ingest    ingestState
	// ready shares and keeps the answers of /readyz, and status those of
	// the status page.
	ready  shared[readyAnswer]
	status shared[Status]
	// sampled holds the handlers' counters at the last status, for the
	// next one's rates.
	sampled rateSample
	// counter is the transport the status counts queues with: the
	// broker's, or an api process's own (see connectBrokers).
	counter  transport.Transport
	listener net.Listener
	server   *http.Server
}

// inbox is the record of processed events, in PostgreSQL or in memory.
type inbox interface {
	router.Inbox
	PruneInbox(ctx context.Context, cutoff time.Time, batch int) (int, error)
	// Claimed returns those of keys that consumer has processed: a
	// re-drive's items that were handled.
	Claimed(ctx context.Context, consumer string, keys []string) (map[string]bool, error)
	// Claims returns when each consumer that has processed key did: a
	// journey's handlings.
	Claims(ctx context.Context, key string) (map[string]time.Time, error)
}

// New connects everything the configuration asks for, as far as the
// role (WithRole; all by default) needs it: PostgreSQL (with migrations
// applied), the broker (with the topology declared), the plugins, the
// router and the HTTP listener. Nothing is consumed or served until Run.
func New(ctx context.Context, cfg *Resolved, logger *slog.Logger, opts ...Option) (_ *Platform, err error) {
	p := &Platform{role: ServeAll, ready: shared[readyAnswer]{keep: readyInterval, bound: readyTimeout},
		status: shared[Status]{keep: statusInterval, bound: statusTimeout}, sampled: rateSample{at: time.Now()}}
	for _, o := range opts {
		o(p)
	}
	for _, name := range cfg.leftOut {
		logger.Info("plugin left out: it keeps its state in PostgreSQL, which this environment's broker does not have", "plugin", name, "broker", cfg.Broker.Kind)
	}
	if p.role != ServeAll && cfg.inProcess() {
		return nil, fmt.Errorf("serve --role %s: broker.kind %s keeps events inside one process; run --role all, or choose an environment with a shared broker (broker.kind amqp or kafka)", p.role, cfg.Broker.Kind)
	}
	if p.resources, err = openResources(ctx, cfg, logger); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	p.workbench = p.resources.newWorkbench()
	if err = p.startTracing(ctx); err != nil {
		return nil, err
	}
	if err = p.connectBrokers(ctx); err != nil {
		return nil, err
	}
	if err = p.makeTransactor(ctx); err != nil {
		return nil, err
	}
	p.workbench.claims = p.inbox.Claims // the memory broker's inbox too

	deps := handlers.Deps{Logger: logger, Tx: p.tx}
	var routes, streamRoutes []router.Route
	var plugins []builtPlugin
	enabled := cfg.plugins
	if !p.role.api() && !p.role.worker() {
		enabled = nil // a relay runs no plugin code
	}
	for _, ep := range enabled {
		built, err := ep.def.Build(ep.cfg, deps)
		if err != nil {
			return nil, err
		}
		if built.Close != nil {
			p.closers = append(p.closers, built.Close)
		}
		plugins = append(plugins, builtPlugin{spec: ep.def.Spec, Plugin: built})
		for _, s := range ep.def.Subscriptions {
			q := ep.def.Queue(s)
			pol, _ := p.top.Policy(q)
			rt := router.Route{Queue: q, Handler: ep.def.Name + "/" + s.Name, Envelope: p.top.Envelope(q), Handles: s.Handles, Policy: pol, Handle: built.Handlers[s.Name],
				Prepare: built.Prepares[s.Name]}
			if p.stream != nil && ep.def.Replayable {
				streamRoutes = append(streamRoutes, rt)
			} else {
				routes = append(routes, rt)
			}
		}
	}
	p.stats = router.NewStats(cfg.Metrics.Enabled)
	if p.role.worker() {
		if p.router, err = router.New(cfg.Router, watermill.NewSlogLogger(logger)); err != nil {
			return nil, err
		}
		if err = p.addRoutes(p.broker, routes); err != nil {
			return nil, err
		}
		if p.stream != nil {
			if err = p.addRoutes(p.stream, streamRoutes); err != nil {
				return nil, err
			}
		}
	}

	if p.listener, err = net.Listen("tcp", cfg.HTTP.Addr); err != nil {
		return nil, fmt.Errorf("http: listen on %s (http.addr): %w", cfg.HTTP.Addr, err)
	}
	p.closers = append(p.closers, func() error {
		if err := p.listener.Close(); !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	if cfg.Metrics.Enabled {
		cs := []prometheus.Collector{p.stats}
		for _, r := range p.relays {
			cs = append(cs, r)
		}
		p.metrics = newMetrics(cs...)
	}
	h, err := p.handler(plugins)
	if err != nil {
		return nil, err
	}
	p.server = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// makeTransactor makes the units of work the plugins write through: in
// PostgreSQL with the outbox, whose commits wake the relays (this
// process's at once, others' through the notifier), or, with the memory
// broker, in memory, publishing as each commits.
func (p *Platform) makeTransactor(ctx context.Context) error {
	if p.pool == nil {
		dest, err := p.broker.Destination("moenda")
		if err != nil {
			return err
		}
		txr := memory.NewTransactor(committedTo{dest}, p.top.Routable)
		p.tx, p.inbox = txr, txr
		return nil
	}
	if err := p.makeNotifier(ctx); err != nil {
		return err
	}
	p.out = outbox.New(p.top.Routable, watermill.NewSlogLogger(p.logger)).Limit(p.cfg.maxEventBytes())
	for _, r := range p.relays {
		p.out.Wakes(r)
	}
	if p.notifier != nil {
		p.out.NotifiesThrough(p.notifier)
	}
	txr := postgres.NewTransactor(p.pool, p.out)
	p.tx, p.inbox = txr, txr
	return nil
}

// addRoutes runs routes on the router, reading from t.
func (p *Platform) addRoutes(t transport.Transport, routes []router.Route) error {
	c, err := t.Consumer()
	if err != nil {
		return err
	}
	router.AddRoutes(p.router, router.Deps{Subscriber: c.Subscriber, Sink: c.Sink, Inbox: p.inbox, Stats: p.stats, Logger: p.logger, Tracer: p.tracer,
		MaxMessageBytes: p.cfg.Router.MaxMessageBytes}, routes)
	return nil
}

// committedTo is the memory transactor's publisher: a unit's events go
// to dest once it commits.
type committedTo struct{ transport.Destination }

func (c committedTo) Publish(key string, msgs ...*message.Message) error {
	keys := make([]string, len(msgs))
	for i := range keys {
		keys[i] = key
	}
	return c.PublishBatch(context.Background(), keys, msgs)
}

// Addr is the address the HTTP server listens on.
func (p *Platform) Addr() string { return p.listener.Addr().String() }

// Run runs what the role asks for (the router, the outbox relays, the
// HTTP server) until ctx ends or one of them fails. A worker serves HTTP
// once its handlers consume. On the way out it stops HTTP first, letting
// the requests in flight finish, so that no request starts a unit of work
// nobody follows up; then, side by side, the router stops consuming and
// gives its handlers router.close_timeout to finish what they hold, and
// the relays publish and record the batch in hand.
func (p *Platform) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRelay()
	for _, r := range p.relays {
		g.Go(func() error { return r.Run(relayCtx) })
	}
	if p.role.api() || p.role.worker() {
		g.Go(func() error { p.pruneInbox(gctx); return nil })
	}
	g.Go(func() error { p.pruneOutbox(gctx); return nil })
	if p.ingests() {
		g.Go(func() error { p.ingestFailures(gctx); return nil })
		g.Go(func() error { p.pruneFailures(gctx); return nil })
	}
	g.Go(func() error { p.watchSlots(gctx); return nil })
	if p.metrics != nil {
		g.Go(func() error { p.pollMetrics(gctx); return nil })
	}
	// The notifier outlives the requests and handlers that finish on the
	// way out: their commits still wake the relay.
	notifyCtx, stopNotifying := context.WithCancel(context.WithoutCancel(ctx))
	defer stopNotifying()
	if p.notifier != nil {
		g.Go(func() error { p.notifier.Run(notifyCtx); return nil })
	}
	if p.router != nil {
		g.Go(func() error {
			// The router stops through Close below, not through ctx, which
			// would cut the handlers' messages off at once.
			if err := p.router.Run(context.WithoutCancel(gctx)); err != nil {
				return fmt.Errorf("router: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		select {
		case <-p.Running():
		case <-gctx.Done():
			return nil
		}
		if err := p.server.Serve(p.listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	var stopping time.Time
	g.Go(func() error {
		<-gctx.Done()
		stopping = time.Now()
		p.logger.Info("moenda stopping: finishing the HTTP requests in flight, the handlers' messages and the relays' batches", "role", p.role)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.HTTP.ShutdownTimeout)
		defer cancel()
		err := p.server.Shutdown(sctx)
		stopRelay()
		if p.router != nil {
			err = errors.Join(err, p.router.Close())
		}
		stopNotifying()
		return err
	})
	serving := []any{"env", p.cfg.Env, "role", p.role, "addr", p.Addr(), "broker", p.cfg.Broker.Kind, "auth", p.cfg.Auth.Enabled}
	if p.role.api() || p.role.relay() {
		serving = append(serving, "console", "http://"+p.Addr()+"/console")
	}
	p.logger.Info("moenda serving", serving...)
	if p.role.api() && p.cfg.Auth.Enabled && len(p.cfg.Auth.Tokens) == 0 {
		p.logger.Warn("auth.enabled with no auth.tokens: publishing and administration answer 401 to everyone; set MOENDA_AUTH__TOKENS=publisher:<sha256 of a token>")
	}
	err := errors.Join(g.Wait(), p.Close())
	p.logger.Info("moenda stopped", "role", p.role, "took", time.Since(stopping).Round(time.Millisecond))
	return err
}

// pruneInbox deletes claims older than inbox.retention every
// inbox.prune_interval, until ctx ends.
func (p *Platform) pruneInbox(ctx context.Context) {
	p.pruneEvery(ctx, "inbox", "old claims", p.cfg.Inbox.PruneInterval, p.cfg.Inbox.Retention, func(ctx context.Context, cutoff time.Time) (int, error) {
		return p.inbox.PruneInbox(ctx, cutoff, 1000)
	})
}

// every runs fn every d, the first time after d, until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fn()
	}
}

// Running is closed once the router's handlers are consuming; at once in a
// process that runs no handlers.
func (p *Platform) Running() <-chan struct{} {
	if p.router == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return p.router.Running()
}
