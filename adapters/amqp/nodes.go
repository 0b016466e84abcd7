package amqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/redact"
)

// nodes is the one dialing rule of every connection moenda opens to
// RabbitMQ: the URLs of one cluster's nodes, tried in order from the node
// the connection last used, the first that answers kept. When the broker
// or the network took that connection away, the next dial starts with the
// following node (wrapping around), so a dead node does not cost every
// redial a refusal or a timeout first; a connection its owner closed
// itself comes back to the same node. Each client holds its own.
type nodes struct {
	urls []string

	mu sync.Mutex
	// first is the index of the node to try first.
	first int
	// last is the connection the last dial made, and closes its close
	// notification: an error when it was lost, nothing when its owner
	// closed it.
	last   *amqp091.Connection
	closes chan *amqp091.Error
}

// newNodes checks that every URL is one amqp091 can dial; what names the
// list in its errors is "url" for one node and "urls[i]" for several.
func newNodes(urls []string) (*nodes, error) {
	if len(urls) == 0 {
		return nil, errors.New("url is empty")
	}
	var errs []error
	for i, u := range urls {
		name := "url"
		if len(urls) > 1 {
			name = fmt.Sprintf("urls[%d]", i)
		}
		if u == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
			continue
		}
		if _, err := amqp091.ParseURI(u); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, redact.URL(u), redact.Error(err, u)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &nodes{urls: append([]string(nil), urls...)}, nil
}

// dial connects with cfg to the first node that answers, trying each once
// in order, and returns the connection and that node's URL. The error of a
// failed dial names every node tried, passwords hidden. ctx ends the tries
// between nodes; cfg.Dial bounds each one.
func (n *nodes) dial(ctx context.Context, cfg amqp091.Config) (*amqp091.Connection, string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last != nil && n.last.IsClosed() {
		// amqp091 marks the connection closed before it notifies, and
		// notifies at once: this receive does not wait long.
		if err := <-n.closes; err != nil {
			n.first = (n.first + 1) % len(n.urls)
		}
		n.last, n.closes = nil, nil
	}
	var errs []error
	for k := range n.urls {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		i := (n.first + k) % len(n.urls)
		conn, err := amqp091.DialConfig(n.urls[i], cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("connect to %s: %w", redact.URL(n.urls[i]), err))
			continue
		}
		n.first, n.last = i, conn
		n.closes = conn.NotifyClose(make(chan *amqp091.Error, 1))
		return conn, n.urls[i], nil
	}
	return nil, "", errors.Join(errs...)
}

// current returns the URL of the node the last dial connected to (the
// first node before any).
func (n *nodes) current() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.urls[n.first]
}

// kept is the connection of one part of a transport that asks rather than
// streams (the readiness probe, the depth reader): made on first use,
// kept from call to call, and made again once the broker or the network
// closed it.
type kept struct {
	nodes *nodes
	// name is the connection's name on the broker; dial bounds each
	// node's dial.
	name string
	dial time.Duration
	// answer bounds each use's wait for the broker; 0 is keptAnswer.
	answer time.Duration

	mu   sync.Mutex
	conn *amqp091.Connection
}

// keptAnswer bounds what fn waits for on a kept connection: amqp091's
// calls on a channel wait for the broker's answer without end, and a
// node that takes the request and never answers (one recovering its
// queues, or frozen) would hold the readiness probe and the metrics with
// it.
const keptAnswer = 10 * time.Second

// use runs fn on the connection, dialling it first when there is none;
// one caller at a time. When fn has no answer within k.answer, or ctx
// ends first, the connection is closed, which ends fn's wait, and the
// next use dials again.
func (k *kept) use(ctx context.Context, fn func(*amqp091.Connection) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil || k.conn.IsClosed() {
		conn, _, err := k.nodes.dial(ctx, amqp091.Config{
			Dial:       amqp091.DefaultDial(k.dial),
			Properties: amqp091.Table{"connection_name": k.name},
		})
		if err != nil {
			return fmt.Errorf("RabbitMQ does not answer: %w", err)
		}
		k.conn = conn
	}
	conn := k.conn
	done := make(chan error, 1)
	go func() { done <- fn(conn) }()
	answer := cmp.Or(k.answer, keptAnswer)
	timer := time.NewTimer(answer)
	defer timer.Stop()
	var why error
	select {
	case err := <-done:
		return err
	case <-timer.C:
		why = fmt.Errorf("RabbitMQ took the request and did not answer within %v; the connection is closed, and dialled again next time", answer)
	case <-ctx.Done():
		why = ctx.Err()
	}
	_ = conn.CloseDeadline(time.Now().Add(time.Second))
	<-done
	return why
}

// check dials the connection when there is none: whether RabbitMQ answers.
func (k *kept) check(ctx context.Context) error {
	return k.use(ctx, func(*amqp091.Connection) error { return nil })
}

// close closes the connection; one the broker closed already is no error.
func (k *kept) close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil || k.conn.IsClosed() {
		return nil
	}
	if err := k.conn.Close(); !errors.Is(err, amqp091.ErrClosed) {
		return err
	}
	return nil
}
