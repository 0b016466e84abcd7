package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
