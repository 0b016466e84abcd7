// Package kafka connects moenda to Kafka, where events are a log that
// several consumer groups read at their own pace and can read again. The
// relay publishes each event to the topic named after its exchange
// (Producer), keyed by its aggregate so one aggregate's events stay in
// order; a Subscriber reads a queue's topics in a consumer group, with the
// failure copies of the router going to retry and dead-letter topics. The
// layout is derived from the same topology as RabbitMQ's, so configuration
// alone chooses the broker.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is what YAML sets for Kafka.
type Config struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string `koanf:"brokers"`
	// Embedded runs an in-process cluster at Brokers[0] when something
	// needs Kafka, so development needs no Kafka installed. It keeps
	// records in memory only.
	Embedded bool `koanf:"embedded"`
	// TopicPrefix is put before every topic and consumer group name, so
	// several installations can share one cluster.
	TopicPrefix string `koanf:"topic_prefix"`
	// Partitions and ReplicationFactor are given to the topics moenda
	// creates; existing topics are left as they are.
	Partitions        int32 `koanf:"partitions"`
	ReplicationFactor int16 `koanf:"replication_factor"`
	// MaxRecordBytes is the largest record the producer sends (key,
	// value and headers); raise it only with the brokers' own limit
	// (message.max.bytes, a topic's max.message.bytes). The outbox takes
	// no event that would not fit (outbox.max_event_bytes), and a failure
	// copy that would not is cut to fit (see Producer.DeadLetter).
	MaxRecordBytes int `koanf:"max_record_bytes"`
}

// DefaultConfig is a single local broker, topics of three partitions
// (one aggregate's events always share one), and records of at most
// 1 MiB, Kafka's own default limit.
func DefaultConfig() Config {
	return Config{Brokers: []string{"127.0.0.1:9092"}, Partitions: 3, ReplicationFactor: 1, MaxRecordBytes: 1 << 20}
}

// minRecordBytes is the least kafka.max_record_bytes: an event needs its
// headers, and a cut failure copy keeps its headers whole.
const minRecordBytes = 16 << 10

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka.brokers is empty; list host:port addresses, like 127.0.0.1:9092"))
	}
	for i, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("kafka.brokers[%d] %q must be host:port, like 127.0.0.1:9092", i, b))
		}
	}
	if c.Embedded {
		if len(c.Brokers) != 1 {
			errs = append(errs, fmt.Errorf("kafka.embedded runs one broker at kafka.brokers[0]; list exactly one address, got %d", len(c.Brokers)))
		} else if host, _, err := net.SplitHostPort(c.Brokers[0]); err == nil && !loopback(host) {
			errs = append(errs, fmt.Errorf("kafka.embedded listens on this machine only: kafka.brokers[0] must be 127.0.0.1:<port>, got %s", c.Brokers[0]))
		}
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("kafka.partitions must be at least 1, got %d", c.Partitions))
	}
	if c.ReplicationFactor < 1 {
		errs = append(errs, fmt.Errorf("kafka.replication_factor must be at least 1, got %d", c.ReplicationFactor))
	}
	if c.MaxRecordBytes < minRecordBytes {
		errs = append(errs, fmt.Errorf("kafka.max_record_bytes must be at least %d, got %d", minRecordBytes, c.MaxRecordBytes))
	}
	return errors.Join(errs...)
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// Topic is the topic of an exchange, a retry tier or a dead-letter queue.
func (c Config) Topic(name string) string { return c.TopicPrefix + name }

// Group is the consumer group id of a reader.
func (c Config) Group(name string) string { return c.TopicPrefix + name }

// Producer returns the settings of the producer's client (franz-go's),
// and the benchmark's raw producers, so they are measured alike: the
// idempotent producer with acks from every in-sync replica; records sent
// as soon as they are given (no linger), uncompressed, at most
// MaxRecordBytes a batch, and put in the partition that sarama's hash of
// their key names, as the subscribers' client and the producer before
// this one did, so an aggregate keeps its partition. A send may be
// cancelled while in flight (Producer.send bounds each one), which may
// then write a record twice.
func (c Config) Producer(clientID string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(clientID), kgo.DialTimeout(5 * time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(int32(c.MaxRecordBytes)), kgo.AllowIdempotentProduceCancellation(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a)))}
}

// fnv32a is the hash sarama's default partitioner keys records by.
func fnv32a(b []byte) uint32 {
	h := fnv.New32a()
	_, _ = h.Write(b)
	return h.Sum32()
}

// Sarama returns the settings of the subscribers' and the admin's clients
// (and the benchmark's raw clients, so they are measured alike): the
// idempotent producer with acks from every in-sync replica, so a retried
// send neither duplicates nor reorders records; consumers start a new group
// at the oldest record (auto.offset.reset=earliest) and commit the offsets
// of processed records once a second.
func (c Config) Sarama(clientID string) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.ClientID = clientID
	sc.Net.DialTimeout = 5 * time.Second
	sc.Net.MaxOpenRequests = 1 // required by the idempotent producer
	sc.Metadata.Retry.Max = 2
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Producer.Return.Successes = true
	sc.Producer.Retry.Max = 5
	sc.Producer.MaxMessageBytes = c.MaxRecordBytes
	if c.MaxRecordBytes == 0 {
		sc.Producer.MaxMessageBytes = DefaultConfig().MaxRecordBytes
	}
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Offsets.AutoCommit.Interval = time.Second
	// A queue's topics are read by one group member each (watermill-kafka
	// subscribes per topic), so each join rebalances the others; members
	// notice at their next heartbeat, and at sarama's default a queue was
	// slow to start reading (see BENCHMARKS.md, "Kafka: the consumer
	// group's heartbeat").
	sc.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return sc
}

// Ping reports whether the cluster answers, on a client of its own.
func Ping(cfg Config) error {
	return withClient(cfg, "moenda readiness", func(sarama.Client) error { return nil })
}

// Prober reports whether the cluster answers, on one client kept from
// call to call: a readiness check asks the connections it has for the
// cluster's metadata rather than opening a client, and dials again only
// once they failed.
type Prober struct {
	cfg    Config
	mu     sync.Mutex
	client sarama.Client
}

// NewProber returns a Prober of cfg's cluster; it connects on first use.
func NewProber(cfg Config) *Prober { return &Prober{cfg: cfg} }

// Ping reports whether the cluster answers, or ctx's error if ctx ends
// first (sarama's calls take no context: the one in flight ends by its
// own timeouts, and holds back the next).
func (p *Prober) Ping(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- p.ping() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Prober) ping() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil || p.client.Closed() {
		client, err := sarama.NewClient(p.cfg.Brokers, p.cfg.Sarama("moenda readiness"))
		if err != nil {
			return fmt.Errorf("kafka: connect to %v: %w", p.cfg.Brokers, err)
		}
		p.client = client
		return nil // it has just fetched the metadata
	}
	if err := p.client.RefreshMetadata(); err != nil {
		_ = p.client.Close()
		return fmt.Errorf("kafka: the cluster at %v does not answer: %w", p.cfg.Brokers, err)
	}
	return nil
}

// Close closes the client, if one is open.
func (p *Prober) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil || p.client.Closed() {
		return nil
	}
	return p.client.Close()
}
