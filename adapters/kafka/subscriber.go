package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
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
type Subscriber struct {
	cfg    Config
	top    *topology.Topology
	group  func(queue string) string
	logger *slog.Logger

	closing   chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	subs      []*wkafka.Subscriber
	wg        sync.WaitGroup
	// lifecycle keeps watermill-kafka's Subscribe and Close apart: they
	// use one WaitGroup, whose Add may not race its Wait.
	lifecycle sync.Mutex
}

// NewSubscriber returns a subscriber reading each queue in the consumer
// group group(queue).
func NewSubscriber(cfg Config, top *topology.Topology, group func(queue string) string, logger *slog.Logger) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka subscriber: %w", err)
	}
	if top == nil || group == nil || logger == nil {
		return nil, errors.New("kafka subscriber: the topology, the group naming and the logger are required")
	}
	return &Subscriber{cfg: cfg, top: top, group: group, logger: logger, closing: make(chan struct{})}, nil
}

// source is one topic a queue reads, and what becomes of its records.
type source struct {
	topic    string
	exchange string        // an exchange's topic: patterns filter it
	patterns []string      // the queue's binding keys on exchange
	delay    time.Duration // a retry topic: records wait this long
}

// sources lists the topics a queue reads: its exchanges', then its retry
// tiers'. The dead-letter topic is not read.
func sources(cfg Config, top *topology.Topology, queue string) ([]source, error) {
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
	return out, nil
}

// Topics lists the topics the queues read and write: their exchanges',
// retry tiers' and dead-letter queues'.
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
		if pol.DeadLetterQueue != "" {
			add(pol.DeadLetterQueue)
		}
	}
	return out
}

// Subscribe implements message.Subscriber with topic = queue name. It
// returns at once; while Kafka is away it keeps trying in the background.
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
	s.mu.Lock()
	s.subs = append(s.subs, ws)
	s.mu.Unlock()

	out := make(chan *message.Message)
	log := s.logger.With("queue", queue, "consumer_group", group)
	var pumps sync.WaitGroup
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if !s.prepare(ctx, srcs, log) {
			close(out)
			return
		}
		for _, src := range srcs {
			pumps.Add(1)
			go func() {
				defer pumps.Done()
				s.pump(ctx, ws, src, out, log)
			}()
		}
		pumps.Wait()
		close(out)
	}()
	return out, nil
}

// prepare creates the queue's topics, trying again every second while
// Kafka is away; it reports false when the subscriber stops first.
func (s *Subscriber) prepare(ctx context.Context, srcs []source, log *slog.Logger) bool {
	topics := make([]string, len(srcs))
	for i, src := range srcs {
		topics[i] = src.topic
	}
	for attempt := 0; ; attempt++ {
		err := withClient(s.cfg, "moenda admin", func(c sarama.Client) error { return createTopics(c, s.cfg, topics) })
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

// pump hands the records of one topic to out until the subscriber stops.
func (s *Subscriber) pump(ctx context.Context, ws *wkafka.Subscriber, src source, out chan<- *message.Message, log *slog.Logger) {
	var ch <-chan *message.Message
	for {
		var err error
		s.lifecycle.Lock()
		select {
		case <-s.closing:
			s.lifecycle.Unlock()
			return
		default:
		}
		ch, err = ws.Subscribe(ctx, src.topic)
		s.lifecycle.Unlock()
		if err == nil {
			break
		}
		log.Warn("kafka: subscribe failed; trying again", "topic", src.topic, "error", err)
		if !s.sleep(ctx, time.Second) {
			return
		}
	}
	for msg := range ch {
		if src.delay > 0 {
			at, _ := wkafka.MessageTimestampFromCtx(msg.Context())
			if !s.sleep(ctx, time.Until(at.Add(src.delay))) {
				return
			}
			msg.Metadata.Set(event.MetaDeliveryExchange, src.topic)
		} else {
			name, err := event.ParseName(msg.Metadata.Get(event.MetaName))
			if err == nil && !matchesAny(src.patterns, name.Base) {
				msg.Ack() // another queue's event on a shared topic
				continue
			}
			msg.Metadata.Set(event.MetaDeliveryExchange, src.exchange)
			msg.Metadata.Set(event.MetaDeliveryRoutingKey, name.Base)
		}
		select {
		case out <- msg:
		case <-ctx.Done():
			return
		case <-s.closing:
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

// Close stops every consumer; records being handled are not committed and
// come again to the group's next member.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	var errs []error
	s.lifecycle.Lock()
	for _, ws := range subs {
		errs = append(errs, ws.Close())
	}
	s.lifecycle.Unlock()
	s.wg.Wait()
	return errors.Join(errs...)
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
