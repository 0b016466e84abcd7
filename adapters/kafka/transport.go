package kafka

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/transport"
)

var _ transport.Transport = (*Transport)(nil)

// Transport is Kafka as moenda uses it: one topic per exchange, read by a
// consumer group per queue, with retry and dead-letter topics beside. Its
// parts connect on first use and again after a failure, so a process
// starts while Kafka is away.
type Transport struct {
	cfg      Config
	set      transport.Settings
	queues   []string
	group    func(queue string) string
	probe    *Prober
	consumer func() (transport.Consumer, error)
	dead     func() (message.Subscriber, error)
	closers  transport.Closers
}

// NewTransport returns the transport of cfg's cluster for the queues that
// read Kafka, each in the consumer group group names. It connects nothing
// yet.
func NewTransport(cfg Config, set transport.Settings, queues []string, group func(queue string) string) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if set.Topology == nil || set.Logger == nil || group == nil {
		return nil, errors.New("kafka: the topology, the logger and the group naming are required")
	}
	t := &Transport{cfg: cfg, set: set, queues: slices.Clone(queues), group: group, probe: NewProber(cfg)}
	t.consumer = sync.OnceValues(t.connectConsumer)
	t.dead = sync.OnceValues(func() (message.Subscriber, error) {
		sub, err := NewSubscriber(cfg, set.Topology, DeadLetterGroup, set.CloseTimeout, set.Logger)
		if err == nil {
			t.closers.Add(sub.Close)
		}
		return sub, err
	})
	return t, nil
}

// Declare does nothing: each producer creates the topics it writes when
// it connects (every exchange's, and the queues' retry and dead-letter
// topics), and a subscriber waits for its topics, so that a process
// starts, and runs on, while Kafka is away.
func (t *Transport) Declare(context.Context) error { return nil }

// Consumer returns a subscriber whose queues read in their consumer groups,
// and a producer for the failure copies; the same pair on every call.
func (t *Transport) Consumer() (transport.Consumer, error) { return t.consumer() }

func (t *Transport) connectConsumer() (transport.Consumer, error) {
	failures, err := t.producer("moenda failures")
	if err != nil {
		return transport.Consumer{}, err
	}
	sub, err := NewSubscriber(t.cfg, t.set.Topology, t.group, t.set.CloseTimeout, t.set.Logger)
	if err != nil {
		return transport.Consumer{}, errors.Join(err, failures.Close())
	}
	t.closers.Add(failures.Close)
	t.closers.Add(sub.Close)
	return transport.Consumer{Subscriber: sub, Sink: failures}, nil
}

// DeadLetterGroup names the consumer group that reads the dead-letter
// queue dlq's topic into the failure ledger: one group per topic, so the
// ledger reads every dead letter once, whichever process reads it.
func DeadLetterGroup(dlq string) string { return "moenda.failures." + dlq }

// DeadLetters returns a subscriber of the dead-letter topics, each read in
// its DeadLetterGroup; the offset of a record is committed once it is
// acknowledged.
func (t *Transport) DeadLetters() (message.Subscriber, error) { return t.dead() }

// Destination returns an idempotent producer with acks=all.
func (t *Transport) Destination(name string) (transport.Destination, error) {
	p, err := t.producer(name)
	if err != nil {
		return nil, err
	}
	t.closers.Add(p.Close)
	return p, nil
}

func (t *Transport) producer(name string) (*Producer, error) {
	return NewProducer(t.cfg, t.set.Topology, Topics(t.set.Topology, t.queues), name, t.set.Logger)
}

// Ready reports whether the cluster answers, within ctx.
func (t *Transport) Ready(ctx context.Context) error { return t.probe.Ping(ctx) }

// Depths is ErrNoDepths: Kafka keeps offsets per consumer group, not a
// count of what waits.
func (t *Transport) Depths(context.Context, []string) (map[string]int, error) {
	return nil, transport.ErrNoDepths
}

// Queues is ErrNoDepths, as Depths.
func (t *Transport) Queues(context.Context, []string) (map[string]transport.QueueState, error) {
	return nil, transport.ErrNoDepths
}

// Close closes every client, the last made first.
func (t *Transport) Close() error {
	return errors.Join(t.closers.Close(), t.probe.Close())
}
