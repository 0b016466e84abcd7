package testenv

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/moenda/moenda/adapters/kafka"
)

// KafkaCluster is a Kafka cluster for one test. Fake is the in-process
// cluster when no KAFKA_BROKERS is set, and nil on a real one.
type KafkaCluster struct {
	Config kafka.Config
	Fake   *kfake.Cluster
}

// Kafka returns a cluster of the test's own: an in-process kfake cluster
// ended with the test, or, with KAFKA_BROKERS set (comma-separated
// host:port), that cluster with every topic and group name under a prefix
// of the test's own.
func Kafka(t testing.TB) KafkaCluster {
	t.Helper()
	cfg := kafka.DefaultConfig()
	if brokers := os.Getenv("KAFKA_BROKERS"); brokers != "" {
		cfg.Brokers = strings.Split(brokers, ",")
		cfg.TopicPrefix = Name("test") + "."
		return KafkaCluster{Config: cfg}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(cfg.Partitions)))
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	cfg.Brokers = c.ListenAddrs()
	return KafkaCluster{Config: cfg, Fake: c}
}

// Client returns a client of the cluster; the caller closes it.
func (k KafkaCluster) Client(t testing.TB) sarama.Client {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(k.Config.Brokers, sc)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	return client
}

// Admin returns an admin client of the cluster, on a client of its own
// that closing it closes; the caller closes it.
func (k KafkaCluster) Admin(t testing.TB) sarama.ClusterAdmin {
	t.Helper()
	client := k.Client(t)
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		_ = client.Close()
		t.Fatalf("testenv: kafka admin: %v", err)
	}
	return admin
}

// LimitedTopic creates topic (a name k.Config prefixes) with partitions
// partitions and a record limit (max.message.bytes) of limit bytes,
// before moenda creates it as the cluster's default would.
func (k KafkaCluster) LimitedTopic(t testing.TB, topic string, partitions int32, limit string) {
	t.Helper()
	admin := k.Admin(t)
	defer admin.Close()
	err := admin.CreateTopic(k.Config.Topic(topic), &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: k.Config.ReplicationFactor,
		ConfigEntries: map[string]*string{"max.message.bytes": &limit}}, false)
	if err != nil {
		t.Fatalf("testenv: create topic %s: %v", topic, err)
	}
}

// Records counts the records topic (a name k.Config prefixes) holds, from
// its partitions' offsets.
func (k KafkaCluster) Records(t testing.TB, topic string) int64 {
	t.Helper()
	client := k.Client(t)
	defer client.Close()
	parts, err := client.Partitions(k.Config.Topic(topic))
	if err != nil {
		t.Fatalf("testenv: partitions of %s: %v", topic, err)
	}
	var n int64
	for _, p := range parts {
		newest, err := client.GetOffset(k.Config.Topic(topic), p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("testenv: offsets of %s: %v", topic, err)
		}
		oldest, err := client.GetOffset(k.Config.Topic(topic), p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("testenv: offsets of %s: %v", topic, err)
		}
		n += newest - oldest
	}
	return n
}

// MessageIDs returns the message id (watermill-kafka's header) of every
// record topic (a name k.Config prefixes) holds, partition by partition.
func (k KafkaCluster) MessageIDs(t testing.TB, topic string) []string {
	t.Helper()
	client := k.Client(t)
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("testenv: consumer: %v", err)
	}
	defer consumer.Close()
	name := k.Config.Topic(topic)
	parts, err := client.Partitions(name)
	if err != nil {
		t.Fatalf("testenv: partitions of %s: %v", topic, err)
	}
	var ids []string
	for _, p := range parts {
		newest, err := client.GetOffset(name, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("testenv: offsets of %s: %v", topic, err)
		}
		pc, err := consumer.ConsumePartition(name, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("testenv: read %s/%d: %v", topic, p, err)
		}
		for offset := int64(-1); offset+1 < newest; {
			select {
			case m := <-pc.Messages():
				offset = m.Offset
				for _, h := range m.Headers {
					if string(h.Key) == wkafka.UUIDHeaderKey {
						ids = append(ids, string(h.Value))
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("testenv: %s/%d gave nothing after offset %d of %d for 10 s", topic, p, offset, newest)
			}
		}
		_ = pc.Close()
	}
	return ids
}
