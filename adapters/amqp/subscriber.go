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
	"github.com/moenda/moenda/adapters/transport"
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
// not kept. With StandAsideRoom the broker hands out more than prefetch,
// and the extra deliveries are handled only in the place of messages
// that stand aside while they wait for their next attempt
// (transport.StandAside).
//
// All subscriptions share one connection, each on a channel of its own.
// Subscribe declares nothing: the queue must already exist. When the
// connection or a channel is lost, each subscription affected logs one
// warning, redials with backoff (to the next node first, see nodes) and
// consumes again on the same output channel, logging once when it does,
// with the node. Messages handed out before the loss cannot be acked any
// more: the broker redelivers them.
//
// A subscription that ends (Close, or its context) stops taking
// deliveries at once but lets the messages in hand finish: their contexts
// live on for the grace period (see NewSubscriber), so a handler's effects
// are not cut off and repeated after a restart. Watermill's router closes
// its subscriber before it waits for its handlers; ending the messages'
// contexts there would cancel every handler in flight.
type Subscriber struct {
	nodes    *nodes
	prefetch int
	// room is how many deliveries the broker hands out beyond prefetch,
	// for messages standing aside (StandAsideRoom).
	room   int
	logger *slog.Logger
	// grace is how long messages in hand keep their contexts once their
	// subscription ends; answerWindow how long after that the answer of a
	// cancelled message's handler is still passed on.
	grace, answerWindow time.Duration

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
	// together makes each channel send answers given together in few
	// frames: see BatchAnswers.
	together bool
}

// SubscriberOption sets a Subscriber apart from the default.
type SubscriberOption func(*Subscriber)

// BatchAnswers suits a reader that acks a batch of messages at once (the
// failure ingest): the acks given within a couple of milliseconds of each
// other reach the broker as one frame (see answers). A reader that answers
// each message on its own gains nothing from it.
func BatchAnswers() SubscriberOption { return func(s *Subscriber) { s.together = true } }

// StandAsideRoom lets the broker hand out room deliveries beyond prefetch,
// each handled only in the place of a message that waits in the consumer
// for its next attempt (transport.StandAside): prefetch messages of a
// queue are still handled at once, and a few failing ones waiting out
// their retries do not take from the others.
func StandAsideRoom(room int) SubscriberOption { return func(s *Subscriber) { s.room = room } }

// NewSubscriber returns a subscriber that consumes from urls, the nodes of
// one cluster, with at most prefetch unacknowledged deliveries per
// subscription. It connects on the first Subscribe, which fails if no node
// can be reached. A nil logger discards logs.
//
// closeTimeout bounds a subscription's end: the messages in hand keep
// their contexts for nine tenths of it, so their handlers can finish and
// be acknowledged; then their contexts end, and the last tenth lets the
// handlers' answers (a requeue, as a rule) reach the broker. A delivery
// still unanswered then is requeued by the broker when the channel closes.
func NewSubscriber(urls []string, prefetch int, closeTimeout time.Duration, logger *slog.Logger, opts ...SubscriberOption) (*Subscriber, error) {
	n, err := newNodes(urls)
	if err != nil {
		return nil, fmt.Errorf("amqp: subscriber: %w", err)
	}
	if prefetch < 1 {
		return nil, fmt.Errorf("amqp: subscriber: prefetch must be at least 1, got %d", prefetch)
	}
	if closeTimeout <= 0 {
		return nil, fmt.Errorf("amqp: subscriber: the close timeout must be positive, got %s", closeTimeout)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	life, stop := context.WithCancel(context.Background())
	grace := transport.Grace(closeTimeout)
	s := &Subscriber{nodes: n, prefetch: prefetch, logger: logger, grace: grace, answerWindow: closeTimeout - grace, life: life, stop: stop}
	for _, opt := range opts {
		opt(s)
	}
	if s.room < 0 {
		return nil, fmt.Errorf("amqp: subscriber: the room for messages standing aside must not be negative, got %d", s.room)
	}
	return s, nil
}

// Subscribe consumes queue, which must already be declared, until ctx ends
// or the subscriber is closed; then the returned channel is closed at
// once, and the deliveries the broker sent that were not handed out yet
// are requeued. A message is acked when the handler acks it and requeued
// when it nacks it. Each message's context keeps ctx's values, and ends
// once the message is acked or nacked, or at the end of the grace period
// that follows the subscription's end.
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

	// hand is the messages' contexts' parent: it outlives ctx, ending
	// only at the end of the grace period that follows the subscription.
	hand, endHand := context.WithCancel(context.WithoutCancel(ctx))
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.life, cancel)
	c, err := s.consume(ctx, queue)
	if err != nil {
		stopOnClose()
		cancel()
		endHand()
		s.subs.Done()
		return nil, fmt.Errorf("amqp: consume queue %q: %w", queue, err)
	}
	out := make(chan *message.Message)
	go func() {
		defer s.subs.Done()
		defer stopOnClose()
		defer cancel()
		defer endHand()
		s.run(ctx, hand, endHand, queue, c, out)
	}()
	return out, nil
}

// consumerTag names the one consumer of each of the subscriber's
// channels, so that it can be cancelled.
const consumerTag = "moenda"

// consuming is one channel consuming a queue.
type consuming struct {
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
	// closes receives the error the channel or connection closed with. It
	// is buffered: amqp091 sends to it synchronously while holding locks.
	closes chan *amqp091.Error
	// node is the URL of the node consumed from, passwords hidden.
	node string
	// answers gathers the channel's answers, with BatchAnswers; nil
	// otherwise, and each answer is sent as it is given.
	answers *answers
}

// run hands over deliveries until ctx ends, consuming again whenever the
// channel is lost. Then it closes out, stops the consumer, and waits for
// the messages in hand to be answered, ending their contexts (hand) after
// the grace period, before it closes the channel.
func (s *Subscriber) run(ctx, hand context.Context, endHand context.CancelFunc, queue string, c consuming, out chan<- *message.Message) {
	var pending sync.WaitGroup
	// The slots outlive a lost channel: its messages in hand hold theirs
	// until they are answered.
	slots := transport.NewSlots(s.prefetch)
	defer func() {
		close(out)
		grace := time.AfterFunc(s.grace, endHand)
		defer grace.Stop()
		s.stopConsuming(queue, c)
		// Answers given in time reach the broker before the channel
		// closes; the broker requeues the rest.
		pending.Wait()
		if c.answers != nil {
			_ = c.answers.flush()
		}
		_ = c.ch.Close()
	}()
	for {
		if !s.dispatch(ctx, hand, queue, c, out, slots, &pending) {
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

// stopConsuming cancels c's consumer, so the broker sends no more, and
// requeues at once what it sent before the cancel that was not handed
// out, for another consumer to take without waiting for the channel to
// close. On a channel already lost there is nothing to do: the broker
// requeued its deliveries.
func (s *Subscriber) stopConsuming(queue string, c consuming) {
	if err := c.ch.Cancel(consumerTag, false); err != nil {
		return
	}
	requeued := 0
	for d := range c.deliveries {
		if d.Nack(false, true) == nil {
			requeued++
		}
	}
	if requeued > 0 {
		s.logger.Debug("amqp: deliveries not handed out went back to their queue", "queue", queue, "deliveries", requeued)
	}
}

// dispatch sends each delivery on out without waiting for earlier ones to
// be acked, once one of slots is free, with a context derived from hand.
// It returns false when ctx ends and true when deliveries stop (the
// channel or connection was lost, or the broker cancelled the consumer).
func (s *Subscriber) dispatch(ctx, hand context.Context, queue string, c consuming, out chan<- *message.Message, slots *transport.Slots, pending *sync.WaitGroup) bool {
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
		// Taken once a delivery is in: a slot taken ahead would keep a
		// message standing aside from coming back while the queue is idle.
		slot, ok := slots.Take(ctx)
		if !ok {
			_ = d.Nack(false, true) // not handed out: back to the queue
			return false
		}
		if c.answers != nil {
			c.answers.received(d.DeliveryTag)
		}
		msg, err := Marshaler{}.Unmarshal(d)
		if err != nil {
			// Left unacked rather than requeued in a loop or dropped: it
			// holds one slot of prefetch until the channel closes.
			s.logger.Error("amqp: delivery cannot be decoded; left unacknowledged", "queue", queue, "message_id", d.MessageId, "error", err)
			slot.Release()
			continue
		}
		msgCtx, done := context.WithCancel(hand)
		msg.SetContext(transport.WithSlot(msgCtx, slot))
		select {
		case out <- msg:
		case <-ctx.Done():
			done()
			slot.Release()
			_ = d.Nack(false, true) // not handed out: back to the queue
			return false
		}
		pending.Add(1)
		go func() {
			defer pending.Done()
			defer done()
			defer slot.Release()
			s.settle(hand, queue, c.answers, d, msg)
		}()
	}
}

// settle acks or requeues d once the handler has acked or nacked msg,
// through together when it is not nil. When the grace period ends first
// (hand), the message's context ends, and an answer given within the
// answer window that follows is still passed on; otherwise the broker
// requeues the delivery when the channel closes.
func (s *Subscriber) settle(hand context.Context, queue string, together *answers, d amqp091.Delivery, msg *message.Message) {
	var acked bool
	select {
	case <-msg.Acked():
		acked = true
	case <-msg.Nacked():
	case <-hand.Done():
		late := time.NewTimer(s.answerWindow)
		defer late.Stop()
		select {
		case <-msg.Acked():
			acked = true
		case <-msg.Nacked():
		case <-late.C:
			s.logger.Warn("amqp: a handler did not answer by the end of the close timeout; the broker redelivers its message", "queue", queue, "event_id", d.MessageId, "correlation_id", d.CorrelationId)
			return
		}
	}
	if together != nil {
		together.answer(d.DeliveryTag, acked)
		return
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
	if err := ch.Qos(s.prefetch+s.room, 0, false); err != nil {
		_ = ch.Close()
		return consuming{}, fmt.Errorf("set prefetch: %w", err)
	}
	closes := ch.NotifyClose(make(chan *amqp091.Error, 1))
	deliveries, err := ch.Consume(queue, consumerTag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return consuming{}, err
	}
	c := consuming{ch: ch, deliveries: deliveries, closes: closes, node: redact.URL(node)}
	if s.together {
		c.answers = newAnswers(ch)
	}
	return c, nil
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

// Close stops every subscription and closes its output channel at once,
// then waits for the messages in hand to be answered (ending their
// contexts after the grace period: see NewSubscriber) and passes the
// answers on, then closes the channels and the connection. Messages not
// answered by then are requeued by the broker. It is idempotent and safe
// to call while handlers ack.
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
