package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/topology"
)

// Declare declares the whole topology: exchanges, then queues, then
// bindings. Declaring what already exists with the same arguments is a
// no-op; a conflicting existing declaration fails with an error naming the
// exchange or queue and the broker's account of the differing argument.
func Declare(ctx context.Context, url string, t *topology.Topology) error {
	conn, err := amqp091.DialConfig(url, amqp091.Config{
		Dial:       amqp091.DefaultDial(5 * time.Second),
		Properties: amqp091.Table{"connection_name": "moenda topology"},
	})
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

// ExistingQueues returns those of names that exist on the broker: a queue
// the configuration no longer declares is not deleted by moenda, and goes
// on receiving what its bindings route to it.
func ExistingQueues(url string, names []string) ([]string, error) {
	conn, err := amqp091.DialConfig(url, amqp091.Config{
		Dial:       amqp091.DefaultDial(5 * time.Second),
		Properties: amqp091.Table{"connection_name": "moenda topology"},
	})
	if err != nil {
		return nil, fmt.Errorf("amqp: connect to look for queues: %w", err)
	}
	defer conn.Close()
	var out []string
	for _, name := range names {
		ch, err := conn.Channel() // a missing queue closes the channel it was asked on
		if err != nil {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		var aerr *amqp091.Error
		switch {
		case err == nil:
			out = append(out, name)
			_ = ch.Close()
		case errors.As(err, &aerr) && aerr.Code == amqp091.NotFound:
		default:
			return nil, fmt.Errorf("amqp: look for queue %q: %w", name, err)
		}
	}
	return out, nil
}
