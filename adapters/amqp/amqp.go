// Package amqp connects moenda to RabbitMQ. moenda declares the topology
// itself (see Declare), so nothing here declares anything: consumers read
// named durable queues (Subscriber), the outbox relay publishes to the
// exchange the topology assigns an event's routing key (BatchPublisher),
// and the copies of failed messages go to retry and dead-letter queues
// (FailureSink). Each has its own connection, so broker flow control on
// publishers never stalls consumers' acks.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/redact"
	"github.com/moenda/moenda/adapters/topology"
)

// MaxMessageBytes is the largest message RabbitMQ takes by default
// (max_message_size: 16 MiB since RabbitMQ 4.0; 3.x took 128 MiB). A
// larger one closes the publishing channel, which the relay cannot tell
// from a transient failure.
const MaxMessageBytes = 16 << 20

// Config is what YAML sets for RabbitMQ.
type Config struct {
	// URL is amqp://user:password@host:port/vhost; keep the password in
	// MOENDA_AMQP__URL rather than in a file.
	URL string `koanf:"url"`
	// URLs name several nodes of one cluster, tried in this order; when set
	// they replace URL. A connection keeps the first node that answers and
	// moves on to the next when that node goes away.
	URLs []string `koanf:"urls"`
	// Prefetch is how many messages of each queue this process handles
	// at once; order across them is not kept. RabbitMQ hands out up to
	// twice as many unacknowledged deliveries, the extra ones handled only
	// in the place of messages waiting in the consumer for their next
	// attempt (StandAsideRoom).
	Prefetch int `koanf:"prefetch"`
}

// DefaultConfig is the local RabbitMQ, and 50 messages of a queue handled
// at once.
func DefaultConfig() Config {
	return Config{URL: "amqp://guest:guest@127.0.0.1:5672/", URLs: []string{}, Prefetch: 50}
}

// Nodes returns the URLs moenda connects to, in the order tried: URLs when
// set, else URL alone.
func (c Config) Nodes() []string {
	if len(c.URLs) > 0 {
		return slices.Clone(c.URLs)
	}
	return []string{c.URL}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	check := func(path, raw string) {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s %q must look like amqp://user:password@host:5672/vhost", path, redact.URL(raw)))
		}
	}
	if len(c.URLs) == 0 {
		check("amqp.url", c.URL)
	}
	seen := map[string]int{}
	for i, raw := range c.URLs {
		path := fmt.Sprintf("amqp.urls[%d]", i)
		check(path, raw)
		if j, ok := seen[raw]; ok {
			errs = append(errs, fmt.Errorf("%s %q repeats amqp.urls[%d]; name each node once", path, redact.URL(raw), j))
		}
		seen[raw] = i
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("amqp.prefetch must be at least 1, got %d", c.Prefetch))
	}
	return errors.Join(errs...)
}

// FailureSink publishes the copies the router makes of failed messages,
// each confirmed by the broker: to a queue's retry queue through the
// default exchange (the retry queue's TTL then dead-letters it back to the
// queue), or to its dead-letter exchange with the queue's name as key.
type FailureSink struct {
	pub *BatchPublisher
	top *topology.Topology
}

// Delay implements router.Sink.
func (s FailureSink) Delay(ctx context.Context, queue string, delay time.Duration, msg *message.Message) error {
	return s.pub.PublishTo(ctx, "", topology.RetryQueue(queue, delay), msg)
}

// DeadLetter implements router.Sink.
func (s FailureSink) DeadLetter(ctx context.Context, queue string, msg *message.Message) error {
	pol, ok := s.top.Policy(queue)
	if !ok {
		return fmt.Errorf("amqp: no subscription consumes %q", queue)
	}
	return s.pub.PublishTo(ctx, pol.DeadLetterExchange, queue, msg)
}

// Redeliver implements transport.Sink: through the default exchange,
// which routes by queue name to that queue alone.
func (s FailureSink) Redeliver(ctx context.Context, queue string, msg *message.Message) error {
	if _, ok := s.top.Policy(queue); !ok {
		return fmt.Errorf("amqp: no subscription consumes %q", queue)
	}
	return s.pub.PublishTo(ctx, "", queue, msg)
}

// Republish implements transport.Sink.
func (s FailureSink) Republish(ctx context.Context, exchange, key string, msg *message.Message) error {
	return s.pub.PublishTo(ctx, exchange, key, msg)
}
