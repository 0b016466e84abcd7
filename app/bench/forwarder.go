package bench

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/router"
)

// stockForwarder drains a backlog with Watermill's components/forwarder
// over watermill-amqp with confirms, from the relay's own position (the
// two share the offsets table): the figure the relay replaces. The rows are
// written in the forwarder's own format (its envelope around the event).
// The relay catches up by polling, which drops the group's slot: a slot
// would keep those rows for the next logical relay, which would park every
// one of them, having no event in its metadata.
func stockForwarder(ctx context.Context, e *env, r *Result) error {
	n := e.sz.backlog / 5
	if err := e.relayCatchUp(ctx, outbox.ReaderPoll); err != nil {
		return err
	}
	err := e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		sqlPub, err := wsql.NewPublisher(wsql.TxFromPgx(tx.Postgres()), wsql.PublisherConfig{SchemaAdapter: outbox.Schema()}, e.wlog)
		if err != nil {
			return err
		}
		pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: outbox.Topic})
		for range n {
			ev := benchEvent()
			msg, err := event.ToMessage(ev)
			if err != nil {
				return err
			}
			if err := pub.Publish(ev.RoutingKey(), msg); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	pub, err := watermillPublisher(e.opts.AMQPURL, e.top, e.wlog)
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(e.pool), wsql.SubscriberConfig{
		ConsumerGroup:  e.set.Outbox.ConsumerGroup,
		PollInterval:   e.set.Outbox.PollInterval,
		ResendInterval: e.set.Outbox.RetryInterval,
		RetryInterval:  e.set.Outbox.RetryInterval,
		SchemaAdapter:  outbox.Schema(),
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
	}, e.wlog)
	if err != nil {
		return err
	}
	rt, err := router.New(e.set.Router, e.wlog)
	if err != nil {
		return err
	}
	if _, err := forwarder.NewForwarder(sub, pub, e.wlog, forwarder.Config{ForwarderTopic: outbox.Topic, Router: rt, AckWhenCannotUnwrap: true}); err != nil {
		return err
	}
	wait, stopConsumer, err := e.arrivals(ctx)
	if err != nil {
		return err
	}
	defer stopConsumer()
	go func() { _ = rt.Run(context.WithoutCancel(ctx)) }()
	defer rt.Close()
	f, err := wait(n, process{})
	if err != nil {
		return err
	}
	r.add(Row{Name: fmt.Sprintf("for comparison: Watermill forwarder drain of %d rows with confirms", n), Value: f.rate, Unit: "rows/s",
		Ceiling: r.value(rowPublish)}, 0, 0)
	return e.purge()
}

// watermillPublisher is watermill-amqp's own publisher as the forwarder
// needs it: confirms, a pool of 4 channels (with none it opens and closes
// a channel per message), publishing with topic = routing key to the
// exchange the topology assigns, and declaring nothing.
func watermillPublisher(url string, top *topology.Topology, logger watermill.LoggerAdapter) (message.Publisher, error) {
	pub, err := wamqp.NewPublisher(wamqp.Config{
		Connection: wamqp.ConnectionConfig{
			AmqpURI:    url,
			AmqpConfig: &amqp091.Config{Properties: amqp091.Table{"connection_name": "moenda bench forwarder"}},
			Reconnect:  wamqp.DefaultReconnectConfig(),
		},
		Marshaler: amqp.Marshaler{},
		Exchange: wamqp.ExchangeConfig{GenerateName: func(topic string) string {
			x, _ := top.ExchangeFor(topic) // bench events are routable
			return x
		}, Type: topology.Topic, Durable: true},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return topic },
			ConfirmDelivery:    true,
			ChannelPoolSize:    4,
		},
		TopologyBuilder: declaredElsewhere{},
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("watermill-amqp publisher: %w", err)
	}
	return pub, nil
}

// declaredElsewhere keeps watermill-amqp from declaring anything: the
// bench declared the topology.
type declaredElsewhere struct{}

func (declaredElsewhere) BuildTopology(*amqp091.Channel, wamqp.BuildTopologyParams, wamqp.Config, watermill.LoggerAdapter) error {
	return nil
}

func (declaredElsewhere) ExchangeDeclare(*amqp091.Channel, string, wamqp.Config) error { return nil }
