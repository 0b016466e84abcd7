package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/event"
)

// TestSubscriberUniversalPubSub runs Watermill's pub/sub test suite against
// Subscriber, with watermill-amqp's publisher publishing through the
// default exchange. Messages are handled concurrently, so order is not
// guaranteed and the suite's ordering tests (TestNoAck among them) are
// skipped. The suite makes up topics: declaringSubscriber declares each
// topic's queue, as Declare does for serve.
func TestSubscriberUniversalPubSub(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	logger := testenv.Logger()
	newPubSub := func(t *testing.T) (message.Publisher, message.Subscriber) {
		pub := newTestPublisher(t, vhost.URL)
		sub, err := NewSubscriber([]string{vhost.URL}, 50, time.Second, logger)
		if err != nil {
			t.Fatal(err)
		}
		return pub, declaringSubscriber{Subscriber: sub, url: vhost.URL}
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
	}, newPubSub, nil)
}

// declaringSubscriber declares a topic's durable queue when the suite asks
// (message.SubscribeInitializer); Subscriber itself declares nothing.
type declaringSubscriber struct {
	*Subscriber
	url string
}

func (s declaringSubscriber) SubscribeInitialize(topic string) error {
	conn, err := amqp091.Dial(s.url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(topic, true, false, false, false, nil)
	return err
}

// newTestPublisher is watermill-amqp's publisher with moenda's marshaler
// and confirms, publishing with routing key = topic to the default
// exchange, which routes to the queue of that name.
func newTestPublisher(t *testing.T, url string) message.Publisher {
	t.Helper()
	pub, err := wamqp.NewPublisher(wamqp.Config{
		Connection: wamqp.ConnectionConfig{
			AmqpURI:    url,
			AmqpConfig: &amqp091.Config{Properties: amqp091.Table{"connection_name": "moenda test publisher"}},
			Reconnect:  wamqp.DefaultReconnectConfig(),
		},
		Marshaler: Marshaler{},
		Exchange:  wamqp.ExchangeConfig{GenerateName: func(string) string { return "" }},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: func(topic string) string { return topic },
			ConfirmDelivery:    true,
			ChannelPoolSize:    4,
		},
		TopologyBuilder: &wamqp.DefaultTopologyBuilder{},
	}, watermill.NewSlogLogger(testenv.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestNewSubscriberValidates(t *testing.T) {
	for _, c := range []struct {
		url      string
		prefetch int
		want     string
	}{
		{"", 10, "url is empty"},
		{"http://127.0.0.1:5672/", 10, "url"},
		{"amqp://guest:guest@127.0.0.1:5672/", 0, "prefetch must be at least 1, got 0"},
	} {
		_, err := NewSubscriber([]string{c.url}, c.prefetch, time.Second, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSubscriber(%q, %d) = %v, want an error containing %q", c.url, c.prefetch, err, c.want)
		}
	}
}

func TestSubscriberSubscribeFailsClearly(t *testing.T) {
	t.Run("broker down", func(t *testing.T) {
		// Nothing listens on port 1.
		sub, err := NewSubscriber([]string{"amqp://guest:secret@127.0.0.1:1/"}, 1, time.Second, testenv.Logger())
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		_, err = sub.Subscribe(context.Background(), "orders")
		if err == nil || !strings.Contains(err.Error(), "connect to amqp://guest:xxxxx@127.0.0.1:1/") || strings.Contains(err.Error(), "secret") {
			t.Fatalf("Subscribe = %v, want a connection error naming the redacted URL", err)
		}
	})
	t.Run("queue missing", func(t *testing.T) {
		vhost := testenv.RabbitMQ(t)
		sub := newTestSubscriber(t, vhost.URL, 1)
		_, err := sub.Subscribe(context.Background(), "missing")
		var aerr *amqp091.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp091.NotFound || !strings.Contains(err.Error(), `queue "missing"`) {
			t.Fatalf("Subscribe = %v, want NOT_FOUND naming the queue", err)
		}
		// The failure closed only that channel: the connection still serves.
		q := declareTestQueue(t, vhost.URL)
		if _, err := sub.Subscribe(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		sub, err := NewSubscriber([]string{"amqp://guest:guest@127.0.0.1:5672/"}, 1, time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Subscribe(context.Background(), "orders"); !errors.Is(err, ErrSubscriberClosed) {
			t.Fatalf("Subscribe after Close = %v, want ErrSubscriberClosed", err)
		}
		if err := sub.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
	})
}

// TestSubscriberDispatchesConcurrently: with prefetch 10, ten messages are
// in the router's hands at once; with prefetch 2, never more than two.
func TestSubscriberDispatchesConcurrently(t *testing.T) {
	t.Run("prefetch 10", func(t *testing.T) {
		vhost := testenv.RabbitMQ(t)
		q := declareTestQueue(t, vhost.URL)
		publishMessages(t, vhost.URL, q, 10)
		allIn := make(chan struct{})
		var inHand atomic.Int32
		handled := make(chan string, 10)
		runRouter(t, newTestSubscriber(t, vhost.URL, 10), q, func(msg *message.Message) error {
			if inHand.Add(1) == 10 {
				close(allIn)
			}
			select {
			case <-allIn:
			case <-time.After(15 * time.Second):
				return errors.New("not all ten messages in hand at once")
			}
			handled <- msg.UUID
			return nil
		})
		select {
		case <-allIn:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 10 messages were in hand at once", inHand.Load())
		}
		receiveIDs(t, handled, 10)
	})
	t.Run("prefetch 2", func(t *testing.T) {
		vhost := testenv.RabbitMQ(t)
		q := declareTestQueue(t, vhost.URL)
		publishMessages(t, vhost.URL, q, 10)
		var inHand, most atomic.Int32
		handled := make(chan string, 10)
		runRouter(t, newTestSubscriber(t, vhost.URL, 2), q, func(msg *message.Message) error {
			n := inHand.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			inHand.Add(-1)
			handled <- msg.UUID
			return nil
		})
		receiveIDs(t, handled, 10)
		if got := most.Load(); got != 2 {
			t.Fatalf("at most %d messages were in hand at once, want 2 (the prefetch)", got)
		}
	})
}

// TestSubscriberStandAside holds the subscriber to prefetch messages in
// hand while the broker hands out more (StandAsideRoom), and shows a
// message waiting for its next attempt (transport.StandAside) lending its
// slot to the next delivery, then taking one back once one is free.
func TestSubscriberStandAside(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	ids := publishMessages(t, vhost.URL, q, 4)
	sub, err := NewSubscriber([]string{vhost.URL}, 2, 5*time.Second, testenv.Logger(), StandAsideRoom(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	out, _ := cancellable(t, sub, q)
	first, second := nextMessage(t, out), nextMessage(t, out)
	// The broker may send all four (prefetch 2 and room 2); two are in hand.
	select {
	case msg := <-out:
		t.Fatalf("message %s handed out with the prefetch's two in hand", msg.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	waiting, back := make(chan struct{}), make(chan error, 1)
	go func() {
		back <- transport.StandAside(first.Context(), func() error { <-waiting; return nil })
	}()
	third := nextMessage(t, out) // in the first's place
	close(waiting)
	select {
	case err := <-back:
		t.Fatalf("the first message took a slot back (%v) while the second and third held both", err)
	case msg := <-out:
		t.Fatalf("message %s handed out with two in hand", msg.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	third.Ack()
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-out:
		t.Fatalf("message %s handed out in the place the first took back", msg.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	first.Ack()
	second.Ack()
	fourth := nextMessage(t, out)
	fourth.Ack()
	seen := map[string]bool{}
	for _, m := range []*message.Message{first, second, third, fourth} {
		seen[m.UUID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("message %s not handed out; got %v", id, seen)
		}
	}
}

// TestSubscriberStandAsideOnAnIdleQueue: a message that stood aside comes
// back whether or not another delivery comes meanwhile.
func TestSubscriberStandAsideOnAnIdleQueue(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	publishMessages(t, vhost.URL, q, 1)
	sub, err := NewSubscriber([]string{vhost.URL}, 1, 5*time.Second, testenv.Logger(), StandAsideRoom(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	out, _ := cancellable(t, sub, q)
	msg := nextMessage(t, out)
	back := make(chan error, 1)
	go func() {
		back <- transport.StandAside(msg.Context(), func() error { time.Sleep(50 * time.Millisecond); return nil })
	}()
	select {
	case err := <-back:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message did not come back to its slot on an idle queue")
	}
	msg.Ack()
}

// subscribedWithLogs subscribes to a fresh queue in a fresh vhost with
// prefetch 10, counting the subscriber's log lines by level.
func subscribedWithLogs(t *testing.T) (testenv.VHost, string, *levelCounter, <-chan *message.Message) {
	t.Helper()
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	logs := &levelCounter{Handler: testenv.Logger().Handler(), counts: map[slog.Level]int{}}
	sub, err := NewSubscriber([]string{vhost.URL}, 10, 5*time.Second, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	out := subscribed(context.Background(), t, sub, q)
	return vhost, q, logs, out
}

// TestSubscriberReconnects closes the subscriber's connection from the
// broker's side: every message published before and after arrives, the
// one in hand during the loss comes again (its ack cannot reach the
// closed channel), and the loss is logged once as a warning and the
// recovery once.
func TestSubscriberReconnects(t *testing.T) {
	vhost, q, logs, out := subscribedWithLogs(t)

	before := publishMessages(t, vhost.URL, q, 20)
	seen := map[string]int{}
	var held *message.Message
	for len(seen) < len(before) {
		msg := nextMessage(t, out)
		seen[msg.UUID]++
		if held == nil {
			held = msg // acked only after the connection is lost
			continue
		}
		msg.Ack()
	}

	testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", vhost.Name, "test")
	// Once the loss is seen, the ack below can only fail.
	testenv.Eventually(t, 10*time.Second, "the loss to be logged", func() bool { return logs.count(slog.LevelWarn) > 0 })
	select {
	case <-held.Context().Done():
		t.Fatal("the message context ended on connection loss; it should last as long as the subscription")
	default:
	}
	held.Ack()
	after := publishMessages(t, vhost.URL, q, 20)

	heldAgain := false
	for !heldAgain || !allSeen(seen, after) {
		msg := nextMessage(t, out)
		if msg.UUID == held.UUID {
			heldAgain = true
		}
		seen[msg.UUID]++
		msg.Ack()
	}
	if !allSeen(seen, before) {
		t.Fatal("a message published before the loss never arrived")
	}
	if w, i := logs.count(slog.LevelWarn), logs.count(slog.LevelInfo); w != 1 || i != 1 {
		t.Fatalf("logged %d warnings and %d infos, want one of each", w, i)
	}
}

// TestSubscriberRetriesUntilBrokerAccepts: while the broker refuses the
// connection, the subscriber keeps redialing with backoff, logging the
// loss once, and consumes again once it is let in.
func TestSubscriberRetriesUntilBrokerAccepts(t *testing.T) {
	vhost, q, logs, out := subscribedWithLogs(t)

	testenv.Rabbitmqctl(t, "clear_permissions", "-p", vhost.Name, "guest")
	testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", vhost.Name, "test")
	testenv.Eventually(t, 10*time.Second, "the loss to be logged", func() bool { return logs.count(slog.LevelWarn) > 0 })
	time.Sleep(time.Second) // several refused attempts: 100, 200, 400 ms apart
	testenv.Rabbitmqctl(t, "set_permissions", "-p", vhost.Name, "guest", ".*", ".*", ".*")

	ids := publishMessages(t, vhost.URL, q, 5)
	seen := map[string]int{}
	ackUntilSeen(t, out, ids, seen)
	if w, i := logs.count(slog.LevelWarn), logs.count(slog.LevelInfo); w != 1 || i != 1 {
		t.Fatalf("logged %d warnings and %d infos, want one of each", w, i)
	}
}

// TestSubscriberConsumesAgainAfterCancel: when the broker cancels the
// consumer (its queue was deleted) on a channel that stays open, the
// subscriber retries until the queue is back.
func TestSubscriberConsumesAgainAfterCancel(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub := newTestSubscriber(t, vhost.URL, 10)
	out := subscribed(context.Background(), t, sub, q)
	ch := testenv.Channel(t, vhost.URL)
	if _, err := ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a few attempts fail with NOT_FOUND
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ids := publishMessages(t, vhost.URL, q, 3)
	seen := map[string]int{}
	ackUntilSeen(t, out, ids, seen)
}

// TestSubscriberCloseWhileAcking closes a subscriber while its handlers
// ack concurrently: Close returns, the output channel closes, and a second
// subscriber receives whatever the first left unacked.
func TestSubscriberCloseWhileAcking(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	ids := publishMessages(t, vhost.URL, q, 300)
	var mu sync.Mutex
	seen := map[string]int{}
	// consume hands each message to a handler goroutine that acks after a
	// short, varying delay, and closes the subscriber once done says so.
	consume := func(done func(received int) bool) {
		sub, err := NewSubscriber([]string{vhost.URL}, 50, 5*time.Second, testenv.Logger())
		if err != nil {
			t.Fatal(err)
		}
		out := subscribed(context.Background(), t, sub, q)
		var handlers sync.WaitGroup
		closed := make(chan error, 1)
		received := 0
		for msg := range out {
			mu.Lock()
			seen[msg.UUID]++
			mu.Unlock()
			delay := time.Duration(received%7) * time.Millisecond
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				time.Sleep(delay)
				msg.Ack()
			}()
			if received++; done(received) {
				go func() { closed <- sub.Close() }()
				done = func(int) bool { return false }
			}
		}
		handlers.Wait()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	}
	consume(func(received int) bool { return received == 100 })
	consume(func(int) bool {
		mu.Lock()
		defer mu.Unlock()
		return allSeen(seen, ids)
	})
}

// TestSubscriberNackRequeues: a nacked message comes back, and an ack
// given just before Close still reaches the broker.
func TestSubscriberNackRequeues(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub := newTestSubscriber(t, vhost.URL, 5)
	out := subscribed(context.Background(), t, sub, q)
	id := publishMessages(t, vhost.URL, q, 1)[0]

	first := nextMessage(t, out)
	first.Nack()
	select {
	case <-first.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("message context did not end after Nack")
	}
	again := nextMessage(t, out)
	if first.UUID != id || again.UUID != id {
		t.Fatalf("got %s then %s, want %s twice", first.UUID, again.UUID, id)
	}
	again.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-out; open {
		t.Fatal("output channel still open after Close")
	}
	if n := testenv.ReadyMessages(t, vhost.URL, q); n != 0 {
		t.Fatalf("%d messages left in the queue after the ack and Close, want 0", n)
	}
}

// TestSubscriberEndsWithContext: cancelling Subscribe's context closes the
// output channel at once, while the message in hand keeps its context and
// its ack, given after the cancel, still reaches the broker: nothing comes
// again.
func TestSubscriberEndsWithContext(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub := newTestSubscriber(t, vhost.URL, 5)
	out, cancel := cancellable(t, sub, q)
	publishMessages(t, vhost.URL, q, 1)
	msg := nextMessage(t, out)
	cancel()
	select {
	case _, open := <-out:
		if open {
			t.Fatal("a message arrived after the subscription ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("output channel not closed after the context ended")
	}
	select {
	case <-msg.Context().Done():
		t.Fatal("the context of the message in hand ended with the subscription")
	case <-time.After(200 * time.Millisecond):
	}
	msg.Ack()
	select {
	case <-msg.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("message context did not end after Ack")
	}
	if n := testenv.ReadyMessages(t, vhost.URL, q); n != 0 {
		t.Fatalf("%d messages back in the queue after the ack, want 0", n)
	}
	expectNothing(t, sub, q, 500*time.Millisecond)
}

// TestSubscriberCloseLetsHandlersFinish: a router handler waits 500 ms on
// its message's context, then records the message; the router closes
// 100 ms into it. The context is not cancelled, the handler finishes, its
// ack reaches the broker, and a new subscriber receives nothing.
func TestSubscriberCloseLetsHandlersFinish(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub, err := NewSubscriber([]string{vhost.URL}, 5, 5*time.Second, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	handle, started, finished := testenv.WaitingHandler(500 * time.Millisecond)
	r, done := testenv.Router(t, sub, q, 5*time.Second, handle)
	publishMessages(t, vhost.URL, q, 1)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("the handler did not start")
	}
	time.Sleep(100 * time.Millisecond)
	at := time.Now()
	if err := r.Close(); err != nil {
		t.Fatalf("router Close: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("the handler's context ended %s after the close: %v", time.Since(at).Round(time.Millisecond), err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := testenv.ReadyMessages(t, vhost.URL, q); n != 0 {
		t.Fatalf("%d messages back in the queue after the handler acked, want 0", n)
	}
	expectNothing(t, newTestSubscriber(t, vhost.URL, 5), q, 500*time.Millisecond)
}

// TestSubscriberGraceIsBounded: with a close timeout of 1 s, the context
// of a message whose handler never answers on its own ends at nine tenths
// of it; a handler that then nacks has its message requeued, and Close
// returns within the close timeout even while another handler never
// answers at all, whose message the broker redelivers.
func TestSubscriberGraceIsBounded(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub, err := NewSubscriber([]string{vhost.URL}, 5, time.Second, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	out := subscribed(context.Background(), t, sub, q)
	ids := publishMessages(t, vhost.URL, q, 2)
	polite, deaf := nextMessage(t, out), nextMessage(t, out) // deaf is never answered
	_ = deaf
	ended := make(chan time.Duration, 1)
	at := time.Now()
	go func() {
		<-polite.Context().Done()
		ended <- time.Since(at)
		polite.Nack()
	}()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(at)
	if took > 1300*time.Millisecond {
		t.Fatalf("Close took %s, want at most the close timeout of 1s", took)
	}
	if d := <-ended; d < 800*time.Millisecond || d > 1100*time.Millisecond {
		t.Fatalf("the message's context ended %s after Close began, want about 900ms", d)
	}
	again := newTestSubscriber(t, vhost.URL, 5)
	out, err = again.Subscribe(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for !allSeen(seen, ids) {
		msg := nextMessage(t, out)
		seen[msg.UUID]++
		if msg.Metadata.Get(event.MetaRedelivered) != "true" {
			t.Errorf("message %s came again without %s", msg.UUID, event.MetaRedelivered)
		}
		msg.Ack()
	}
}

// TestSubscriberStopsTakingAtOnce: once a subscription ends, the
// deliveries the broker had sent it that were not handed out go back to
// the queue at once, and another consumer handles them while the first
// still holds its message in hand.
func TestSubscriberStopsTakingAtOnce(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub := newTestSubscriber(t, vhost.URL, 10)
	out, cancel := cancellable(t, sub, q)
	ids := publishMessages(t, vhost.URL, q, 10)
	held := nextMessage(t, out) // the others wait in the subscriber
	time.Sleep(200 * time.Millisecond)
	cancel()
	other := newTestSubscriber(t, vhost.URL, 10)
	out2 := subscribed(context.Background(), t, other, q)
	seen := map[string]int{held.UUID: 1}
	ackUntilSeen(t, out2, ids, seen)
	if seen[held.UUID] != 1 {
		t.Fatalf("the message in hand was delivered again while its handler held it")
	}
	select {
	case <-held.Context().Done():
		t.Fatal("the context of the message in hand ended before its grace period")
	default:
	}
	held.Ack()
}

// expectNothing subscribes to queue with sub and fails if a message comes
// within d.
func expectNothing(t *testing.T, sub *Subscriber, queue string, d time.Duration) {
	t.Helper()
	out, cancel := cancellable(t, sub, queue)
	defer cancel()
	select {
	case msg, ok := <-out:
		if ok {
			t.Fatalf("message %s delivered again", msg.UUID)
		}
	case <-time.After(d):
	}
}

func newTestSubscriber(t *testing.T, url string, prefetch int) *Subscriber {
	t.Helper()
	sub, err := NewSubscriber([]string{url}, prefetch, 5*time.Second, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sub.Close(); err != nil {
			t.Error(err)
		}
	})
	return sub
}

func declareTestQueue(t *testing.T, url string) string {
	t.Helper()
	name := testenv.Name("orders")
	if _, err := testenv.Channel(t, url).QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return name
}

// publish publishes n messages to queue through the default exchange on a
// connection of its own, waits for the broker's confirms, and returns
// their ids.
func publishMessages(t *testing.T, url, queue string, n int) []string {
	t.Helper()
	ch := testenv.Channel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	confirms := make([]*amqp091.DeferredConfirmation, n)
	for i := range n {
		ids[i] = watermill.NewUUID()
		pub, err := Marshaler{}.Marshal(message.NewMessage(ids[i], fmt.Appendf(nil, `{"n":%d}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		if confirms[i], err = ch.PublishWithDeferredConfirm("", queue, false, false, pub); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range confirms {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := c.WaitContext(ctx)
		cancel()
		if err != nil || !ok {
			t.Fatalf("publish not confirmed: ok=%v err=%v", ok, err)
		}
	}
	return ids
}

// cancellable subscribes sub to queue with a context that the returned
// cancel ends, or the test's end.
func cancellable(t *testing.T, sub message.Subscriber, queue string) (<-chan *message.Message, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return subscribed(ctx, t, sub, queue), cancel
}

// subscribed subscribes sub to queue with ctx, failing the test on an
// error.
func subscribed(ctx context.Context, t *testing.T, sub message.Subscriber, queue string) <-chan *message.Message {
	t.Helper()
	out, err := sub.Subscribe(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nextMessage(t *testing.T, out <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-out:
		if !ok {
			t.Fatal("output channel closed")
		}
		return msg
	case <-time.After(15 * time.Second):
		t.Fatal("no message within 15s")
	}
	return nil
}

func receiveIDs(t *testing.T, ids <-chan string, n int) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case id := <-ids:
			seen[id] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("handled %d of %d messages", len(seen), n)
		}
	}
}

// ackUntilSeen acks the messages of out until each of ids has come,
// counting in seen how often each message came.
func ackUntilSeen(t *testing.T, out <-chan *message.Message, ids []string, seen map[string]int) {
	t.Helper()
	for !allSeen(seen, ids) {
		msg := nextMessage(t, out)
		seen[msg.UUID]++
		msg.Ack()
	}
}

func allSeen(seen map[string]int, ids []string) bool {
	for _, id := range ids {
		if seen[id] == 0 {
			return false
		}
	}
	return true
}

// runRouter runs a Watermill router with one handler consuming queue, as
// serve does, until the test ends.
func runRouter(t *testing.T, sub message.Subscriber, queue string, handle message.NoPublishHandlerFunc) {
	t.Helper()
	r, done := testenv.Router(t, sub, queue, 5*time.Second, handle)
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// levelCounter counts records per level and passes them on. Records of
// loggers made with With or WithGroup are not counted; Subscriber makes
// none.
type levelCounter struct {
	slog.Handler
	mu     sync.Mutex
	counts map[slog.Level]int
}

func (h *levelCounter) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Level]++
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h *levelCounter) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[l]
}
