package app

import (
	"slices"
	"sort"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// Catalog lists what the enabled plugins publish and consume.
type Catalog struct {
	Events        []CatalogEvent        `json:"events"`
	Subscriptions []CatalogSubscription `json:"subscriptions"`
}

// CatalogEvent is one published event and who receives it.
type CatalogEvent struct {
	Name        string                `json:"event_name"`
	RoutingKey  string                `json:"routing_key"`
	Exchange    string                `json:"exchange"`
	PublishedBy []string              `json:"published_by"`
	Subscribers []CatalogSubscription `json:"subscribers"`
}

// CatalogSubscription is one queue and the handler consuming it: the
// plugin's subscription of the same name.
type CatalogSubscription struct {
	Queue           string   `json:"queue"`
	Plugin          string   `json:"plugin"`
	Handler         string   `json:"handler"`
	Events          []string `json:"events"`
	DeadLetterQueue string   `json:"dead_letter_queue"`
	// RetryDelays are the waits of the redeliveries through the broker.
	RetryDelays []string `json:"retry_delays"`
}

// catalog derives the catalog from the enabled plugins and the topology.
func (c *Resolved) catalog(top *topology.Topology) Catalog {
	cat := Catalog{Events: []CatalogEvent{}, Subscriptions: []CatalogSubscription{}}
	for _, p := range c.plugins {
		for _, s := range p.def.Subscriptions {
			q := p.def.Queue(s)
			pol, _ := top.Policy(q)
			delays := []string{}
			for _, d := range pol.Delays {
				delays = append(delays, d.String())
			}
			cat.Subscriptions = append(cat.Subscriptions, CatalogSubscription{Queue: q, Plugin: p.def.Name, Handler: s.Name,
				Events: s.Events, DeadLetterQueue: pol.DeadLetterQueue, RetryDelays: delays})
		}
	}
	byName := map[string]*CatalogEvent{}
	for _, p := range c.plugins {
		for _, name := range p.def.Publishes {
			if e, ok := byName[name]; ok {
				e.PublishedBy = append(e.PublishedBy, p.def.Name)
				continue
			}
			n, _ := event.ParseName(name) // checked by the registry
			x, _ := top.ExchangeFor(n.Base)
			e := &CatalogEvent{Name: name, RoutingKey: n.Base, Exchange: x, PublishedBy: []string{p.def.Name}, Subscribers: []CatalogSubscription{}}
			for _, s := range cat.Subscriptions {
				if x != "" && slices.Contains(top.QueuesFor(x, n.Base), s.Queue) {
					e.Subscribers = append(e.Subscribers, s)
				}
			}
			byName[name] = e
		}
	}
	for _, e := range byName {
		cat.Events = append(cat.Events, *e)
	}
	sort.Slice(cat.Events, func(i, j int) bool { return cat.Events[i].Name < cat.Events[j].Name })
	return cat
}
