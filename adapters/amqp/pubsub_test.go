package amqp

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/moenda/moenda/adapters/testenv"
)

// TestUniversalPubSub runs Watermill's pub/sub test suite against
// watermill-amqp configured as moenda configures it (marshaler, confirms,
// channel pool, prefetch, durable queues, reconnects). The one difference:
// the suite makes up topics, so here each topic's queue is declared on
// subscribe and publishing goes through the default exchange, where serve
// declares the topology up front.
func TestUniversalPubSub(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	cfg := Config{URL: vhost.URL, Prefetch: 50, PublisherChannels: 4}
	newPubSub := func(t *testing.T) (message.Publisher, message.Subscriber) {
		config := func() wamqp.Config {
			c := watermillConfig(cfg)
			c.Connection = connection(cfg, "moenda test")
			c.TopologyBuilder = &wamqp.DefaultTopologyBuilder{}
			return c
		}
		logger := watermill.NewSlogLogger(testenv.Logger())
		pub, err := wamqp.NewPublisher(config(), logger)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := wamqp.NewSubscriber(config(), logger)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
	}, newPubSub, nil)
}
