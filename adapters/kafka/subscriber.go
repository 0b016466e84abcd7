package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/handlers/event"
)

// Subscriber consumes a queue of the topology on Kafka: topic = queue
// name, as for RabbitMQ. It reads the topics of the exchanges the queue is
// bound on, in a consumer group, and hands on the events its bindings
// match (acknowledging the others); it also reads the queue's retry
// topics, holding each copy back until its delay has passed. Records of one
// partition are handled one at a time, in order; the offset of a record is
// committed after its handler acknowledged it, so a crash redelivers
// (at least once) and the inbox deduplicates.
//
// A subscription that ends (Close, or its context) hands out no more
// records at once but lets the messages in hand finish: their contexts
// live on for the grace period (see NewSubscriber), and the offsets of
// those acknowledged meanwhile are committed before the consumer leaves
// its group. watermill-kafka ends every message's context when its
// subscriber closes or its subscription's context ends, and Watermill's
// router does both before it waits for its handlers; so each queue's
// watermill-kafka subscriber is closed only once its messages are
// answered, and subscribes with a context that outlives the router's.
type Subscriber struct {
	cfg    Config
	top    *topology.Topology
	group  func(queue string) string
	logger *slog.Logger
	// grace is how long messages in hand keep their contexts once their
	// subscription ends.
	grace time.Duration

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	// mu guards errs, the errors of closing each queue's consumer.
	mu   sync.Mutex
	errs []error
}

// NewSubscriber returns a subscriber reading each queue in the consumer
// group group(queue). closeTimeout bounds a subscription's end: the
// messages in hand keep their contexts for nine tenths of it, as with
// RabbitMQ (amqp.NewSubscriber); a record whose message is unanswered
// then is not committed, and comes again to the group.
func NewSubscriber(cfg Config, top *topology.Topology, group func(queue string) string, closeTimeout time.Duration, logger *slog.Logger) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka subscriber: %w", err)
	}
	if top == nil || group == nil || logger == nil {
		return nil, errors.New("kafka subscriber: the topology, the group naming and the logger are required")
	}
	if closeTimeout <= 0 {
		return nil, fmt.Errorf("kafka subscriber: the close timeout must be positive, got %s", closeTimeout)
	}
	return &Subscriber{cfg: cfg, top: top, group: group, logger: logger, grace: transport.Grace(closeTimeout), closing: make(chan struct{})}, nil
}

// source is one topic a queue reads, and what becomes of its records.
type source struct {
	topic    string
	exchange string        // an exchange's topic: patterns filter it
	patterns []string      // the queue's binding keys on exchange
	delay    time.Duration // a retry topic: records wait this long
	// asIs: a topic of one queue's own (its dead letters, or what a
	// re-drive sends it), whose every record is handed on as it is.
	asIs bool
}

// sources lists the topics a queue reads: its exchanges', its retry
// tiers' and its re-drive topic; a dead-letter queue's is its own topic.
func sources(cfg Config, top *topology.Topology, queue string) ([]source, error) {
	if slices.Contains(top.DeadLetterQueues(), queue) {
		return []source{{topic: cfg.Topic(queue), asIs: true}}, nil
	}
	pol, ok := top.Policy(queue)
	if !ok {
		return nil, fmt.Errorf("kafka: no subscription consumes %q", queue)
	}
	var out []source
	for _, b := range top.BindingsOf(queue) {
		i := len(out) - 1
		if i < 0 || out[i].exchange != b.Exchange {
			out = append(out, source{topic: cfg.Topic(b.Exchange), exchange: b.Exchange})
			i++
		}
		out[i].patterns = append(out[i].patterns, b.Key)
	}
	for _, d := range pol.Delays {
		out = append(out, source{topic: cfg.Topic(topology.RetryQueue(queue, d)), delay: d})
	}
	return append(out, source{topic: cfg.Topic(topology.RedriveQueue(queue)), asIs: true}), nil
}

// Topics lists the topics the queues read and write: their exchanges',
// retry tiers', re-drive and dead-letter queues'.
func Topics(top *topology.Topology, queues []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(t string) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	for _, q := range queues {
		for _, b := range top.BindingsOf(q) {
			add(b.Exchange)
		}
		pol, _ := top.Policy(q)
		for _, d := range pol.Delays {
			add(topology.RetryQueue(q, d))
		}
		add(topology.RedriveQueue(q))
		if pol.DeadLetterQueue != "" {
			add(pol.DeadLetterQueue)
		}
	}
	return out
}

// Subscribe implements message.Subscriber with topic = queue name. It
// returns at once; while Kafka is away it keeps trying in the background.
// When ctx ends or the subscriber closes, the returned channel closes at
// once; the messages in hand keep ctx's values and their contexts until
// they are answered or the grace period ends.
func (s *Subscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	srcs, err := sources(s.cfg, s.top, queue)
	if err != nil {
		return nil, err
	}
	group := s.cfg.Group(s.group(queue))
	sc := s.cfg.Sarama("moenda " + group)
	ws, err := wkafka.NewSubscriber(wkafka.SubscriberConfig{
		Brokers:               s.cfg.Brokers,
		Unmarshaler:           wkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         group,
		NackResendSleep:       100 * time.Millisecond,
		ReconnectRetrySleep:   time.Second,
	}, watermill.NewSlogLoggerWithLevelMapping(s.logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}))
	if err != nil {
		return nil, fmt.Errorf("kafka: subscribe %s: %w", queue, err)
	}

	// hand is the context watermill-kafka derives the messages' contexts
	// from: it ends only with the grace period that follows ctx's end.
	hand, endHand := context.WithCancel(context.WithoutCancel(ctx))
	out := make(chan *message.Message)
	log := s.logger.With("queue", queue, "consumer_group", group)
	var pumps sync.WaitGroup
	var inHand transport.InHand
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if s.prepare(ctx, srcs, log) {
			for _, src := range srcs {
				pumps.Add(1)
				go func() {
					defer pumps.Done()
					s.pump(ctx, hand, ws, src, out, &inHand, log)
				}()
			}
			pumps.Wait()
		}
		close(out)
		err := s.finish(ws, &inHand, endHand, log)
		if err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("kafka: close the consumer of %s: %w", queue, err))
			s.mu.Unlock()
		}
	}()
	return out, nil
}

// finish waits for the messages in hand to be answered, for the grace
// period at most, then ends their contexts and closes ws, which commits
// the offsets of those acknowledged.
func (s *Subscriber) finish(ws *wkafka.Subscriber, inHand *transport.InHand, endHand context.CancelFunc, log *slog.Logger) error {
	grace := time.NewTimer(s.grace)
	defer grace.Stop()
	select {
	case <-inHand.Answered():
		// watermill-kafka marks an acknowledged record's offset in a
		// goroutine of its own, woken by the ack, and only while the
		// consumer's session lives; ending hand ends that session, so at
		// once it could come first, and the record would come again to
		// the group. Give that goroutine a moment, within the grace.
		select {
		case <-time.After(markSettle):
		case <-grace.C:
		}
	case <-grace.C:
		log.Warn("kafka: handlers did not answer by the end of the grace period; their records come again to the group")
	}
	endHand()
	return ws.Close()
}

// markSettle is how long a closing subscriber waits, once every message
// in hand is answered, before it ends the consumers' sessions (see
// finish).
const markSettle = 250 * time.Millisecond

// prepare creates the queue's topics, trying again every second while
// Kafka is away; it reports false when the subscriber stops first.
func (s *Subscriber) prepare(ctx context.Context, srcs []source, log *slog.Logger) bool {
	topics := make([]string, len(srcs))
	for i, src := range srcs {
		topics[i] = src.topic
	}
	for attempt := 0; ; attempt++ {
		err := CreateTopics(s.cfg, "moenda admin", topics)
		if err == nil {
			return true
		}
		if attempt == 0 {
			log.Warn("kafka: cannot reach the cluster; the queue waits for it", "error", err)
		}
		if !s.sleep(ctx, time.Second) {
			return false
		}
	}
}

// pump hands the records of one topic to out until ctx ends or the
// subscriber stops, subscribing ws with hand, and counts the messages
// handed out in inHand until each is answered.
func (s *Subscriber) pump(ctx, hand context.Context, ws *wkafka.Subscriber, src source, out chan<- *message.Message, inHand *transport.InHand, log *slog.Logger) {
	var ch <-chan *message.Message
	for {
		select {
		case <-s.closing:
			return
		case <-ctx.Done():
			return
		default:
		}
		var err error
		ch, err = ws.Subscribe(hand, src.topic)
		if err == nil {
			break
		}
		log.Warn("kafka: subscribe failed; trying again", "topic", src.topic, "error", err)
		if !s.sleep(ctx, time.Second) {
			return
		}
	}
	for {
		msg, ok := transport.Next(ctx, s.closing, ch)
		if !ok {
			return
		}
		if src.delay > 0 {
			at, _ := wkafka.MessageTimestampFromCtx(msg.Context())
			if !s.sleep(ctx, time.Until(at.Add(src.delay))) {
				return
			}
			msg.Metadata.Set(event.MetaDeliveryExchange, src.topic)
		} else if !src.asIs {
			name, err := event.ParseName(msg.Metadata.Get(event.MetaName))
			if err == nil && !matchesAny(src.patterns, name.Base) {
				msg.Ack() // another queue's event on a shared topic
				continue
			}
			msg.Metadata.Set(event.MetaDeliveryExchange, src.exchange)
			msg.Metadata.Set(event.MetaDeliveryRoutingKey, name.Base)
		}
		if !inHand.Pass(ctx, s.closing, out, msg) {
			return
		}
	}
}

func matchesAny(patterns []string, key string) bool {
	for _, p := range patterns {
		if topology.Match(p, key) {
			return true
		}
	}
	return false
}

// sleep waits d, and reports false if the subscriber or ctx stopped first.
func (s *Subscriber) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

// Close stops every subscription, hands out no more records, and waits
// for the messages in hand to be answered (for the grace period at most:
// see NewSubscriber) before each consumer commits what was acknowledged
// and leaves its group; records not acknowledged come again to the
// group's next member.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// withClient runs fn with a client of its own.
func withClient(cfg Config, name string, fn func(sarama.Client) error) error {
	client, err := sarama.NewClient(cfg.Brokers, cfg.Sarama(name))
	if err != nil {
		return fmt.Errorf("kafka: connect to %v: %w", cfg.Brokers, err)
	}
	defer client.Close()
	return fn(client)
}
