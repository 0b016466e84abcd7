package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/app/replay"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/analytics"
	"github.com/moenda/moenda/migrations"
)

// Row names of the Kafka step's ceilings.
const (
	rowKafkaProduce = "ceiling: sarama SyncProducer, idempotent, acks=all, SendMessages batches of %d"
	rowKafkaConsume = "ceiling: sarama consumer, every partition from the oldest record to the high watermark"
)

// kafkaRelayGroup is the Kafka relay's position in the outbox, as
// analytics.kafka.relay_group names it by default: a position of its own,
// apart from the RabbitMQ relay's.
const kafkaRelayGroup = "moenda-relay-kafka"

// kafkaBench is the Kafka side of a run: a cluster, topics under a prefix
// of the run's own, and the topology of the analytics plugin's queues on
// the bench exchange. close deletes the topics and stops a cluster it
// started.
type kafkaBench struct {
	cfg    kafka.Config
	top    *topology.Topology
	def    handlers.Definition // the analytics plugin, whose queues top binds
	logger *slog.Logger
	stop   func()
}

// kafkaStream measures the relay feeding Kafka and the replay of the
// analytics projection reading it back, each against the raw sarama client
// doing the same work in the same run on the same cluster: the replay
// reads what the drain published.
func kafkaStream(ctx context.Context, e *env, r *Result) error {
	k, err := e.newKafka()
	if err != nil {
		return err
	}
	defer k.close()
	if err := k.drain(ctx, e, r); err != nil {
		return err
	}
	return k.replay(ctx, e, r)
}

// newKafka connects to the configured cluster, starting the embedded one
// when the configuration asks for it. Options without brokers (a test's)
// get an embedded cluster of their own on a free port.
func (e *env) newKafka() (*kafkaBench, error) {
	cfg := e.opts.Kafka
	if len(cfg.Brokers) == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := l.Addr().String()
		_ = l.Close()
		cfg = kafka.DefaultConfig()
		cfg.Brokers, cfg.Embedded = []string{addr}, true
	}
	cfg.TopicPrefix = "bench-" + strings.TrimPrefix(e.exchange, "moenda.bench.") + "."
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka settings: %w", err)
	}
	def := analytics.Plugin()
	var subs []topology.Subscription
	for _, s := range def.Subscriptions {
		subs = append(subs, topology.Subscription{Queue: def.Queue(s), Patterns: s.Events})
	}
	top, err := topology.Build(e.topologyConfig(), subs)
	if err != nil {
		return nil, err
	}
	k := &kafkaBench{cfg: cfg, top: top, def: def, logger: e.logger, stop: func() {}}
	if cfg.Embedded {
		stop, _, err := kafka.StartEmbedded(cfg, e.logger)
		if err != nil {
			return nil, err
		}
		k.stop = stop
	}
	return k, nil
}

// close deletes the run's topics and its replay group, then stops the
// cluster if this run started it. Errors are ignored: kfake may not
// support deletion, and an embedded cluster ends with the run anyway.
func (k *kafkaBench) close() {
	defer k.stop()
	client, err := sarama.NewClient(k.cfg.Brokers, k.cfg.Sarama("moenda bench cleanup"))
	if err != nil {
		return
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return
	}
	if topics, err := admin.ListTopics(); err == nil {
		for t := range topics {
			if strings.HasPrefix(t, k.cfg.TopicPrefix) {
				_ = admin.DeleteTopic(t)
			}
		}
	}
	for _, s := range k.def.Subscriptions {
		_ = admin.DeleteConsumerGroup(k.cfg.Group(k.replayGroup(s)))
	}
}

// topic is the Kafka topic the relay publishes bench events to.
func (k *kafkaBench) topic() (string, error) {
	x, err := k.top.ExchangeFor(benchEvent().RoutingKey())
	if err != nil {
		return "", err
	}
	return k.cfg.Topic(x), nil
}

func (k *kafkaBench) replayGroup(s handlers.Subscription) string {
	return k.def.Queue(s) + ".replay" // as `moenda replay` names it
}

// drain fills the outbox with a backlog, then publishes as many records
// with the raw producer to a topic of its own (the ceiling), then times the
// relay, in this process with a kafka.Producer as its destination, moving
// the backlog to the exchange's topic: from its start to the confirmation
// of the last batch. Both send batches of outbox.batch_size records of the
// relayed event's size and headers, keyed as the relay keys them (by the
// event id: bench events name no aggregate).
func (k *kafkaBench) drain(ctx context.Context, e *env, r *Result) error {
	n := e.sz.backlog
	// The relay starts from the outbox's end, not from what earlier steps
	// left, as if it had published those already.
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT $1, "offset", transaction_id FROM watermill_outbox ORDER BY transaction_id DESC, "offset" DESC LIMIT 1
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
			last_processed_transaction_id = excluded.last_processed_transaction_id`, kafkaRelayGroup); err != nil {
		return fmt.Errorf("position the Kafka relay at the outbox's end: %w", err)
	}
	if err := e.openSlot(ctx, kafkaRelayGroup); err != nil {
		return err
	}
	if err := e.fill(ctx, n); err != nil {
		return fmt.Errorf("fill the outbox: %w", err)
	}
	ceiling, err := k.rawProduce(ctx, n, e.set.Outbox.BatchSize)
	if err != nil {
		return fmt.Errorf("raw producer: %w", err)
	}
	r.add(Row{Name: fmt.Sprintf(rowKafkaProduce, e.set.Outbox.BatchSize), Value: ceiling, Unit: "msg/s"}, 0, 0)
	rate, err := k.relay(ctx, e, n)
	if err != nil {
		return err
	}
	r.add(Row{Name: fmt.Sprintf("moenda: Kafka relay drain of %d rows, idempotent producer, acks=all", n), Value: rate, Unit: "rows/s",
		Ceiling: ceiling, Target: "ratio >= 0.60"}, 0.60, 0)
	return nil
}

// rawProduce publishes n copies of a relayed bench event's record with a
// sarama SyncProducer, batch at a time, to a topic of its own with the
// partitions the relay's topic has, and returns records per second from
// the first send to the last confirmation.
func (k *kafkaBench) rawProduce(ctx context.Context, n, batch int) (float64, error) {
	msg, _, err := outbox.Prepare(ctx, benchEvent(), k.top.Routable)
	if err != nil {
		return 0, err
	}
	topic := k.cfg.Topic("ceiling.produce")
	tmpl, err := wkafka.DefaultMarshaler{}.Marshal(topic, msg)
	if err != nil {
		return 0, err
	}
	keys := make([]sarama.StringEncoder, n) // a fresh event id per record
	for i := range keys {
		keys[i] = sarama.StringEncoder(watermill.NewUUID())
	}
	client, err := sarama.NewClient(k.cfg.Brokers, k.cfg.Sarama("moenda bench ceiling"))
	if err != nil {
		return 0, err
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return 0, err
	}
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: k.cfg.Partitions, ReplicationFactor: k.cfg.ReplicationFactor}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return 0, err
	}
	sp, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		return 0, err
	}
	defer sp.Close()
	at := time.Now()
	began := time.Now()
	for sent := 0; sent < n; sent += batch {
		recs := make([]*sarama.ProducerMessage, min(batch, n-sent))
		for i := range recs {
			recs[i] = &sarama.ProducerMessage{Topic: topic, Key: keys[sent+i], Value: tmpl.Value, Headers: tmpl.Headers, Timestamp: at}
		}
		if err := sp.SendMessages(recs); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// relay runs the outbox relay into Kafka until it has published n rows and
// returns rows per second from its start. Its producer connects (and
// creates its topics) before the clock starts, as the raw one does.
func (k *kafkaBench) relay(ctx context.Context, e *env, n int) (float64, error) {
	dest, err := kafka.NewProducer(k.cfg, k.top, nil, "moenda outbox relay", k.logger)
	if err != nil {
		return 0, err
	}
	defer dest.Close()
	if err := dest.PublishBatch(ctx, nil, nil); err != nil { // connects
		return 0, err
	}
	counted := &countedDestination{Destination: dest, want: int64(n), done: make(chan struct{})}
	cfg := e.set.Outbox
	cfg.ConsumerGroup, cfg.Reader = kafkaRelayGroup, e.reader
	relay, err := outbox.NewRelay(e.pool, counted, k.top.Routable, cfg, k.logger)
	if err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- relay.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case <-counted.done:
		return float64(n) / time.Since(began).Seconds(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("the Kafka relay published %d of %d rows: %w", counted.sent.Load(), n, await.ErrTimeout)
	}
}

// countedDestination tells when the relay has had n messages confirmed.
type countedDestination struct {
	outbox.Destination
	want int64
	sent atomic.Int64
	once sync.Once
	done chan struct{}
}

func (d *countedDestination) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	if err := d.Destination.PublishBatch(ctx, keys, msgs); err != nil {
		return err
	}
	if d.sent.Add(int64(len(msgs))) >= d.want {
		d.once.Do(func() { close(d.done) })
	}
	return nil
}

// replay times `moenda replay analytics` over the topic the drain filled,
// done as the command does it (the plugin's Rewind, kafka.Rewind, a
// kafka.Subscriber in group <queue>.replay and the router's whole chain
// with the inbox, the plugin writing one fact per event through a
// PostgreSQL unit of work on the bench database), from the router's start
// until every partition is read to its end. The ceiling reads the same
// topic with a raw sarama consumer first.
func (k *kafkaBench) replay(ctx context.Context, e *env, r *Result) error {
	if _, err := migrations.Up(ctx, e.pool, slog.New(slog.DiscardHandler), migrations.Set{Name: k.def.Name, Files: k.def.Migrations}); err != nil {
		return err
	}
	topic, err := k.topic()
	if err != nil {
		return err
	}
	ceiling, err := k.rawConsume(ctx, topic)
	if err != nil {
		return fmt.Errorf("raw consumer: %w", err)
	}
	r.add(Row{Name: rowKafkaConsume, Value: ceiling, Unit: "msg/s"}, 0, 0)

	built, err := k.def.Build(k.def.NewConfig(), handlers.Deps{Logger: k.logger, Tx: e.tx})
	if err != nil {
		return err
	}
	if built.Close != nil {
		defer built.Close()
	}
	var queues []string
	for _, s := range k.def.Subscriptions {
		queues = append(queues, k.def.Queue(s))
	}
	failures, err := kafka.NewProducer(k.cfg, k.top, kafka.Topics(k.top, queues), "moenda replay failures", k.logger)
	if err != nil {
		return err
	}
	defer failures.Close()
	run, err := replay.Start(ctx, replay.Deps{Kafka: k.cfg, Topology: k.top, Store: e.tx, Sink: failures, Logger: k.logger}, k.def, built, time.Time{})
	if err != nil {
		return err
	}
	began := time.Now()
	if err := run.Read(ctx); err != nil {
		return err
	}
	read, total := run.Progress()
	rate := float64(read) / time.Since(began).Seconds()
	var facts int64
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM analytics_eventos`).Scan(&facts); err != nil {
		return err
	}
	if read != total || facts != total {
		return fmt.Errorf("replay read %d of %d records and the projection holds %d facts", read, total, facts)
	}
	r.add(Row{Name: fmt.Sprintf("moenda: Kafka replay of the analytics projection, %d events, batches of %d", total, replay.Batch), Value: rate, Unit: "events/s",
		Ceiling: ceiling, Target: "ratio >= 0.50"}, 0.50, 0)
	return nil
}

// rawConsume reads every partition of topic from its oldest record to the
// high watermark it had at the start, one sarama partition consumer each,
// and returns records per second from connecting to the last record.
func (k *kafkaBench) rawConsume(ctx context.Context, topic string) (float64, error) {
	began := time.Now()
	consumer, err := sarama.NewConsumer(k.cfg.Brokers, k.cfg.Sarama("moenda bench ceiling"))
	if err != nil {
		return 0, err
	}
	defer consumer.Close()
	parts, err := consumer.Partitions(topic)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(parts))
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return 0, err
		}
		end := pc.HighWaterMarkOffset() // as it was when the consumer started
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			if end <= 0 {
				return // an empty partition
			}
			for {
				select {
				case m := <-pc.Messages():
					total.Add(1)
					if m.Offset+1 >= end {
						return
					}
				case err := <-pc.Errors():
					errs <- err
					return
				case <-ctx.Done():
					errs <- fmt.Errorf("partition %d: read %d records in all: %w", p, total.Load(), ctx.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(total.Load()) / took.Seconds(), nil
}
