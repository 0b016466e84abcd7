package bench

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"

	"github.com/moenda/moenda/adapters/kafka"
)

// producers measures franz-go's producer, the relay's client, against
// sarama's SyncProducer, which it used before and the subscribers still
// read with, on the same cluster in the same rounds, each publishing n
// records of the relayed event batch at a time to a topic of its own:
// the figures the relay's client was chosen by. Both are idempotent with
// acks=all and send records as soon as they are given, uncompressed.
func (k *kafkaBench) producers(ctx context.Context, e *env, r *Result, n int) error {
	batch := e.set.Outbox.BatchSize
	var rounds int
	p, err := alternate(e, "Kafka producers", e.sz.rounds, func() (flow, error) {
		rounds++
		topic := k.cfg.Topic(fmt.Sprintf("ceiling.sarama.%d", rounds))
		defer k.deleteTopics(topic, nil)
		return k.saramaProduce(ctx, topic, n, batch)
	}, func() (flow, error) {
		topic := k.cfg.Topic(fmt.Sprintf("ceiling.franz.%d", rounds))
		defer k.deleteTopics(topic, nil)
		return k.rawProduce(ctx, topic, n, batch)
	})
	if err != nil {
		return err
	}
	r.add(p.row(Row{Name: fmt.Sprintf("franz-go's producer, the relay's client, against sarama's SyncProducer (kafka.Config.Sarama) in the same rounds, batches of %d", batch),
		Unit: "msg/s"}), 0, 0)
	return nil
}

// saramaProduce is rawProduce with sarama's SyncProducer, set as
// kafka.Config.Sarama sets the subscribers' clients.
func (k *kafkaBench) saramaProduce(ctx context.Context, topic string, n, batch int) (flow, error) {
	tmpl, err := k.benchRecord(ctx, topic)
	if err != nil {
		return flow{}, err
	}
	headers := make([]sarama.RecordHeader, len(tmpl.Headers))
	for i, h := range tmpl.Headers {
		headers[i] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
	}
	keys := make([]sarama.StringEncoder, n) // a fresh event id per record
	for i := range keys {
		keys[i] = sarama.StringEncoder(watermill.NewUUID())
	}
	if err := kafka.CreateTopics(k.cfg, "moenda bench ceiling", []string{topic}); err != nil {
		return flow{}, err
	}
	client, err := sarama.NewClient(k.cfg.Brokers, k.cfg.Sarama("moenda bench ceiling"))
	if err != nil {
		return flow{}, err
	}
	defer client.Close()
	sp, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		return flow{}, err
	}
	defer sp.Close()
	return k.timed(func() (int, error) {
		for sent := 0; sent < n; sent += batch {
			recs := make([]*sarama.ProducerMessage, min(batch, n-sent))
			for i := range recs {
				recs[i] = &sarama.ProducerMessage{Topic: topic, Key: keys[sent+i], Value: sarama.ByteEncoder(tmpl.Value), Headers: headers, Timestamp: tmpl.Timestamp}
			}
			if err := sp.SendMessages(recs); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
}
