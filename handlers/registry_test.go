package handlers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

type cfg struct {
	Greeting string `koanf:"greeting"`
}

func (c cfg) Validate() error {
	if c.Greeting == "" {
		return errorString("handlers.p.greeting is empty")
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

func plugin(name string, subs ...handlers.Subscription) handlers.Definition {
	return handlers.Define(handlers.Spec{Name: name, Publishes: []string{"a.b.v1"}, Subscriptions: subs}, cfg{Greeting: "oi"},
		func(c cfg, _ handlers.Deps) (handlers.Plugin, error) {
			h := map[string]handlers.HandlerFunc{}
			for _, s := range subs {
				h[s.Name] = func(context.Context, event.Event) error { return nil }
			}
			return handlers.Plugin{Handlers: h}, nil
		})
}

func TestRegistry(t *testing.T) {
	reg, err := handlers.NewRegistry(plugin("p", handlers.Subscription{Name: "s", Events: []string{"a.#"}}), plugin("q"))
	if err != nil {
		t.Fatal(err)
	}
	defs, err := reg.Select([]string{"q", "p"})
	if err != nil || len(defs) != 2 || defs[0].Name != "q" {
		t.Fatalf("Select = %v, %v", defs, err)
	}
	if q := defs[1].Queue(defs[1].Subscriptions[0]); q != "p.s" {
		t.Fatalf("queue name = %q, want p.s", q)
	}
	_, err = reg.Select([]string{"p", "nope", "p"})
	if err == nil || !strings.Contains(err.Error(), `unknown plugin "nope" (known: p, q)`) || !strings.Contains(err.Error(), `"p" is listed twice`) {
		t.Fatalf("Select error = %v", err)
	}

	c := defs[1].NewConfig()
	if err := defs[1].ValidateConfig(c); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	c.(*cfg).Greeting = ""
	if err := defs[1].ValidateConfig(c); err == nil {
		t.Fatal("Validate was not called")
	}
	if defs[1].NewConfig().(*cfg).Greeting != "oi" {
		t.Fatal("NewConfig shares state between calls")
	}
	if _, err := defs[1].Build(defs[1].NewConfig(), handlers.Deps{}); err != nil {
		t.Fatal(err)
	}
}

// A subscription's queue is "<plugin>.<name>" unless a contract names it.
func TestQueueNames(t *testing.T) {
	d := plugin("car")
	if got := d.Queue(handlers.Subscription{Name: "analista"}); got != "car.analista" {
		t.Fatalf("default queue = %q", got)
	}
	if got := d.Queue(handlers.Subscription{Name: "analista", Queue: "processos.analista"}); got != "processos.analista" {
		t.Fatalf("named queue = %q", got)
	}
}

func TestRegistryRejectsBadDefinitions(t *testing.T) {
	missing := handlers.Define(handlers.Spec{Name: "m", Subscriptions: []handlers.Subscription{{Name: "s", Events: []string{"a"}}}}, cfg{},
		func(cfg, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
	reg, err := handlers.NewRegistry(missing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Select([]string{"m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Build(missing.NewConfig(), handlers.Deps{}); err == nil || !strings.Contains(err.Error(), `no handler for subscription "s"`) {
		t.Fatalf("Build of a plugin missing a handler: %v", err)
	}

	tests := []struct {
		defs []handlers.Definition
		want string
	}{
		{[]handlers.Definition{plugin("Bad Name")}, "must be lower-case"},
		{[]handlers.Definition{plugin("p"), plugin("p")}, `"p" is registered twice`},
		{[]handlers.Definition{{Spec: handlers.Spec{Name: "raw"}}}, "not made with handlers.Define"},
		{[]handlers.Definition{plugin("p", handlers.Subscription{Name: "s"})}, "lists no events"},
		{[]handlers.Definition{handlers.Define(handlers.Spec{Name: "v", Publishes: []string{"a.b"}}, cfg{}, nil)}, "ending in a version"},
		{[]handlers.Definition{plugin("q", handlers.Subscription{Name: "s", Queue: "Bad Queue", Events: []string{"a"}})}, `queue "Bad Queue" must be lower-case`},
		{[]handlers.Definition{withPayloads("p", handlers.PayloadOf[ab]("a.c.v1"))}, `declares the payload of "a.c.v1", which it does not publish`},
		{[]handlers.Definition{withPayloads("p", handlers.PayloadOf[ab]("a.b.v1"), handlers.PayloadOf[ab]("a.b.v1"))}, `declares the payload of "a.b.v1" twice`},
		{[]handlers.Definition{withPayloads("p", handlers.Payload{Event: "a.b.v1"})}, "with no type"},
		{[]handlers.Definition{withPayloads("p", handlers.PayloadOf[looped]("a.b.v1"))}, "refers to itself"},
		{[]handlers.Definition{withPayloads("p", handlers.PayloadOf[ab]("a.b.v1")), withPayloads("q", handlers.PayloadOf[struct{ X int }]("a.b.v1"))}, `plugins "p" and "q" declare the payload of "a.b.v1"`},
	}
	for _, tt := range tests {
		if _, err := handlers.NewRegistry(tt.defs...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewRegistry error = %v, want %q", err, tt.want)
		}
	}
}

// ab is a payload type.
type ab struct {
	A int    `json:"a"`
	B string `json:"b,omitempty"`
}

// looped is a payload type with no JSON Schema of its own.
type looped struct {
	Next *looped `json:"next"`
}

// withPayloads is plugin name, publishing a.b.v1, with payloads declared.
func withPayloads(name string, payloads ...handlers.Payload) handlers.Definition {
	return handlers.Define(handlers.Spec{Name: name, Publishes: []string{"a.b.v1"}, Payloads: payloads}, cfg{},
		func(cfg, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
}

// A declared payload type gives its event's schema; two plugins that
// publish one event may both declare its type, if it is the same.
func TestPayloadOf(t *testing.T) {
	p, q := withPayloads("p", handlers.PayloadOf[ab]("a.b.v1")), withPayloads("q", handlers.PayloadOf[ab]("a.b.v1"))
	if _, err := handlers.NewRegistry(p, q); err != nil {
		t.Fatal(err)
	}
	got, ok := p.Payload("a.b.v1")
	if !ok {
		t.Fatal("no payload for a.b.v1")
	}
	s, err := got.Schema()
	if err != nil {
		t.Fatal(err)
	}
	if s.Properties["a"] == nil || s.Properties["b"] == nil || len(s.Required) != 1 || s.Required[0] != "a" {
		t.Fatalf("schema = %+v, want a required and b optional", s)
	}
	if _, ok := p.Payload("a.c.v1"); ok {
		t.Fatal("a payload for an event not declared")
	}
}

// A prepare step must belong to one of the plugin's subscriptions: one
// under a misspelt name would never run, and its handler would wait
// inside its unit of work.
func TestBuildRefusesAPrepareStepOfNoSubscription(t *testing.T) {
	def := handlers.Define(handlers.Spec{Name: "p", Subscriptions: []handlers.Subscription{{Name: "s", Events: []string{"a.b"}}}}, cfg{Greeting: "oi"},
		func(c cfg, _ handlers.Deps) (handlers.Plugin, error) {
			return handlers.Plugin{
				Handlers: map[string]handlers.HandlerFunc{"s": func(context.Context, event.Event) error { return nil }},
				Prepares: map[string]handlers.PrepareFunc{"t": func(ctx context.Context, _ event.Event) (context.Context, error) { return ctx, nil }},
			}, nil
		})
	_, err := def.Build(&cfg{Greeting: "oi"}, handlers.Deps{})
	if err == nil || !strings.Contains(err.Error(), `a prepare step for "t", which is not a subscription`) {
		t.Fatalf("Build = %v", err)
	}
}
