// These tests take RabbitMQ away under running connections. Those that
// restart the node run only with TEST_BROKER_RESTART=1, alone: .ci/test
// runs them in a step of their own.

package outbox_test

import (
	"os"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// delivered counts the distinct wanted event ids among deliveries.
func delivered(got []amqp091.Delivery, want map[string]bool) int {
	seen := map[string]bool{}
	for _, d := range got {
		if want[d.MessageId] {
			seen[d.MessageId] = true
		}
	}
	return len(seen)
}

func TestRelaySurvivesBrokerDroppingConnections(t *testing.T) {
	eachReader(t, func(t *testing.T, base outbox.Config) {
		s := newStack(t)
		s.startRelay(t, base)
		want := map[string]bool{}
		s.commit(t, 10, want)
		testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", s.vhost.Name, "test: the broker drops every connection")
		s.commit(t, 20, want)
		got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
		testenv.Eventually(t, 30*time.Second, "every event committed around the drop", func() bool {
			return delivered(got(), want) == len(want)
		})
	})
}

// TestRelaySurvivesBrokerRestart stops and starts the RabbitMQ node
// itself, so it runs only where nothing else uses the broker meanwhile:
// .ci/test runs it alone with TEST_BROKER_RESTART=1.
func TestRelaySurvivesBrokerRestart(t *testing.T) {
	if os.Getenv("TEST_BROKER_RESTART") != "1" {
		t.Skip("restarts the RabbitMQ node; set TEST_BROKER_RESTART=1 where no other test uses it (.ci/test does)")
	}
	eachReader(t, func(t *testing.T, base outbox.Config) {
		s := newStack(t)
		s.startRelay(t, base)
		want := map[string]bool{}
		s.commit(t, 10, want)
		testenv.Rabbitmqctl(t, "stop_app")
		t.Cleanup(func() { testenv.Rabbitmqctl(t, "start_app"); testenv.Rabbitmqctl(t, "await_startup") })
		s.commit(t, 20, want) // the outbox keeps them while the broker is down
		testenv.Rabbitmqctl(t, "start_app")
		testenv.Rabbitmqctl(t, "await_startup")
		got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
		testenv.Eventually(t, 60*time.Second, "every event committed before and during the restart", func() bool {
			return delivered(got(), want) == len(want)
		})
	})
}
