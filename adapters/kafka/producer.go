package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// Producer publishes to Kafka with the idempotent producer and acks=all. It
// is the relay's destination (one topic per exchange) and the router's
// failure sink (retry and dead-letter topics). It connects on first use and
// again after a failure, creating the topics it needs each time, so a
// process starts while Kafka is away and carries on once it is back.
type Producer struct {
	cfg    Config
	top    *topology.Topology
	topics []string
	name   string
	logger *slog.Logger

	mu     sync.Mutex
	client sarama.Client
	sp     sarama.SyncProducer
}

// NewProducer returns a producer that creates, on connecting, the topics
// of every exchange of top and those listed in extra.
func NewProducer(cfg Config, top *topology.Topology, extra []string, name string, logger *slog.Logger) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	if top == nil || logger == nil {
		return nil, errors.New("kafka producer: the topology and the logger are required")
	}
	var topics []string
	for _, x := range top.EventExchanges() {
		topics = append(topics, cfg.Topic(x))
	}
	for _, t := range extra {
		topics = append(topics, cfg.Topic(t))
	}
	return &Producer{cfg: cfg, top: top, topics: topics, name: name, logger: logger}, nil
}

// PublishBatch publishes each message to its exchange's topic, in that
// exchange's envelope format, and returns once every in-sync replica has
// it. It implements the relay's Destination: when only some records
// failed, it returns an outbox.BatchError naming them, those the broker
// will never take marked outbox.ErrRefused (see refused).
func (p *Producer) PublishBatch(ctx context.Context, routingKeys []string, msgs []*message.Message) error {
	b, err := p.Prepare(routingKeys, msgs)
	if err != nil {
		return err
	}
	return b.Publish(ctx)
}

// Prepare implements outbox.PreparingDestination: it builds the batch's
// records, which PublishBatch would build before sending them.
func (p *Producer) Prepare(routingKeys []string, msgs []*message.Message) (outbox.Prepared, error) {
	b := &batch{p: p, keys: routingKeys, msgs: msgs, recs: make([]*sarama.ProducerMessage, len(msgs))}
	for i := range msgs {
		var err error
		if b.recs[i], err = b.record(i); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// batch is a batch of records built to publish, with the messages they
// were built from.
type batch struct {
	p    *Producer
	keys []string
	msgs []*message.Message
	recs []*sarama.ProducerMessage
}

// record builds the record of the batch's i-th message.
func (b *batch) record(i int) (*sarama.ProducerMessage, error) {
	x, err := b.p.top.ExchangeFor(b.keys[i])
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return record(b.p.cfg.Topic(x), event.Encoded(b.p.top.Published(x), b.msgs[i]), occurredAt(b.msgs[i]))
}

// Publish sends the batch's records, as PublishBatch does.
func (b *batch) Publish(ctx context.Context) error {
	err := b.p.send(ctx, b.recs)
	var perrs sarama.ProducerErrors
	if !errors.As(err, &perrs) {
		return err
	}
	index := make(map[*sarama.ProducerMessage]int, len(b.recs))
	for i, rec := range b.recs {
		index[rec] = i
	}
	failed := make(map[int]error, len(perrs))
	anyRefused := false
	for _, pe := range perrs {
		i, ok := index[pe.Msg]
		if !ok {
			return err // not a record of this batch: fail the batch as a whole
		}
		failed[i] = refused(pe.Err)
		anyRefused = anyRefused || errors.Is(failed[i], outbox.ErrRefused)
	}
	// A broker refuses a record batch as a whole: one record over its
	// limit, or several that only together are, fail every record sent
	// with them to that partition, and the idempotent producer may fail
	// the records sent after them to it with another error (their
	// sequence then has a gap). Sent alone, in their order, each fails
	// only for itself.
	if anyRefused && len(failed) > 1 {
		for _, i := range slices.Sorted(maps.Keys(failed)) {
			rec, berr := b.record(i)
			if berr == nil {
				berr = b.p.send(ctx, []*sarama.ProducerMessage{rec})
			}
			var alone sarama.ProducerErrors
			switch {
			case berr == nil:
				delete(failed, i)
			case errors.As(berr, &alone) && len(alone) == 1:
				failed[i] = refused(alone[0].Err)
			default:
				failed[i] = berr
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("kafka: publish %d records: %w", len(b.recs), &outbox.BatchError{Failed: failed})
}

// PublishAhead implements outbox.AheadDestination: the logical relay
// sends the next batch while it records the last one's position. A crash
// then repeats up to two batches, which the readers' inbox absorbs as it
// does one; the drain gains what the record took (BENCHMARKS.md, "Kafka
// relay: publishing ahead").
func (p *Producer) PublishAhead() bool { return true }

// refused marks err outbox.ErrRefused when the broker will never take the
// record it is about: too large for the producer's limit
// (kafka.max_record_bytes) or the broker's (message.max.bytes, a topic's
// max.message.bytes), or a record it calls invalid.
func refused(err error) error {
	var local sarama.ConfigurationError // the producer's own size check
	switch {
	case errors.As(err, &local),
		errors.Is(err, sarama.ErrMessageSizeTooLarge),
		errors.Is(err, sarama.ErrMessageSetSizeTooLarge),
		errors.Is(err, sarama.ErrInvalidRecord),
		errors.Is(err, sarama.ErrInvalidTimestamp):
		return fmt.Errorf("%w: %w", outbox.ErrRefused, err)
	}
	return err
}

// Delay implements router.Sink: the copy waits in the queue's retry topic
// for delay (the Subscriber holds it back until then), then its handler
// runs again. A copy too large for a record (the failure headers added
// to a record near the limit) cannot wait there: it goes to the
// dead-letter topic cut to fit (see DeadLetter), as too_large, so its
// partition moves on.
func (p *Producer) Delay(ctx context.Context, queue string, delay time.Duration, msg *message.Message) error {
	topic := topology.RetryQueue(queue, delay)
	rec, err := record(p.cfg.Topic(topic), msg, time.Now()) // stamped now: the delay runs from this moment
	if err != nil {
		return err
	}
	if rec.ByteSize(recordVersion) <= p.recordLimit() {
		return p.send(ctx, []*sarama.ProducerMessage{rec})
	}
	cp := msg.Copy()
	cp.Metadata.Set(event.HeaderReason, event.ReasonTooLarge)
	p.logger.WarnContext(ctx, "kafka: the retry copy would be larger than a record may be (kafka.max_record_bytes): it goes to the dead-letter topic, its body cut",
		"event_id", msg.Metadata.Get(event.HeaderEventID), "correlation_id", msg.Metadata.Get(event.HeaderCorrelationID), "queue", queue,
		"size", rec.ByteSize(recordVersion), "limit", p.recordLimit())
	return p.DeadLetter(ctx, queue, cp)
}

// DeadLetter implements router.Sink: the copy goes to the topic named
// after the queue's dead-letter queue. A copy larger than a record may be
// has its body cut to fit, and says so in event.HeaderTruncated: a record
// the producer cannot send would send the delivery back to its partition,
// which would then never move on.
func (p *Producer) DeadLetter(ctx context.Context, queue string, msg *message.Message) error {
	pol, ok := p.top.Policy(queue)
	if !ok {
		return fmt.Errorf("kafka: no subscription consumes %q", queue)
	}
	rec, err := record(p.cfg.Topic(pol.DeadLetterQueue), msg, time.Now())
	if err != nil {
		return err
	}
	if over := rec.ByteSize(recordVersion) - p.recordLimit(); over > 0 {
		cp := msg.Copy()
		cp.Metadata.Set(event.HeaderTruncated, strconv.Itoa(len(msg.Payload)))
		over += len(event.HeaderTruncated) + len(cp.Metadata.Get(event.HeaderTruncated)) + 2*binary.MaxVarintLen32
		cp.Payload = cp.Payload[:max(0, len(cp.Payload)-over)]
		if rec, err = record(p.cfg.Topic(pol.DeadLetterQueue), cp, time.Now()); err != nil {
			return err
		}
		p.logger.WarnContext(ctx, "kafka: the dead letter would be larger than a record may be (kafka.max_record_bytes): its body is cut",
			"event_id", msg.Metadata.Get(event.HeaderEventID), "correlation_id", msg.Metadata.Get(event.HeaderCorrelationID), "queue", queue,
			"body_bytes", len(msg.Payload), "kept_bytes", len(cp.Payload))
	}
	return p.send(ctx, []*sarama.ProducerMessage{rec})
}

// Redeliver implements transport.Sink: the copy goes to queue's re-drive
// topic (topology.RedriveQueue), which only queue's consumer group reads.
func (p *Producer) Redeliver(ctx context.Context, queue string, msg *message.Message) error {
	if _, ok := p.top.Policy(queue); !ok {
		return fmt.Errorf("kafka: no subscription consumes %q", queue)
	}
	rec, err := record(p.cfg.Topic(topology.RedriveQueue(queue)), msg, time.Now())
	if err != nil {
		return err
	}
	return p.send(ctx, []*sarama.ProducerMessage{rec})
}

// Republish implements transport.Sink: to exchange's topic, which every
// group of the exchange reads.
func (p *Producer) Republish(ctx context.Context, exchange, _ string, msg *message.Message) error {
	rec, err := record(p.cfg.Topic(exchange), msg, time.Now())
	if err != nil {
		return err
	}
	return p.send(ctx, []*sarama.ProducerMessage{rec})
}

// recordVersion is the record format the producer writes (Kafka 0.11 and
// later), for sarama's size estimate.
const recordVersion = 2

// recordMargin is what a record holds beyond its body and headers (its
// key, the framing of its fields), and again what a broker counts beyond a
// record's own size against its limit (the record batch holding it).
const recordMargin = 1 << 10

// MaxEventBytes is the largest event (as event.Size counts it) a record
// of c.MaxRecordBytes holds with its framing.
func (c Config) MaxEventBytes() int { return c.MaxRecordBytes - recordMargin }

// recordLimit is the largest a failure copy may be, as sarama estimates
// a record's size: a broker whose message.max.bytes is
// kafka.max_record_bytes takes it in a batch of its own.
func (p *Producer) recordLimit() int {
	return p.cfg.MaxRecordBytes - recordMargin
}

// record is msg as a Kafka record stamped at: the envelope as value, the
// metadata as headers, keyed by the event's aggregate (else its id).
func record(topic string, msg *message.Message, at time.Time) (*sarama.ProducerMessage, error) {
	if _, ok := msg.Metadata[event.MetaDeliveryExchange]; ok {
		// A failure copy: where it was delivered from is not a header.
		msg = msg.Copy()
		delete(msg.Metadata, event.MetaDeliveryExchange)
		delete(msg.Metadata, event.MetaDeliveryRoutingKey)
	}
	rec, err := wkafka.DefaultMarshaler{}.Marshal(topic, msg)
	if err != nil {
		return nil, fmt.Errorf("kafka: event %s: %w", msg.UUID, err)
	}
	key := msg.Metadata.Get(event.MetaAggregateID)
	if key == "" {
		key = msg.UUID
	}
	rec.Key = sarama.StringEncoder(key)
	rec.Timestamp = at
	return rec, nil
}

// occurredAt is when msg's event occurred, which stamps its record so a
// replay can start from a time; now, for a message that does not say.
func occurredAt(msg *message.Message) time.Time {
	if at, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(event.MetaOccurredAt)); err == nil {
		return at
	}
	return time.Now()
}

func (p *Producer) send(ctx context.Context, recs []*sarama.ProducerMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.sp == nil {
		if err := p.connect(); err != nil {
			return err
		}
	}
	if err := p.sp.SendMessages(recs); err != nil {
		// An idempotent producer that failed may hold sequence numbers
		// the broker never saw: start again with a new producer id.
		p.disconnect()
		return fmt.Errorf("kafka: publish %d records: %w", len(recs), err)
	}
	return nil
}

func (p *Producer) connect() error {
	client, err := sarama.NewClient(p.cfg.Brokers, p.cfg.Sarama(p.name))
	if err != nil {
		return fmt.Errorf("kafka: connect to %v: %w", p.cfg.Brokers, err)
	}
	if err := createTopics(client, p.cfg, p.topics); err != nil {
		_ = client.Close()
		return err
	}
	sp, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("kafka: producer: %w", err)
	}
	p.client, p.sp = client, sp
	p.logger.Info("kafka: producer connected", "producer", p.name, "brokers", p.cfg.Brokers)
	return nil
}

func (p *Producer) disconnect() {
	if p.sp != nil {
		_ = p.sp.Close()
		_ = p.client.Close()
	}
	p.client, p.sp = nil, nil
}

// Close closes the connection, if there is one.
func (p *Producer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.disconnect()
	return nil
}

// createTopics creates the topics that do not exist yet.
func createTopics(client sarama.Client, cfg Config, topics []string) error {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka: admin: %w", err)
	}
	// Closing the admin would close the shared client.
	existing, err := admin.ListTopics()
	if err != nil {
		return fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, t := range topics {
		if _, ok := existing[t]; ok {
			continue
		}
		err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("kafka: create topic %s: %w", t, err)
		}
		existing[t] = sarama.TopicDetail{}
	}
	return nil
}

// Blocked is "": Kafka has no broker-wide alarm that holds a producer back.
func (p *Producer) Blocked() string { return "" }
