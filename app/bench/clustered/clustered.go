// Package clustered measures moenda's RabbitMQ clients on a quorum queue
// replicated on three nodes against the same queue on one node, each
// beside the raw client (amqp091-go) doing the same work on the same
// servers, and how long the clients take to move when the queue's leader
// dies. The nodes are started for the run on loopback ports of their own
// (adapters/testenv/cluster). `moenda bench cluster` runs it.
package clustered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/testenv/cluster"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/app/bench/median"
)

// Options size a run.
type Options struct {
	// Messages is how many each publish and consume measure moves.
	Messages int
	// Dir holds the nodes' files; the caller removes it.
	Dir    string
	Logger *slog.Logger
}

// Row is one figure: moenda's, and the raw client's (Ceiling) on the same
// nodes, in the same run, each the median of paired rounds.
type Row struct {
	Name    string  `json:"name"`
	Nodes   int     `json:"nodes"`
	Value   float64 `json:"value"`
	Ceiling float64 `json:"ceiling,omitempty"`
	Unit    string  `json:"unit"`
	// Ratio is the median of the rounds' ratios of moenda's rate to the
	// raw client's, and Min and Max their spread; 0 without a ceiling.
	Ratio    float64 `json:"ratio,omitempty"`
	Min, Max float64 `json:"-"`
}

// What the run measures with, as moenda's defaults have them.
const (
	queue    = "bench.cluster"
	exchange = "bench"
	key      = "bench.tick"
	// window is the relay's confirm window (outbox.confirm_window), and
	// prefetch the consumers' (amqp.prefetch).
	window   = 256
	prefetch = 50
	// batch is the relay's batch (outbox.batch_size).
	batch = 256
)

// Run measures on one node, then on three, then kills the three nodes'
// leader under load.
func Run(ctx context.Context, opts Options) ([]Row, error) {
	var rows []Row
	for _, n := range []int{1, 3} {
		c, err := cluster.StartRabbitMQ(ctx, opts.Logger, filepath.Join(opts.Dir, fmt.Sprintf("nodes%d", n)), n)
		if err != nil {
			return rows, err
		}
		got, err := measure(ctx, c, opts)
		rows = append(rows, got...)
		c.Close()
		if err != nil {
			return rows, fmt.Errorf("bench cluster: %d nodes: %w", n, err)
		}
	}
	return rows, nil
}

// measure publishes then consumes opts.Messages with the raw client and
// with moenda's, on c; on a cluster it then kills the queue's leader.
func measure(ctx context.Context, c *cluster.RabbitMQ, opts Options) ([]Row, error) {
	n, urls := len(c.Nodes), c.URLs()
	top, err := quorumTopology()
	if err != nil {
		return nil, err
	}
	if err := amqp.Declare(ctx, urls, top); err != nil {
		return nil, err
	}
	pub, err := amqp.NewBatchPublisher(urls, "moenda bench", window, top)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	// In each round each client publishes into the empty queue, then
	// takes what it published, so both find the queue alike; which goes
	// first alternates.
	var publish, consume paired
	for round := range rounds {
		var rawPub, rawIn, minePub, mineIn float64
		raw := func() (err error) { rawPub, rawIn, err = rawRound(ctx, urls[0], opts.Messages); return err }
		mine := func() (err error) { minePub, mineIn, err = moendaRound(ctx, pub, urls, opts); return err }
		first, second := raw, mine
		if round%2 == 1 {
			first, second = mine, raw
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		publish.add(minePub, rawPub)
		consume.add(mineIn, rawIn)
	}
	rows := []Row{
		publish.row("publish, confirmed, to a quorum queue", n),
		consume.row("consume and acknowledge a quorum queue", n),
	}
	if n < 3 {
		return rows, nil
	}
	sub, err := amqp.NewSubscriber(urls, prefetch, 5*time.Second, opts.Logger)
	if err != nil {
		return rows, err
	}
	defer sub.Close()
	in, err := sub.Subscribe(ctx, queue)
	if err != nil {
		return rows, err
	}
	took, err := failover(ctx, c, pub, in)
	if err != nil {
		return rows, fmt.Errorf("failover: %w", err)
	}
	return append(rows, Row{Name: "the queue's leader killed: to the first event published after it and handled", Nodes: n, Value: took.Seconds(), Unit: "s"}), nil
}

// rounds is how many paired rounds each figure is the median of.
const rounds = 5

// rawRound publishes n messages with the raw client, then consumes them,
// and returns both rates.
func rawRound(ctx context.Context, url string, n int) (publish, consume float64, err error) {
	if publish, err = rawPublish(ctx, url, n); err != nil {
		return 0, 0, fmt.Errorf("raw publish: %w", err)
	}
	if consume, err = rawConsume(ctx, url, n); err != nil {
		return 0, 0, fmt.Errorf("raw consume: %w", err)
	}
	return publish, consume, nil
}

// moendaRound publishes opts.Messages through pub, then consumes them with
// a subscriber of its own, and returns both rates.
func moendaRound(ctx context.Context, pub *amqp.BatchPublisher, urls []string, opts Options) (publish, consume float64, err error) {
	if publish, err = moendaPublish(ctx, pub, opts.Messages); err != nil {
		return 0, 0, fmt.Errorf("moenda publish: %w", err)
	}
	sub, err := amqp.NewSubscriber(urls, prefetch, 5*time.Second, opts.Logger)
	if err != nil {
		return 0, 0, err
	}
	defer sub.Close()
	in, err := sub.Subscribe(ctx, queue)
	if err != nil {
		return 0, 0, err
	}
	if consume, err = moendaConsume(ctx, in, opts.Messages); err != nil {
		return 0, 0, fmt.Errorf("moenda consume: %w", err)
	}
	return publish, consume, nil
}

// paired keeps the rounds of one figure: moenda's rate and the raw
// client's, each round's side by side.
type paired struct{ mine, raw, ratios []float64 }

func (p *paired) add(mine, raw float64) {
	p.mine, p.raw, p.ratios = append(p.mine, mine), append(p.raw, raw), append(p.ratios, mine/raw)
}

// row is the figure's row: the medians of the rounds, and the spread of
// their ratios.
func (p *paired) row(name string, nodes int) Row {
	return Row{Name: name, Nodes: nodes, Value: median.Of(p.mine), Ceiling: median.Of(p.raw), Unit: "msg/s",
		Ratio: median.Of(p.ratios), Min: slices.Min(p.ratios), Max: slices.Max(p.ratios)}
}

// quorumTopology is one exchange carrying bench.# to one quorum queue.
func quorumTopology() (*topology.Topology, error) {
	return topology.Build(topology.Config{
		QueueType: topology.Quorum,
		Exchanges: []topology.ExchangeConfig{{Name: exchange, Events: []string{"bench.#"}}},
		Failure: topology.FailureConfig{ImmediateRetries: new(int), Delays: []time.Duration{},
			DeadLetter: topology.DeadLetterConfig{Exchange: exchange + ".dlx", Queue: "{queue}.dlq"}},
	}, []topology.Subscription{{Queue: queue, Patterns: []string{"bench.#"}}})
}

// body is the bench's event, about the size of a relayed one.
var body = []byte(`{"id":"00000000-0000-0000-0000-000000000000","name":"bench.tick","payload":{"n":1,"note":"a bench event, about as large as a small domain event"}}`)

// rawPublish publishes n persistent messages in confirm mode, window at
// a time, as the relay does, and returns their rate.
func rawPublish(ctx context.Context, url string, n int) (float64, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	pending := make([]*amqp091.DeferredConfirmation, 0, window)
	wait := func(dc *amqp091.DeferredConfirmation) error {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return errors.Join(err, errors.New("not confirmed"))
		}
		return nil
	}
	began := time.Now()
	for i := range n {
		if len(pending) == window {
			if err := wait(pending[0]); err != nil {
				return 0, err
			}
			pending = pending[1:]
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, ContentType: "application/json", MessageId: strconv.Itoa(i), Body: body})
		if err != nil {
			return 0, err
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if err := wait(dc); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// moendaPublish publishes n messages through pub in the relay's batches,
// and returns their rate.
func moendaPublish(ctx context.Context, pub *amqp.BatchPublisher, n int) (float64, error) {
	topics := make([]string, batch)
	for i := range topics {
		topics[i] = key
	}
	began := time.Now()
	for sent := 0; sent < n; sent += batch {
		k := min(batch, n-sent)
		msgs := make([]*message.Message, k)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), body)
		}
		if err := pub.PublishBatch(ctx, topics[:k], msgs); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// rawConsume takes n messages off the queue with prefetch, acknowledging
// each, and returns their rate.
func rawConsume(ctx context.Context, url string, n int) (float64, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	for range n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return 0, errors.New("the consumer was closed")
			}
			if err := d.Ack(false); err != nil {
				return 0, err
			}
		case <-time.After(30 * time.Second):
			return 0, errors.New("no delivery for 30 s")
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// moendaConsume takes n messages from in, acknowledging each, and returns
// their rate.
func moendaConsume(ctx context.Context, in <-chan *message.Message, n int) (float64, error) {
	began := time.Now()
	for range n {
		select {
		case msg := <-in:
			msg.Ack()
		case <-time.After(30 * time.Second):
			return 0, errors.New("no delivery for 30 s")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// failover publishes a steady stream through pub while in is consumed,
// kills the node leading the queue, and returns the time from the kill to
// the first message published after it and handled: both clients moved to
// another node, and the queue has a new leader.
func failover(ctx context.Context, c *cluster.RabbitMQ, pub *amqp.BatchPublisher, in <-chan *message.Message) (time.Duration, error) {
	leader, err := c.QueueLeader(ctx, "/", queue)
	if err != nil {
		return 0, err
	}
	var mu sync.Mutex
	var killed time.Time
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			msg := message.NewMessage(watermill.NewUUID(), body)
			mu.Lock()
			after := !killed.IsZero()
			mu.Unlock()
			msg.Metadata.Set("after", strconv.FormatBool(after))
			_ = pub.PublishBatch(ctx, []string{key}, []*message.Message{msg})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	handled := make(chan time.Time, 1)
	go func() {
		for {
			select {
			case msg := <-in:
				msg.Ack()
				if msg.Metadata.Get("after") == "true" {
					handled <- time.Now()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	// Let the stream run before the kill.
	time.Sleep(2 * time.Second)
	mu.Lock()
	killed = time.Now()
	mu.Unlock()
	if err := c.Kill(leader); err != nil {
		return 0, err
	}
	defer func() { _ = c.Restart(context.WithoutCancel(ctx), leader) }()
	select {
	case at := <-handled:
		return at.Sub(killed), nil
	case <-ctx.Done():
		return 0, errors.New("no event published after the kill was handled within 2 minutes")
	}
}

// Markdown writes the run as BENCHMARKS.md's section, under heading.
func Markdown(w io.Writer, heading string, rows []Row, command string) error {
	_, err := fmt.Fprintf(w, "%s\n\nGenerated by `%s`. moenda's RabbitMQ clients on a quorum queue (`x-queue-type: quorum`), replicated on three nodes of one cluster and on one node, each beside the raw client (amqp091-go) doing the same work on the same nodes in the same run, in %d paired rounds whose order alternates (each figure is the median of the rounds, the ratio the median of the rounds' ratios, with their spread): in each, persistent messages published in confirm mode with %d confirms outstanding (moenda's: the relay's publisher, in batches of %d), and consumed with a prefetch of %d, each acknowledged (moenda's: its subscriber). The nodes run on this machine, started for the run on loopback ports of their own, so a replicated publish costs CPU on the same two cores rather than a network round trip.\n\n| measure | nodes | moenda | raw client | ratio | unit |\n|---|--:|--:|--:|--:|---|\n",
		heading, command, rounds, window, batch, prefetch)
	if err != nil {
		return err
	}
	for _, r := range rows {
		ceiling, ratio := "", ""
		if r.Ceiling > 0 {
			ceiling, ratio = fmt.Sprintf("%.0f", r.Ceiling), fmt.Sprintf("%.2f (%.2f–%.2f)", r.Ratio, r.Min, r.Max)
		}
		value := fmt.Sprintf("%.0f", r.Value)
		if r.Unit == "s" {
			value = fmt.Sprintf("%.2f", r.Value)
		}
		if _, err := fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", r.Name, r.Nodes, value, ceiling, ratio, r.Unit); err != nil {
			return err
		}
	}
	return nil
}
