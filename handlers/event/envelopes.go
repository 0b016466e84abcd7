package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Envelope formats: what a queue reads (topology.subscriptions[].envelope)
// and what an exchange carries (topology.exchanges[].envelope).
const (
	// EnvelopeMoenda is moenda's own envelope (Event).
	EnvelopeMoenda = "moenda"
	// EnvelopeTipoVersao is the envelope that names an event by its tipo
	// and versao fields, {id, tipo, versao, ocorridoEm, origem, dados}, as
	// seed 001's publishers write it from any AMQP client. A queue in this
	// format reads moenda's envelope too, so moenda's own publishers and
	// the others can share it. moenda reads it only.
	EnvelopeTipoVersao = "tipo-versao"
	// EnvelopeFlat is an event's fields at the top level of the body with
	// eventId and occurredAt, named by its routing key, as Spring AMQP's
	// Jackson converter writes an event record (seed 004). moenda
	// publishes it on an exchange set to it and reads it, and moenda's own
	// envelope, on the queues bound there.
	EnvelopeFlat = "flat"
)

// Envelopes lists the formats DecodeAs reads.
var Envelopes = []string{EnvelopeMoenda, EnvelopeTipoVersao, EnvelopeFlat}

// PublishedEnvelopes lists the formats EncodeAs writes.
var PublishedEnvelopes = []string{EnvelopeMoenda, EnvelopeFlat}

// formerNames are the formats' first names, after the seeds that brought
// them; configuration still accepts them.
var formerNames = map[string]string{"seed001": EnvelopeTipoVersao, "seed004": EnvelopeFlat}

// Format is an envelope format as configuration names it: read from text,
// a former name becomes the format's name, so what is resolved and
// printed is one name per format.
type Format string

// UnmarshalText reads a format's name or its former name.
func (f *Format) UnmarshalText(text []byte) error {
	name := string(text)
	if now, ok := formerNames[name]; ok {
		name = now
	}
	*f = Format(name)
	return nil
}

// DecodeAs decodes body in format (empty: moenda's) into an Event, with
// Decode's reasons for what it refuses. meta is the delivery's metadata:
// a format whose body does not name the event takes the name from it.
//
// A tipo-versao envelope becomes the event named "<tipo>.v<versao>", with
// its id as the event id (and so as the inbox key) and its dados as the
// payload. A flat body is its own payload; its eventId is the event
// id, and its name is the delivery's event name (the AMQP type moenda
// sets) or else its routing key with .v1. Fields a format does not know
// are ignored.
func DecodeAs(format string, body []byte, meta message.Metadata) (Event, error) {
	switch format {
	case EnvelopeTipoVersao:
		return decodeTipoVersao(body)
	case EnvelopeFlat:
		return decodeFlat(body, meta)
	default:
		return Decode(body)
	}
}

// EncodeAs writes body, moenda's envelope, in format for an exchange that
// carries it. A flat body is the payload's fields with eventId and
// occurredAt set from the envelope; correlation, causation and the name
// travel in the message's properties and headers. A payload that is not a
// JSON object is kept whole under "payload", so a relay never stalls on
// it: its consumers refuse it with a reason. A body that is not an
// envelope is returned as it is.
func EncodeAs(format string, body []byte) []byte {
	if format != EnvelopeFlat {
		return body
	}
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return body
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e.Payload, &fields); err != nil || fields == nil {
		fields = map[string]json.RawMessage{"payload": e.Payload}
	}
	fields["eventId"], _ = json.Marshal(e.ID)
	fields["occurredAt"], _ = json.Marshal(e.OccurredAt.UTC().Format(time.RFC3339Nano))
	out, err := marshal(fields)
	if err != nil {
		return body
	}
	return out
}

// tipoVersao is the tipo-versao envelope.
type tipoVersao struct {
	EventID    string          `json:"event_id"` // set: moenda's envelope
	ID         string          `json:"id"`
	Tipo       string          `json:"tipo"`
	Versao     int             `json:"versao"`
	OcorridoEm time.Time       `json:"ocorridoEm"`
	Origem     string          `json:"origem"`
	Dados      json.RawMessage `json:"dados"`
}

func decodeTipoVersao(body []byte) (Event, error) {
	return decodeForeign(body, nil, "tipo-versao envelope", &tipoVersao{})
}

func (s *tipoVersao) ownEnvelope() bool { return s.EventID != "" && s.ID == "" }

func (s *tipoVersao) event([]byte, message.Metadata) (Event, error) {
	if s.ID == "" {
		return Event{}, Reject(ReasonMissingEventID, errors.New("invalid envelope: id is missing"))
	}
	if s.Versao < 1 {
		return Event{}, Reject(ReasonInvalidEnvelope, fmt.Errorf("invalid envelope: versao must be 1 or more, got %d", s.Versao))
	}
	return Event{ID: s.ID, Name: fmt.Sprintf("%s.v%d", s.Tipo, s.Versao), OccurredAt: s.OcorridoEm, Source: s.Origem, Payload: s.Dados}, nil
}

// flat is the identity of a flat body.
type flat struct {
	EventID    string          `json:"event_id"` // set: moenda's envelope
	ID         string          `json:"eventId"`
	OccurredAt json.RawMessage `json:"occurredAt"`
}

func decodeFlat(body []byte, meta message.Metadata) (Event, error) {
	return decodeForeign(body, meta, "flat event", &flat{})
}

func (s *flat) ownEnvelope() bool { return s.EventID != "" && s.ID == "" }

func (s *flat) event(body []byte, meta message.Metadata) (Event, error) {
	if s.ID == "" {
		return Event{}, Reject(ReasonMissingEventID, errors.New("invalid event: eventId is missing"))
	}
	at, err := instant(s.OccurredAt)
	if err != nil {
		return Event{}, Reject(ReasonInvalidEnvelope, fmt.Errorf("invalid event: occurredAt: %w", err))
	}
	return Event{
		ID: s.ID, Name: nameOf(meta), OccurredAt: at, Payload: bytes.TrimSpace(body),
		CorrelationID: meta.Get(MetaCorrelationID), CausationID: meta.Get(MetaCausationID), AggregateID: meta.Get(MetaAggregateID),
	}, nil
}

// foreign is a body in a format other than moenda's envelope, as read.
type foreign interface {
	// ownEnvelope tells a body that is moenda's envelope after all: a queue
	// in a foreign format reads moenda's own publishers too.
	ownEnvelope() bool
	// event is the event the body, delivered with meta, carries.
	event(body []byte, meta message.Metadata) (Event, error)
}

// decodeForeign decodes body, delivered with meta, into s, a format that
// errors name kind: moenda's own envelope as Decode does, any other as
// the format's event, which must be valid.
func decodeForeign(body []byte, meta message.Metadata, kind string, s foreign) (Event, error) {
	if !utf8.Valid(body) {
		return Event{}, Reject(ReasonInvalidEncoding, errors.New("body is not valid UTF-8"))
	}
	if err := json.Unmarshal(body, s); err != nil {
		return Event{}, Reject(ReasonDecode, fmt.Errorf("decode %s: %w", kind, err))
	}
	if s.ownEnvelope() {
		return Decode(body)
	}
	e, err := s.event(body, meta)
	if err != nil {
		return Event{}, err
	}
	if err := e.Validate(); err != nil {
		return Event{}, Reject(ReasonInvalidEnvelope, fmt.Errorf("invalid %s: %w", kind, err))
	}
	return e, nil
}

// nameOf names a flat delivery: by the event name moenda sent with it,
// else by the key it was first published with (a retry copy is delivered
// with its queue's name), in version 1.
func nameOf(meta message.Metadata) string {
	if n := meta.Get(MetaName); n != "" {
		if _, err := ParseName(n); err == nil {
			return n
		}
	}
	key := meta.Get(HeaderOriginalRoutingKey)
	if key == "" {
		key = meta.Get(MetaDeliveryRoutingKey)
	}
	return key + ".v1"
}

// instant reads a java.time.Instant as Jackson writes it: an ISO-8601
// string, or seconds since the epoch with a fraction when dates are
// written as timestamps. Missing is the zero time, which Validate refuses.
func instant(raw json.RawMessage) (time.Time, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return time.Time{}, nil
	}
	if s[0] == '"' {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return time.Time{}, err
		}
		return time.Parse(time.RFC3339Nano, v)
	}
	secs, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || len(frac) > 9 {
		return time.Time{}, fmt.Errorf("%s is neither an RFC 3339 time nor seconds since the epoch", s)
	}
	nsec := int64(0)
	if frac != "" {
		if nsec, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("%s is neither an RFC 3339 time nor seconds since the epoch", s)
		}
	}
	return time.Unix(sec, nsec).UTC(), nil
}
