package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/redact"
	"github.com/moenda/moenda/adapters/topology"
)

// BatchPublisher publishes a batch of messages on one channel in confirm
// mode with up to window confirmations outstanding, and returns once the
// broker has confirmed every one. watermill-amqp waits for each confirm
// before the next publish, which caps an outbox relay at a fraction of what
// the broker takes; pipelining keeps per-channel order and the guarantee.
// It redials on the next batch after any failure.
type BatchPublisher struct {
	url    string
	window int
	top    *topology.Topology

	mu   sync.Mutex
	conn *amqp091.Connection
	ch   *amqp091.Channel
}

// NewBatchPublisher returns a publisher that connects on first use.
func NewBatchPublisher(url string, window int, top *topology.Topology) *BatchPublisher {
	return &BatchPublisher{url: url, window: window, top: top}
}

// PublishBatch publishes each message to the exchange the topology assigns
// its routing key (topics[i]), in order. It fails as a whole: on error the
// caller republishes the batch, and consumers deduplicate.
func (p *BatchPublisher) PublishBatch(ctx context.Context, topics []string, msgs []*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(); err != nil {
		return err
	}
	pending := make([]*amqp091.DeferredConfirmation, 0, p.window)
	wait := func(dc *amqp091.DeferredConfirmation) error {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("amqp: the broker refused a message (nack) or the channel closed")
		}
		return nil
	}
	for i, msg := range msgs {
		exchange, err := p.top.ExchangeFor(topics[i])
		if err != nil {
			return err
		}
		pub, err := Marshaler{}.Marshal(msg)
		if err != nil {
			return err
		}
		if len(pending) == p.window {
			if err := wait(pending[0]); err != nil {
				p.reset()
				return err
			}
			pending = pending[1:]
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, topics[i], false, false, pub)
		if err != nil {
			p.reset()
			return fmt.Errorf("amqp: publish: %w", err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if err := wait(dc); err != nil {
			p.reset()
			return err
		}
	}
	return nil
}

func (p *BatchPublisher) connect() error {
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	p.reset()
	conn, err := amqp091.DialConfig(p.url, amqp091.Config{
		Dial:       amqp091.DefaultDial(5 * time.Second),
		Properties: amqp091.Table{"connection_name": "moenda outbox relay"},
	})
	if err != nil {
		return fmt.Errorf("amqp: connect to %s: %w", redact.URL(p.url), err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("amqp: open a confirm channel: %w", err)
	}
	p.conn, p.ch = conn, ch
	return nil
}

func (p *BatchPublisher) reset() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// Close closes the connection.
func (p *BatchPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset()
	return nil
}
