package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// Of a batch, the producer names only the records the broker refuses for
// good: the one over the topic's limit, which the broker refuses with the
// records sent beside it to its partition, and the one over
// kafka.max_record_bytes, which never leaves. The others are delivered,
// once each, whether they share the refused one's partition or are spread
// over the topic's (where the partitions' answers come back in any order).
func TestProducerNamesOnlyTheRecordsRefusedForGood(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("one partition %v", shared), func(t *testing.T) {
			k := testenv.Kafka(t)
			k.LimitedTopic(t, "eventos.dominio", 3, "65536")
			p := producer(t, k.Config, layout(t))

			titles := []string{"a", "b", strings.Repeat("<", 100_000), "c", strings.Repeat("<", 2<<20), "d", "e", "f", "g"}
			var keys, delivered []string
			var msgs []*message.Message
			for i, titulo := range titles {
				e, err := event.New("tarefa.concluida.v1", "test", map[string]any{"tarefa_id": i, "titulo": titulo})
				if err != nil {
					t.Fatal(err)
				}
				if shared {
					e.AggregateID = "same"
				}
				msg, err := event.ToMessage(e)
				if err != nil {
					t.Fatal(err)
				}
				keys, msgs = append(keys, e.RoutingKey()), append(msgs, msg)
				if i != 2 && i != 4 {
					delivered = append(delivered, msg.UUID)
				}
			}
			err := p.PublishBatch(context.Background(), keys, msgs)
			var partly *outbox.BatchError
			if !errors.As(err, &partly) || len(partly.Failed) != 2 || !errors.Is(partly.Failed[2], outbox.ErrRefused) || !errors.Is(partly.Failed[4], outbox.ErrRefused) {
				var each []string
				if partly != nil {
					for i, ferr := range partly.Failed {
						each = append(each, fmt.Sprintf("record %d: %v", i, ferr))
					}
				}
				t.Fatalf("PublishBatch = %v (%s), want records 2 and 4 refused for good, and only them", err, strings.Join(each, "; "))
			}
			if !strings.Contains(partly.Failed[2].Error(), "too large for the topic") || strings.Contains(partly.Failed[2].Error(), "kafka.max_record_bytes") ||
				!strings.Contains(partly.Failed[4].Error(), "larger than kafka.max_record_bytes") {
				t.Fatalf("why: %v; %v", partly.Failed[2], partly.Failed[4])
			}
			got := k.MessageIDs(t, "eventos.dominio")
			slices.Sort(got)
			slices.Sort(delivered)
			if !slices.Equal(got, delivered) {
				t.Fatalf("the topic holds %v, want the %d others, each once: %v", got, len(delivered), delivered)
			}
		})
	}
}
