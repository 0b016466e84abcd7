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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// Producer publishes to Kafka with the idempotent producer and acks=all. It
// is the relay's destination (one topic per exchange) and the router's
// failure sink (retry and dead-letter topics). It connects on first use and
// again after a failure, creating the topics it needs each time, so a
// process starts while Kafka is away and carries on once it is back.
//
// It sends with franz-go's client rather than sarama's, which the
// subscribers read with: a quarter of sarama's CPU per record, and on two
// cores the relay's drain gained up to a quarter more rows a second
// (BENCHMARKS.md, "Kafka: franz-go's producer against sarama's"). Records
// go to the partitions sarama's hash of their key names, so an
// aggregate's events keep their partition.
type Producer struct {
	cfg    Config
	top    *topology.Topology
	topics []string
	name   string
	logger *slog.Logger

	mu     sync.Mutex
	client *kgo.Client
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
	b := &batch{p: p, keys: routingKeys, msgs: msgs, recs: make([]*kgo.Record, len(msgs))}
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
	recs []*kgo.Record
}

// record builds the record of the batch's i-th message.
func (b *batch) record(i int) (*kgo.Record, error) {
	x, err := b.p.top.ExchangeFor(b.keys[i])
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return record(b.p.cfg.Topic(x), event.Encoded(b.p.top.Published(x), b.msgs[i]), occurredAt(b.msgs[i]))
}

// Publish sends the batch's records, as PublishBatch does.
func (b *batch) Publish(ctx context.Context) error {
	failed, err := b.p.send(ctx, b.recs)
	if err != nil || len(failed) == 0 {
		return err
	}
	anyRefused := false
	for i, ferr := range failed {
		failed[i] = b.p.refused(b.recs[i], ferr)
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
			rec, err := b.record(i) // a record sent once is the client's
			var alone map[int]error
			if err == nil {
				alone, err = b.p.send(ctx, []*kgo.Record{rec})
			}
			switch {
			case err != nil:
				failed[i] = err
			case len(alone) == 0:
				delete(failed, i)
			default:
				failed[i] = b.p.refused(rec, alone[0])
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

// refused marks err, rec's failure, outbox.ErrRefused when the broker will
// never take rec: too large for the producer's limit
// (kafka.max_record_bytes), which the error names, or the broker's
// (message.max.bytes, a topic's max.message.bytes), or a record it calls
// invalid.
func (p *Producer) refused(rec *kgo.Record, err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge) && recordSize(rec) > p.cfg.MaxRecordBytes:
		return fmt.Errorf("%w: the record is larger than kafka.max_record_bytes (%d): %w", outbox.ErrRefused, p.cfg.MaxRecordBytes, err)
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return fmt.Errorf("%w: the record is too large for the topic (its max.message.bytes, or the broker's message.max.bytes): %w", outbox.ErrRefused, err)
	case errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.InvalidTimestamp):
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
	if recordSize(rec) <= p.recordLimit() {
		return p.sendOne(ctx, rec)
	}
	cp := msg.Copy()
	cp.Metadata.Set(event.HeaderReason, event.ReasonTooLarge)
	p.logger.WarnContext(ctx, "kafka: the retry copy would be larger than a record may be (kafka.max_record_bytes): it goes to the dead-letter topic, its body cut",
		"event_id", msg.Metadata.Get(event.HeaderEventID), "correlation_id", msg.Metadata.Get(event.HeaderCorrelationID), "queue", queue,
		"size", recordSize(rec), "limit", p.recordLimit())
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
	if over := recordSize(rec) - p.recordLimit(); over > 0 {
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
	return p.sendOne(ctx, rec)
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
	return p.sendOne(ctx, rec)
}

// Republish implements transport.Sink: to exchange's topic, which every
// group of the exchange reads.
func (p *Producer) Republish(ctx context.Context, exchange, _ string, msg *message.Message) error {
	rec, err := record(p.cfg.Topic(exchange), msg, time.Now())
	if err != nil {
		return err
	}
	return p.sendOne(ctx, rec)
}

// recordMargin is what a record holds beyond its body and headers (its
// key, the framing of its fields), and again what a broker counts beyond a
// record's own size against its limit (the record batch holding it).
const recordMargin = 1 << 10

// MaxEventBytes is the largest event (as event.Size counts it) a record
// of c.MaxRecordBytes holds with its framing.
func (c Config) MaxEventBytes() int { return c.MaxRecordBytes - recordMargin }

// recordLimit is the largest a failure copy may be, as recordSize counts
// it: a broker whose message.max.bytes is kafka.max_record_bytes takes it
// in a batch of its own.
func (p *Producer) recordLimit() int {
	return p.cfg.MaxRecordBytes - recordMargin
}

// recordSize is rec's size in a record batch, at most: its key, value
// and headers, each with its length, and the record's own fields.
func recordSize(rec *kgo.Record) int {
	const field = binary.MaxVarintLen32
	n := 1 + 2*binary.MaxVarintLen64 + 4*field + len(rec.Key) + len(rec.Value) // attributes, deltas, lengths
	for _, h := range rec.Headers {
		n += 2*field + len(h.Key) + len(h.Value)
	}
	return n
}

// record is msg as a Kafka record stamped at: the envelope as value, and
// the metadata as headers beside the message's id, as watermill-kafka's
// marshaler writes them (the subscribers read them with it); keyed by the
// event's aggregate (else its id).
func record(topic string, msg *message.Message, at time.Time) (*kgo.Record, error) {
	if msg.Metadata.Get(wkafka.UUIDHeaderKey) != "" {
		return nil, fmt.Errorf("kafka: event %s: metadata %s is the message id's header", msg.UUID, wkafka.UUIDHeaderKey)
	}
	headers := make([]kgo.RecordHeader, 1, len(msg.Metadata)+1)
	headers[0] = kgo.RecordHeader{Key: wkafka.UUIDHeaderKey, Value: []byte(msg.UUID)}
	for k, v := range msg.Metadata {
		switch k {
		case event.MetaDeliveryExchange, event.MetaDeliveryRoutingKey: // a failure copy's: where it was delivered from
		default:
			headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	key := msg.Metadata.Get(event.MetaAggregateID)
	if key == "" {
		key = msg.UUID
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: msg.Payload, Headers: headers, Timestamp: at}, nil
}

// occurredAt is when msg's event occurred, which stamps its record so a
// replay can start from a time; now, for a message that does not say.
func occurredAt(msg *message.Message) time.Time {
	if at, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(event.MetaOccurredAt)); err == nil {
		return at
	}
	return time.Now()
}

// deliveryTimeout bounds a send, retries included, so a producer whose
// cluster is away fails, to be retried by its caller, rather than wait
// for it. (franz-go's own RecordDeliveryTimeout counts from a record's
// timestamp, which is when its event occurred: a backlog would time out
// at once.)
const deliveryTimeout = 10 * time.Second

// send sends recs and waits until every in-sync replica has each, or it
// failed, for at most deliveryTimeout: it returns the records that
// failed, by their index in recs. A failure closes the client, so the
// next send starts again with a new producer id: a record that timed out
// in flight may have been written, and sent again is then written twice,
// which the readers' inbox absorbs as it does any redelivery. The error
// is the connection's.
func (p *Producer) send(ctx context.Context, recs []*kgo.Record) (map[int]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.client == nil {
		if err := p.connect(ctx); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, deliveryTimeout)
	defer cancel()
	var failed map[int]error
	var index map[*kgo.Record]int
	for _, res := range p.client.ProduceSync(ctx, recs...) { // in the order they end
		if res.Err == nil {
			continue
		}
		if index == nil {
			failed, index = map[int]error{}, make(map[*kgo.Record]int, len(recs))
			for i, rec := range recs {
				index[rec] = i
			}
		}
		failed[index[res.Record]] = res.Err
	}
	if failed != nil {
		p.disconnect()
	}
	return failed, nil
}

// sendOne sends rec, as send does.
func (p *Producer) sendOne(ctx context.Context, rec *kgo.Record) error {
	failed, err := p.send(ctx, []*kgo.Record{rec})
	if err == nil && failed != nil {
		err = failed[0]
	}
	if err != nil {
		return fmt.Errorf("kafka: publish to %s: %w", rec.Topic, err)
	}
	return nil
}

// connect creates the producer's topics, then opens its client, set as
// Config.Producer says.
func (p *Producer) connect(ctx context.Context) error {
	if err := CreateTopics(p.cfg, p.name, p.topics); err != nil {
		return err
	}
	client, err := kgo.NewClient(p.cfg.Producer(p.name)...)
	if err != nil {
		return fmt.Errorf("kafka: producer: %w", err)
	}
	p.client = client
	p.logger.InfoContext(ctx, "kafka: producer connected", "producer", p.name, "brokers", p.cfg.Brokers)
	return nil
}

func (p *Producer) disconnect() {
	if p.client != nil {
		p.client.Close()
	}
	p.client = nil
}

// Close closes the connection, if there is one.
func (p *Producer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.disconnect()
	return nil
}

// CreateTopics creates the topics that do not exist yet, with the
// partitions and replication factor cfg gives, over a client of its own
// named clientID.
func CreateTopics(cfg Config, clientID string, topics []string) error {
	return withClient(cfg, clientID, func(client sarama.Client) error { return createTopics(client, cfg, topics) })
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
