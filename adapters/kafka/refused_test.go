package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// Of a batch whose records share a partition, the producer names only the
// records the broker refuses for good: the one over the topic's limit,
// which the broker refuses with the records sent beside it, and the one
// over kafka.max_record_bytes, which never leaves. The others are
// delivered, once.
func TestProducerNamesOnlyTheRecordsRefusedForGood(t *testing.T) {
	k := testenv.Kafka(t)
	k.LimitedTopic(t, "eventos.dominio", 1, "65536")
	p := producer(t, k.Config, layout(t))

	titles := []string{"a", "b", strings.Repeat("<", 100_000), "c", strings.Repeat("<", 2<<20), "d"}
	var keys []string
	var msgs []*message.Message
	for i, titulo := range titles {
		e, err := event.New("tarefa.concluida.v1", "test", map[string]any{"tarefa_id": i, "titulo": titulo})
		if err != nil {
			t.Fatal(err)
		}
		e.AggregateID = "same"
		msg, err := event.ToMessage(e)
		if err != nil {
			t.Fatal(err)
		}
		keys, msgs = append(keys, e.RoutingKey()), append(msgs, msg)
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
	if !strings.Contains(partly.Failed[2].Error(), "too large") || !strings.Contains(partly.Failed[4].Error(), "larger than configured Producer.MaxMessageBytes") {
		t.Fatalf("why: %v; %v", partly.Failed[2], partly.Failed[4])
	}
	if n := k.Records(t, "eventos.dominio"); n != 4 {
		t.Fatalf("the topic holds %d records, want the 4 others, each once", n)
	}
}
