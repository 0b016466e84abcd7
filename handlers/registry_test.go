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
	}
	for _, tt := range tests {
		if _, err := handlers.NewRegistry(tt.defs...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewRegistry error = %v, want %q", err, tt.want)
		}
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
