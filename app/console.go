package app

import (
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/app/console"
)

// console builds the operations console on admin, the /v1/admin handler
// (its routes relative to /v1/admin): the console calls it in-process,
// with the caller of each session, so its pages can do nothing the API
// does not allow.
func (p *Platform) console(admin http.Handler) (*console.Console, error) {
	api := chi.NewRouter()
	api.Mount("/v1/admin", admin)
	return console.New(console.Deps{Config: p.cfg.Console, Auth: p.cfg.Auth.Enabled, API: api, Vouch: withSession,
		Map: consoleMap(p.cfg.catalog(p.top), p.top), Logger: p.logger})
}

// consoleMap is the topology as the console draws it: each exchange
// events are published to, with its routing keys and publishers (from the
// catalog), and each queue bound to one, with its subscriber, retry
// queues and dead-letter queue.
func consoleMap(cat Catalog, top *topology.Topology) console.Map {
	var m console.Map
	exchanges := top.EventExchanges()
	for _, name := range exchanges {
		x := console.MapExchange{Name: name, Kind: kindOf(top, name)}
		for _, e := range cat.Events {
			if e.Exchange != name {
				continue
			}
			if !slices.Contains(x.Keys, e.RoutingKey) {
				x.Keys = append(x.Keys, e.RoutingKey)
			}
			for _, pub := range e.PublishedBy {
				if !slices.Contains(x.Publishers, pub) {
					x.Publishers = append(x.Publishers, pub)
				}
			}
		}
		slices.Sort(x.Keys)
		slices.Sort(x.Publishers)
		m.Exchanges = append(m.Exchanges, x)
	}
	subs := map[string]CatalogSubscription{}
	for _, s := range cat.Subscriptions {
		subs[s.Queue] = s
	}
	var queues []string
	for _, b := range top.Bindings {
		if slices.Contains(exchanges, b.Exchange) && !slices.Contains(queues, b.Queue) {
			queues = append(queues, b.Queue)
		}
	}
	for _, s := range cat.Subscriptions { // a subscription on no event exchange still shows
		if !slices.Contains(queues, s.Queue) {
			queues = append(queues, s.Queue)
		}
	}
	for _, name := range queues {
		q := console.MapQueue{Name: name}
		if s, ok := subs[name]; ok {
			q.Plugin, q.Handler = s.Plugin, s.Handler
		}
		for _, b := range top.BindingsOf(name) {
			q.Bindings = append(q.Bindings, console.MapBinding{Exchange: b.Exchange, Key: b.Key})
		}
		if pol, ok := top.Policy(name); ok {
			for _, d := range pol.Delays {
				q.RetryQueues = append(q.RetryQueues, topology.RetryQueue(name, d))
			}
			q.DeadLetterQueue = pol.DeadLetterQueue
		}
		m.Queues = append(m.Queues, q)
	}
	return m
}

// kindOf is the kind of the exchange name (topic, fanout, ...).
func kindOf(top *topology.Topology, name string) string {
	for _, x := range top.Exchanges {
		if x.Name == name {
			return x.Kind
		}
	}
	return ""
}
