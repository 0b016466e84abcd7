package app

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

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
