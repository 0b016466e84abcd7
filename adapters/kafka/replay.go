package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"golang.org/x/sync/errgroup"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// Replay reads a queue's exchange topics again, in a consumer group of its
// own, from the offsets Rewind set up to the end the topics had then.
type Replay struct {
	cfg   Config
	group string
	parts []*partition

	mu   sync.Mutex
	read int64
}

// partition is one partition a replay reads, and how far it has come.
type partition struct {
	src        source
	id         int32
	start, end int64
	next       int64 // guarded by Replay.mu
}

// Rewind points group at the records of queue's exchange topics stamped at
// or after from (the zero time: the oldest records), and returns the
// replay that reads them, up to the end the topics have now. Offsets are
// set explicitly, so this works for a new group and for one with committed
// offsets alike; no member of the group may be running.
func Rewind(cfg Config, top *topology.Topology, queue, group string, from time.Time) (*Replay, error) {
	srcs, err := sources(cfg, top, queue)
	if err != nil {
		return nil, err
	}
	r := &Replay{cfg: cfg, group: group}
	err = withClient(cfg, "moenda replay", func(client sarama.Client) error {
		for _, src := range srcs {
			if src.delay > 0 {
				continue // retry copies belong to the live readers
			}
			if err := createTopics(client, cfg, []string{src.topic}); err != nil {
				return err
			}
			ids, err := client.Partitions(src.topic)
			if err != nil {
				return fmt.Errorf("kafka: partitions of %s: %w", src.topic, err)
			}
			for _, id := range ids {
				end, err := client.GetOffset(src.topic, id, sarama.OffsetNewest)
				if err != nil {
					return fmt.Errorf("kafka: end of %s/%d: %w", src.topic, id, err)
				}
				start, err := offsetAt(client, src.topic, id, from, end)
				if err != nil {
					return err
				}
				r.parts = append(r.parts, &partition{src: src, id: id, start: start, end: end, next: start})
			}
		}
		return r.commit(client)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// offsetAt is the first offset of a record stamped at or after from, the
// oldest for the zero time, or end when no record is that recent.
func offsetAt(client sarama.Client, topic string, id int32, from time.Time, end int64) (int64, error) {
	at := sarama.OffsetOldest
	if !from.IsZero() {
		at = from.UnixMilli()
	}
	off, err := client.GetOffset(topic, id, at)
	if err != nil {
		return 0, fmt.Errorf("kafka: offset of %s/%d at %v: %w", topic, id, from, err)
	}
	if off < 0 {
		return end, nil
	}
	return off, nil
}

// commit records every partition's position as the group's offsets, so
// that Kafka's tools show how far the replay has come.
func (r *Replay) commit(client sarama.Client) error {
	offsets := map[string]map[int32]sarama.OffsetAndMetadata{}
	r.mu.Lock()
	for _, p := range r.parts {
		if offsets[p.src.topic] == nil {
			offsets[p.src.topic] = map[int32]sarama.OffsetAndMetadata{}
		}
		offsets[p.src.topic][p.id] = sarama.OffsetAndMetadata{Offset: p.next, LeaderEpoch: -1}
	}
	r.mu.Unlock()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka: admin: %w", err)
	}
	group := r.cfg.Group(r.group)
	resp, err := admin.AlterConsumerGroupOffsets(group, offsets, nil)
	if err != nil {
		return fmt.Errorf("kafka: set the offsets of group %s: %w", group, err)
	}
	for topic, parts := range resp.Errors {
		for id, kerr := range parts {
			if kerr != sarama.ErrNoError {
				return fmt.Errorf("kafka: set the offset of group %s on %s/%d: %w (is another replay of it running?)", group, topic, id, kerr)
			}
		}
	}
	return nil
}

// Read reads every partition from its start to its end, a goroutine per
// partition, and hands its records to handle in order, in batches of at
// most max, each with the delivery metadata a Subscriber sets; records the
// queue's bindings do not match count as read without reaching handle. A
// batch counts as read once handle returns nil. The group's offsets are
// committed every second and at the end. Read returns when every
// partition is read, when ctx ends or when handle fails.
func (r *Replay) Read(ctx context.Context, max int, handle func(ctx context.Context, msgs []*message.Message) error) error {
	client, err := sarama.NewClient(r.cfg.Brokers, r.cfg.Sarama("moenda replay"))
	if err != nil {
		return fmt.Errorf("kafka: connect to %v: %w", r.cfg.Brokers, err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("kafka: consumer: %w", err)
	}
	defer consumer.Close()
	g, gctx := errgroup.WithContext(ctx)
	for _, p := range r.parts {
		if p.start >= p.end {
			continue
		}
		g.Go(func() error { return r.readPartition(gctx, consumer, p, max, handle) })
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if cerr := r.commit(client); err == nil && cerr != nil {
				err = cerr
			}
			return err
		case <-tick.C:
			if err := r.commit(client); err != nil {
				return err
			}
		}
	}
}

func (r *Replay) readPartition(ctx context.Context, consumer sarama.Consumer, p *partition, max int, handle func(context.Context, []*message.Message) error) error {
	pc, err := consumer.ConsumePartition(p.src.topic, p.id, p.start)
	if err != nil {
		return fmt.Errorf("kafka: read %s/%d from %d: %w", p.src.topic, p.id, p.start, err)
	}
	defer pc.Close()
	next := p.start
	for next < p.end {
		var recs []*sarama.ConsumerMessage
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pc.Errors():
			return fmt.Errorf("kafka: read %s/%d: %w", p.src.topic, p.id, err)
		case rec := <-pc.Messages():
			recs = append(recs, rec)
		}
	more: // whatever has arrived, up to max and the end
		for len(recs) < max && recs[len(recs)-1].Offset+1 < p.end {
			select {
			case rec := <-pc.Messages():
				recs = append(recs, rec)
			default:
				break more
			}
		}
		msgs := make([]*message.Message, 0, len(recs))
		for _, rec := range recs {
			msg, err := p.src.message(rec)
			if err != nil {
				return err
			}
			if msg != nil {
				msgs = append(msgs, msg)
			}
		}
		if len(msgs) > 0 {
			if err := handle(ctx, msgs); err != nil {
				return err
			}
		}
		next = recs[len(recs)-1].Offset + 1
		r.advance(p, next)
	}
	return nil
}

// message is a record of src as a delivery, or nil for one the queue's
// bindings do not match.
func (src source) message(rec *sarama.ConsumerMessage) (*message.Message, error) {
	msg, err := wkafka.DefaultMarshaler{}.Unmarshal(rec)
	if err != nil {
		return nil, fmt.Errorf("kafka: %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
	}
	name, err := event.ParseName(msg.Metadata.Get(event.MetaName))
	if err == nil && !matchesAny(src.patterns, name.Base) {
		return nil, nil
	}
	msg.Metadata.Set(event.MetaDeliveryExchange, src.exchange)
	msg.Metadata.Set(event.MetaDeliveryRoutingKey, name.Base)
	return msg, nil
}

func (r *Replay) advance(p *partition, next int64) {
	r.mu.Lock()
	r.read += next - p.next
	p.next = next
	r.mu.Unlock()
}

// Progress returns how many records were read and how many there are.
func (r *Replay) Progress() (read, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.parts {
		total += p.end - p.start
	}
	return r.read, total
}
