package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
)

// Broker kinds: broker.kind names the transport of an environment.
const (
	BrokerAMQP   = "amqp"
	BrokerKafka  = "kafka"
	BrokerMemory = "memory"
)

var brokerKinds = []string{BrokerAMQP, BrokerKafka, BrokerMemory}

// inProcess reports whether the broker lives inside this process: events
// go from handler to handler in memory, and there is no PostgreSQL, no
// outbox and no other process to share them with. Every check of the
// kind that these follow from asks this, so a transport of either sort
// is added here, beside the factory, and nowhere else.
func (c *Config) inProcess() bool { return c.Broker.Kind == BrokerMemory }

// maxEventBytes is the largest event the outbox takes: outbox.max_event_bytes,
// or when that is 0 the least of what the configured brokers take
// (kafka.max_record_bytes less the record's framing when anything
// publishes to Kafka, RabbitMQ's default max_message_size with the AMQP
// broker); 0, any size, with the memory broker.
func (c *Config) maxEventBytes() int {
	if c.Outbox.MaxEventBytes > 0 {
		return c.Outbox.MaxEventBytes
	}
	limit := 0
	if c.Broker.Kind == BrokerAMQP {
		limit = amqp.MaxMessageBytes
	}
	if c.usesKafka() {
		if k := c.Kafka.MaxEventBytes(); limit == 0 || k < limit {
			limit = k
		}
	}
	return limit
}

// newTransport is the one place a broker kind becomes its adapter. Each
// transport carries its part of top: RabbitMQ the layout declared there
// (RabbitTopology), Kafka the queues that read it (kafkaReaders).
func newTransport(kind string, cfg *Resolved, top *topology.Topology, logger *slog.Logger) (transport.Transport, error) {
	set := transport.Settings{Topology: top, CloseTimeout: cfg.Router.CloseTimeout, ConfirmWindow: cfg.Outbox.ConfirmWindow,
		DeadLetterBatch: cfg.Failures.BatchSize, Logger: logger}
	switch kind {
	case BrokerAMQP:
		declared, err := cfg.RabbitTopology()
		if err != nil {
			return nil, err
		}
		set.Topology = declared
		return amqp.NewTransport(cfg.AMQP, set)
	case BrokerKafka:
		queues, group := cfg.kafkaReaders()
		return kafka.NewTransport(cfg.Kafka, set, queues, group)
	case BrokerMemory:
		return memory.NewTransport(set)
	}
	return nil, fmt.Errorf("broker.kind %q is not supported", kind)
}

// connectTransports makes broker.kind's transport and, with
// analytics.kafka.enabled, Kafka's beside it. Nothing connects until used.
func (r *resources) connectTransports() error {
	var err error
	if r.broker, err = newTransport(r.cfg.Broker.Kind, r.cfg, r.top, r.logger); err != nil {
		return err
	}
	r.onClose(r.broker.Close)
	if r.cfg.Analytics.Kafka.Enabled && r.cfg.Broker.Kind != BrokerKafka {
		if r.stream, err = newTransport(BrokerKafka, r.cfg, r.top, r.logger); err != nil {
			return err
		}
		r.onClose(r.stream.Close)
	}
	return nil
}

// kafka is the transport that carries Kafka: the broker or the one beside
// it; nil when the environment uses none.
func (r *resources) kafka() transport.Transport {
	if r.stream != nil {
		return r.stream
	}
	if r.cfg.Broker.Kind == BrokerKafka {
		return r.broker
	}
	return nil
}

// relayTarget is a transport the outbox feeds, and the consumer group
// whose position its relay keeps: each relay keeps its own, so either
// broker can be away without holding the other back.
type relayTarget struct {
	transport transport.Transport
	group     string
}

// relayTargets are the transports the outbox feeds: the broker, and Kafka
// beside it. The memory broker has no outbox.
func (r *resources) relayTargets() []relayTarget {
	if r.pool == nil {
		return nil
	}
	targets := []relayTarget{{r.broker, r.cfg.Outbox.ConsumerGroup}}
	if r.stream != nil {
		targets = append(targets, relayTarget{r.stream, r.cfg.Analytics.Kafka.RelayGroup})
	}
	return targets
}

// startEmbeddedKafka runs the in-process cluster when kafka.embedded asks
// for it. A cluster this process starts is empty, so the relay that feeds
// it starts again from the outbox's first row: the outbox keeps the events
// of the last outbox.retention, and the readers' inbox and idempotent
// writes absorb the repeats.
func (r *resources) startEmbeddedKafka(ctx context.Context) error {
	if !r.cfg.Kafka.Embedded || !r.cfg.usesKafka() {
		return nil
	}
	stop, started, err := kafka.StartEmbedded(r.cfg.Kafka, r.logger)
	if err != nil {
		return err
	}
	r.onClose(func() error { stop(); return nil })
	if !started {
		return nil
	}
	r.embeddedStarted = true
	return outbox.ResetPosition(ctx, r.pool, r.cfg.kafkaRelayGroup())
}

// kafkaReaders returns the queues that read Kafka and their consumer
// group: with broker.kind kafka every queue, in a group named after it;
// beside RabbitMQ the replayable plugins' queues, in a group named after
// the plugin (seed 001: the group id is the service's name).
func (c *Resolved) kafkaReaders() ([]string, func(queue string) string) {
	groups := map[string]string{}
	var queues []string
	for _, ep := range c.plugins {
		if c.Broker.Kind != BrokerKafka && !ep.def.Replayable {
			continue
		}
		for _, s := range ep.def.Subscriptions {
			q := ep.def.Queue(s)
			queues = append(queues, q)
			groups[q] = ep.def.Name
			if c.Broker.Kind == BrokerKafka {
				groups[q] = q
			}
		}
	}
	return queues, func(queue string) string { return groups[queue] }
}
