package plugintest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Plugin is a plugin built over one store with its routes mounted, as a
// test drives it: requests, deliveries, and the events committed.
type Plugin struct {
	handlers.Plugin
	Store
	// T is the test that drives it, which its checks fail.
	T      testing.TB
	router chi.Router
}

// Build builds a plugin over s with build, which gets the store's unit of
// work, the test logger and a Clock (build may set another).
func Build(t testing.TB, s Store, build func(handlers.Deps) (handlers.Plugin, error)) *Plugin {
	t.Helper()
	p, err := build(handlers.Deps{Logger: testenv.Logger(), Tx: s.Tx, Now: Clock()})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	if p.Routes != nil {
		p.Routes(r)
	}
	return &Plugin{Plugin: p, Store: s, T: t, router: r}
}

// Defaults is def's build with its default configuration, for Build.
func Defaults(def handlers.Definition) func(handlers.Deps) (handlers.Plugin, error) {
	return func(deps handlers.Deps) (handlers.Plugin, error) { return def.Build(def.NewConfig(), deps) }
}

// Serve answers req.
func (p *Plugin) Serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	p.router.ServeHTTP(rec, req)
	return rec
}

// Expect answers req, which must answer code, decoding the answer into out
// when it is not nil.
func (p *Plugin) Expect(code int, req *http.Request, out any) {
	p.T.Helper()
	rec := p.Serve(req)
	if rec.Code != code {
		p.T.Fatalf("%s %s = %d %s, want %d", req.Method, req.URL, rec.Code, rec.Body, code)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			p.T.Fatalf("%s %s: %v in %s", req.Method, req.URL, err, rec.Body)
		}
	}
}

// Do answers one request; an empty body sends none.
func (p *Plugin) Do(method, path, body string) *httptest.ResponseRecorder {
	return p.Serve(httptest.NewRequest(method, path, strings.NewReader(body)))
}

// Must answers one request that must answer code, decoding the answer
// into out when it is not nil.
func (p *Plugin) Must(code int, method, path, body string, out any) {
	p.T.Helper()
	p.Expect(code, httptest.NewRequest(method, path, strings.NewReader(body)), out)
}

// Deliver hands e to a subscription's handler as the router does: inside
// a unit of work the handler joins.
func (p *Plugin) Deliver(sub string, e event.Event) error {
	return p.Tx.InTx(context.Background(), func(ctx context.Context, _ handlers.Tx) error {
		return p.Handlers[sub](ctx, e)
	})
}

// Relay delivers the events that reach the subscription s (see Reaches)
// to its handler, in order, as the broker would route them; it stops at
// the first that fails.
func (p *Plugin) Relay(s handlers.Subscription, events []event.Event) error {
	for _, e := range events {
		if !Reaches(s, e) {
			continue
		}
		if err := p.Deliver(s.Name, e); err != nil {
			return fmt.Errorf("deliver %s: %w", e.Name, err)
		}
	}
	return nil
}

// Events decodes every committed event, in order.
func (p *Plugin) Events() []event.Event {
	p.T.Helper()
	var out []event.Event
	for _, b := range p.Committed() {
		e, err := event.Decode(b)
		if err != nil {
			p.T.Fatalf("a committed event does not decode: %v", err)
		}
		out = append(out, e)
	}
	return out
}

// Event is an event as source publishes it, with payload (verbatim when
// it is a json.RawMessage). A name event.New refuses is the test's own
// mistake: it panics.
func Event(name, source string, payload any) event.Event {
	e, err := event.New(name, source, payload)
	if err != nil {
		panic(err)
	}
	return e
}

// Clock is a clock that starts on 2026-01-15 at 10:30 UTC and moves one
// second at each reading, so every time a test sees is distinct and known.
func Clock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second)
		return t
	}
}
