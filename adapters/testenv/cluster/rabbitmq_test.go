package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/testenv/cluster"
)

// running is how many nodes node sees running in its cluster.
func running(t *testing.T, c *cluster.RabbitMQ, node *cluster.RabbitNode) int {
	t.Helper()
	out, err := c.Ctl(context.Background(), node, "cluster_status", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Running []string `json:"running_nodes"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatalf("cluster_status: %v\n%s", err, out)
	}
	return len(status.Running)
}

// leader is the node that leads queue, as node sees it.
func leader(t *testing.T, c *cluster.RabbitMQ, node *cluster.RabbitNode, queue string) *cluster.RabbitNode {
	t.Helper()
	out, err := c.Ctl(context.Background(), node, "list_queues", "name", "leader", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var qs []struct{ Name, Leader string }
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatalf("list_queues: %v\n%s", err, out)
	}
	for _, q := range qs {
		for _, n := range c.Nodes {
			if q.Name == queue && q.Leader == n.Name {
				return n
			}
		}
	}
	t.Fatalf("no leader of %s in %s", queue, out)
	return nil
}

// The harness's three nodes form one cluster; a quorum queue declared on
// one keeps every confirmed message when its leader's node is killed,
// served by another node; the killed node comes back into the cluster.
func TestAQuorumQueueOutlivesItsLeadersNode(t *testing.T) {
	c := testenv.RabbitCluster(t, 3)
	for _, n := range c.Nodes {
		if got := running(t, c, n); got != 3 {
			t.Fatalf("%s sees %d nodes running, want 3", n.Name, got)
		}
	}
	conn, err := amqp091.Dial(c.Nodes[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const queue, n = "harness.quorum", 200
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := conf.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("message %d not confirmed: %v", i, err)
		}
	}
	conn.Close()

	dead := leader(t, c, c.Nodes[0], queue)
	if err := c.Kill(dead); err != nil {
		t.Fatal(err)
	}
	alive := c.Nodes[0]
	if alive == dead {
		alive = c.Nodes[1]
	}
	var got int
	testenv.Eventually(t, time.Minute, "the queue's messages from a node alive", func() bool {
		conn, err := amqp091.Dial(alive.URL())
		if err != nil {
			return false
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil || !ok {
				return got == n
			}
			if string(d.Body) != fmt.Sprint(got) {
				t.Fatalf("message %d reads %q", got, d.Body)
			}
			got++
		}
	})
	if err := c.Restart(ctx, dead); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the restarted node back in the cluster", func() bool { return running(t, c, alive) == 3 })
}
