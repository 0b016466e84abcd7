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
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/redact"
	"github.com/moenda/moenda/adapters/topology"
)

// Config is what YAML sets for RabbitMQ.
type Config struct {
	// URL is amqp://user:password@host:port/vhost; keep the password in
	// MOENDA_AMQP__URL rather than in a file.
	URL string `koanf:"url"`
	// Prefetch bounds the unacknowledged deliveries of each queue, and so
	// how many of its messages this process handles at once; order across
	// them is not kept.
	Prefetch int `koanf:"prefetch"`
}

// DefaultConfig is the local RabbitMQ, and 50 messages of a queue handled
// at once.
func DefaultConfig() Config {
	return Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Prefetch: 50}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		errs = append(errs, fmt.Errorf("amqp.url %q must look like amqp://user:password@host:5672/vhost", redact.URL(c.URL)))
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("amqp.prefetch must be at least 1, got %d", c.Prefetch))
	}
	return errors.Join(errs...)
}

// Broker holds the connections to RabbitMQ and what is built on them.
type Broker struct {
	probe    *probe
	failures *BatchPublisher
	// Subscriber consumes with topic = queue name.
	Subscriber *Subscriber
	// Sink publishes the copies of failed messages.
	Sink FailureSink
}

// Connect makes the consumer and the failure publisher; both (re)connect
// by themselves when the broker goes away.
func Connect(cfg Config, top *topology.Topology, logger *slog.Logger) (*Broker, error) {
	sub, err := NewSubscriber(cfg.URL, cfg.Prefetch, logger)
	if err != nil {
		return nil, err
	}
	failures, err := NewBatchPublisher(cfg.URL, "moenda failures", 1, top)
	if err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	return &Broker{
		probe:      &probe{url: cfg.URL},
		failures:   failures,
		Subscriber: sub,
		Sink:       FailureSink{pub: failures, top: top},
	}, nil
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

// Ready reports whether RabbitMQ answers. It asks on a connection of its
// own: watermill-amqp's IsConnected races with its reconnect loop (upstream
// ThreeDotsLabs/watermill#693), and the pub/sub connections reconnect by
// themselves once the broker is back.
func (b *Broker) Ready() error { return b.probe.check() }

// probe keeps one idle connection and redials it when it is gone.
type probe struct {
	url  string
	mu   sync.Mutex
	conn *amqp091.Connection
}

func (p *probe) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	conn, err := amqp091.DialConfig(p.url, amqp091.Config{
		Dial:       amqp091.DefaultDial(2 * time.Second),
		Properties: amqp091.Table{"connection_name": "moenda readiness"},
	})
	if err != nil {
		return fmt.Errorf("amqp: RabbitMQ at %s does not answer: %w", redact.URL(p.url), err)
	}
	p.conn = conn
	return nil
}

func (p *probe) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.IsClosed() {
		return nil
	}
	return p.conn.Close()
}

// Close closes the subscriber, the failure publisher and the probe.
func (b *Broker) Close() error {
	return errors.Join(b.Subscriber.Close(), b.failures.Close(), b.probe.close())
}
