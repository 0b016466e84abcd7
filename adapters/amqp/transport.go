package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/transport"
)

var _ transport.Transport = (*Transport)(nil)

// Transport is RabbitMQ as moenda uses it. Each part (the consumer, the
// failure publisher, each destination, the readiness probe, the depth
// reader) has a connection of its own to one of the cluster's nodes, made
// on first use and made again when its node goes away.
type Transport struct {
	cfg      Config
	set      transport.Settings
	probe    *kept
	consumer func() (transport.Consumer, error)
	dead     func() (message.Subscriber, error)
	depths   func() (*DepthReader, error)
	closers  transport.Closers
}

// NewTransport returns the transport of the cluster cfg names, carrying
// set.Topology (the part of the layout declared on RabbitMQ). It connects
// nothing yet.
func NewTransport(cfg Config, set transport.Settings) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if set.Topology == nil || set.Logger == nil {
		return nil, errors.New("amqp: the topology and the logger are required")
	}
	n, err := newNodes(cfg.Nodes())
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	t := &Transport{cfg: cfg, set: set, probe: &kept{nodes: n, name: "moenda readiness", dial: 2 * time.Second}}
	t.consumer = sync.OnceValues(t.connectConsumer)
	t.dead = sync.OnceValues(func() (message.Subscriber, error) {
		sub, err := NewSubscriber(cfg.Nodes(), DeadLetterPrefetch(cfg, set), set.CloseTimeout, set.Logger, BatchAnswers())
		if err == nil {
			t.closers.Add(sub.Close)
		}
		return sub, err
	})
	t.depths = sync.OnceValues(func() (*DepthReader, error) {
		d, err := NewDepthReader(cfg.Nodes())
		if err == nil {
			t.closers.Add(d.Close)
		}
		return d, err
	})
	return t, nil
}

// Declare declares the topology's exchanges, queues and bindings.
func (t *Transport) Declare(ctx context.Context) error {
	return Declare(ctx, t.cfg.Nodes(), t.set.Topology)
}

// Consumer returns the subscriber, handling amqp.prefetch messages of a
// queue at once with as much room again for messages standing aside
// between their immediate retries, and the failure sink, whose copies the
// broker confirms one by one; the same pair on every call.
func (t *Transport) Consumer() (transport.Consumer, error) { return t.consumer() }

func (t *Transport) connectConsumer() (transport.Consumer, error) {
	sub, err := NewSubscriber(t.cfg.Nodes(), t.cfg.Prefetch, t.set.CloseTimeout, t.set.Logger, StandAsideRoom(t.cfg.Prefetch))
	if err != nil {
		return transport.Consumer{}, err
	}
	failures, err := NewBatchPublisher(t.cfg.Nodes(), "moenda failures", 1, t.set.Topology)
	if err != nil {
		return transport.Consumer{}, errors.Join(err, sub.Close())
	}
	t.closers.Add(sub.Close)
	t.closers.Add(failures.Close)
	return transport.Consumer{Subscriber: sub, Sink: FailureSink{pub: failures, top: t.set.Topology}}, nil
}

// DeadLetters returns a subscriber of its own, with DeadLetterPrefetch:
// it reads any queue by name, the topology's dead-letter queues and
// foreign ones alike.
func (t *Transport) DeadLetters() (message.Subscriber, error) { return t.dead() }

// DeadLetterPrefetch is the prefetch of the dead letters' subscriber:
// amqp.prefetch, or the ingest's batch when that is larger. The ingest
// answers a batch's deliveries only once it has committed them all, so a
// prefetch below the batch leaves every batch short, waiting out its
// linger: a few batches a second whatever the database allows.
func DeadLetterPrefetch(cfg Config, set transport.Settings) int {
	return max(cfg.Prefetch, set.DeadLetterBatch)
}

// Destination returns a publisher with pipelined confirms, up to
// set.ConfirmWindow in flight.
func (t *Transport) Destination(name string) (transport.Destination, error) {
	dest, err := NewBatchPublisher(t.cfg.Nodes(), name, t.set.ConfirmWindow, t.set.Topology)
	if err != nil {
		return nil, err
	}
	t.closers.Add(dest.Close)
	return dest, nil
}

// Ready reports whether RabbitMQ answers, dialling within ctx. It asks on
// a connection of its own, kept open from call to call and dialled again
// only once the broker closed it: watermill-amqp's IsConnected races with
// its reconnect loop (upstream ThreeDotsLabs/watermill#693), and the
// other connections reconnect by themselves once the broker is back.
func (t *Transport) Ready(ctx context.Context) error {
	if err := t.probe.check(ctx); err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	return nil
}

// Depths returns the ready messages of each named queue that exists.
func (t *Transport) Depths(_ context.Context, queues []string) (map[string]int, error) {
	d, err := t.depths()
	if err != nil {
		return nil, err
	}
	return d.Depths(queues)
}

// Queues returns the ready messages and the consumers of each named
// queue that exists.
func (t *Transport) Queues(_ context.Context, queues []string) (map[string]transport.QueueState, error) {
	d, err := t.depths()
	if err != nil {
		return nil, err
	}
	return d.Queues(queues)
}

// Close closes every connection, the last made first.
func (t *Transport) Close() error {
	return errors.Join(t.closers.Close(), t.probe.close())
}
