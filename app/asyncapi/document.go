package asyncapi

import (
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/schema"
)

// Document is an AsyncAPI 3.0 document: the part of the specification
// moenda fills in. Maps are written in key order, so the same
// installation always gives the same document.
type Document struct {
	AsyncAPI           string                `json:"asyncapi"`
	Info               Info                  `json:"info"`
	DefaultContentType string                `json:"defaultContentType"`
	Servers            map[string]*Server    `json:"servers"`
	Channels           map[string]*Channel   `json:"channels"`
	Operations         map[string]*Operation `json:"operations"`
	Components         Components            `json:"components"`
}

// Info describes the installation.
type Info struct {
	Title       string `json:"title"`
	Version     string `json:"version"`
	Description string `json:"description"`
}

// Server is a broker.
type Server struct {
	Host            string `json:"host"`
	Pathname        string `json:"pathname,omitempty"`
	Protocol        string `json:"protocol"`
	ProtocolVersion string `json:"protocolVersion,omitempty"`
	Title           string `json:"title,omitempty"`
	Description     string `json:"description,omitempty"`
}

// Ref is a reference to another part of the document.
type Ref struct {
	Ref string `json:"$ref"`
}

// Channel is an exchange and routing key, or a queue.
type Channel struct {
	Address     string           `json:"address"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	Servers     []Ref            `json:"servers,omitempty"`
	Messages    map[string]Ref   `json:"messages"`
	Bindings    *ChannelBindings `json:"bindings,omitempty"`
	Moenda      *ChannelExt      `json:"x-moenda,omitempty"`
}

// ChannelBindings are a channel's protocol bindings.
type ChannelBindings struct {
	AMQP *AMQPChannel `json:"amqp,omitempty"`
}

// AMQPChannel is the AMQP channel binding (0.3.0).
type AMQPChannel struct {
	Is             string        `json:"is"`
	Exchange       *AMQPExchange `json:"exchange,omitempty"`
	Queue          *AMQPQueue    `json:"queue,omitempty"`
	BindingVersion string        `json:"bindingVersion"`
}

// AMQPExchange is an exchange as the AMQP binding describes it.
type AMQPExchange struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"autoDelete"`
	VHost      string `json:"vhost"`
}

// AMQPQueue is a queue as the AMQP binding describes it.
type AMQPQueue struct {
	Name       string `json:"name"`
	Durable    bool   `json:"durable"`
	Exclusive  bool   `json:"exclusive"`
	AutoDelete bool   `json:"autoDelete"`
	VHost      string `json:"vhost"`
}

// ChannelExt is what moenda adds to a channel (x-moenda): for an
// exchange's, where it routes and what it keeps that nothing binds; for a
// queue's, who consumes it and what becomes of a message that fails.
type ChannelExt struct {
	Exchange          string   `json:"exchange,omitempty"`
	RoutingKey        string   `json:"routing_key,omitempty"`
	Queues            []string `json:"queues,omitempty"`
	AlternateExchange string   `json:"alternate_exchange,omitempty"`
	UnroutedQueue     string   `json:"unrouted_queue,omitempty"`

	Plugin  string `json:"plugin,omitempty"`
	Handler string `json:"handler,omitempty"`
	// External marks a queue declared for a consumer outside moenda.
	External bool      `json:"external,omitempty"`
	Bindings []Binding `json:"bindings,omitempty"`
	// Handles are the event types the handler reads; others are
	// acknowledged and ignored. Empty: every type.
	Handles   []string `json:"handles,omitempty"`
	Envelope  string   `json:"envelope,omitempty"`
	QueueType string   `json:"queue_type,omitempty"`
	// ImmediateRetries are tried in the consumer, ImmediateInterval
	// apart (doubling); then the retry queues, in order, each holding the
	// message for its delay; then the dead-letter queue.
	ImmediateRetries   *int         `json:"immediate_retries,omitempty"`
	ImmediateInterval  string       `json:"immediate_interval,omitempty"`
	RetryQueues        []RetryQueue `json:"retry_queues,omitempty"`
	DeadLetterExchange string       `json:"dead_letter_exchange,omitempty"`
	DeadLetterQueue    string       `json:"dead_letter_queue,omitempty"`
}

// Binding binds a queue to an exchange with a routing-key pattern.
type Binding struct {
	Exchange string `json:"exchange"`
	Key      string `json:"key"`
}

// RetryQueue holds a failed message for Delay, then hands it back to its
// queue.
type RetryQueue struct {
	Name  string `json:"name"`
	Delay string `json:"delay"`
}

// Operation is a plugin publishing to a channel or consuming one.
type Operation struct {
	Action      string             `json:"action"`
	Channel     Ref                `json:"channel"`
	Title       string             `json:"title,omitempty"`
	Description string             `json:"description,omitempty"`
	Messages    []Ref              `json:"messages"`
	Bindings    *OperationBindings `json:"bindings,omitempty"`
	Moenda      *OperationExt      `json:"x-moenda,omitempty"`
}

// OperationBindings are an operation's protocol bindings.
type OperationBindings struct {
	AMQP *AMQPOperation `json:"amqp,omitempty"`
}

// AMQPOperation is the AMQP operation binding (0.3.0).
type AMQPOperation struct {
	DeliveryMode   int    `json:"deliveryMode,omitempty"`
	Timestamp      bool   `json:"timestamp,omitempty"`
	Ack            bool   `json:"ack,omitempty"`
	BindingVersion string `json:"bindingVersion"`
}

// OperationExt names the plugin (and handler) of an operation.
type OperationExt struct {
	Plugin  string `json:"plugin"`
	Handler string `json:"handler,omitempty"`
}

// Components hold the messages and the headers' schema.
type Components struct {
	Messages map[string]*Message       `json:"messages"`
	Schemas  map[string]*schema.Schema `json:"schemas"`
}

// Message is one event type.
type Message struct {
	Name          string           `json:"name"`
	Title         string           `json:"title,omitempty"`
	Summary       string           `json:"summary,omitempty"`
	ContentType   string           `json:"contentType"`
	Headers       Ref              `json:"headers"`
	Payload       *schema.Schema   `json:"payload"`
	CorrelationID *CorrelationID   `json:"correlationId,omitempty"`
	Bindings      *MessageBindings `json:"bindings,omitempty"`
	Moenda        *MessageExt      `json:"x-moenda,omitempty"`
}

// CorrelationID says where a message's correlation id is.
type CorrelationID struct {
	Location string `json:"location"`
}

// MessageBindings are a message's protocol bindings.
type MessageBindings struct {
	AMQP *AMQPMessage `json:"amqp,omitempty"`
}

// AMQPMessage is the AMQP message binding (0.3.0).
type AMQPMessage struct {
	ContentEncoding string `json:"contentEncoding,omitempty"`
	MessageType     string `json:"messageType,omitempty"`
	BindingVersion  string `json:"bindingVersion"`
}

// MessageExt is what moenda adds to a message (x-moenda).
type MessageExt struct {
	Event       string   `json:"event"`
	RoutingKey  string   `json:"routing_key"`
	Exchange    string   `json:"exchange"`
	Envelope    string   `json:"envelope"`
	PublishedBy []string `json:"published_by"`
	// PayloadDeclared says the plugin declares the payload's Go type:
	// POST /v1/events holds payloads to its schema.
	PayloadDeclared bool `json:"payload_declared"`
}

// headersSchema is the key of the headers' schema in components.
const headersSchema = "MoendaHeaders"

// headers is the schema of the headers a message may carry: the
// envelope's ids, and those moenda sets on the copies of a failed
// message (retries and dead letters). Every value is a string.
func headers() *schema.Schema {
	str := func(desc string) *schema.Schema {
		return &schema.Schema{Type: schema.Types{"string"}, Description: desc}
	}
	return &schema.Schema{
		Type:        schema.Types{"object"},
		Description: "Headers of a moenda message. On RabbitMQ correlation_id travels in the AMQP correlation_id property, event_name in type and occurred_at in timestamp; other keys are headers, all strings.",
		Properties: map[string]*schema.Schema{
			event.MetaCorrelationID:        str("The request or flow the event belongs to; events a handler publishes inherit it."),
			event.MetaCausationID:          str("The event that caused this one."),
			event.MetaAggregateID:          str("The entity the event is about; Kafka keys records by it."),
			event.HeaderAttempts:           str("On a retry or a dead letter: the deliveries that have failed so far."),
			event.HeaderReason:             str("On a dead letter: why (retries_exhausted, permanent, decode_error, ...)."),
			event.HeaderError:              str("On a retry or a dead letter: the last error."),
			event.HeaderQueue:              str("On a retry or a dead letter: the queue whose consumer failed."),
			event.HeaderHandler:            str("On a retry or a dead letter: the handler that failed."),
			event.HeaderFirstFailureAt:     {Type: schema.Types{"string"}, Format: "date-time", Description: "On a retry or a dead letter: the first failure."},
			event.HeaderLastFailureAt:      {Type: schema.Types{"string"}, Format: "date-time", Description: "On a retry or a dead letter: the last failure."},
			event.HeaderOriginalExchange:   str("On a retry or a dead letter: where the message was first published."),
			event.HeaderOriginalRoutingKey: str("On a retry or a dead letter: its first routing key."),
			event.HeaderEventID:            str("On a dead letter: the envelope's event_id, readable even when the body is not."),
			event.HeaderCorrelationID:      str("On a dead letter: the envelope's correlation_id."),
			event.HeaderTruncated:          str("On a dead letter cut to fit the broker's limit: the body's length before, in bytes."),
		},
	}
}

// body is the schema of a message's body in format: moenda's envelope
// around payload, or payload's fields with eventId and occurredAt (flat).
func body(format, name string, payload *schema.Schema) *schema.Schema {
	uuid := &schema.Schema{Type: schema.Types{"string"}, Format: "uuid"}
	when := &schema.Schema{Type: schema.Types{"string"}, Format: "date-time"}
	if format == event.EnvelopeFlat {
		flat := *payload
		flat.Description = "The payload's fields with eventId and occurredAt, flat (the exchange's envelope: flat)."
		flat.Type = schema.Types{"object"}
		flat.Properties = map[string]*schema.Schema{"eventId": uuid, "occurredAt": when}
		for k, v := range payload.Properties {
			flat.Properties[k] = v
		}
		flat.Required = append([]string{"eventId", "occurredAt"}, payload.Required...)
		return &flat
	}
	str := &schema.Schema{Type: schema.Types{"string"}}
	return &schema.Schema{
		Type:        schema.Types{"object"},
		Description: "moenda's envelope; payload is the event's own.",
		Properties: map[string]*schema.Schema{
			"event_id":       uuid,
			"event_name":     {Type: schema.Types{"string"}, Const: name},
			"occurred_at":    when,
			"correlation_id": str,
			"causation_id":   str,
			"source":         str,
			"aggregate_id":   str,
			"payload":        payload,
		},
		Required: []string{"event_id", "event_name", "occurred_at", "payload"},
	}
}
