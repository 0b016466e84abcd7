package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
)

// loadTopology is one exchange carrying prefix.# to the queue q of type
// queueType, which dead-letters to {queue}.dlq, with the alternate
// exchange moenda declares by default; it returns q.
func loadTopology(t *testing.T, prefix, q, queueType string) (*topology.Topology, string) {
	t.Helper()
	top, err := topology.Build(topology.Config{
		QueueType: queueType,
		Unrouted:  "{exchange}.unrouted",
		Exchanges: []topology.ExchangeConfig{{Name: prefix, Events: []string{prefix + ".#"}}},
		Failure: topology.FailureConfig{ImmediateRetries: new(int), Delays: []time.Duration{},
			DeadLetter: topology.DeadLetterConfig{Exchange: prefix + ".dlx", Queue: "{queue}.dlq"}},
	}, []topology.Subscription{{Queue: q, Patterns: []string{prefix + ".#"}}})
	if err != nil {
		t.Fatal(err)
	}
	return top, q
}

// newMessages returns n messages with fresh ids, all with routing key
// prefix.tick.
func newMessages(prefix string, n int) ([]string, []*message.Message) {
	topics := make([]string, n)
	msgs := make([]*message.Message, n)
	for i := range n {
		topics[i] = prefix + ".tick"
		msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))
	}
	return topics, msgs
}

// connectedNode is the URL of the node the subscriber's connection is
// open to, or "" while it has none.
func (s *Subscriber) connectedNode() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.conn.IsClosed() {
		return ""
	}
	return s.node
}

// TestEveryClientWorksOnTheSecondNode: with a first node that refuses
// connections, every part of the Transport (Declare, the Subscriber, the
// destination, the failure sink, the readiness probe and the depths) works
// on the second.
func TestEveryClientWorksOnTheSecondNode(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	top, q := loadTopology(t, "load", "load", topology.Classic)
	everyClientWorksOnTheSecondNode(t, []string{deadURL(t, vhost.URL), vhost.URL}, top, q)
}

// everyClientWorksOnTheSecondNode checks every part of a Transport given
// urls, whose first node is away, on the second.
func everyClientWorksOnTheSecondNode(t *testing.T, urls []string, top *topology.Topology, q string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, err := NewTransport(Config{URLs: urls, Prefetch: 10}, transport.Settings{Topology: top, CloseTimeout: 5 * time.Second, ConfirmWindow: 8, Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	if err := tr.Declare(ctx); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	if err := tr.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	c, err := tr.Consumer()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Subscriber.Subscribe(ctx, q)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	pub, err := tr.Destination("moenda test relay")
	if err != nil {
		t.Fatal(err)
	}
	topics, msgs := newMessages("load", 10)
	if err := pub.PublishBatch(ctx, topics, msgs); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	seen := map[string]int{}
	var last *message.Message
	for len(seen) < len(msgs) {
		last = nextMessage(t, out)
		seen[last.UUID]++
		last.Ack()
	}
	for _, m := range msgs {
		if seen[m.UUID] == 0 {
			t.Fatalf("message %s published and never consumed", m.UUID)
		}
	}
	if got := c.Subscriber.(*Subscriber).connectedNode(); got != urls[1] {
		t.Fatalf("subscriber on %q, want the second node", got)
	}

	if err := c.Sink.DeadLetter(ctx, q, message.NewMessage(watermill.NewUUID(), []byte(`{}`))); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the dead letter in "+q+".dlq", func() bool {
		got, err := tr.Depths(ctx, []string{q + ".dlq", "missing"})
		if err != nil {
			t.Fatalf("Depths: %v", err)
		}
		if _, ok := got["missing"]; ok {
			t.Fatalf("Depths = %v: a queue that does not exist is left out", got)
		}
		return got[q+".dlq"] == 1
	})
}

// TestFailoverUnderLoad runs failoverUnderLoad with node 1 a proxy in
// front of the broker, node 2 the broker itself, and the proxy stopped.
func TestFailoverUnderLoad(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	proxy, node1 := proxyTo(t, "node1", vhost.URL)
	top, q := loadTopology(t, "load", "load", topology.Classic)
	failoverUnderLoad(t, []string{node1, vhost.URL}, top, q, proxy.Stop)
}

// TestFailoverUnderLoadOnACluster runs failoverUnderLoad on a cluster of
// three RabbitMQ nodes with a quorum queue, every client given the three
// nodes; node 1, where the queue was declared and its leader lives, is
// killed with SIGKILL. While it is down, every client of a Transport
// works on node 2 (everyClientWorksOnTheSecondNode). Then node 1 starts
// again and rejoins the cluster.
//
// A classic queue declared on node 1 lives there alone: while node 1 is
// down, the depth reader names it unavailable with RabbitMQ's reason, and
// the quorum queue not, and a batch routed to it comes back to be
// published again (RabbitMQ would confirm and drop it); once node 1 is
// back, the queue is served and takes the batch.
func TestFailoverUnderLoadOnACluster(t *testing.T) {
	c := testenv.RabbitCluster(t, 3)
	// Every wait is bounded, so that one the broker never ends fails here,
	// named, rather than at the package's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	classicTop, classic := loadTopology(t, "classic", "classic.on.node1", topology.Classic)
	if err := Declare(ctx, c.URLs()[:1], classicTop); err != nil {
		t.Fatal(err)
	}
	top, q := loadTopology(t, "load", "load", topology.Quorum)
	failoverUnderLoad(t, c.URLs(), top, q, func() {
		if err := c.Kill(c.Nodes[0]); err != nil {
			t.Error(err)
		}
	})
	depths, err := NewDepthReader(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = depths.Close() })
	states, err := depths.Queues([]string{classic, q})
	if err != nil || !strings.Contains(states[classic].Unavailable, "down or inaccessible") || states[q].Unavailable != "" {
		t.Fatalf("with node 1 down: %+v, %v; want %s unavailable, %s not", states, err, classic, q)
	}
	pub, err := NewBatchPublisher(c.URLs(), "moenda test relay", 8, classicTop)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	topics, msgs := newMessages("classic", 3)
	var partly *outbox.BatchError
	if err := pub.PublishBatch(ctx, topics, msgs); !errors.As(err, &partly) ||
		len(partly.Failed) != 3 || errors.Is(err, outbox.ErrRefused) {
		t.Fatalf("a batch routed to %s with its node down: %v; want each message named, to be sent again", classic, err)
	}
	// A queue of its own: the failover's subscriber still reads q.
	top, q = loadTopology(t, "load", "load.after", topology.Quorum)
	everyClientWorksOnTheSecondNode(t, c.URLs(), top, q)
	if err := c.Restart(ctx, c.Nodes[0]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "node 1 back in the cluster", func() bool {
		out, err := c.Ctl(ctx, c.Nodes[1], "cluster_status", "--formatter", "json")
		return err == nil && runningNodes(out) == 3
	})
	testenv.Eventually(t, time.Minute, classic+" available again", func() bool {
		states, err := depths.Queues([]string{classic})
		_, listed := states[classic]
		return err == nil && listed && states[classic].Unavailable == ""
	})
	if err := pub.PublishBatch(ctx, topics, msgs); err != nil {
		t.Fatalf("the batch again, node 1 back: %v", err)
	}
	states, err = depths.Queues([]string{classic})
	if err != nil || states[classic].Messages != len(msgs) {
		t.Fatalf("%s holds %+v (%v); want the %d messages of the batch", classic, states[classic], err, len(msgs))
	}
}

// runningNodes is how many nodes a cluster_status in JSON names running.
func runningNodes(status string) int {
	var s struct {
		Running []string `json:"running_nodes"`
	}
	if json.Unmarshal([]byte(status), &s) != nil {
		return 0
	}
	return len(s.Running)
}

// failoverUnderLoad publishes a steady stream through a BatchPublisher
// while a Subscriber consumes, both given urls, node 1 first. takeDown
// makes node 1 go away mid-stream: both move to node 2, as the readiness probe
// does, and every confirmed message is consumed. Messages in flight at
// the cut may arrive twice (a batch republished after its confirms were
// lost, a delivery whose ack was lost); none may be lost.
func failoverUnderLoad(t *testing.T, urls []string, top *topology.Topology, q string, takeDown func()) {
	ctx := context.Background()
	node1, node2 := urls[0], urls[1]
	if err := Declare(ctx, urls, top); err != nil {
		t.Fatal(err)
	}
	sub, err := NewSubscriber(urls, 50, 5*time.Second, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	out := subscribed(ctx, t, sub, q)
	pub, err := NewBatchPublisher(urls, "moenda test relay", 64, top)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	probeNodes, err := newNodes(urls)
	if err != nil {
		t.Fatal(err)
	}
	ready := &kept{nodes: probeNodes, name: "moenda readiness", dial: 2 * time.Second}
	t.Cleanup(func() { _ = ready.close() })
	if err := ready.check(context.Background()); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	deliveries := 0
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for msg := range out {
			mu.Lock()
			seen[msg.UUID]++
			deliveries++
			mu.Unlock()
			msg.Ack()
		}
	}()

	// The publisher sends batches of 20 every 5 ms, and a batch that
	// fails again after 50 ms with the same ids, as the relay does.
	var published []string
	var cutAt, movedAt time.Time
	var failed int
	stop := make(chan struct{})
	done := make(chan error, 1)
	cut := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
			topics, msgs := newMessages("load", 20)
			deadline := time.Now().Add(30 * time.Second)
			for {
				bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := pub.PublishBatch(bctx, topics, msgs)
				cancel()
				if err == nil {
					break
				}
				failed++
				if time.Now().After(deadline) {
					done <- fmt.Errorf("a batch still fails after 30 s: %w", err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			for _, m := range msgs {
				published = append(published, m.UUID)
			}
			select {
			case <-cut:
				if movedAt.IsZero() {
					movedAt = time.Now()
				}
			default:
			}
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(published)
	}

	testenv.Eventually(t, 20*time.Second, "2,000 messages confirmed on node 1", func() bool { return count() >= 2000 })
	if got := pub.nodes.current(); got != node1 {
		t.Fatalf("publisher on %s before the cut, want node 1 %s", got, node1)
	}
	if got := sub.connectedNode(); got != node1 {
		t.Fatalf("subscriber on %q before the cut, want node 1 %s", got, node1)
	}
	if got := ready.nodes.current(); got != node1 {
		t.Fatalf("probe on %s before the cut, want node 1 %s", got, node1)
	}
	beforeCut := count()
	mu.Lock()
	cutAt = time.Now()
	close(cut)
	mu.Unlock()
	takeDown() // node 1 goes away: its connections die, new ones are refused

	var subMoved time.Duration
	testenv.Eventually(t, 20*time.Second, "the subscriber on node 2", func() bool {
		if sub.connectedNode() == node2 {
			subMoved = time.Since(cutAt)
			return true
		}
		return false
	})
	testenv.Eventually(t, 10*time.Second, "the readiness probe ready on node 2", func() bool {
		return ready.check(context.Background()) == nil && ready.nodes.current() == node2
	})
	testenv.Eventually(t, 20*time.Second, "2,000 more messages confirmed on node 2", func() bool { return count() >= beforeCut+2000 })
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := pub.nodes.current(); got != node2 {
		t.Fatalf("publisher on %s after the cut, want node 2 %s", got, node2)
	}

	mu.Lock()
	all := slices.Clone(published)
	pubMoved := movedAt.Sub(cutAt)
	mu.Unlock()
	testenv.Eventually(t, 60*time.Second, "every confirmed message consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range all {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(500 * time.Millisecond) // late redeliveries count as duplicates
	mu.Lock()
	distinct, total := len(seen), deliveries
	mu.Unlock()
	lost := 0
	for _, id := range all {
		if seen[id] == 0 {
			lost++
		}
	}
	if lost != 0 {
		t.Fatalf("%d of %d confirmed messages lost", lost, len(all))
	}
	t.Logf("published %d (confirmed; %d before the cut), %d failed batch attempts; consumed %d distinct in %d deliveries: %d duplicates, 0 lost; "+
		"publisher confirmed on node 2 %v after the cut, subscriber on node 2 after %v",
		len(all), beforeCut, failed, distinct, total, total-distinct, pubMoved.Round(time.Millisecond), subMoved.Round(time.Millisecond))
}
