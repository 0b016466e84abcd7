package amqp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/topology"
)

// Declare declares the whole topology: exchanges, then queues, then
// bindings. Declaring what already exists with the same arguments is a
// no-op; a conflicting existing declaration fails with an error naming the
// exchange or queue and the broker's account of the differing argument.
// It declares through the first of urls, the nodes of one cluster, that
// answers.
func Declare(ctx context.Context, urls []string, t *topology.Topology) error {
	conn, err := dialOnce(ctx, urls)
	if err != nil {
		return fmt.Errorf("amqp: connect to declare topology: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: open channel: %w", err)
	}
	defer ch.Close()

	for _, x := range t.Exchanges {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ch.ExchangeDeclare(x.Name, x.Kind, true, false, false, false, table(x.Args)); err != nil {
			return conflict("exchange", x.Name, err)
		}
	}
	for _, q := range t.Queues {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, table(q.Args)); err != nil {
			if err := retyped(q, err); err != nil {
				return err
			}
			return conflict("queue", q.Name, err)
		}
	}
	for _, b := range t.Bindings {
		if err := ch.QueueBind(b.Queue, b.Key, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("amqp: bind queue %q to exchange %q with key %q: %w", b.Queue, b.Exchange, b.Key, err)
		}
	}
	return nil
}

func table(args map[string]any) amqp091.Table {
	if len(args) == 0 {
		return nil
	}
	t := amqp091.Table{}
	for k, v := range args {
		t[k] = v
	}
	return t
}

func conflict(kind, name string, err error) error {
	var aerr *amqp091.Error
	if errors.As(err, &aerr) && aerr.Code == amqp091.PreconditionFailed {
		return fmt.Errorf("amqp: %s %q already exists with other arguments (%s); delete it or make the configuration match: %w", kind, name, aerr.Reason, err)
	}
	return fmt.Errorf("amqp: declare %s %q: %w", kind, name, err)
}

// quorumArgs are the arguments moenda gives its quorum queues and never
// its classic ones.
var quorumArgs = []string{topology.ArgQueueType, topology.ArgDeadLetterStrategy, topology.ArgOverflow, topology.ArgDeliveryLimit}

// inequivalent reads RabbitMQ's PRECONDITION_FAILED reason: the argument
// that differs, what the declaration sent and what the queue has, e.g.
// "inequivalent arg 'x-overflow' for queue 'q' in vhost '/': received the
// value 'reject-publish' of type 'longstr' but current is none".
var inequivalent = regexp.MustCompile(`inequivalent arg '([^']+)' .*: received (.*) but current is (.*)$`)

// quoted is the first quoted word of a value in that reason.
var quoted = regexp.MustCompile(`'([^']*)'`)

// retyped returns the error for q when err says that the queue exists
// with another type, and nil otherwise. RabbitMQ names the first argument
// that differs, which for a queue with a dead-letter exchange is seldom
// x-queue-type (3.10 names x-overflow or x-dead-letter-strategy); one of
// the arguments that only moenda's quorum queues have, sent but not held
// or held but not sent, says the same.
func retyped(q topology.Queue, err error) error {
	var aerr *amqp091.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp091.PreconditionFailed {
		return nil
	}
	m := inequivalent.FindStringSubmatch(aerr.Reason)
	if m == nil || !slices.Contains(quorumArgs, m[1]) {
		return nil
	}
	arg, sentNone, heldNone := m[1], m[2] == "none", m[3] == "none"
	want, _ := q.Args[topology.ArgQueueType].(string)
	if want == "" {
		want = topology.Classic
	}
	var had string
	switch {
	case arg == topology.ArgQueueType && heldNone:
		had = topology.Classic
	case arg == topology.ArgQueueType:
		if v := quoted.FindStringSubmatch(m[3]); v != nil {
			had = v[1]
		}
	case sentNone == heldNone:
		return nil // both quorum queues, with other settings
	case want == topology.Classic:
		had = topology.Quorum
	default:
		had = topology.Classic
	}
	if had == "" || had == want {
		return nil
	}
	return fmt.Errorf("amqp: queue %q exists as a %s queue, and the configuration declares it %s: a queue's type cannot change in place. "+
		"Drain the queue and delete it so that moenda declares it anew, with its retry and dead-letter queues (`moenda topology print` lists them), "+
		"or move its messages out first, e.g. with a shovel, and back once it is declared; or set queue_type back to %s: %w", q.Name, had, want, had, err)
}

// dialOnce opens the topology connection of Declare, to
// the first of urls that answers.
func dialOnce(ctx context.Context, urls []string) (*amqp091.Connection, error) {
	n, err := newNodes(urls)
	if err != nil {
		return nil, err
	}
	conn, _, err := n.dial(ctx, amqp091.Config{
		Dial:       amqp091.DefaultDial(5 * time.Second),
		Properties: amqp091.Table{"connection_name": "moenda topology"},
	})
	return conn, err
}
