package memory

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/transport"
)

var _ transport.Transport = (*Transport)(nil)

// Transport is the in-process broker as moenda uses it: there is nothing
// to declare or to reach, and a destination routes by the topology at once.
type Transport struct{ b *Broker }

// NewTransport returns the in-process broker routing by set.Topology.
func NewTransport(set transport.Settings) (*Transport, error) {
	if set.Topology == nil || set.Logger == nil {
		return nil, errors.New("memory: the topology and the logger are required")
	}
	return &Transport{b: NewBroker(set.Topology, set.CloseTimeout, watermill.NewSlogLogger(set.Logger))}, nil
}

// Publisher publishes with topic = routing key, for the memory
// transactor, which publishes a unit's events once it commits.
func (t *Transport) Publisher() message.Publisher { return t.b.Publisher }

// Declare does nothing: the broker routes by the topology it was made with.
func (t *Transport) Declare(context.Context) error { return nil }

// Consumer returns the broker's subscriber and its timers and dead-letter
// routing as the failure sink.
func (t *Transport) Consumer() (transport.Consumer, error) {
	return transport.Consumer{Subscriber: t.b.Subscriber, Sink: t.b}, nil
}

// DeadLetters returns the broker's subscriber: a dead-letter queue is a
// queue like any other here.
func (t *Transport) DeadLetters() (message.Subscriber, error) { return t.b.Subscriber, nil }

// Destination returns a destination that routes each message to the
// queues bound to its exchange; delivery is the confirm.
func (t *Transport) Destination(string) (transport.Destination, error) {
	return destination{t.b}, nil
}

// Ready is nil: the broker is in the process.
func (t *Transport) Ready(context.Context) error { return nil }

// Depths is ErrNoDepths.
func (t *Transport) Depths(context.Context, []string) (map[string]int, error) {
	return nil, transport.ErrNoDepths
}

// Queues is ErrNoDepths, as Depths.
func (t *Transport) Queues(context.Context, []string) (map[string]transport.QueueState, error) {
	return nil, transport.ErrNoDepths
}

// Close ends the subscriptions and closes the channels.
func (t *Transport) Close() error { return t.b.Close() }

type destination struct{ b *Broker }

func (d destination) PublishBatch(_ context.Context, routingKeys []string, msgs []*message.Message) error {
	for i, msg := range msgs {
		if err := d.b.Publisher.Publish(routingKeys[i], msg); err != nil {
			return err
		}
	}
	return nil
}

func (destination) Blocked() string { return "" }
func (destination) Close() error    { return nil }
