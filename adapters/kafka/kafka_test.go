package kafka_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// layout is one exchange carrying tarefa.* events, read by the queues
// given, each bound to #.
func layout(t *testing.T, queues ...string) *topology.Topology {
	t.Helper()
	cfg := topology.DefaultConfig()
	cfg.Exchanges = []topology.ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.*"}}}
	var subs []topology.Subscription
	for _, q := range queues {
		subs = append(subs, topology.Subscription{Queue: q, Patterns: []string{"#"}})
	}
	top, err := topology.Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// publish publishes n events through the relay's destination and returns
// their ids.
func publish(t *testing.T, p *kafka.Producer, n int) []string {
	t.Helper()
	var ids []string
	for sent := 0; sent < n; sent += 100 {
		var keys []string
		var msgs []*message.Message
		for i := sent; i < min(n, sent+100); i++ {
			e, err := event.New("tarefa.concluida.v1", "test", map[string]int{"tarefa_id": i})
			if err != nil {
				t.Fatal(err)
			}
			e.AggregateID = fmt.Sprint(i % 7)
			msg, err := event.ToMessage(e)
			if err != nil {
				t.Fatal(err)
			}
			keys, msgs, ids = append(keys, e.RoutingKey()), append(msgs, msg), append(ids, e.ID)
		}
		if err := p.PublishBatch(context.Background(), keys, msgs); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// subscribe subscribes a subscriber of group to queue, closed when the
// test ends if not before; closeTimeout is the subscriber's.
func subscribe(t *testing.T, cfg kafka.Config, top *topology.Topology, queue, group string, closeTimeout time.Duration) (*kafka.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := kafka.NewSubscriber(cfg, top, func(string) string { return group }, closeTimeout, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	ch, err := sub.Subscribe(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return sub, ch
}

// first waits a minute at most for ch's first message.
func first(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg := <-ch:
		return msg
	case <-time.After(time.Minute):
		t.Fatal("no message within a minute")
		return nil
	}
}

// reader consumes a queue in a group and records the ids it acknowledged.
type reader struct {
	sub  *kafka.Subscriber
	mu   sync.Mutex
	seen map[string]int
}

func read(t *testing.T, cfg kafka.Config, top *topology.Topology, queue, group string, handle func(*message.Message)) *reader {
	t.Helper()
	sub, ch := subscribe(t, cfg, top, queue, group, 5*time.Second)
	r := &reader{sub: sub, seen: map[string]int{}}
	go func() {
		for msg := range ch {
			if handle != nil {
				handle(msg)
			}
			r.mu.Lock()
			r.seen[msg.UUID]++
			r.mu.Unlock()
			msg.Ack()
		}
	}()
	return r
}

func (r *reader) has(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.seen[id] == 0 {
			return false
		}
	}
	return true
}

func (r *reader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func producer(t *testing.T, cfg kafka.Config, top *topology.Topology, queues ...string) *kafka.Producer {
	t.Helper()
	p, err := kafka.NewProducer(cfg, top, kafka.Topics(top, queues), "test", testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestEveryGroupReadsEveryEventFromTheStart(t *testing.T) {
	k := testenv.Kafka(t)
	top := layout(t, "analytics.metricas", "auditoria.arquivo")
	ids := publish(t, producer(t, k.Config, top), 300)

	a := read(t, k.Config, top, "analytics.metricas", "analytics", nil)
	b := read(t, k.Config, top, "auditoria.arquivo", "auditoria", nil)
	testenv.Eventually(t, time.Minute, "both groups to read all 300 events", func() bool { return a.has(ids) && b.has(ids) })

	// A group that did not exist when the events were published still
	// starts at the oldest record (auto.offset.reset=earliest).
	late := read(t, k.Config, top, "analytics.metricas", "analytics-late", nil)
	testenv.Eventually(t, time.Minute, "a group created afterwards to read all 300", func() bool { return late.has(ids) })
}

func TestAGroupMemberStoppingLosesNothing(t *testing.T) {
	k := testenv.Kafka(t)
	top := layout(t, "analytics.metricas")
	ids := publish(t, producer(t, k.Config, top), 600)

	var processed sync.Map
	slow := func(msg *message.Message) { time.Sleep(time.Millisecond); processed.Store(msg.UUID, true) }
	a := read(t, k.Config, top, "analytics.metricas", "analytics", slow)
	b := read(t, k.Config, top, "analytics.metricas", "analytics", slow)
	// The member that stops is the first to process 100 events, whichever
	// it is: the events are keyed by 7 aggregates over 3 partitions, and a
	// member that joined with its peer may be given one partition holding
	// fewer than 100.
	var stopping, staying *reader
	testenv.Eventually(t, time.Minute, "a member to process 100 events", func() bool {
		switch {
		case a.count() >= 100:
			stopping, staying = a, b
		case b.count() >= 100:
			stopping, staying = b, a
		}
		return stopping != nil
	})
	if err := stopping.sub.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "every published event processed", func() bool {
		for _, id := range ids {
			if _, ok := processed.Load(id); !ok {
				return false
			}
		}
		return true
	})
	n := 0
	processed.Range(func(any, any) bool { n++; return true })
	if n != len(ids) {
		t.Fatalf("processed %d distinct events, published %d", n, len(ids))
	}
	t.Logf("the member that stopped processed %d before it did, the other %d", stopping.count(), staying.count())
}

func TestConfigValidate(t *testing.T) {
	ok := kafka.DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	tests := []struct {
		name string
		edit func(*kafka.Config)
		want string
	}{
		{"no brokers", func(c *kafka.Config) { c.Brokers = nil }, "kafka.brokers is empty"},
		{"no port", func(c *kafka.Config) { c.Brokers = []string{"kafka"} }, `kafka.brokers[0] "kafka" must be host:port`},
		{"embedded elsewhere", func(c *kafka.Config) { c.Embedded, c.Brokers = true, []string{"kafka:9092"} }, "kafka.embedded listens on this machine only"},
		{"embedded twice", func(c *kafka.Config) { c.Embedded, c.Brokers = true, []string{"127.0.0.1:1", "127.0.0.1:2"} }, "list exactly one address, got 2"},
		{"no partitions", func(c *kafka.Config) { c.Partitions = 0 }, "kafka.partitions must be at least 1"},
		{"no replicas", func(c *kafka.Config) { c.ReplicationFactor = 0 }, "kafka.replication_factor must be at least 1"},
	}
	for _, tt := range tests {
		c := kafka.DefaultConfig()
		tt.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestEmbeddedClusterIsSharedByTheProcessesOfOneMachine(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := kafka.DefaultConfig()
	cfg.Embedded, cfg.Brokers = true, []string{l.Addr().String()}

	// Something that is not Kafka holds the address.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if _, _, err := kafka.StartEmbedded(cfg, testenv.Logger()); err == nil || !strings.Contains(err.Error(), "is taken by something that is not Kafka") {
		t.Fatalf("start over a foreign listener: %v", err)
	}
	_ = l.Close()

	stop, started, err := kafka.StartEmbedded(cfg, testenv.Logger())
	if err != nil || !started {
		t.Fatalf("first start: started %v, %v", started, err)
	}
	defer stop()
	again, started, err := kafka.StartEmbedded(cfg, testenv.Logger())
	if err != nil || started {
		t.Fatalf("second start: started %v, %v; want the running cluster used", started, err)
	}
	again()
	if err := kafka.Ping(cfg); err != nil {
		t.Fatalf("the first cluster stopped with the second caller: %v", err)
	}
}

// TestAClosedSubscriberLetsTheMessageInHandFinish: the subscriber closes
// while a handler holds a message. The message keeps its context, the
// handler acknowledges it 300 ms later, Close returns after that, and the
// group's next member receives nothing: the offset was committed.
func TestAClosedSubscriberLetsTheMessageInHandFinish(t *testing.T) {
	k := testenv.Kafka(t)
	top := layout(t, "analytics.metricas")
	id := publish(t, producer(t, k.Config, top), 1)[0]

	sub, ch := subscribe(t, k.Config, top, "analytics.metricas", "analytics", 5*time.Second)
	msg := first(t, ch)
	if msg.UUID != id {
		t.Fatalf("got %s, want %s", msg.UUID, id)
	}
	closed := make(chan error, 1)
	at := time.Now()
	go func() { closed <- sub.Close() }()
	select {
	case <-msg.Context().Done():
		t.Fatal("the message's context ended with the close")
	case <-time.After(300 * time.Millisecond):
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with the message unanswered", err)
	default:
	}
	msg.Ack()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(at); took > 4*time.Second {
		t.Fatalf("Close took %s after the ack", took)
	}
	again := read(t, k.Config, top, "analytics.metricas", "analytics", nil)
	time.Sleep(3 * time.Second)
	if n := again.count(); n != 0 {
		t.Fatalf("the group's next member received %d messages, want none: the acknowledged offset was not committed", n)
	}
}

// TestAClosedSubscriberEndsTheGraceOfAHandlerThatNeverAnswers: Close
// returns within the close timeout (1 s) while a handler never answers;
// the message's context ends at nine tenths of it, and the record comes
// again to the group's next member.
func TestAClosedSubscriberEndsTheGraceOfAHandlerThatNeverAnswers(t *testing.T) {
	k := testenv.Kafka(t)
	top := layout(t, "analytics.metricas")
	id := publish(t, producer(t, k.Config, top), 1)[0]

	sub, ch := subscribe(t, k.Config, top, "analytics.metricas", "analytics", time.Second)
	msg := first(t, ch)
	at := time.Now()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(at); took < 800*time.Millisecond || took > 1500*time.Millisecond {
		t.Fatalf("Close took %s, want about the grace of 900ms", took)
	}
	select {
	case <-msg.Context().Done():
	default:
		t.Fatal("the message's context did not end with the grace period")
	}
	again := read(t, k.Config, top, "analytics.metricas", "analytics", nil)
	testenv.Eventually(t, time.Minute, "the unanswered record to come again", func() bool { return again.has([]string{id}) })
}
