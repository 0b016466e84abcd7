package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// BatchPublisher publishes a batch of messages on one channel in confirm
// mode with up to window confirmations outstanding, and returns once the
// broker has confirmed every one. watermill-amqp waits for each confirm
// before the next publish, which caps an outbox relay at a fraction of what
// the broker takes; pipelining keeps per-channel order and the guarantee.
// It redials on the next batch after any failure.
type BatchPublisher struct {
	nodes  *nodes
	name   string
	window int
	top    *topology.Topology
	dial   dialer

	mu      sync.Mutex
	conn    *amqp091.Connection
	wire    *corkedConn // conn's socket, corked while a batch is published
	ch      *amqp091.Channel
	returns chan amqp091.Return
	// blocked is the broker's reason while it blocks publishing on the
	// connection (a memory or disk alarm); nil otherwise.
	blocked atomic.Pointer[string]
}

// NewBatchPublisher returns a publisher that connects on first use to one
// of urls, the nodes of one cluster (see nodes); name names its connection
// in the broker's management tools, and window is how many confirms may
// be outstanding (at least 1).
func NewBatchPublisher(urls []string, name string, window int, top *topology.Topology) (*BatchPublisher, error) {
	var errs []error
	n, err := newNodes(urls)
	if err != nil {
		errs = append(errs, err)
	}
	if window < 1 {
		errs = append(errs, fmt.Errorf("confirm window must be at least 1, got %d", window))
	}
	if top == nil {
		errs = append(errs, errors.New("no topology to route by"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("amqp: publisher %s: %w", name, err)
	}
	return &BatchPublisher{nodes: n, name: name, window: window, top: top, dial: amqp091.DefaultDial(5 * time.Second)}, nil
}

// PublishBatch publishes each message to the exchange the topology assigns
// its routing key (topics[i]), in order, in the envelope format of that
// exchange. It fails as a whole: on error the caller republishes the
// batch, and consumers deduplicate. The exceptions are named in an
// outbox.BatchError, the others being delivered: a message AMQP cannot
// carry (see fits) is not sent, and named outbox.ErrRefused, so the relay
// parks its row rather than retry the batch forever; a message the
// broker returned though the topology routes it to a queue (see publish)
// is named with an error of its own, so the relay sends it again later.
func (p *BatchPublisher) PublishBatch(ctx context.Context, topics []string, msgs []*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(); err != nil {
		return err
	}
	return p.publish(ctx, len(msgs), func(i int) (string, string, *message.Message, error) {
		exchange, err := p.top.ExchangeFor(topics[i])
		if err != nil {
			return "", "", nil, err
		}
		return exchange, topics[i], event.Encoded(p.top.Published(exchange), msgs[i]), nil
	})
}

// PublishTo publishes msg to exchange with key and returns once the broker
// has confirmed it. The publish is mandatory: a message no queue takes is
// an error here rather than silently dropped.
func (p *BatchPublisher) PublishTo(ctx context.Context, exchange, key string, msg *message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(); err != nil {
		return err
	}
	pub, err := Marshaler{}.Marshal(msg)
	if err != nil {
		return err
	}
	if err := fits(pub, p.conn.Config.FrameSize); err != nil {
		return fmt.Errorf("amqp: message %s: %w: %w", msg.UUID, outbox.ErrRefused, err)
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
	if err != nil {
		p.reset()
		return fmt.Errorf("amqp: publish to exchange %q with key %q: %w", exchange, key, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err == nil && !ok {
		err = errors.New("the broker refused it (nack) or the channel closed")
	}
	if err != nil {
		p.reset()
		return fmt.Errorf("amqp: publish to exchange %q with key %q not confirmed: %w", exchange, key, err)
	}
	// RabbitMQ returns an unroutable mandatory message before it confirms it.
	select {
	case r, ok := <-p.returns:
		if !ok { // the channel closed after the confirm, with no return before it
			return nil
		}
		return fmt.Errorf("amqp: exchange %q routes key %q to no queue (%s); declare the topology again (restart serve)", exchange, key, r.ReplyText)
	default:
		return nil
	}
}

// publish publishes n messages, each to the exchange and key target
// gives, with up to window confirms outstanding, and waits for them all.
// Those that do not fit AMQP's frames are skipped and named in an
// outbox.BatchError once the others are confirmed.
//
// Every message is mandatory. RabbitMQ confirms a message routed only to
// queues it cannot reach now, and drops it: a classic queue whose node is
// down, once the cluster has counted that node gone (measured on 3.10: a
// nack for the first second, then acks). Mandatory, such a message comes
// back (basic.return, before its confirm) and is named in the
// BatchError, to be published again. A message the topology routes to no
// queue is returned only where its exchange has no alternate exchange,
// and nothing would take it: it counts as delivered, as without the flag.
func (p *BatchPublisher) publish(ctx context.Context, n int, target func(i int) (exchange, key string, msg *message.Message, err error)) error {
	pending := make([]*amqp091.DeferredConfirmation, 0, p.window)
	var failed map[int]error
	fail := func(i int, err error) {
		if failed == nil {
			failed = map[int]error{}
		}
		failed[i] = err
	}
	ids := make([]string, n)
	// returned holds the returns read so far, by message id; a return
	// precedes its message's confirm, so every return of a confirmed
	// message is in the channel by then.
	returned := map[string]amqp091.Return{}
	drain := func() {
		for {
			select {
			case r, ok := <-p.returns:
				if !ok { // the channel closed: what it held was read first
					return
				}
				returned[r.MessageId] = r
			default:
				return
			}
		}
	}
	// The batch's messages go out in few writes (see corkedConn), all of
	// them before any confirm is waited for.
	wire := p.wire
	wire.cork()
	defer func() { _ = wire.uncork() }()
	wait := func(dc *amqp091.DeferredConfirmation) error {
		if err := wire.flush(); err != nil {
			return fmt.Errorf("amqp: publish: %w", err)
		}
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("amqp: the broker refused a message (nack) or the channel closed")
		}
		drain()
		return nil
	}
	for i := range n {
		exchange, key, msg, err := target(i)
		if err != nil {
			return err
		}
		pub, err := Marshaler{}.Marshal(msg)
		if err != nil {
			return err
		}
		if err := fits(pub, p.conn.Config.FrameSize); err != nil {
			fail(i, fmt.Errorf("amqp: message %s: %w: %w", msg.UUID, outbox.ErrRefused, err))
			continue
		}
		ids[i] = msg.UUID
		if len(pending) == p.window {
			if err := wait(pending[0]); err != nil {
				p.reset()
				return err
			}
			pending = pending[1:]
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
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
	if len(returned) > 0 {
		for i, id := range ids {
			if r, ok := returned[id]; ok && id != "" && len(p.top.QueuesFor(r.Exchange, r.RoutingKey)) > 0 {
				fail(i, fmt.Errorf("amqp: message %s: RabbitMQ returned it (%s): exchange %q routes key %q to %s, which it cannot reach now (a classic queue whose node is down?)",
					id, r.ReplyText, r.Exchange, r.RoutingKey, strings.Join(p.top.QueuesFor(r.Exchange, r.RoutingKey), ", ")))
			}
		}
	}
	if failed != nil {
		return fmt.Errorf("amqp: publish %d messages: %w", n, &outbox.BatchError{Failed: failed})
	}
	return nil
}

func (p *BatchPublisher) connect() error {
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	p.reset()
	conn, _, err := p.nodes.dial(context.Background(), amqp091.Config{
		Dial:       corkedDial(p.dial, func(c *corkedConn) { p.wire = c }),
		Properties: amqp091.Table{"connection_name": p.name},
	})
	if err != nil {
		return fmt.Errorf("amqp: %w", err)
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
	// Room for a window's returns: they are read once a confirm has come,
	// and a full channel would stop the connection's reader.
	p.returns = ch.NotifyReturn(make(chan amqp091.Return, p.window+1))
	blocks := conn.NotifyBlocked(make(chan amqp091.Blocking, 1))
	go func() {
		for b := range blocks {
			if b.Active {
				p.blocked.Store(&b.Reason)
			} else {
				p.blocked.Store(nil)
			}
		}
		p.blocked.Store(nil) // the connection is gone, and its block with it
	}()
	return nil
}

// Blocked returns why the broker blocks this publisher's connection (an
// alarm: low on memory or disk), or "" when it does not.
func (p *BatchPublisher) Blocked() string {
	if r := p.blocked.Load(); r != nil {
		return *r
	}
	return ""
}

func (p *BatchPublisher) reset() {
	if p.wire != nil {
		// Closing waits for the broker's answer to the close it writes.
		_ = p.wire.uncork()
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.wire, p.ch = nil, nil, nil
}

// Close closes the connection.
func (p *BatchPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset()
	return nil
}
