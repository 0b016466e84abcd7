package amqp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
)

// retryDelay is the one delay of the topologies below.
const retryDelay = 300 * time.Millisecond

// typedTopology is one consuming queue, work, with its retry queue, its
// dead-letter queue and the unrouted queue of its exchange, all of type
// typ: ev.unrouted, work, work.dlq and work.retry.300ms.
func typedTopology(t *testing.T, typ string) *topology.Topology {
	t.Helper()
	cfg := topology.DefaultConfig()
	cfg.QueueType = typ
	cfg.Failure.Delays = []time.Duration{retryDelay}
	cfg.Exchanges = []topology.ExchangeConfig{{Name: "ev", Events: []string{"ev.#"}}}
	top, err := topology.Build(cfg, []topology.Subscription{{Queue: "work", Patterns: []string{"ev.*"}}})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// declaredVHost is a vhost of the test's own with typedTopology(typ)
// declared in it.
func declaredVHost(t *testing.T, typ string) testenv.VHost {
	t.Helper()
	vhost := testenv.RabbitMQ(t)
	if err := Declare(context.Background(), []string{vhost.URL}, typedTopology(t, typ)); err != nil {
		t.Fatal(err)
	}
	return vhost
}

// queueTypes reads the type and arguments of every queue in vhost, as
// RabbitMQ holds them.
func queueTypes(t *testing.T, vhost string) (types, args map[string]string) {
	t.Helper()
	out := testenv.Rabbitmqctl(t, "list_queues", "-p", vhost, "name", "type", "arguments", "--no-table-headers")
	types, args = map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 {
			types[f[0]], args[f[0]] = f[1], f[2]
		}
	}
	return types, args
}

// Quorum queues are declared with their type and at-least-once
// dead-letters; declaring them again is a no-op.
func TestDeclareQuorumQueues(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	top := typedTopology(t, topology.Quorum)
	for range 2 {
		if err := Declare(context.Background(), []string{vhost.URL}, top); err != nil {
			t.Fatal(err)
		}
	}
	types, args := queueTypes(t, vhost.Name)
	if len(types) != 4 {
		t.Fatalf("queues %v, want ev.unrouted, work, work.dlq and work.retry.300ms", types)
	}
	for name, typ := range types {
		if typ != topology.Quorum {
			t.Errorf("queue %s is %s", name, typ)
		}
	}
	for name, want := range map[string][]string{
		"work":             {`{"x-dead-letter-strategy","at-least-once"}`, `{"x-overflow","reject-publish"}`, `{"x-delivery-limit",100}`, `{"x-dead-letter-exchange","moenda.dlx"}`},
		"work.retry.300ms": {`{"x-dead-letter-strategy","at-least-once"}`, `{"x-overflow","reject-publish"}`, `{"x-message-ttl",300}`, `{"x-dead-letter-routing-key","work"}`},
	} {
		for _, w := range want {
			if !strings.Contains(args[name], w) {
				t.Errorf("queue %s has arguments %s, lacking %s", name, args[name], w)
			}
		}
	}
	if strings.Contains(args["work.retry.300ms"], "x-delivery-limit") {
		t.Errorf("the retry queue has a delivery limit: %s", args["work.retry.300ms"])
	}
}

// A message in a quorum retry queue goes back to its quorum queue through
// the default exchange once its TTL has passed.
func TestQuorumRetryQueueHandsBack(t *testing.T) {
	vhost := declaredVHost(t, topology.Quorum)
	back := testenv.Consume(t, vhost.URL, "work")
	ch := testenv.Channel(t, vhost.URL)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	conf, err := ch.PublishWithDeferredConfirm("", topology.RetryQueue("work", retryDelay), false, false, amqp091.Publishing{MessageId: "m1", Body: []byte("{}"), DeliveryMode: amqp091.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("the retry queue did not confirm: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the message back in work", func() bool { return len(back()) > 0 })
	d := back()[0]
	if waited := time.Since(sent); waited < retryDelay*8/10 {
		t.Errorf("the message came back after %s, before its %s", waited, retryDelay)
	}
	death, _ := d.Headers["x-death"].([]any)
	if d.MessageId != "m1" || len(death) != 1 {
		t.Fatalf("delivery %s with x-death %v", d.MessageId, d.Headers["x-death"])
	}
	if entry, _ := death[0].(amqp091.Table); entry["queue"] != "work.retry.300ms" || entry["reason"] != "expired" {
		t.Fatalf("x-death %v", entry)
	}
}

// A message that goes back to its quorum queue unacknowledged more than
// DeliveryLimit times lands in the dead-letter queue.
func TestQuorumDeliveryLimitDeadLetters(t *testing.T) {
	vhost := declaredVHost(t, topology.Quorum)
	dead := testenv.Consume(t, vhost.URL, "work.dlq")
	ch := testenv.Channel(t, vhost.URL)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "work", false, false, amqp091.Publishing{MessageId: "poison", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var last amqp091.Delivery
	for len(dead()) == 0 {
		select {
		case d := <-deliveries:
			n, last = n+1, d
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
		case <-time.After(50 * time.Millisecond):
		}
		if n > 2*topology.DeliveryLimit {
			t.Fatalf("%d deliveries and no dead letter", n)
		}
	}
	if n != topology.DeliveryLimit+1 || last.Headers["x-delivery-count"] != int64(topology.DeliveryLimit) {
		t.Errorf("%d deliveries, the last with x-delivery-count %v; want %d and %d", n, last.Headers["x-delivery-count"], topology.DeliveryLimit+1, topology.DeliveryLimit)
	}
	d := dead()[0]
	death, _ := d.Headers["x-death"].([]any)
	if entry, _ := death[0].(amqp091.Table); d.MessageId != "poison" || entry["queue"] != "work" || entry["reason"] != "delivery_limit" {
		t.Fatalf("dead letter %s with x-death %v", d.MessageId, d.Headers["x-death"])
	}
}

// A queue that exists with the other type fails to declare with an error
// that says so and what to do, whichever argument RabbitMQ names first.
func TestQueueTypeChangeIsAClearError(t *testing.T) {
	for _, tt := range []struct{ had, want string }{{topology.Classic, topology.Quorum}, {topology.Quorum, topology.Classic}} {
		t.Run(tt.had+" to "+tt.want, func(t *testing.T) {
			vhost := declaredVHost(t, tt.had)
			// Each queue alone, so that each kind is seen failing.
			for _, q := range typedTopology(t, tt.want).Queues {
				err := Declare(context.Background(), []string{vhost.URL}, &topology.Topology{Queues: []topology.Queue{q}})
				var aerr *amqp091.Error
				if !errors.As(err, &aerr) || aerr.Code != amqp091.PreconditionFailed {
					t.Fatalf("queue %s: %v, want PRECONDITION_FAILED", q.Name, err)
				}
				for _, want := range []string{
					`queue "` + q.Name + `" exists as a ` + tt.had + ` queue, and the configuration declares it ` + tt.want,
					"a queue's type cannot change in place", "Drain the queue and delete it", "shovel", "set queue_type back to " + tt.had,
				} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("queue %s: error does not say %q: %v", q.Name, want, err)
					}
				}
			}
		})
	}
}

// A quorum queue with other settings of its own is a plain conflict, not
// a change of type.
func TestQuorumQueueWithOtherSettingsIsNoTypeChange(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	ch := testenv.Channel(t, vhost.URL)
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp091.Table{
		topology.ArgQueueType: topology.Quorum, topology.ArgDeadLetterExchange: "moenda.dlx", topology.ArgDeadLetterRoutingKey: "work",
		topology.ArgDeadLetterStrategy: "at-least-once", topology.ArgOverflow: "reject-publish", topology.ArgDeliveryLimit: int64(5),
	}); err != nil {
		t.Fatal(err)
	}
	err := Declare(context.Background(), []string{vhost.URL}, typedTopology(t, topology.Quorum))
	if err == nil || !strings.Contains(err.Error(), `queue "work" already exists with other arguments`) || !strings.Contains(err.Error(), "x-delivery-limit") || strings.Contains(err.Error(), "type cannot change") {
		t.Fatalf("Declare = %v", err)
	}
}
