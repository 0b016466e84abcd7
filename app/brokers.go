package app

import (
	"context"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/migrations"
)

// connectPostgres opens the pool, creating the database if it is missing,
// and applies the migrations.
func (p *Platform) connectPostgres(ctx context.Context) error {
	if err := postgres.EnsureDatabase(ctx, p.cfg.Postgres, p.logger); err != nil {
		return err
	}
	pool, err := postgres.Connect(ctx, p.cfg.Postgres)
	if err != nil {
		return err
	}
	p.pool = pool
	p.closers = append(p.closers, func() error { pool.Close(); return nil })
	_, err = migrations.Up(ctx, pool, p.logger, p.cfg.migrations()...)
	return err
}

// connectBrokers connects the transports the configuration names, as far
// as the process's role needs them: the consumers and the failure
// publisher for a worker, a relay from the outbox to each transport for a
// relay, nothing for an api process, which only writes the outbox. The
// transports are RabbitMQ (broker.kind amqp), Kafka (broker.kind kafka), or
// RabbitMQ with Kafka beside it (analytics.kafka.enabled), where each
// relay keeps its own position so either broker can be away without
// holding the other back.
func (p *Platform) connectBrokers(ctx context.Context) error {
	cfg := p.cfg
	if !p.role.worker() && !p.role.relay() {
		return nil
	}
	if cfg.Broker.Kind == BrokerAMQP {
		declared, err := cfg.RabbitTopology()
		if err != nil {
			return err
		}
		if err := amqp.Declare(ctx, cfg.AMQP.Nodes(), declared); err != nil {
			return err
		}
		if p.role.worker() {
			if err := p.warnOfUnreadQueues(); err != nil {
				return err
			}
		}
		// A relay's readiness asks RabbitMQ too; its consumers and failure
		// publisher connect on first use, which only a worker makes.
		b, err := amqp.Connect(cfg.AMQP, p.top, cfg.Router.CloseTimeout, p.logger)
		if err != nil {
			return err
		}
		p.broker = broker{subscriber: b.Subscriber, sink: b.Sink, ready: b.Ready, close: b.Close}
		p.closers = append(p.closers, p.broker.close)
		if p.role.relay() {
			dest, err := amqp.NewBatchPublisher(cfg.AMQP.Nodes(), "moenda outbox relay", cfg.Outbox.ConfirmWindow, p.top)
			if err != nil {
				return err
			}
			p.closers = append(p.closers, dest.Close)
			p.publishing = dest.Blocked
			if err := p.addRelay(ctx, dest, cfg.Outbox.ConsumerGroup); err != nil {
				return err
			}
		}
	}
	if !cfg.usesKafka() {
		return nil
	}
	if _, err := p.startEmbeddedKafka(ctx); err != nil {
		return err
	}
	queues, group := p.kafkaReaders()
	if p.role.worker() {
		failures, err := kafka.NewProducer(cfg.Kafka, p.top, kafka.Topics(p.top, queues), "moenda failures", p.logger)
		if err != nil {
			return err
		}
		p.closers = append(p.closers, failures.Close)
		sub, err := kafka.NewSubscriber(cfg.Kafka, p.top, group, cfg.Router.CloseTimeout, p.logger)
		if err != nil {
			return err
		}
		probe := kafka.NewProber(cfg.Kafka)
		p.closers = append(p.closers, probe.Close)
		b := broker{subscriber: sub, sink: failures, ready: probe.Ping, close: sub.Close}
		p.closers = append(p.closers, b.close)
		if cfg.Broker.Kind == BrokerKafka {
			p.broker = b
		} else {
			p.stream = &b // not part of readiness: RabbitMQ delivery goes on without it
		}
	} else if cfg.Broker.Kind == BrokerKafka {
		probe := kafka.NewProber(cfg.Kafka)
		p.closers = append(p.closers, probe.Close)
		p.broker = broker{ready: probe.Ping}
	}
	if !p.role.relay() {
		return nil
	}
	dest, err := kafka.NewProducer(cfg.Kafka, p.top, kafka.Topics(p.top, queues), "moenda outbox relay", p.logger)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, dest.Close)
	return p.addRelay(ctx, dest, cfg.kafkaRelayGroup())
}

// warnOfUnreadQueues logs a warning for each queue of a replayable plugin
// left on RabbitMQ from before analytics.kafka.enabled: nothing reads it
// now, and it keeps a copy of every event its bindings match.
func (p *Platform) warnOfUnreadQueues() error {
	if !p.cfg.Analytics.Kafka.Enabled {
		return nil
	}
	queues, _ := p.kafkaReaders()
	left, err := amqp.ExistingQueues(p.cfg.AMQP.Nodes(), queues)
	for _, q := range left {
		p.logger.Warn("a queue of a plugin that now reads Kafka is still on RabbitMQ and fills up unread; delete it once it is empty or no longer needed",
			"queue", q, "command", "rabbitmqctl delete_queue "+q)
	}
	return err
}

// kafkaReaders returns the queues that read Kafka and their consumer
// group: with broker.kind kafka every queue, in a group named after it;
// beside RabbitMQ the replayable plugins' queues, in a group named after
// the plugin (seed 001: the group id is the service's name).
func (p *Platform) kafkaReaders() ([]string, func(queue string) string) {
	groups := map[string]string{}
	var queues []string
	for _, ep := range p.cfg.plugins {
		if p.cfg.Broker.Kind != BrokerKafka && !ep.def.Replayable {
			continue
		}
		for _, s := range ep.def.Subscriptions {
			q := ep.def.Queue(s)
			queues = append(queues, q)
			groups[q] = ep.def.Name
			if p.cfg.Broker.Kind == BrokerKafka {
				groups[q] = q
			}
		}
	}
	return queues, func(queue string) string { return groups[queue] }
}

// startEmbeddedKafka runs the in-process cluster when kafka.embedded asks
// for it, and reports whether this process started it. A cluster this
// process starts is empty, so the relay that feeds it starts again from the
// outbox's first row: the outbox keeps the events of the last
// outbox.retention, and the readers' inbox and idempotent writes absorb
// the repeats.
func (p *Platform) startEmbeddedKafka(ctx context.Context) (bool, error) {
	if !p.cfg.Kafka.Embedded {
		return false, nil
	}
	stop, started, err := kafka.StartEmbedded(p.cfg.Kafka, p.logger)
	if err != nil {
		return false, err
	}
	p.closers = append(p.closers, func() error { stop(); return nil })
	if !started {
		return false, nil
	}
	return true, outbox.ResetPosition(ctx, p.pool, p.cfg.kafkaRelayGroup())
}

// addRelay adds a relay from the outbox to dest, with its own position.
// Each relay finds its group's reader itself (outbox.reader auto follows
// the one the group recorded); outbox.reader: logical is refused here, at
// the start, when the server cannot stream.
func (p *Platform) addRelay(ctx context.Context, dest outbox.Destination, group string) error {
	if p.reader == "" {
		if p.cfg.Outbox.Reader == outbox.ReaderLogical {
			if _, err := outbox.ChooseReader(ctx, p.pool, outbox.ReaderLogical, p.logger); err != nil {
				return err
			}
		}
		p.reader = p.cfg.Outbox.Reader
	}
	cfg := p.cfg.Outbox
	cfg.ConsumerGroup = group
	r, err := outbox.NewRelay(p.pool, dest, p.top.Routable, cfg, p.logger)
	if err != nil {
		return err
	}
	if p.tracer != nil {
		r.Trace(p.tracer)
	}
	p.relays = append(p.relays, r)
	return nil
}

// wakeRelays tells every relay that rows were committed: those of this
// process directly, and, unless they all lead, a polling relay elsewhere
// through the notifier.
func (p *Platform) wakeRelays() {
	leading := len(p.relays) > 0
	for _, r := range p.relays {
		r.Wake()
		leading = leading && r.Active()
	}
	if p.notifier != nil && !leading {
		p.notifier.Signal()
	}
}

// makeNotifier makes the notifier through which this process's commits
// wake a polling relay in another process, when the process writes the
// outbox and the relays may poll; a logical relay streams each commit as
// it happens and needs none. With outbox.reader auto, each group reads as
// it recorded: the notifier is left out only when the groups of this
// configuration all read logical (a group yet to decide may poll).
func (p *Platform) makeNotifier(ctx context.Context) error {
	if !p.role.api() && !p.role.worker() {
		return nil // a relay process writes no events
	}
	switch p.cfg.Outbox.Reader {
	case outbox.ReaderLogical:
		return nil
	case outbox.ReaderAuto:
		groups := []string{p.cfg.Outbox.ConsumerGroup}
		if p.cfg.usesKafka() {
			groups = append(groups, p.cfg.kafkaRelayGroup())
		}
		streaming, err := outbox.GroupsStream(ctx, p.pool, groups...)
		if err != nil {
			p.logger.Warn("outbox: could not read how the relays read the outbox; notifying them of commits in case they poll", "error", err)
		}
		if streaming {
			return nil
		}
	}
	p.notifier = outbox.NewNotifier(p.pool, p.logger)
	return nil
}
