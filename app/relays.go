package app

import (
	"context"
	"errors"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/transport"
)

// connectBrokers makes the transports and what the process's role needs
// of them: the topology declared and, for a relay, a relay from the outbox
// to each transport; the consumers, made as the routes are added, for a
// worker. An api process only writes the outbox: it gets a transport of
// its own for the status page to count the queues with, which connects
// on the first count.
func (p *Platform) connectBrokers(ctx context.Context) error {
	if !p.role.worker() && !p.role.relay() {
		counter, err := newTransport(p.cfg.Broker.Kind, p.cfg, p.top, p.logger)
		if err != nil {
			return err
		}
		p.onClose(counter.Close)
		p.counter = counter
		return nil
	}
	if err := p.connectTransports(); err != nil {
		return err
	}
	p.counter = p.broker
	if err := p.broker.Declare(ctx); err != nil {
		return err
	}
	if p.role.worker() {
		if err := p.warnOfUnreadQueues(ctx); err != nil {
			return err
		}
	}
	if err := p.startEmbeddedKafka(ctx); err != nil {
		return err
	}
	if !p.role.relay() {
		return nil
	}
	for i, t := range p.relayTargets() {
		dest, err := t.transport.Destination("moenda outbox relay")
		if err != nil {
			return err
		}
		if i == 0 {
			p.publishing = dest.Blocked
		}
		if err := p.addRelay(ctx, dest, t.group); err != nil {
			return err
		}
	}
	return nil
}

// warnOfUnreadQueues logs a warning for each queue of a replayable plugin
// left on the broker from before analytics.kafka.enabled: nothing reads it
// now, and it keeps a copy of every event its bindings match.
func (p *Platform) warnOfUnreadQueues(ctx context.Context) error {
	if p.stream == nil {
		return nil
	}
	queues, _ := p.cfg.kafkaReaders()
	left, err := p.broker.Depths(ctx, queues)
	if errors.Is(err, transport.ErrNoDepths) {
		return nil // a broker that counts nothing has nothing to warn of
	}
	for q := range left {
		p.logger.Warn("a queue of a plugin that now reads Kafka is still on RabbitMQ and fills up unread; delete it once it is empty or no longer needed",
			"queue", q, "command", "rabbitmqctl delete_queue "+q)
	}
	return err
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
		streaming, err := outbox.GroupsStream(ctx, p.pool, p.cfg.relayGroups()...)
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
