// Package transport is what moenda needs of a broker, whichever it is:
// each broker's adapter (amqp, kafka, memory) provides one Transport, the
// composition root chooses one by configuration, and the conformance
// suite (transporttest) holds every one of them to the same cases.
package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
)

// Transport is one broker as moenda uses it. A Transport is made for one
// topology and, where the broker has consumer groups, one way of naming
// them; it connects lazily, so that a process asks only for what its role
// needs.
type Transport interface {
	// Declare makes what the topology needs exist on the broker
	// (exchanges, queues and bindings; topics), checking what is already
	// there against it.
	Declare(ctx context.Context) error
	// Consumer returns the subscriber the router's handlers read with
	// (topic = queue name) and the sink their failure copies go to.
	Consumer() (Consumer, error)
	// DeadLetters returns a subscriber of dead-letter queues, by name
	// (topic = queue), for the failure ledger: each dead letter leaves its
	// queue only once acknowledged, and a Nack hands it back. The same
	// subscriber on every call.
	DeadLetters() (message.Subscriber, error)
	// Destination returns a relay destination, whose PublishBatch returns
	// once the broker has confirmed every message; name names its
	// connection on the broker.
	Destination(name string) (Destination, error)
	// Ready reports whether the broker answers, within ctx.
	Ready(ctx context.Context) error
	// Depths returns how many messages wait in each named queue that
	// exists, or ErrNoDepths where the broker keeps no such count.
	Depths(ctx context.Context, queues []string) (map[string]int, error)
	// Queues returns what waits in each named queue that exists and how
	// many consumers read it, or ErrNoDepths where the broker keeps no
	// such count: Depths with the consumers, for the status page.
	Queues(ctx context.Context, queues []string) (map[string]QueueState, error)
	// Close closes every connection the transport made.
	Close() error
}

// Consumer is what a worker's router reads with and fails to.
type Consumer struct {
	Subscriber message.Subscriber
	Sink       Sink
}

// Sink takes the copies of failed messages: one to deliver to queue again
// after delay, one for queue's dead letters. It has router.Sink's methods,
// and Redeliver.
type Sink interface {
	Delay(ctx context.Context, queue string, delay time.Duration, msg *message.Message) error
	DeadLetter(ctx context.Context, queue string, msg *message.Message) error
	// Redeliver delivers msg to queue alone, at once, and returns once the
	// broker holds it: a re-drive's copy of a failure goes back to the
	// consumer that failed, never to every queue its event is bound to.
	Redeliver(ctx context.Context, queue string, msg *message.Message) error
	// Republish publishes msg to exchange with key and returns once the
	// broker holds it: a re-drive to the original exchange, chosen
	// explicitly, which every queue bound there gets again.
	Republish(ctx context.Context, exchange, key string, msg *message.Message) error
}

// Destination is where a relay publishes the outbox.
type Destination interface {
	outbox.Destination
	// Blocked says why the broker holds publishing back now (a RabbitMQ
	// resource alarm), or "".
	Blocked() string
	Close() error
}

// QueueState is what a broker says of one queue.
type QueueState struct {
	// Messages are those ready for delivery; those delivered and not yet
	// acknowledged are not counted.
	Messages int `json:"messages"`
	// Consumers are the subscriptions reading the queue, from any process.
	Consumers int `json:"consumers"`
	// Unavailable says why the broker cannot serve the queue now, as it
	// said it: a classic queue whose node is down; empty when it can.
	Unavailable string `json:"unavailable,omitempty"`
}

// ErrNoDepths is Depths' answer on a broker that does not count what
// waits in a queue (Kafka counts offsets per consumer group, not queues).
var ErrNoDepths = errors.New("transport: this broker keeps no queue depths")

// Settings are what every transport is made with.
type Settings struct {
	// Topology is the layout the transport carries.
	Topology *topology.Topology
	// CloseTimeout bounds how long a consumer lets the messages in hand
	// finish once it is closed.
	CloseTimeout time.Duration
	// ConfirmWindow is how many messages a destination may have sent and
	// not yet confirmed.
	ConfirmWindow int
	// DeadLetterBatch is how many dead letters a reader of DeadLetters
	// holds before it answers any (failures.batch_size): a transport that
	// bounds the unanswered deliveries lets at least that many through,
	// or each batch would wait out its linger half full.
	DeadLetterBatch int
	Logger          *slog.Logger
}

// Grace is how long a consumer's messages in hand keep their contexts
// once it is closed: nine tenths of closeTimeout, so that their handlers
// can finish and be answered; the last tenth lets the answers (a requeue,
// as a rule) reach the broker.
func Grace(closeTimeout time.Duration) time.Duration { return closeTimeout - closeTimeout/10 }

// Closers closes what a transport opened, the last opened first. It is
// safe for concurrent use.
type Closers struct {
	mu  sync.Mutex
	fns []func() error
}

// Add adds fn to what Close runs.
func (c *Closers) Add(fn func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Close runs every fn added, the last added first, and forgets them.
func (c *Closers) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for i := len(c.fns) - 1; i >= 0; i-- {
		errs = append(errs, c.fns[i]())
	}
	c.fns = nil
	return errors.Join(errs...)
}
