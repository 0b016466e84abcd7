package event

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Metadata keys copied from the envelope onto a Watermill message, so broker
// adapters can set transport properties without decoding the payload.
const (
	MetaName          = "event_name"
	MetaCorrelationID = "correlation_id" // the key Watermill's CorrelationID middleware uses
	MetaCausationID   = "causation_id"
	MetaOccurredAt    = "occurred_at"
	MetaAggregateID   = "aggregate_id"
)

// ToMessage wraps e in a Watermill message whose UUID is the event id and
// whose payload is the canonical envelope.
func ToMessage(e Event) (*message.Message, error) {
	body, err := e.MarshalJSON() // not through marshal, which would scan its output again
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", e.ID, err)
	}
	msg := message.NewMessage(e.ID, body)
	msg.Metadata.Set(MetaName, e.Name)
	msg.Metadata.Set(MetaOccurredAt, e.OccurredAt.UTC().Format(time.RFC3339Nano))
	if e.CorrelationID != "" {
		msg.Metadata.Set(MetaCorrelationID, e.CorrelationID)
	}
	if e.AggregateID != "" {
		msg.Metadata.Set(MetaAggregateID, e.AggregateID)
	}
	if e.CausationID != "" {
		msg.Metadata.Set(MetaCausationID, e.CausationID)
	}
	return msg, nil
}

// Encoded is msg, whose body is moenda's envelope, with its body in format
// (EncodeAs): a copy, since the caller may publish msg elsewhere too.
func Encoded(format string, msg *message.Message) *message.Message {
	if format == EnvelopeMoenda {
		return msg
	}
	c := msg.Copy()
	c.Payload = EncodeAs(format, msg.Payload)
	return c
}
