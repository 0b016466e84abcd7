package failures_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/event"
)

// deadLetters is how many dead letters each ingest test sends.
const deadLetters = 60

// layout is one consumed queue with a dead-letter queue, named for the
// test.
func layout(t *testing.T, name string) (*topology.Topology, string, string) {
	t.Helper()
	cfg := topology.DefaultConfig()
	cfg.Exchanges = []topology.ExchangeConfig{{Name: name, Events: []string{"demo.*"}}}
	cfg.Failure.Delays = []time.Duration{}
	cfg.Failure.DeadLetter = topology.DeadLetterConfig{Exchange: name + ".dlx", Queue: "{queue}.dlq"}
	queue := name + ".q"
	top, err := topology.Build(cfg, []topology.Subscription{{Queue: queue, Patterns: []string{"demo.*"}}})
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := top.Policy(queue)
	return top, queue, pol.DeadLetterQueue
}

// sendDeadLetters dead-letters deadLetters events of queue as the router
// does, each with moenda's headers and an error text of one cause.
func sendDeadLetters(t *testing.T, tr transport.Transport, queue string) {
	t.Helper()
	c, err := tr.Consumer()
	if err != nil {
		t.Fatal(err)
	}
	for i := range deadLetters {
		e, err := event.New("demo.a.v1", "ingest", map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := event.ToMessage(e)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			event.HeaderEventID: e.ID, event.HeaderQueue: queue, event.HeaderHandler: queue,
			event.HeaderReason: event.ReasonRetriesExhausted, event.HeaderError: fmt.Sprintf("reserve pedido %d: timeout", i),
			event.HeaderAttempts: "3", event.HeaderLastFailureAt: time.Now().UTC().Format(time.RFC3339Nano),
		} {
			msg.Metadata.Set(k, v)
		}
		if err := c.Sink.DeadLetter(context.Background(), queue, msg); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
	}
}

// crashing is a ledger that, once, records a batch and then answers an
// error (a crash between the commit and the acknowledgements), then once
// refuses a batch (the database away), then works.
type crashing struct {
	failures.Ledger
	mu    sync.Mutex
	calls int
}

func (c *crashing) Record(ctx context.Context, fs []failures.Failure) (int, error) {
	c.mu.Lock()
	c.calls++
	call := c.calls
	c.mu.Unlock()
	switch call {
	case 1:
		_, err := c.Ledger.Record(ctx, fs)
		return 0, errors.Join(err, errors.New("the connection broke before the commit was answered"))
	case 2:
		return 0, errors.New("the database is away")
	}
	return c.Ledger.Record(ctx, fs)
}

// ingest runs an Ingest of dlq into l until want failures are recorded
// (or the wait ends), then stops it.
func ingest(t *testing.T, tr transport.Transport, dlq string, l failures.Ledger, want int) {
	t.Helper()
	sub, err := tr.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	in := &failures.Ingest{Subscriber: sub, Queues: []string{dlq}, Ledger: l, Batch: 16, Linger: 50 * time.Millisecond,
		Now: time.Now, Logger: testenv.Logger()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := l.List(context.Background(), failures.Filter{}, failures.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// checkLedger checks that l holds every dead letter once, in one group.
func checkLedger(t *testing.T, l failures.Ledger, dlq string, want int) []failures.Failure {
	t.Helper()
	got, err := l.List(context.Background(), failures.Filter{}, failures.Page{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, f := range got {
		if ids[f.EventID] {
			t.Errorf("%s is in the ledger twice", f.EventID)
		}
		ids[f.EventID] = true
		if f.Queue != dlq {
			t.Errorf("%s recorded from %q, want %q", f.EventID, f.Queue, dlq)
		}
	}
	if len(got) != want {
		t.Fatalf("the ledger holds %d failures, want %d", len(got), want)
	}
	return got
}

// On RabbitMQ: the dead-letter queue empties into the ledger, each dead
// letter once although a batch was recorded, then refused, then read
// again; a message the broker dead-lettered itself is there too.
func TestIngestEmptiesRabbitMQsDeadLetterQueues(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	top, queue, dlq := layout(t, "ingest")
	newTransport := func() *amqp.Transport {
		tr, err := amqp.NewTransport(amqp.Config{URLs: []string{vhost.URL}, Prefetch: 32},
			transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, ConfirmWindow: 16, Logger: testenv.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := newTransport()
	if err := tr.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	sendDeadLetters(t, tr, queue)
	rejectOnce(t, vhost.URL, queue)

	l := &crashing{Ledger: failures.NewPostgres(testenv.Postgres(t).Pool)}
	ingest(t, tr, dlq, l, deadLetters+1)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	got := checkLedger(t, l, dlq, deadLetters+1)
	if got[0].Reason != "rejected" || got[0].FailedQueue != queue || got[0].Error != "dead-lettered by the broker: rejected at queue "+queue {
		t.Errorf("the broker's dead letter: %+v", got[0])
	}
	groups, err := l.Groups(context.Background(), failures.Filter{Reason: event.ReasonRetriesExhausted}, failures.ByCause)
	if err != nil || len(groups) != 1 || groups[0].Count != deadLetters {
		t.Errorf("Groups = %+v, %v; want one group of %d", groups, err, deadLetters)
	}
	// Closing the connections sent back every dead letter not acknowledged.
	depths := newTransport()
	defer depths.Close()
	if d, err := depths.Depths(context.Background(), []string{dlq}); err != nil || d[dlq] != 0 {
		t.Errorf("%s holds %v (%v) after ingest, want 0: each dead letter is acknowledged once recorded", dlq, d, err)
	}
}

// rejectOnce publishes one message to queue and rejects it without
// requeue, so that RabbitMQ dead-letters it itself, as it does a foreign
// consumer's reject or a quorum queue's delivery limit.
func rejectOnce(t *testing.T, url, queue string) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", queue, false, false, amqp091.Publishing{MessageId: "foreign-1", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// On Kafka (the embedded cluster, or KAFKA_BROKERS): the dead-letter topic
// is read into the ledger in a consumer group of its own.
func TestIngestReadsKafkasDeadLetterTopics(t *testing.T) {
	k := testenv.Kafka(t)
	top, queue, dlq := layout(t, fmt.Sprintf("ingest-%d", time.Now().UnixNano()%1e6))
	tr, err := kafka.NewTransport(k.Config, transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, Logger: testenv.Logger()},
		[]string{queue}, func(q string) string { return q })
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sendDeadLetters(t, tr, queue)
	l := &crashing{Ledger: failures.NewPostgres(testenv.Postgres(t).Pool)}
	ingest(t, tr, dlq, l, deadLetters)
	checkLedger(t, l, dlq, deadLetters)
}

// In the memory environment the ledger is in memory, fed the same way.
func TestIngestInMemory(t *testing.T) {
	top, queue, dlq := layout(t, "ingest")
	tr, err := memory.NewTransport(transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sendDeadLetters(t, tr, queue)
	l := &crashing{Ledger: failures.NewMemory(time.Now)}
	ingest(t, tr, dlq, l, deadLetters)
	checkLedger(t, l, dlq, deadLetters)
}
