package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/redact"
)

// Reconnect backoff and dial timeout of the Subscriber.
const (
	firstRetryWait = 100 * time.Millisecond
	maxRetryWait   = 5 * time.Second
	dialTimeout    = 5 * time.Second
)

// ErrSubscriberClosed is returned by Subscribe after Close.
var ErrSubscriberClosed = errors.New("amqp: subscriber is closed")

// Subscriber is a Watermill subscriber that hands a queue's deliveries to
// the router as fast as they arrive, bounded only by the channel's
// prefetch, instead of one at a time. watermill-amqp waits for each
// message's ack before reading the next delivery, so a message waiting
// between in-process retries blocks its whole queue; here it holds one
// slot of prefetch. Because messages are handled concurrently, order is
// not kept.
//
// All subscriptions share one connection, each on a channel of its own.
// Subscribe declares nothing: the queue must already exist. When the
// connection or a channel is lost, each subscription affected logs one
// warning, redials with backoff (to the next node first, see nodes) and
// consumes again on the same output channel, logging once when it does,
// with the node. Messages handed out before the loss cannot be acked any
// more: the broker redelivers them.
type Subscriber struct {
	nodes    *nodes
	prefetch int
	logger   *slog.Logger

	// life ends when Close is called; every subscription's context
	// derives from it.
	life context.Context
	stop context.CancelFunc
	once sync.Once
	subs sync.WaitGroup

	// mu guards closed, conn and the subs.Add that must not race Close's
	// subs.Wait. It is held while dialing, so subscriptions that lose the
	// connection together redial it once.
	mu     sync.Mutex
	closed bool
	conn   *amqp091.Connection
	// node is the URL conn was dialed to.
	node string
}

// NewSubscriber returns a subscriber that consumes from urls, the nodes of
// one cluster, with at most prefetch unacknowledged deliveries per
// subscription. It connects on the first Subscribe, which fails if no node
// can be reached. A nil logger discards logs.
func NewSubscriber(urls []string, prefetch int, logger *slog.Logger) (*Subscriber, error) {
	n, err := newNodes(urls)
	if err != nil {
		return nil, fmt.Errorf("amqp: subscriber: %w", err)
	}
	if prefetch < 1 {
		return nil, fmt.Errorf("amqp: subscriber: prefetch must be at least 1, got %d", prefetch)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	life, stop := context.WithCancel(context.Background())
	return &Subscriber{nodes: n, prefetch: prefetch, logger: logger, life: life, stop: stop}, nil
}

// Subscribe consumes queue, which must already be declared, until ctx ends
// or the subscriber is closed; then the returned channel is closed. A
// message is acked when the handler acks it and requeued when it nacks it.
// Each message's context ends once it is acked or nacked, or when the
// subscription ends.
func (s *Subscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	if queue == "" {
		return nil, errors.New("amqp: subscribe: queue name is empty")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrSubscriberClosed
	}
	s.subs.Add(1)
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.life, cancel)
	c, err := s.consume(ctx, queue)
	if err != nil {
		stopOnClose()
		cancel()
		s.subs.Done()
		return nil, fmt.Errorf("amqp: consume queue %q: %w", queue, err)
	}
	out := make(chan *message.Message)
	go func() {
		defer s.subs.Done()
		defer stopOnClose()
		defer cancel()
		s.run(ctx, queue, c, out)
	}()
	return out, nil
}

// consuming is one channel consuming a queue.
type consuming struct {
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
	// closes receives the error the channel or connection closed with. It
	// is buffered: amqp091 sends to it synchronously while holding locks.
	closes chan *amqp091.Error
	// node is the URL of the node consumed from, passwords hidden.
	node string
}

// run hands over deliveries until ctx ends, consuming again whenever the
// channel is lost, then waits for pending acks, closes the channel and
// closes out.
func (s *Subscriber) run(ctx context.Context, queue string, c consuming, out chan<- *message.Message) {
	defer close(out)
	var pending sync.WaitGroup
	defer func() {
		// Acks already signalled reach the broker before the channel
		// closes; the rest are requeued by the broker.
		pending.Wait()
		_ = c.ch.Close()
	}()
	for {
		if !s.dispatch(ctx, queue, c, out, &pending) {
			return
		}
		lost := time.Now()
		s.logger.Warn("amqp: consumer lost; consuming again once RabbitMQ answers", "queue", queue, "error", lossReason(c.closes))
		_ = c.ch.Close() // still open if only the consumer was cancelled
		next, attempts, ok := s.reconsume(ctx, queue)
		if !ok {
			return
		}
		c = next
		s.logger.Info("amqp: consuming again", "queue", queue, "node", c.node, "down_for", time.Since(lost).Round(time.Millisecond), "attempts", attempts)
	}
}

// dispatch sends each delivery on out without waiting for earlier ones to
// be acked. It returns false when ctx ends and true when deliveries stop
// (the channel or connection was lost, or the broker cancelled the
// consumer).
func (s *Subscriber) dispatch(ctx context.Context, queue string, c consuming, out chan<- *message.Message, pending *sync.WaitGroup) bool {
	for {
		var d amqp091.Delivery
		select {
		case <-ctx.Done():
			return false
		case delivery, ok := <-c.deliveries:
			if !ok {
				return ctx.Err() == nil
			}
			d = delivery
		}
		msg, err := Marshaler{}.Unmarshal(d)
		if err != nil {
			// Left unacked rather than requeued in a loop or dropped: it
			// holds one slot of prefetch until the channel closes.
			s.logger.Error("amqp: delivery cannot be decoded; left unacknowledged", "queue", queue, "message_id", d.MessageId, "error", err)
			continue
		}
		msgCtx, done := context.WithCancel(ctx)
		msg.SetContext(msgCtx)
		select {
		case out <- msg:
		case <-ctx.Done():
			done()
			return false // not handed out: the broker requeues it
		}
		pending.Add(1)
		go func() {
			defer pending.Done()
			defer done()
			s.settle(ctx, queue, d, msg)
		}()
	}
}

// settle acks or requeues d once the handler has acked or nacked msg. When
// the subscription ends first, an ack or nack already given is still
// passed on; otherwise the broker requeues the delivery when the channel
// closes.
func (s *Subscriber) settle(ctx context.Context, queue string, d amqp091.Delivery, msg *message.Message) {
	var acked bool
	select {
	case <-msg.Acked():
		acked = true
	case <-msg.Nacked():
	case <-ctx.Done():
		select {
		case <-msg.Acked():
			acked = true
		case <-msg.Nacked():
		default:
			return
		}
	}
	var err error
	if acked {
		err = d.Ack(false)
	} else {
		err = d.Nack(false, true)
	}
	if err != nil {
		// The channel closed meanwhile; the broker has requeued the
		// delivery already.
		s.logger.Debug("amqp: ack or nack not sent; the broker redelivers the message", "queue", queue, "message_id", msg.UUID, "ack", acked, "error", err)
	}
}

// reconsume retries consume with backoff until it works or ctx ends.
func (s *Subscriber) reconsume(ctx context.Context, queue string) (consuming, int, bool) {
	wait := firstRetryWait
	for attempt := 1; ; attempt++ {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return consuming{}, attempt, false
		case <-timer.C:
		}
		c, err := s.consume(ctx, queue)
		if err == nil {
			return c, attempt, true
		}
		s.logger.Debug("amqp: consume failed; retrying", "queue", queue, "attempt", attempt, "retry_in", min(2*wait, maxRetryWait), "error", err)
		wait = min(2*wait, maxRetryWait)
	}
}

// consume opens a channel on the shared connection and consumes queue on
// it with manual acks.
func (s *Subscriber) consume(ctx context.Context, queue string) (consuming, error) {
	conn, node, err := s.connection(ctx)
	if err != nil {
		return consuming{}, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return consuming{}, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		_ = ch.Close()
		return consuming{}, fmt.Errorf("set prefetch: %w", err)
	}
	closes := ch.NotifyClose(make(chan *amqp091.Error, 1))
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return consuming{}, err
	}
	return consuming{ch: ch, deliveries: deliveries, closes: closes, node: redact.URL(node)}, nil
}

// connection returns the shared connection and its node's URL, dialing it
// if there is none or it was lost. ctx cuts the dial short.
func (s *Subscriber) connection(ctx context.Context) (*amqp091.Connection, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, "", ErrSubscriberClosed
	}
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, s.node, nil
	}
	conn, node, err := s.nodes.dial(ctx, amqp091.Config{
		Dial:       dialContext(ctx),
		Properties: amqp091.Table{"connection_name": "moenda consumer"},
	})
	if err != nil {
		return nil, "", err
	}
	s.logger.Debug("amqp: consumer connected", "node", redact.URL(node))
	s.conn, s.node = conn, node
	return conn, node, nil
}

// dialContext is amqp091.DefaultDial that also gives up when ctx ends, so Close
// need not wait for a dial to an unresponsive host.
func dialContext(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Bounds the handshake; amqp091 clears it once connected.
		if err := conn.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// lossReason says why deliveries stopped. amqp091 sends the close error
// before it closes the deliveries channel, so it is there already if any.
func lossReason(closes <-chan *amqp091.Error) error {
	select {
	case err, ok := <-closes:
		if ok && err != nil {
			return err
		}
	default:
	}
	return errors.New("the broker cancelled the consumer")
}

// Close stops every subscription, waits for them to pass on acks already
// given, closes their channels and output channels, then the connection.
// Messages handed out and not yet acked are requeued by the broker. It is
// idempotent and safe to call while handlers ack.
func (s *Subscriber) Close() error {
	var err error
	s.once.Do(func() {
		s.stop()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.subs.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.conn != nil && !s.conn.IsClosed() {
			if cerr := s.conn.Close(); cerr != nil && !errors.Is(cerr, amqp091.ErrClosed) {
				err = fmt.Errorf("amqp: close consumer connection: %w", cerr)
			}
		}
	})
	return err
}
