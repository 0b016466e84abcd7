// Package transporttest is the conformance suite every transport passes:
// each broker's adapter runs it from its own tests, with a Subject made
// for each case, as Watermill's tests.TestPubSub does for its Pub/Subs.
package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/event"
)

// Subject is one transport under test, made for one case, on a broker (a
// vhost, a cluster) of the case's own.
type Subject struct {
	Transport transport.Transport
}

// Features says what a transport does beyond what every one does.
type Features struct {
	// Depths: the broker counts what waits in a queue and who reads it
	// (else Depths and Queues answer transport.ErrNoDepths).
	Depths bool
	// Unreachable makes the transport of a broker that does not answer;
	// nil for one that cannot be away (in the process).
	Unreachable func(t *testing.T, top *topology.Topology, queues []string) transport.Transport
}

// NewSubject makes the Subject of one case, carrying top, whose consumed
// queues are queues.
type NewSubject func(t *testing.T, top *topology.Topology, queues []string) Subject

// retryDelay is the one retry tier of every queue of the suite.
const retryDelay = time.Second

// wait bounds every wait of the suite: long for a busy machine, never
// reached when the transport works.
const wait = 30 * time.Second

// Run runs every case against the subjects newSubject makes. Each case
// has names of its own, so that the subjects of one test may share a
// broker.
func Run(t *testing.T, f Features, newSubject NewSubject) {
	cases := []struct {
		name string
		run  func(t *testing.T, f Features, l layout, s Subject)
	}{
		{"a destination's confirmed messages reach the queues bound to them", testConsume},
		{"a delayed copy comes back to its queue after its delay", testDelay},
		{"a dead letter reaches the queue's dead letters", testDeadLetter},
		{"a redelivered copy reaches its queue alone", testRedeliver},
		{"readiness", testReady},
		{"closing ends the subscriptions", testClose},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLayout(t, fmt.Sprintf("conformance-%d-%d", time.Now().UnixNano()%1e6, i))
			c.run(t, f, l, newSubject(t, l.top, []string{l.all, l.some}))
		})
	}
}

// layout is a case's topology: one exchange for demo.* events; queue all
// takes every one of them, queue some only demo.a, and each has a retry
// tier of retryDelay and a dead-letter queue.
type layout struct {
	top       *topology.Topology
	all, some string
}

func newLayout(t *testing.T, prefix string) layout {
	t.Helper()
	l := layout{all: prefix + ".all", some: prefix + ".some"}
	cfg := topology.DefaultConfig()
	cfg.Exchanges = []topology.ExchangeConfig{{Name: prefix, Events: []string{"demo.*"}}}
	cfg.Failure.Delays = []time.Duration{retryDelay}
	cfg.Failure.DeadLetter = topology.DeadLetterConfig{Exchange: prefix + ".dlx", Queue: "{queue}.dlq"}
	var err error
	l.top, err = topology.Build(cfg, []topology.Subscription{
		{Queue: l.all, Patterns: []string{"demo.*"}},
		{Queue: l.some, Patterns: []string{"demo.a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// messages returns n events of each name as messages, and their routing
// keys.
func messages(t *testing.T, n int, names ...string) ([]string, []*message.Message) {
	t.Helper()
	var keys []string
	var msgs []*message.Message
	for _, name := range names {
		for i := range n {
			e, err := event.New(name, "conformance", map[string]int{"n": i})
			if err != nil {
				t.Fatal(err)
			}
			msg, err := event.ToMessage(e)
			if err != nil {
				t.Fatal(err)
			}
			keys, msgs = append(keys, e.RoutingKey()), append(msgs, msg)
		}
	}
	return keys, msgs
}

// declared declares s's topology and returns its consumer.
func declared(t *testing.T, s Subject) transport.Consumer {
	t.Helper()
	t.Cleanup(func() { _ = s.Transport.Close() })
	if err := s.Transport.Declare(context.Background()); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	c, err := s.Transport.Consumer()
	if err != nil {
		t.Fatalf("Consumer: %v", err)
	}
	return c
}

// subscribe reads queue until the test ends.
func subscribe(t *testing.T, sub message.Subscriber, queue string) <-chan *message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, err := sub.Subscribe(ctx, queue)
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", queue, err)
	}
	return out
}

// publish publishes msgs through a destination of s.
func publish(t *testing.T, s Subject, keys []string, msgs []*message.Message) {
	t.Helper()
	dest, err := s.Transport.Destination("moenda conformance")
	if err != nil {
		t.Fatalf("Destination: %v", err)
	}
	if err := dest.PublishBatch(context.Background(), keys, msgs); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	if why := dest.Blocked(); why != "" {
		t.Fatalf("Blocked = %q on a broker with no alarm", why)
	}
}

// collect acks what out delivers until it holds every id of want, and
// fails on an id outside want.
func collect(t *testing.T, out <-chan *message.Message, queue string, want []*message.Message) {
	t.Helper()
	missing := map[string]bool{}
	for _, m := range want {
		missing[m.UUID] = true
	}
	expected := idSet(want)
	deadline := time.After(wait)
	for len(missing) > 0 {
		select {
		case msg, ok := <-out:
			if !ok {
				t.Fatalf("%s: the subscription closed with %d messages missing", queue, len(missing))
			}
			if !expected[msg.UUID] {
				t.Fatalf("%s: got message %s (%s), which its bindings do not route here", queue, msg.UUID, msg.Metadata.Get(event.MetaName))
			}
			delete(missing, msg.UUID)
			msg.Ack()
		case <-deadline:
			t.Fatalf("%s: %d of %d messages not delivered in %s", queue, len(missing), len(want), wait)
		}
	}
}

func idSet(msgs []*message.Message) map[string]bool {
	set := map[string]bool{}
	for _, m := range msgs {
		set[m.UUID] = true
	}
	return set
}

func testConsume(t *testing.T, _ Features, l layout, s Subject) {
	c := declared(t, s)
	all := subscribe(t, c.Subscriber, l.all)
	some := subscribe(t, c.Subscriber, l.some)
	keys, msgs := messages(t, 10, "demo.a.v1", "demo.b.v1")
	publish(t, s, keys, msgs)
	collect(t, all, l.all, msgs)
	collect(t, some, l.some, slices.DeleteFunc(slices.Clone(msgs), func(m *message.Message) bool {
		return m.Metadata.Get(event.MetaName) != "demo.a.v1"
	}))
}

func testDelay(t *testing.T, _ Features, l layout, s Subject) {
	c := declared(t, s)
	out := subscribe(t, c.Subscriber, l.all)
	_, msgs := messages(t, 1, "demo.a.v1")
	sent := time.Now()
	if err := c.Sink.Delay(context.Background(), l.all, retryDelay, msgs[0]); err != nil {
		t.Fatalf("Delay: %v", err)
	}
	collect(t, out, l.all, msgs)
	// A broker's timer may fire a little early by the test's clock: a
	// tenth of the delay is tolerance, not a second tier.
	if took := time.Since(sent); took < retryDelay-retryDelay/10 {
		t.Fatalf("the copy came back after %s, before its delay of %s", took, retryDelay)
	}
}

func testDeadLetter(t *testing.T, f Features, l layout, s Subject) {
	c := declared(t, s)
	pol, ok := l.top.Policy(l.some)
	if !ok || pol.DeadLetterQueue == "" {
		t.Fatalf("the layout gives %s no dead-letter queue", l.some)
	}
	_, msgs := messages(t, 1, "demo.a.v1")
	msgs[0].Metadata.Set(event.HeaderReason, "conformance")
	if err := c.Sink.DeadLetter(context.Background(), l.some, msgs[0]); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	if f.Depths {
		deadline := time.Now().Add(wait)
		for {
			got, err := s.Transport.Depths(context.Background(), []string{pol.DeadLetterQueue, l.all + ".absent"})
			if err != nil {
				t.Fatalf("Depths: %v", err)
			}
			if _, ok := got[l.all+".absent"]; ok {
				t.Fatalf("Depths = %v: a queue that does not exist is left out", got)
			}
			if got[pol.DeadLetterQueue] == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Depths = %v, want 1 in %s", got, pol.DeadLetterQueue)
			}
			time.Sleep(50 * time.Millisecond)
		}
		got, err := s.Transport.Queues(context.Background(), []string{pol.DeadLetterQueue, l.all + ".absent"})
		if want := (transport.QueueState{Messages: 1}); err != nil || len(got) != 1 || got[pol.DeadLetterQueue] != want {
			t.Fatalf("Queues = %v, %v; want %s alone, with %+v (nothing reads it yet)", got, err, pol.DeadLetterQueue, want)
		}
	} else {
		if _, err := s.Transport.Depths(context.Background(), []string{pol.DeadLetterQueue}); !errors.Is(err, transport.ErrNoDepths) {
			t.Fatalf("Depths error = %v, want transport.ErrNoDepths from a broker that counts none", err)
		}
		if _, err := s.Transport.Queues(context.Background(), []string{pol.DeadLetterQueue}); !errors.Is(err, transport.ErrNoDepths) {
			t.Fatalf("Queues error = %v, want transport.ErrNoDepths from a broker that counts none", err)
		}
	}
	dead, err := s.Transport.DeadLetters()
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	out := subscribe(t, dead, pol.DeadLetterQueue)
	// Handed back once, as the failure ledger does with a batch it could
	// not record, the dead letter comes again, headers and all.
	for i, ack := range []bool{false, true} {
		select {
		case msg := <-out:
			if msg.UUID != msgs[0].UUID || string(msg.Payload) != string(msgs[0].Payload) {
				t.Fatalf("dead letter %s %q, want %s %q", msg.UUID, msg.Payload, msgs[0].UUID, msgs[0].Payload)
			}
			if got := msg.Metadata.Get(event.HeaderReason); got != "conformance" {
				t.Fatalf("dead letter's %s = %q: its headers are lost", event.HeaderReason, got)
			}
			if ack {
				msg.Ack()
			} else {
				msg.Nack()
			}
		case <-time.After(wait):
			t.Fatalf("reading %d: no dead letter in %s after %s", i+1, pol.DeadLetterQueue, wait)
		}
	}
}

// A re-drive's copy goes to the one queue that failed: some gets it, and
// all, bound to the same events, does not. A message published after it
// to all shows all was reading meanwhile.
func testRedeliver(t *testing.T, _ Features, l layout, s Subject) {
	c := declared(t, s)
	toAll := subscribe(t, c.Subscriber, l.all)
	toSome := subscribe(t, c.Subscriber, l.some)
	_, copies := messages(t, 1, "demo.a.v1")
	if err := c.Sink.Redeliver(context.Background(), l.some, copies[0]); err != nil {
		t.Fatalf("Redeliver: %v", err)
	}
	if err := c.Sink.Redeliver(context.Background(), l.all+".absent", copies[0]); err == nil {
		t.Fatal("Redeliver to a queue no subscription consumes: no error")
	}
	collect(t, toSome, l.some, copies)
	keys, marker := messages(t, 1, "demo.b.v1")
	publish(t, s, keys, marker)
	collect(t, toAll, l.all, marker) // fails on the copy, an id outside marker
}

func testReady(t *testing.T, f Features, l layout, s Subject) {
	t.Cleanup(func() { _ = s.Transport.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Transport.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if f.Unreachable == nil {
		return
	}
	away := f.Unreachable(t, l.top, []string{l.all, l.some})
	t.Cleanup(func() { _ = away.Close() })
	// The parts of a transport connect on first use: a process starts
	// while its broker is away.
	if _, err := away.Consumer(); err != nil {
		t.Fatalf("Consumer of a broker that is away: %v", err)
	}
	if _, err := away.Destination("moenda conformance"); err != nil {
		t.Fatalf("Destination of a broker that is away: %v", err)
	}
	began := time.Now()
	err := away.Ready(ctx)
	if err == nil {
		t.Fatal("Ready = nil from a broker that does not answer")
	}
	if ctx.Err() != nil {
		t.Fatalf("Ready took until its context ended (%s): %v", time.Since(began), err)
	}
	if err.Error() == "" {
		t.Fatal("Ready's error says nothing")
	}
	t.Logf("away: %v", err)
}

func testClose(t *testing.T, _ Features, l layout, s Subject) {
	c := declared(t, s)
	out := subscribe(t, c.Subscriber, l.all)
	if err := s.Transport.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case _, ok := <-out:
		if ok {
			t.Fatal("a message arrived from a closed transport, with nothing published")
		}
	case <-time.After(wait):
		t.Fatalf("the subscription still open %s after Close", wait)
	}
}
