package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"

	"github.com/moenda/moenda/adapters/testenv"
)

// A logical relay publishing to Kafka sends the next batch while it
// records the last one's position (outbox.AheadDestination). Killed with
// SIGKILL in the middle of a drain of 50,000 rows, inside one of its
// transactions of 2,000, it repeats at most the two batches published
// since its last record, and loses nothing. Against a real cluster with
// KAFKA_BROKERS set.
func TestKafkaRelayKilledMidStreamRepeatsAtMostTwoBatches(t *testing.T) {
	s := newStack(t)
	k := testenv.Kafka(t)
	c := newKafkaTally(t, k, k.Config.Topic(s.top.EventExchanges()[0]))
	want := map[string]bool{}
	at := s.killRelayMidDrain(t, c, want, "RELAY_READER=logical",
		"RELAY_KAFKA="+strings.Join(k.Config.Brokers, ","), "RELAY_KAFKA_PREFIX="+k.Config.TopicPrefix)
	dups := settleDuplicates(t, c, want)
	t.Logf("killed after %d of %d records; %d repeated (batch %d)", at, crashRows, dups, crashWindow)
	if dups > 2*crashWindow {
		t.Fatalf("%d events repeated after the kill, more than the two batches published ahead of the last record (%d)", dups, 2*crashWindow)
	}
}

// newKafkaTally counts the records of every partition of topic, from the
// oldest, by the event id each carries, as they arrive; the topic appears
// when the relay first connects.
func newKafkaTally(t *testing.T, k testenv.KafkaCluster, topic string) *tally {
	t.Helper()
	c := &tally{times: map[string]int{}}
	client := k.Client(t)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the client closes
	go func() {
		var parts []int32
		for ctx.Err() == nil {
			if err := client.RefreshMetadata(topic); err == nil {
				if parts, err = client.Partitions(topic); err == nil && len(parts) > 0 {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return // the test ended before the topic appeared
		}
		consumer, err := sarama.NewConsumerFromClient(client)
		if err != nil {
			t.Errorf("kafka consumer: %v", err)
			return
		}
		defer consumer.Close()
		for _, p := range parts {
			pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				t.Errorf("consume %s/%d: %v", topic, p, err)
				return
			}
			go func() {
				defer pc.Close()
				for {
					select {
					case m, ok := <-pc.Messages():
						if !ok {
							return
						}
						c.mu.Lock()
						for _, h := range m.Headers {
							if string(h.Key) == wkafka.UUIDHeaderKey {
								c.times[string(h.Value)]++
							}
						}
						c.mu.Unlock()
						c.n.Add(1)
					case <-ctx.Done():
						return
					}
				}
			}()
		}
		<-ctx.Done()
	}()
	return c
}
