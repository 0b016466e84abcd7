// Package amqp connects moenda to RabbitMQ through watermill-amqp. moenda
// declares the topology itself (see Declare), so the Watermill publisher and
// subscriber are configured never to declare anything: they publish to the
// exchange the topology assigns an event's routing key, and consume named
// durable queues. Publishing and consuming use separate connections, so
// broker flow control on publishers never stalls consumers' acks.
package amqp

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
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
	// Prefetch bounds unacknowledged deliveries per consuming queue.
	Prefetch int `koanf:"prefetch"`
	// PublisherChannels is the number of channels kept open for publishing;
	// 0 would open and close a channel per message.
	PublisherChannels int `koanf:"publisher_channels"`
	// ConsumersPerQueue is how many messages of one queue are handled at
	// once (each on its own channel); order across them is not kept.
	ConsumersPerQueue int `koanf:"consumers_per_queue"`
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
	if c.PublisherChannels < 1 {
		errs = append(errs, fmt.Errorf("amqp.publisher_channels must be at least 1, got %d", c.PublisherChannels))
	}
	if c.ConsumersPerQueue < 1 {
		errs = append(errs, fmt.Errorf("amqp.consumers_per_queue must be at least 1, got %d", c.ConsumersPerQueue))
	}
	return errors.Join(errs...)
}

// Broker holds the connections to RabbitMQ and what is built on them.
type Broker struct {
	pubConn, subConn *wamqp.ConnectionWrapper
	probe            *probe
	// DeadLetter publishes with topic = queue name to the dead-letter
	// exchange, whose binding routes it to that queue's DLQ.
	DeadLetter message.Publisher
	// Subscriber consumes with topic = queue name.
	Subscriber message.Subscriber
}

// Connect opens the dead-letter publishing and the consuming connections. watermill-amqp
// reconnects them with backoff when the broker goes away.
func Connect(cfg Config, top *topology.Topology, logger watermill.LoggerAdapter) (*Broker, error) {
	base := watermillConfig(cfg)
	pubConn, err := wamqp.NewConnection(connection(cfg, "moenda publisher"), logger)
	if err != nil {
		return nil, fmt.Errorf("amqp: connect to %s: %w", redact.URL(cfg.URL), err)
	}
	subConn, err := wamqp.NewConnection(connection(cfg, "moenda consumer"), logger)
	if err != nil {
		_ = pubConn.Close()
		return nil, fmt.Errorf("amqp: connect to %s: %w", redact.URL(cfg.URL), err)
	}
	b := &Broker{pubConn: pubConn, subConn: subConn, probe: &probe{url: cfg.URL}}

	dlCfg := base
	dlCfg.Exchange.GenerateName = wamqp.GenerateExchangeNameConstant(top.DeadLetterExchange())
	// Dead letters are rare: a channel per publish, no pool. A pool whose
	// channel failed to reopen while the broker was away panics on Close in
	// watermill-amqp v3.1.0 (it closes a nil channel).
	dlCfg.Publish.ChannelPoolSize = 0
	dl, err := wamqp.NewPublisherWithConnection(dlCfg, logger, pubConn)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("amqp: dead-letter publisher: %w", err), b.Close())
	}
	b.DeadLetter = dl
	sub, err := wamqp.NewSubscriberWithConnection(base, logger, subConn)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("amqp: subscriber: %w", err), b.Close())
	}
	b.Subscriber = sub
	return b, nil
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

// Close closes the subscriber, the publishers and both connections.
func (b *Broker) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{b.Subscriber, b.DeadLetter} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	errs = append(errs, b.subConn.Close(), b.pubConn.Close(), b.probe.close())
	return errors.Join(errs...)
}

// NewPublisher returns watermill-amqp's own publisher, on a connection of
// its own, publishing with topic = routing key to the exchange the topology
// assigns. It awaits each confirm in turn; moenda's relay uses
// BatchPublisher instead, and this one serves code that needs a Watermill
// publisher, such as Watermill's forwarder.
func NewPublisher(cfg Config, top *topology.Topology, logger watermill.LoggerAdapter) (message.Publisher, error) {
	c := watermillConfig(cfg)
	c.Connection = connection(cfg, "moenda events publisher")
	c.Exchange.GenerateName = func(topic string) string {
		x, _ := top.ExchangeFor(topic) // checked by routed.Publish first
		return x
	}
	pub, err := wamqp.NewPublisher(c, logger)
	if err != nil {
		return nil, fmt.Errorf("amqp: publisher: %w", err)
	}
	return routed{Publisher: pub, top: top}, nil
}

// routed refuses to publish a routing key no exchange carries, instead of
// letting the broker drop it.
type routed struct {
	message.Publisher
	top *topology.Topology
}

func (r routed) Publish(topic string, msgs ...*message.Message) error {
	if _, err := r.top.ExchangeFor(topic); err != nil {
		return err
	}
	return r.Publisher.Publish(topic, msgs...)
}

// connection configures one connection. Each gets its own amqp091.Config:
// the client writes into it while connecting, so two connections
// reconnecting at once must not share one.
func connection(cfg Config, name string) wamqp.ConnectionConfig {
	return wamqp.ConnectionConfig{
		AmqpURI:    cfg.URL,
		AmqpConfig: &amqp091.Config{Properties: amqp091.Table{"connection_name": name}},
		Reconnect:  wamqp.DefaultReconnectConfig(),
	}
}

// watermillConfig configures publishers and the subscriber; their
// connections are made by connection.
func watermillConfig(cfg Config) wamqp.Config {
	return wamqp.Config{
		Marshaler: Marshaler{},
		// Consumers read named queues and bind nothing: no exchange.
		Exchange:  wamqp.ExchangeConfig{GenerateName: func(string) string { return "" }, Type: topology.Topic, Durable: true},
		Queue:     wamqp.QueueConfig{GenerateName: wamqp.GenerateQueueNameTopicName, Durable: true},
		QueueBind: wamqp.QueueBindConfig{GenerateRoutingKey: func(string) string { return "" }},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return topic },
			ConfirmDelivery:    true,
			ChannelPoolSize:    cfg.PublisherChannels,
		},
		Consume:         wamqp.ConsumeConfig{Qos: wamqp.QosConfig{PrefetchCount: cfg.Prefetch}},
		TopologyBuilder: declaredElsewhere{},
	}
}

// declaredElsewhere keeps watermill-amqp from declaring anything: Declare
// has already built the topology from configuration.
type declaredElsewhere struct{}

func (declaredElsewhere) BuildTopology(*amqp091.Channel, wamqp.BuildTopologyParams, wamqp.Config, watermill.LoggerAdapter) error {
	return nil
}

func (declaredElsewhere) ExchangeDeclare(*amqp091.Channel, string, wamqp.Config) error { return nil }
