package bench

import (
	"context"
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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/app/replay"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/analytics"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/migrations"
)

// Row names of the Kafka step's ceilings.
const (
	rowKafkaProduce = "ceiling: franz-go producer, set as the relay's (idempotent, acks=all), ProduceSync batches of %d"
	rowRawRelay     = "ceiling: pglogrepl read into franz-go's producer, batches of %d, each insert decoded by pglogrepl.Parse and its metadata by encoding/json"
	rowRawStream    = "ceiling: pglogrepl reading %d rows of the outbox's logical stream (pgoutput, binary values), each insert counted by its first byte"
	rowKafkaConsume = "ceiling: sarama consumer, every partition from the oldest record to the high watermark, a fact per record written with pgx a batch at a time"
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
	cfg     kafka.Config
	top     *topology.Topology
	def     handlers.Definition // the analytics plugin, whose queues top binds
	logger  *slog.Logger
	cluster process // the embedded cluster's, when the bench started one
	stop    func()
}

// kafkaStream measures the relay feeding Kafka and the replay of the
// analytics projection reading it back, each against the raw client of
// the same kind (franz-go's producer, sarama's consumer) doing the same
// work in the same run on the same cluster: the replay reads what the
// drain published.
func kafkaStream(ctx context.Context, e *env, r *Result) error {
	k, err := e.newKafka(ctx)
	if err != nil {
		return err
	}
	defer k.close()
	if err := k.drain(ctx, e, r); err != nil {
		return err
	}
	if err := k.replay(ctx, e, r); err != nil {
		return err
	}
	// The Kafka relay's group is done with: its slot would keep the WAL of
	// every step after this one, gigabytes, and their serve would warn of it.
	if err := outbox.ResetPosition(ctx, e.pool, kafkaRelayGroup); err != nil {
		return err
	}
	// The rows this step wrote were Kafka's alone: the RabbitMQ relay's
	// group is put past them, or the serve processes of the steps after
	// this one would spend their measures relaying them (a million rows).
	return e.positionAtEnd(ctx, e.set.Outbox.ConsumerGroup)
}

// newKafka connects to the configured cluster. Where the configuration
// asks for the embedded one, or names no brokers (a test's options), the
// bench starts one of its own on a free port, in a process of its own
// (KafkaCluster).
func (e *env) newKafka(ctx context.Context) (*kafkaBench, error) {
	cfg := e.opts.Kafka
	if len(cfg.Brokers) == 0 {
		cfg = kafka.DefaultConfig()
		cfg.Embedded = true
	}
	if cfg.Embedded {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		cfg.Brokers = []string{l.Addr().String()}
		_ = l.Close()
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
		if k.cluster, k.stop, err = e.startKafkaCluster(ctx, cfg); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// close deletes the run's topics and its replay group, then stops the
// cluster if this run started it. Errors are ignored: an embedded cluster
// ends with the run anyway.
func (k *kafkaBench) close() {
	defer k.stop()
	k.deleteTopics(k.cfg.TopicPrefix, func(admin sarama.ClusterAdmin) {
		for _, s := range k.def.Subscriptions {
			_ = admin.DeleteConsumerGroup(k.cfg.Group(k.replayGroup(s)))
		}
	})
}

// deleteTopics deletes the topics whose name starts with prefix, then runs
// also, if given, with the same admin client. A round's topics go once it
// is measured, so the embedded cluster, which keeps records in memory,
// holds one round's at a time. Errors are ignored.
func (k *kafkaBench) deleteTopics(prefix string, also func(sarama.ClusterAdmin)) {
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
			if strings.HasPrefix(t, prefix) {
				_ = admin.DeleteTopic(t)
			}
		}
	}
	if also != nil {
		also(admin)
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

// drain times the relay, in this process with a kafka.Producer as its
// destination, moving a backlog from the outbox to the exchange's topic,
// from its start to the confirmation of the last batch, in rounds paired
// with the raw producer publishing as many records to a topic of its own
// (the ceiling). Each relay round has a backlog of its own, written before
// it starts. Both send batches of outbox.batch_size records of the relayed
// event's size and headers, keyed as the relay keys them (by the event id:
// bench events name no aggregate). An embedded cluster's CPU is its
// process's, apart from both sides'.
func (k *kafkaBench) drain(ctx context.Context, e *env, r *Result) error {
	n := e.sz.kafkaBacklog
	// Each relay round starts from the outbox's end, not from what earlier
	// steps and rounds left, as if it had published those already, with a
	// slot of its own: a slot that several short sessions streamed from
	// may not have moved where PostgreSQL starts decoding (its
	// restart_lsn), and each session would decode the rounds before again.
	// Each round publishes to topics of its own: a topic that grew over
	// the rounds before would cost the cluster more with each one. The
	// replay reads the first round's.
	var raws, relays int
	rounds, err := alternate(e, "Kafka relay drain", e.sz.rounds, func() (flow, error) {
		raws++
		topic := k.cfg.Topic(fmt.Sprintf("ceiling.produce.%d", raws))
		defer k.deleteTopics(topic, nil)
		return k.rawProduce(ctx, topic, n, e.set.Outbox.BatchSize)
	}, func() (flow, error) {
		round := "" // the replay's
		if relays > 0 {
			round = fmt.Sprintf("round%d.", relays)
		}
		relays++
		return k.relayRound(ctx, e, round, n)
	})
	if err != nil {
		return err
	}
	r.add(Row{Name: fmt.Sprintf(rowKafkaProduce, e.set.Outbox.BatchSize), Value: rounds.row(Row{}).Ceiling, Unit: "msg/s", CPU: rounds.rawCPU()}, 0, 0)
	r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: Kafka relay drain of %d rows, %s reader, idempotent producer, acks=all, against the raw producer in the same rounds", n, e.reader),
		Unit: "rows/s", Target: "ratio >= 0.60"}), 0.60, 0)
	if err := k.producers(ctx, e, r, n); err != nil {
		return err
	}
	return k.streamCeilings(ctx, e, r, n)
}

// streamCeilings measures the logical relay against raw clients that
// read its stream too. The producer ceiling does not read: the relay's
// drain also reads the rows from PostgreSQL, decodes them and records its
// position. pglogrepl read into franz-go's producer is the drain's
// like-for-like ceiling; and the same drain to a destination that takes
// each batch at once, against pglogrepl reading the stream alone, splits
// the drain's CPU into reading and publishing. The poll reader has no
// such ceilings: a run with it has no such rows, as it has no row of the
// logical reader's writes.
func (k *kafkaBench) streamCeilings(ctx context.Context, e *env, r *Result, n int) error {
	if e.reader != outbox.ReaderLogical {
		return nil
	}
	batch := e.set.Outbox.BatchSize
	var raws, relays int
	drains, err := alternate(e, "Kafka relay drain, like for like", e.sz.rounds, func() (flow, error) {
		raws++
		topic := k.cfg.Topic(fmt.Sprintf("ceiling.relay.%d", raws))
		defer k.deleteTopics(topic, nil)
		return k.rawRelay(ctx, e, topic, n, batch)
	}, func() (flow, error) {
		relays++
		return k.relayRound(ctx, e, fmt.Sprintf("like%d.", relays), n)
	})
	if err != nil {
		return err
	}
	r.add(Row{Name: fmt.Sprintf(rowRawRelay, batch), Value: drains.row(Row{}).Ceiling, Unit: "rows/s", CPU: drains.rawCPU()}, 0, 0)
	r.add(drains.row(Row{Name: fmt.Sprintf("moenda: Kafka relay drain of %d rows, logical reader, against pglogrepl read into the raw producer in the same rounds", n),
		Unit: "rows/s"}), 0, 0)
	reads, err := alternate(e, "Kafka relay's reading", e.sz.rounds, func() (flow, error) {
		return e.rawStream(ctx, n)
	}, func() (flow, error) {
		return k.relay(ctx, e, nowhere{}, n)
	})
	if err != nil {
		return err
	}
	r.add(Row{Name: fmt.Sprintf(rowRawStream, n), Value: reads.row(Row{}).Ceiling, Unit: "rows/s", CPU: reads.rawCPU()}, 0, 0)
	r.add(reads.row(Row{Name: fmt.Sprintf("moenda: Kafka relay's reading alone, the same drain of %d rows to a destination that takes each batch at once, against pglogrepl reading the same stream in the same rounds", n),
		Unit: "rows/s"}), 0, 0)
	return nil
}

// nowhere is a destination that takes every batch at once, ahead of the
// recorded position as the Kafka producer does: the relay's own work
// without publishing's.
type nowhere struct{}

func (nowhere) PublishBatch(context.Context, []string, []*message.Message) error { return nil }
func (nowhere) PublishAhead() bool                                               { return true }

// rawProduce publishes n copies of a relayed bench event's record with
// franz-go's client set as the relay's (rawProducer), batch at a time, to
// topic, timed from the first send to the last confirmation.
func (k *kafkaBench) rawProduce(ctx context.Context, topic string, n, batch int) (flow, error) {
	tmpl, err := k.benchRecord(ctx, topic)
	if err != nil {
		return flow{}, err
	}
	keys := make([][]byte, n) // a fresh event id per record
	for i := range keys {
		keys[i] = []byte(watermill.NewUUID())
	}
	client, err := k.rawProducer(ctx, topic)
	if err != nil {
		return flow{}, err
	}
	defer client.Close()
	return k.timed(func() (int, error) {
		for sent := 0; sent < n; sent += batch {
			recs := make([]*kgo.Record, min(batch, n-sent))
			for i := range recs {
				recs[i] = &kgo.Record{Topic: topic, Key: keys[sent+i], Value: tmpl.Value, Headers: tmpl.Headers, Timestamp: tmpl.Timestamp}
			}
			if err := client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
}

// benchRecord is the record the relay makes of a bench event, published
// to topic.
func (k *kafkaBench) benchRecord(ctx context.Context, topic string) (*kgo.Record, error) {
	msg, _, err := outbox.Prepare(ctx, benchEvent(), k.top.Routable)
	if err != nil {
		return nil, err
	}
	sm, err := wkafka.DefaultMarshaler{}.Marshal(topic, msg)
	if err != nil {
		return nil, err
	}
	rec := &kgo.Record{Topic: topic, Timestamp: time.Now()}
	rec.Value, _ = sm.Value.Encode()
	for _, h := range sm.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
	}
	return rec, nil
}

// relayRound runs a round of the relay's drain of n rows (relay), to
// topics under the run's prefix and round's, deleted once it is done; with
// no round, to the run's own topics, which it keeps. Its producer
// connects (and creates its topics) before the clock starts, as the raw
// one does.
func (k *kafkaBench) relayRound(ctx context.Context, e *env, round string, n int) (flow, error) {
	cfg := k.cfg
	if round != "" {
		cfg.TopicPrefix += round
		defer k.deleteTopics(cfg.TopicPrefix, nil)
	}
	dest, err := kafka.NewProducer(cfg, k.top, nil, "moenda outbox relay", k.logger)
	if err != nil {
		return flow{}, err
	}
	defer dest.Close()
	if err := dest.PublishBatch(ctx, nil, nil); err != nil { // connects
		return flow{}, err
	}
	return k.relay(ctx, e, dest, n)
}

// rawProducer is the ceilings' producer, franz-go's client set as the
// relay's, with topic created with the partitions the relay's topics
// have; it connects before it returns.
func (k *kafkaBench) rawProducer(ctx context.Context, topic string) (*kgo.Client, error) {
	if err := kafka.CreateTopics(k.cfg, "moenda bench ceiling", []string{topic}); err != nil {
		return nil, err
	}
	client, err := kgo.NewClient(k.cfg.Producer("moenda bench ceiling")...)
	if err != nil {
		return nil, err
	}
	if err := client.Ping(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}

// relay fills the outbox with a backlog of n rows and runs the relay from
// the outbox's end, into dest, until dest has taken the n rows, timed
// from the relay's start.
func (k *kafkaBench) relay(ctx context.Context, e *env, dest outbox.Destination, n int) (flow, error) {
	if err := e.positionAtEnd(ctx, kafkaRelayGroup); err != nil {
		return flow{}, err
	}
	if err := e.fill(ctx, n); err != nil {
		return flow{}, fmt.Errorf("fill the outbox: %w", err)
	}
	counted := &countedDestination{Destination: dest, want: int64(n), done: make(chan struct{})}
	ocfg := e.set.Outbox
	ocfg.ConsumerGroup, ocfg.Reader = kafkaRelayGroup, e.reader
	relay, err := outbox.NewRelay(e.pool, counted, k.top.Routable, ocfg, k.logger)
	if err != nil {
		return flow{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	running := false
	defer func() { // once timed, not in the time
		stop()
		if running {
			<-done
		}
	}()
	return k.timed(func() (int, error) {
		running = true
		go func() { done <- relay.Run(runCtx) }()
		select {
		case <-counted.done:
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Minute):
			return 0, fmt.Errorf("the Kafka relay published %d of %d rows: %w", counted.sent.Load(), n, await.ErrTimeout)
		}
	})
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
	return d.count(d.Destination.PublishBatch(ctx, keys, msgs), len(msgs))
}

// Prepare builds the batch as the destination does, where it builds
// apart from sending (outbox.PreparingDestination), so the relay runs as
// it does in serve.
func (d *countedDestination) Prepare(keys []string, msgs []*message.Message) (outbox.Prepared, error) {
	c := countedBatch{d: d, n: len(msgs), publish: func(ctx context.Context) error { return d.Destination.PublishBatch(ctx, keys, msgs) }}
	if p, ok := d.Destination.(outbox.PreparingDestination); ok {
		built, err := p.Prepare(keys, msgs)
		if err != nil {
			return nil, err
		}
		c.publish = built.Publish
	}
	return c, nil
}

// count counts n messages confirmed, unless err.
func (d *countedDestination) count(err error, n int) error {
	if err == nil && d.sent.Add(int64(n)) >= d.want {
		d.once.Do(func() { close(d.done) })
	}
	return err
}

// countedBatch is a batch a countedDestination prepared.
type countedBatch struct {
	d       *countedDestination
	n       int
	publish func(context.Context) error
}

func (c countedBatch) Publish(ctx context.Context) error { return c.d.count(c.publish(ctx), c.n) }

// PublishAhead passes on the destination's choice (outbox.AheadDestination).
func (d *countedDestination) PublishAhead() bool {
	a, ok := d.Destination.(outbox.AheadDestination)
	return ok && a.PublishAhead()
}

// replay times `moenda replay analytics` over the topic the drain's first
// round filled, done as the command does it (the plugin's Rewind,
// kafka.Rewind, a kafka.Subscriber in group <queue>.replay and the
// router's whole chain with the inbox, the plugin writing one fact per
// event through a PostgreSQL unit of work on the bench database), from
// the router's start until every partition is read to its end, in rounds
// paired with rawConsume (the ceiling). Each round rewinds first, as the
// command does, so each does the same work.
func (k *kafkaBench) replay(ctx context.Context, e *env, r *Result) error {
	if _, err := migrations.Up(ctx, e.pool, slog.New(slog.DiscardHandler), migrations.Set{Name: k.def.Name, Files: k.def.Migrations}); err != nil {
		return err
	}
	topic, err := k.topic()
	if err != nil {
		return err
	}
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
	var events int64
	rounds, err := alternate(e, "Kafka replay", e.sz.rounds, func() (flow, error) {
		return k.rawConsume(ctx, e, topic)
	}, func() (flow, error) {
		run, err := replay.Start(ctx, replay.Deps{Kafka: k.cfg, Topology: k.top, Store: e.tx, Sink: failures, Logger: k.logger}, k.def, built, time.Time{})
		if err != nil {
			return flow{}, err
		}
		f, err := k.timed(func() (int, error) {
			if err := run.Read(ctx); err != nil {
				return 0, err
			}
			read, _ := run.Progress()
			return int(read), nil
		})
		if err != nil {
			return flow{}, err
		}
		var facts int64
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM analytics_eventos`).Scan(&facts); err != nil {
			return flow{}, err
		}
		read, total := run.Progress()
		if read != total || facts != total {
			return flow{}, fmt.Errorf("replay read %d of %d records and the projection holds %d facts", read, total, facts)
		}
		events = total
		return f, nil
	})
	if err != nil {
		return err
	}
	r.add(Row{Name: rowKafkaConsume, Value: rounds.row(Row{}).Ceiling, Unit: "msg/s", CPU: rounds.rawCPU()}, 0, 0)
	r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: Kafka replay of the analytics projection, %d events, batches of %d, against the raw consumer in the same rounds", events, replay.Batch),
		Unit: "events/s", Target: "ratio >= 0.50"}), 0.50, 0)
	return nil
}

// rawConsume reads every partition of topic from its oldest record to the
// high watermark it had at the start, one sarama partition consumer each,
// and writes a fact per record as the replay does: a batch of up to
// replay.Batch records of a partition in one INSERT of unnested arrays,
// its fields from the record's headers (the replay decodes each
// envelope), into a table of its own emptied first. It returns the rate
// from connecting to the last write.
func (k *kafkaBench) rawConsume(ctx context.Context, e *env, topic string) (flow, error) {
	if _, err := e.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_replay_raw (LIKE analytics_eventos INCLUDING ALL); TRUNCATE bench_replay_raw`); err != nil {
		return flow{}, err
	}
	write := func(ctx context.Context, msgs []*sarama.ConsumerMessage) error {
		ids, names, at := make([]string, len(msgs)), make([]string, len(msgs)), make([]time.Time, len(msgs))
		for i, m := range msgs {
			for _, h := range m.Headers {
				switch string(h.Key) {
				case wkafka.UUIDHeaderKey:
					ids[i] = string(h.Value)
				case event.MetaName:
					names[i] = string(h.Value)
				case event.MetaOccurredAt:
					at[i], _ = time.Parse(time.RFC3339Nano, string(h.Value))
				}
			}
		}
		_, err := e.pool.Exec(ctx, `INSERT INTO bench_replay_raw (event_id, evento, ocorrido_em)
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) ON CONFLICT (event_id) DO NOTHING`, ids, names, at)
		return err
	}
	return k.timed(func() (int, error) { return k.consumeAll(ctx, topic, write) })
}

// consumeAll reads topic as rawConsume says, handing write each batch,
// and returns how many records it read.
func (k *kafkaBench) consumeAll(ctx context.Context, topic string, write func(context.Context, []*sarama.ConsumerMessage) error) (int, error) {
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
			var batch []*sarama.ConsumerMessage
			flush := func() bool {
				if len(batch) == 0 {
					return true
				}
				if err := write(ctx, batch); err != nil {
					errs <- fmt.Errorf("partition %d: %w", p, err)
					return false
				}
				batch = batch[:0]
				return true
			}
			for {
				if len(pc.Messages()) == 0 && !flush() { // nothing more at hand
					return
				}
				select {
				case m := <-pc.Messages():
					total.Add(1)
					batch = append(batch, m)
					if len(batch) == replay.Batch && !flush() {
						return
					}
					if m.Offset+1 >= end {
						flush()
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
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return int(total.Load()), nil
}
