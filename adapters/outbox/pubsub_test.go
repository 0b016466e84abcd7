package outbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// TestUniversalPubSub runs Watermill's pub/sub test suite against the
// PostgreSQL pub/sub on the outbox's schema, over pgx, with the test
// environment's intervals. The suite
// makes up topics, so their tables are created on first use here, where
// the outbox's own table comes from the migrations.
func TestUniversalPubSub(t *testing.T) {
	// The suite runs many subscribers at once and each holds a connection
	// while a message awaits its ack: give it a pool that size.
	pool, err := pgxpool.New(context.Background(), testenv.ExclusivePostgres(t).URL+"&pool_max_conns=60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logger := watermill.NewSlogLogger(testenv.Logger())
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{
			SchemaAdapter:        outbox.Schema(),
			AutoInitializeSchema: true,
		}, logger)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
			ConsumerGroup:    group,
			PollInterval:     testConfig.PollInterval,
			ResendInterval:   testConfig.RetryInterval,
			RetryInterval:    testConfig.RetryInterval,
			SchemaAdapter:    outbox.Schema(),
			OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true,
		}, logger)
		if err != nil {
			t.Fatal(err)
		}
		return pub, &closeWaiter{Subscriber: sub, closing: make(chan struct{})}
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:      true,
		ExactlyOnceDelivery: true,
		GuaranteedOrder:     true,
		Persistent:          true,
	}, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPubSub(t, "")
	}, newPubSub)
}

// closeWaiter makes Close return only once every channel Subscribe gave
// is closed, as the suite checks. watermill-sql v4.1.3's subscriber marks
// a subscription done before it closes its channel (consume defers
// subscribeWg.Done, and close(out) runs after consume returns), so its
// Close can return with a channel still open; under load the suite then
// fails "messages channel is not closed (blocked)".
type closeWaiter struct {
	*wsql.Subscriber
	closing chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func (c *closeWaiter) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := c.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(out)
		for msg := range in {
			select {
			case out <- msg:
			case <-c.closing:
				msg.Nack() // closing: nobody reads any more
			}
		}
	}()
	return out, nil
}

func (c *closeWaiter) Close() error {
	c.once.Do(func() { close(c.closing) })
	err := c.Subscriber.Close()
	c.wg.Wait()
	return err
}
