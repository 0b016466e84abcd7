package amqp

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/handlers/event"
)

// Marshaler maps the envelope onto AMQP properties: message_id is the event
// id, type the event name, correlation_id and timestamp come from the
// envelope, and every message is persistent JSON. Other metadata travels as
// string headers.
type Marshaler struct{}

// Metadata that become properties, or describe a delivery, not headers.
var notHeaders = map[string]bool{
	event.MetaName: true, event.MetaCorrelationID: true, event.MetaOccurredAt: true,
	event.MetaDeliveryExchange: true, event.MetaDeliveryRoutingKey: true, event.MetaRedelivered: true,
}

// brokerHeaders are set by RabbitMQ itself when it dead-letters or
// redelivers a message; a copy moenda publishes must not carry them, or
// the broker would read a stale, stringified history.
var brokerHeaders = map[string]bool{
	"x-death": true, "x-delivery-count": true,
	"x-first-death-exchange": true, "x-first-death-queue": true, "x-first-death-reason": true,
	"x-last-death-exchange": true, "x-last-death-queue": true, "x-last-death-reason": true,
}

// Marshal implements watermill-amqp's Marshaler.
func (Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	headers := amqp091.Table{}
	for k, v := range msg.Metadata {
		if !notHeaders[k] && !brokerHeaders[k] {
			headers[k] = v
		}
	}
	var ts time.Time
	if s := msg.Metadata.Get(event.MetaOccurredAt); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return amqp091.Publishing{}, fmt.Errorf("message %s: metadata %s: %w", msg.UUID, event.MetaOccurredAt, err)
		}
		ts = t.UTC()
	}
	return amqp091.Publishing{
		Headers:       headers,
		ContentType:   "application/json",
		DeliveryMode:  amqp091.Persistent,
		CorrelationId: msg.Metadata.Get(event.MetaCorrelationID),
		MessageId:     msg.UUID,
		Timestamp:     ts,
		Type:          msg.Metadata.Get(event.MetaName),
		Body:          msg.Payload,
	}, nil
}

// Unmarshal implements watermill-amqp's Marshaler. Headers that are not
// strings (x-death, x-delivery-count) are kept as their printed form rather
// than rejected, so a dead-lettered or redelivered message never loops on a
// decoding error.
func (Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	msg := message.NewMessage(d.MessageId, d.Body)
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			msg.Metadata.Set(k, s)
		} else {
			msg.Metadata.Set(k, fmt.Sprint(v))
		}
	}
	if d.Type != "" {
		msg.Metadata.Set(event.MetaName, d.Type)
	}
	if d.CorrelationId != "" {
		msg.Metadata.Set(event.MetaCorrelationID, d.CorrelationId)
	}
	if !d.Timestamp.IsZero() {
		msg.Metadata.Set(event.MetaOccurredAt, d.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	msg.Metadata.Set(event.MetaDeliveryExchange, d.Exchange)
	msg.Metadata.Set(event.MetaDeliveryRoutingKey, d.RoutingKey)
	if d.Redelivered {
		msg.Metadata.Set(event.MetaRedelivered, "true")
	}
	return msg, nil
}
