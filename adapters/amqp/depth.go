package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/transport"
)

// DepthReader reads how many ready messages queues hold, and how many
// consumers read them, for the metrics of dead-letter and unrouted queues
// and the status page, on a connection of its own.
type DepthReader struct{ conn *kept }

// NewDepthReader returns a reader for the broker at urls, the nodes of one
// cluster (see nodes).
func NewDepthReader(urls []string) (*DepthReader, error) {
	n, err := newNodes(urls)
	if err != nil {
		return nil, fmt.Errorf("amqp: depth reader: %w", err)
	}
	return &DepthReader{conn: &kept{nodes: n, name: "moenda metrics", dial: 5 * time.Second}}, nil
}

// Depths returns the ready messages of each queue in names that exists;
// a queue that does not exist is left out.
func (d *DepthReader) Depths(names []string) (map[string]int, error) {
	queues, err := d.Queues(names)
	out := make(map[string]int, len(queues))
	for name, q := range queues {
		out[name] = q.Messages
	}
	return out, err
}

// Queues returns the ready messages and the consumers of each queue in
// names that exists, as a passive declare answers them; a queue that does
// not exist is left out. A queue whose node is down (a classic queue of
// a cluster: its messages live on that node alone) is in the answer,
// with the broker's reason in Unavailable.
func (d *DepthReader) Queues(names []string) (map[string]transport.QueueState, error) {
	out := make(map[string]transport.QueueState, len(names))
	err := d.conn.use(context.Background(), func(conn *amqp091.Connection) error {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		defer func() { _ = ch.Close() }()
		for _, name := range names {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			var aerr *amqp091.Error
			switch {
			case err == nil:
				out[name] = transport.QueueState{Messages: q.Messages, Consumers: q.Consumers}
			case errors.As(err, &aerr) && aerr.Code == amqp091.NotFound:
				// RabbitMQ answers 404 for a durable queue whose node is
				// down too, saying so: "home node 'rabbit1@host' of durable
				// queue 'q' in vhost '/' is down or inaccessible".
				if strings.Contains(aerr.Reason, "down or inaccessible") {
					out[name] = transport.QueueState{Unavailable: aerr.Reason}
				}
				// a missing queue closes the channel it was asked on
				if ch, err = conn.Channel(); err != nil {
					return fmt.Errorf("open channel: %w", err)
				}
			default:
				return fmt.Errorf("depth of %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("amqp: %w", err)
	}
	return out, nil
}

// Close closes the reader's connection.
func (d *DepthReader) Close() error { return d.conn.close() }
