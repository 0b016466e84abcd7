// Package handlers is the plugin API and registry. A plugin is one folder
// under handlers/ that returns a Definition: its stable name, the events it
// publishes, its subscriptions, its config section and a build function.
// The registry is an explicit value handed to the app; nothing registers
// itself. Plugins never see a broker: they publish through a Tx and receive
// decoded events.
package handlers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/schema"
)

// Transactor runs units of work. Events published through the Tx leave
// only if fn returns nil and the transaction commits.
//
// A handler runs inside the unit of work that records its event in the
// inbox: InTx called with the handler's context joins that unit instead of
// opening another, so the handler's writes, the events it publishes and the
// inbox claim commit together.
type Transactor interface {
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// Tx is one open unit of work.
type Tx interface {
	// Publish records events in the outbox of this transaction. Correlation
	// and causation ids not set on an event are taken from ctx.
	Publish(ctx context.Context, events ...event.Event) error
	// Postgres is the open PostgreSQL transaction, or nil in an environment
	// without PostgreSQL (memory).
	Postgres() pgx.Tx
	// OnCommit registers fn to run after a successful commit; in-memory
	// stores use it to apply staged writes.
	OnCommit(fn func())
	// Remember records r in this unit of work, so that a client that
	// repeats a request (after a cut connection, say) gets the first answer
	// and causes nothing twice. If r.Consumer already recorded r.Key, it
	// records nothing and returns the earlier receipt.
	Remember(ctx context.Context, r Receipt) (earlier *Receipt, err error)
}

// Receipt is what a consumer answered under one idempotency key.
type Receipt struct {
	// Consumer names who answered: a route or a queue.
	Consumer string
	// Key is the event id or the client's idempotency key (at most 200 bytes).
	Key string
	// Fingerprint identifies the request, to tell a repeat from a different
	// request under the same key.
	Fingerprint []byte
	// Answer is the JSON answer to repeat.
	Answer []byte
}

// HandlerFunc handles one event. Return an error marked event.Permanent
// when retrying cannot help (bad payload); other errors are retried.
type HandlerFunc func(ctx context.Context, e event.Event) error

// PrepareFunc is the first step of a handler that waits on something
// other than the database (another service's answer, a simulated
// analysis): it runs before the unit of work opens, so the wait holds no
// database connection and no transaction, and the context it returns
// (derived from ctx, or nil for ctx itself) is the handler's. It runs on every attempt, and before the inbox is
// consulted, so for a duplicate delivery too: it must have no effect of
// its own. An error fails the attempt as the handler's would.
type PrepareFunc func(ctx context.Context, e event.Event) (context.Context, error)

// BatchHandlerFunc handles events in order, all in one unit of work: the
// bulk form of a HandlerFunc.
type BatchHandlerFunc func(ctx context.Context, events []event.Event) error

// Deps are what the platform gives a plugin when it is built. Database
// work goes through Tx: a unit of work's transaction is the plugin's only
// way to the database, so nothing it writes can skip the outbox, and a
// handler's writes join its delivery's transaction.
type Deps struct {
	Logger *slog.Logger
	Tx     Transactor
	// Now is the plugin's clock; nil is time.Now. A test sets it to see
	// known times.
	Now func() time.Time
}

// Clock is Now, or time.Now when Now is not set.
func (d Deps) Clock() func() time.Time {
	if d.Now == nil {
		return time.Now
	}
	return d.Now
}

// Plugin is a built plugin.
type Plugin struct {
	// Handlers holds one handler per declared subscription, by its name.
	Handlers map[string]HandlerFunc
	// Routes mounts the plugin's HTTP routes; nil when it has none.
	Routes func(chi.Router)
	// Close releases what the plugin holds; nil when nothing.
	Close func() error
	// Prepares optionally give a subscription's handler a first step run
	// outside its unit of work, by subscription name (see PrepareFunc).
	Prepares map[string]PrepareFunc
	// Batches optionally give a subscription's handler a bulk form, by
	// subscription name: `moenda replay` then writes many events in one
	// statement and one transaction instead of one transaction per event.
	// It must have the handler's effect; a batch that fails runs event by
	// event through the handler, as when serving.
	Batches map[string]BatchHandlerFunc
	// Rewind forgets what the plugin derived from events that occurred at
	// or after from (the zero time: all of them), before `moenda replay`
	// reads them again. Required of a Replayable plugin.
	Rewind func(ctx context.Context, from time.Time) error
}

// Subscription is a queue the plugin consumes.
type Subscription struct {
	// Name is stable: the queue is named "<plugin>.<name>", unless Queue
	// names it.
	Name string
	// Queue names the queue when a contract fixes it (a seed's
	// processos.analista, an existing installation's); empty is
	// "<plugin>.<name>".
	Queue string
	// Events are routing-key patterns (* one word, # any words).
	Events []string
	// Handles lists the versioned event names the handler understands, such
	// as "tarefa.concluida.v1". An event of another type that reaches the
	// queue is acknowledged and counted as ignored (subscribers ignore
	// unknown types); an event of a listed type in a version not listed is a
	// permanent failure (unknown_version). Empty: every event the bindings
	// deliver is handled, whatever its version.
	Handles []string
}

// Spec is the static part of a plugin, known without building it: it drives
// the topology, the catalog and `moenda topology print`.
type Spec struct {
	// Name is a public, stable API: it names queues and consumer groups.
	Name string
	// Publishes lists the versioned event names the plugin publishes.
	Publishes []string
	// Payloads give the Go types of the payloads of events it publishes
	// (PayloadOf): the AsyncAPI document shows their JSON Schema, and
	// POST /v1/events answers 422 to a payload that does not match.
	Payloads      []Payload
	Subscriptions []Subscription
	// Exchange is where the plugin's published events go when the
	// configuration (topology.exchanges) routes them nowhere: a default that
	// configuration can override.
	Exchange string
	// Migrations are the plugin's own goose files (00001_name.sql and on),
	// embedded from its folder and applied after the platform's, with a
	// version history of their own; nil when it keeps no tables.
	Migrations fs.FS
	// RouteAuth says who may call the plugin's HTTP routes when the
	// platform's tokens are on (auth.enabled).
	RouteAuth RouteAuth
	// NeedsPostgres says the plugin keeps its state in PostgreSQL only, so
	// an environment without it (broker.kind memory) cannot run it: the
	// registry leaves it out of the defaults there.
	NeedsPostgres bool
	// OptIn plugins are carried but run only where handlers.enabled names
	// them: a tool's probe, an example. Every other registered plugin runs
	// by default.
	OptIn bool
	// Replayable plugins read the event log: when analytics.kafka.enabled
	// is set, their subscriptions consume Kafka in one consumer group named
	// after the plugin, and `moenda replay <plugin>` rebuilds what they
	// derived (Plugin.Rewind) from it.
	Replayable bool
}

// RouteAuth is how a plugin's HTTP routes are authenticated.
type RouteAuth int

const (
	// AuthPublisher, the default: writes (POST, PUT, PATCH, DELETE) need a
	// platform token with the publisher role; reads are open.
	AuthPublisher RouteAuth = iota
	// AuthOwn: the plugin authenticates its callers itself (locacoes'
	// customer tokens), and the platform's tokens are not asked for.
	AuthOwn
)

// MigrationsDir is the folder dir of fsys, where a plugin embeds its goose
// files, as Spec.Migrations wants it. dir is the plugin's own constant, so
// a bad one panics when the plugin is defined.
func MigrationsDir(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("handlers: migrations in %q: %v", dir, err))
	}
	return sub
}

// Payload is the Go type of one published event's payload.
type Payload struct {
	// Event is the versioned event name, one of Spec.Publishes.
	Event string
	// Type is what the plugin hands event.New as the payload.
	Type reflect.Type
}

// PayloadOf declares that the payload of the versioned event name is a P,
// as encoding/json writes it.
func PayloadOf[P any](name string) Payload {
	return Payload{Event: name, Type: reflect.TypeFor[P]()}
}

// Schema is the JSON Schema of the payload.
func (p Payload) Schema() (*schema.Schema, error) {
	s, err := schema.For(p.Type)
	if err != nil {
		return nil, fmt.Errorf("payload of %s (%s): %w", p.Event, p.Type, err)
	}
	return s, nil
}

// Payload returns the declared payload type of the event name, if the
// plugin declares one.
func (d Definition) Payload(name string) (Payload, bool) {
	i := slices.IndexFunc(d.Payloads, func(p Payload) bool { return p.Event == name })
	if i < 0 {
		return Payload{}, false
	}
	return d.Payloads[i], true
}

// Definition is a plugin as the registry holds it.
type Definition struct {
	Spec
	newConfig func() any
	build     func(cfg any, deps Deps) (Plugin, error)
}

// Define makes a Definition whose config section is decoded into a copy of
// defaults (strictly: unknown keys fail). If C has a Validate method it runs
// before Build.
func Define[C any](spec Spec, defaults C, build func(cfg C, deps Deps) (Plugin, error)) Definition {
	return Definition{
		Spec: spec,
		newConfig: func() any {
			c := defaults
			return &c
		},
		build: func(cfg any, deps Deps) (Plugin, error) {
			c, ok := cfg.(*C)
			if !ok {
				return Plugin{}, fmt.Errorf("plugin %s: config is %T, want *%T", spec.Name, cfg, defaults)
			}
			return build(*c, deps)
		},
	}
}

// NewConfig returns a pointer to the plugin's config filled with defaults,
// ready to be decoded into.
func (d Definition) NewConfig() any { return d.newConfig() }

// ValidateConfig runs the config's Validate method, if it has one.
func (d Definition) ValidateConfig(cfg any) error {
	if v, ok := cfg.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// Build builds the plugin and checks it handles every subscription it declared.
func (d Definition) Build(cfg any, deps Deps) (Plugin, error) {
	p, err := d.build(cfg, deps)
	if err != nil {
		return Plugin{}, fmt.Errorf("plugin %s: %w", d.Name, err)
	}
	for _, s := range d.Subscriptions {
		if p.Handlers[s.Name] == nil {
			return Plugin{}, fmt.Errorf("plugin %s: no handler for subscription %q", d.Name, s.Name)
		}
	}
	for name := range p.Prepares {
		if !slices.ContainsFunc(d.Subscriptions, func(s Subscription) bool { return s.Name == name }) {
			return Plugin{}, fmt.Errorf("plugin %s: a prepare step for %q, which is not a subscription", d.Name, name)
		}
	}
	for name := range p.Batches {
		if !slices.ContainsFunc(d.Subscriptions, func(s Subscription) bool { return s.Name == name }) {
			return Plugin{}, fmt.Errorf("plugin %s: a batch handler for %q, which is not a subscription", d.Name, name)
		}
	}
	if d.Replayable && p.Rewind == nil {
		return Plugin{}, fmt.Errorf("plugin %s: a replayable plugin must give Rewind", d.Name)
	}
	return p, nil
}

// Queue is the durable queue name of one of the plugin's subscriptions.
func (d Definition) Queue(s Subscription) string {
	if s.Queue != "" {
		return s.Queue
	}
	return d.Name + "." + s.Name
}

var nameRE = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*$`)

// Registry holds the plugins a binary knows.
type Registry struct {
	defs []Definition
}

// NewRegistry checks the definitions (valid, unique names; versioned event
// names) and returns the registry.
func NewRegistry(defs ...Definition) (*Registry, error) {
	var errs []error
	seen := map[string]bool{}
	payloads := map[string]Payload{} // by event, with the plugin that declared it first
	declaredBy := map[string]string{}
	for _, d := range defs {
		if !nameRE.MatchString(d.Name) {
			errs = append(errs, fmt.Errorf("plugin name %q must be lower-case words joined by . _ or -", d.Name))
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("plugin %q is registered twice", d.Name))
		}
		seen[d.Name] = true
		if d.build == nil {
			errs = append(errs, fmt.Errorf("plugin %q was not made with handlers.Define", d.Name))
		}
		for _, n := range d.Publishes {
			if _, err := event.ParseName(n); err != nil {
				errs = append(errs, fmt.Errorf("plugin %q publishes: %w", d.Name, err))
			}
		}
		own := map[string]bool{}
		for _, p := range d.Payloads {
			switch had, ok := payloads[p.Event]; {
			case !slices.Contains(d.Publishes, p.Event):
				errs = append(errs, fmt.Errorf("plugin %q declares the payload of %q, which it does not publish; add it to Publishes", d.Name, p.Event))
				continue
			case own[p.Event]:
				errs = append(errs, fmt.Errorf("plugin %q declares the payload of %q twice", d.Name, p.Event))
				continue
			case p.Type == nil:
				errs = append(errs, fmt.Errorf("plugin %q declares the payload of %q with no type; use handlers.PayloadOf", d.Name, p.Event))
				continue
			case ok && had.Type != p.Type:
				errs = append(errs, fmt.Errorf("plugins %q and %q declare the payload of %q as %s and %s; one event has one payload type", declaredBy[p.Event], d.Name, p.Event, had.Type, p.Type))
				continue
			}
			own[p.Event] = true
			if _, err := p.Schema(); err != nil {
				errs = append(errs, fmt.Errorf("plugin %q: %w", d.Name, err))
				continue
			}
			if _, ok := payloads[p.Event]; !ok {
				payloads[p.Event], declaredBy[p.Event] = p, d.Name
			}
		}
		subs := map[string]bool{}
		for _, s := range d.Subscriptions {
			if !nameRE.MatchString(s.Name) || subs[s.Name] {
				errs = append(errs, fmt.Errorf("plugin %q: subscription name %q must be unique lower-case words", d.Name, s.Name))
			}
			subs[s.Name] = true
			if s.Queue != "" && !nameRE.MatchString(s.Queue) {
				errs = append(errs, fmt.Errorf("plugin %q: subscription %q: queue %q must be lower-case words joined by . _ or -", d.Name, s.Name, s.Queue))
			}
			if len(s.Events) == 0 {
				errs = append(errs, fmt.Errorf("plugin %q: subscription %q lists no events", d.Name, s.Name))
			}
			for _, h := range s.Handles {
				if _, err := event.ParseName(h); err != nil {
					errs = append(errs, fmt.Errorf("plugin %q: subscription %q handles: %w", d.Name, s.Name, err))
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Registry{defs: defs}, nil
}

// Names lists the known plugins in registration order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.defs))
	for i, d := range r.defs {
		names[i] = d.Name
	}
	return names
}

// Lookup returns the plugin named name.
func (r *Registry) Lookup(name string) (Definition, bool) {
	i := slices.IndexFunc(r.defs, func(d Definition) bool { return d.Name == name })
	if i < 0 {
		return Definition{}, false
	}
	return r.defs[i], true
}

// Defaults are the plugins that run where handlers.enabled is not set:
// every registered plugin but the opt-in ones, in registration order.
// Without PostgreSQL, those that need it are left out, and returned apart
// so the caller can say so.
func (r *Registry) Defaults(withPostgres bool) (run, leftOut []Definition) {
	for _, d := range r.defs {
		switch {
		case d.OptIn:
		case d.NeedsPostgres && !withPostgres:
			leftOut = append(leftOut, d)
		default:
			run = append(run, d)
		}
	}
	return run, leftOut
}

// Select returns the enabled plugins, in the order given; an unknown name
// is an error that lists the known ones.
func (r *Registry) Select(enabled []string) ([]Definition, error) {
	var out []Definition
	var errs []error
	for _, name := range enabled {
		d, ok := r.Lookup(name)
		if !ok {
			errs = append(errs, fmt.Errorf("handlers.enabled: unknown plugin %q (known: %s)", name, strings.Join(r.Names(), ", ")))
			continue
		}
		if slices.ContainsFunc(out, func(o Definition) bool { return o.Name == name }) {
			errs = append(errs, fmt.Errorf("handlers.enabled: plugin %q is listed twice", name))
			continue
		}
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}
