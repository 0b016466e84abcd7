package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/router"
)

// Platform is moenda assembled from a Config: the HTTP server, the router
// running plugin handlers, the outbox relay, and the connections
// they share.
type Platform struct {
	cfg    *Resolved
	logger *slog.Logger
	role   ServeRole
	top    *topology.Topology
	pool   *pgxpool.Pool // nil with the memory broker
	broker broker
	tx     handlers.Transactor
	inbox  inbox
	stats  *router.Stats
	// metrics is nil unless metrics.enabled.
	metrics *metrics
	// tracer is nil unless tracing.exporter asks for spans.
	tracer trace.Tracer
	// stream is Kafka beside RabbitMQ (analytics.kafka.enabled), where
	// replayable plugins read; nil otherwise.
	stream *broker
	router *message.Router // nil unless the role runs handlers
	// relays move outbox rows to RabbitMQ, Kafka, or both; none with the
	// memory broker.
	relays []*outbox.Relay
	reader string // how the relays read the outbox, once chosen
	// notifier wakes polling relays in other processes; nil when the
	// relays stream, or this process writes no events.
	notifier *outbox.Notifier
	// publishing says why RabbitMQ blocks the relay's publishing (an
	// alarm), or ""; nil without a RabbitMQ relay.
	publishing func() string
	// ready shares and keeps the answers of /readyz.
	ready    readiness
	listener net.Listener
	server   *http.Server
	closers  []func() error
}

// broker is what the platform needs of a transport.
type broker struct {
	subscriber message.Subscriber // topic = queue name
	sink       router.Sink
	ready      func(context.Context) error
	close      func() error
}

// inbox is the record of processed events, in PostgreSQL or in memory.
type inbox interface {
	router.Inbox
	PruneInbox(ctx context.Context, cutoff time.Time, batch int) (int, error)
}

// BuildTopology derives the broker layout from the configuration and the
// enabled plugins, without connecting to anything.
func (c *Resolved) BuildTopology() (*topology.Topology, error) {
	return c.buildTopology(func(enabledPlugin) bool { return true })
}

// RabbitTopology is the part of the layout declared on RabbitMQ: all of
// it, except, when replayable plugins read Kafka (analytics.kafka.enabled),
// their queues, which nobody would consume there.
func (c *Resolved) RabbitTopology() (*topology.Topology, error) {
	return c.buildTopology(func(p enabledPlugin) bool { return !c.Analytics.Kafka.Enabled || !p.def.Replayable })
}

// buildTopology derives the layout with the subscriptions of the plugins
// include accepts.
func (c *Resolved) buildTopology(include func(enabledPlugin) bool) (*topology.Topology, error) {
	var subs []topology.Subscription
	included := map[string]bool{}
	for _, p := range c.plugins {
		if !include(p) {
			continue
		}
		for _, s := range p.def.Subscriptions {
			subs = append(subs, topology.Subscription{Queue: p.def.Queue(s), Patterns: s.Events})
			included[p.def.Queue(s)] = true
		}
	}
	cfg := c.routedByPlugins()
	// The settings of a queue this layout leaves out (its plugin is not
	// enabled, or reads Kafka) wait for the day it is in; a queue no
	// registered plugin has stays an error, as a misspelling.
	cfg.Subscriptions = slices.DeleteFunc(slices.Clone(cfg.Subscriptions), func(o topology.SubscriptionConfig) bool {
		return c.queues[o.Queue] && !included[o.Queue]
	})
	top, err := topology.Build(cfg, subs)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	var errs []error
	for _, p := range c.plugins {
		for _, name := range p.def.Publishes {
			n, _ := event.ParseName(name) // checked by the registry
			if _, err := top.ExchangeFor(n.Base); err != nil {
				errs = append(errs, fmt.Errorf("topology: plugin %s publishes %s: %w", p.def.Name, name, err))
			}
		}
	}
	for _, p := range c.plugins {
		for _, s := range p.def.Subscriptions {
			q := p.def.Queue(s)
			pol, _ := top.Policy(q)
			if path := redeliveryPath(pol); c.Inbox.Retention <= path {
				errs = append(errs, fmt.Errorf("inbox.retention (%s) must be longer than the retry schedule of queue %s (%s), or a late redelivery would run its handler again", c.Inbox.Retention, q, path))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return top, nil
}

// routedByPlugins is the topology configuration with each enabled
// plugin's published events routed to the plugin's exchange, where the
// configuration routes them nowhere: configuration overrides a plugin's
// default, and an exchange the configuration does not list is added.
func (c *Resolved) routedByPlugins() topology.Config {
	cfg := c.Topology
	cfg.Exchanges = slices.Clone(cfg.Exchanges)
	for i := range cfg.Exchanges {
		cfg.Exchanges[i].Events = slices.Clone(cfg.Exchanges[i].Events)
	}
	for _, p := range c.plugins {
		if p.def.Exchange == "" {
			continue
		}
		for _, name := range p.def.Publishes {
			n, _ := event.ParseName(name) // checked by the registry
			if slices.ContainsFunc(cfg.Exchanges, func(x topology.ExchangeConfig) bool {
				return slices.ContainsFunc(x.Events, func(pattern string) bool { return topology.Match(pattern, n.Base) })
			}) {
				continue
			}
			i := slices.IndexFunc(cfg.Exchanges, func(x topology.ExchangeConfig) bool { return x.Name == p.def.Exchange })
			if i < 0 {
				cfg.Exchanges = append(cfg.Exchanges, topology.ExchangeConfig{Name: p.def.Exchange})
				i = len(cfg.Exchanges) - 1
			}
			cfg.Exchanges[i].Events = append(cfg.Exchanges[i].Events, n.Base)
		}
	}
	return cfg
}

// redeliveryPath is how long a message may take through its retries.
func redeliveryPath(pol topology.Policy) time.Duration {
	var d time.Duration
	for _, delay := range pol.Delays {
		d += delay
	}
	return d + time.Duration(pol.Attempts())*(pol.ImmediateInterval<<pol.ImmediateRetries)
}

// New connects everything the configuration asks for, as far as the
// role (WithRole; all by default) needs it: PostgreSQL (with migrations
// applied), the broker (with the topology declared), the plugins, the
// router and the HTTP listener. Nothing is consumed or served until Run.
func New(ctx context.Context, cfg *Resolved, logger *slog.Logger, opts ...Option) (_ *Platform, err error) {
	p := &Platform{cfg: cfg, logger: logger, role: ServeAll}
	for _, o := range opts {
		o(p)
	}
	for _, name := range cfg.leftOut {
		logger.Info("plugin left out: it keeps its state in PostgreSQL, which broker.kind memory does not have", "plugin", name)
	}
	if p.role != ServeAll && cfg.Broker.Kind == BrokerMemory {
		return nil, fmt.Errorf("serve --role %s: broker.kind memory keeps events inside one process; run --role all, or choose an environment with a shared broker (broker.kind amqp or kafka)", p.role)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	if err = p.startTracing(ctx); err != nil {
		return nil, err
	}
	wlog := watermill.NewSlogLogger(logger)
	if p.top, err = cfg.BuildTopology(); err != nil {
		return nil, err
	}
	routable := p.top.Routable

	switch cfg.Broker.Kind {
	case BrokerAMQP, BrokerKafka:
		if err = p.connectPostgres(ctx); err != nil {
			return nil, err
		}
		if err = p.connectBrokers(ctx); err != nil {
			return nil, err
		}
		if err = p.makeNotifier(ctx); err != nil {
			return nil, err
		}
		txr := postgres.NewTransactor(p.pool, outbox.New(routable, wlog).Limit(cfg.maxEventBytes()), p.wakeRelays)
		p.tx, p.inbox = txr, txr
	case BrokerMemory:
		b := memory.NewBroker(p.top, cfg.Router.CloseTimeout, wlog)
		p.broker = broker{subscriber: b.Subscriber, sink: b, ready: func(context.Context) error { return nil }, close: b.Close}
		p.closers = append(p.closers, p.broker.close)
		txr := memory.NewTransactor(b.Publisher, routable)
		p.tx, p.inbox = txr, txr
	default:
		return nil, fmt.Errorf("broker.kind %q is not supported", cfg.Broker.Kind)
	}

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
		if p.router, err = router.New(cfg.Router, wlog); err != nil {
			return nil, err
		}
		router.AddRoutes(p.router, router.Deps{Subscriber: p.broker.subscriber, Sink: p.broker.sink, Inbox: p.inbox, Stats: p.stats, Logger: logger, Tracer: p.tracer, MaxMessageBytes: p.cfg.Router.MaxMessageBytes}, routes)
		if p.stream != nil {
			router.AddRoutes(p.router, router.Deps{Subscriber: p.stream.subscriber, Sink: p.stream.sink, Inbox: p.inbox, Stats: p.stats, Logger: logger, Tracer: p.tracer, MaxMessageBytes: p.cfg.Router.MaxMessageBytes}, streamRoutes)
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
	p.server = &http.Server{
		Handler:           p.handler(plugins),
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return p, nil
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
	p.logger.Info("moenda serving", "env", p.cfg.Env, "role", p.role, "addr", p.Addr(), "broker", p.cfg.Broker.Kind, "auth", p.cfg.Auth.Enabled)
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
	every(ctx, p.cfg.Inbox.PruneInterval, func() {
		n, err := p.inbox.PruneInbox(ctx, time.Now().Add(-p.cfg.Inbox.Retention), 1000)
		switch {
		case err != nil && ctx.Err() == nil:
			p.logger.Warn("inbox: prune failed; will try again", "error", err, "retry_in", p.cfg.Inbox.PruneInterval)
		case n > 0:
			p.logger.Info("inbox: pruned old claims", "deleted", n, "retention", p.cfg.Inbox.Retention)
		}
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

// Close releases connections in the reverse order they were opened.
func (p *Platform) Close() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	p.closers = nil
	return errors.Join(errs...)
}
