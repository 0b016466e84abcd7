package kafka_test

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/adapters/transport/transporttest"
)

// The suite runs on the embedded cluster, and on a real one when
// KAFKA_BROKERS is set (testenv.Kafka).
func TestTransportConformance(t *testing.T) {
	k := testenv.Kafka(t)
	newTransport := func(t *testing.T, cfg kafka.Config, top *topology.Topology, queues []string) transport.Transport {
		tr, err := kafka.NewTransport(cfg, transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, Logger: testenv.Logger()},
			queues, func(queue string) string { return queue })
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	transporttest.Run(t, transporttest.Features{
		Unreachable: func(t *testing.T, top *topology.Topology, queues []string) transport.Transport {
			cfg := k.Config
			cfg.Brokers = []string{testenv.ClosedAddr(t)}
			return newTransport(t, cfg, top, queues)
		},
	}, func(t *testing.T, top *topology.Topology, queues []string) transporttest.Subject {
		return transporttest.Subject{
			Transport:   newTransport(t, k.Config, top, queues),
			DeadLetters: func(t *testing.T, dlq string) <-chan *message.Message { return readTopic(t, k.Config, dlq) },
		}
	})
}

// readTopic reads every partition of the queue's topic from its start,
// outside any consumer group: the subscriber does not read dead letters.
func readTopic(t *testing.T, cfg kafka.Config, queue string) <-chan *message.Message {
	t.Helper()
	consumer, err := sarama.NewConsumer(cfg.Brokers, cfg.Sarama("moenda conformance"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close() })
	topic := cfg.Topic(queue)
	partitions, err := consumer.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	out := make(chan *message.Message, 16)
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for rec := range pc.Messages() {
				msg, err := wkafka.DefaultMarshaler{}.Unmarshal(rec)
				if err != nil {
					t.Errorf("%s: %v", topic, err)
					return
				}
				out <- msg
			}
		}()
	}
	return out
}
