package amqp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
)

// declaredPublisher is a batch publisher with a confirm window of
// window on a vhost of its own, where the exchange prefix routes its
// events (prefix.#) to the classic queue prefix.q, declared; it returns
// the vhost's URL and the queue too.
func declaredPublisher(t *testing.T, prefix string, window int) (*BatchPublisher, string, string) {
	t.Helper()
	vhost := testenv.RabbitMQ(t)
	top, q := loadTopology(t, prefix, prefix+".q", topology.Classic)
	if err := Declare(context.Background(), []string{vhost.URL}, top); err != nil {
		t.Fatal(err)
	}
	pub, err := NewBatchPublisher([]string{vhost.URL}, "moenda test relay", window, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub, vhost.URL, q
}

// A publisher that could not work is refused when it is made, not on its
// first batch.
func TestNewBatchPublisherRefusesWhatCannotWork(t *testing.T) {
	top := &topology.Topology{}
	tests := []struct {
		name   string
		url    string
		window int
		top    *topology.Topology
		want   string
	}{
		{"no confirm window", "amqp://guest:guest@127.0.0.1:5672/", 0, top, "confirm window must be at least 1"},
		{"not an AMQP URL", "http://127.0.0.1/", 1, top, "url"},
		{"no topology", "amqp://guest:guest@127.0.0.1:5672/", 1, nil, "no topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewBatchPublisher([]string{tt.url}, "test", tt.window, tt.top); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to say %q", err, tt.want)
			}
		})
	}
	if _, err := NewBatchPublisher([]string{"amqp://guest:guest@127.0.0.1:5672/"}, "test", 1, top); err != nil {
		t.Fatal(err)
	}
}

// TestBatchWithItsReturnsClosedEnds: amqp091 closes the channel of
// returns when the AMQP channel shuts down. A batch whose confirms came
// before that ends, as does a single publish, rather than reading the
// closed channel's zero values for ever while it holds the publisher
// (which froze a relay whose broker went away mid-batch, at full CPU).
func TestBatchWithItsReturnsClosedEnds(t *testing.T) {
	pub, url, q := declaredPublisher(t, "closed", 8)
	topics, msgs := newMessages("closed", 3)
	if err := pub.PublishBatch(context.Background(), topics, msgs); err != nil {
		t.Fatal(err)
	}
	closed := make(chan amqp091.Return)
	close(closed)
	pub.mu.Lock()
	pub.returns = closed // as amqp091 leaves it once the channel shut down
	pub.mu.Unlock()
	done := make(chan error, 2)
	go func() {
		topics, msgs := newMessages("closed", 3)
		done <- pub.PublishBatch(context.Background(), topics, msgs)
		done <- pub.PublishTo(context.Background(), "closed", "closed.tick", message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
	}()
	for _, what := range []string{"PublishBatch", "PublishTo"} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still runs after 10 s with its returns closed", what)
		}
	}
	if got := testenv.ReadyMessages(t, url, q); got != 7 {
		t.Fatalf("%s holds %d messages, want 7", q, got)
	}
}
