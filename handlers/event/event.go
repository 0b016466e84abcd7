// Package event defines the envelope every moenda event travels in, from the
// outbox to the broker to a handler. It is the one wire contract shared by
// handlers, the router and the broker adapters, so it depends on nothing else
// in the project.
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

	"github.com/google/uuid"
)

// Event is the canonical envelope. Its JSON field names are the wire contract.
type Event struct {
	ID            string    `json:"event_id"`
	Name          string    `json:"event_name"`
	OccurredAt    time.Time `json:"occurred_at"`
	CorrelationID string    `json:"correlation_id,omitempty"`
	CausationID   string    `json:"causation_id,omitempty"`
	Source        string    `json:"source,omitempty"`
	// AggregateID names the entity the event is about (a tarefa's id),
	// set by the use case that raises it. Kafka keys records by it, so one
	// aggregate's events stay in order in one partition.
	AggregateID string          `json:"aggregate_id,omitempty"`
	Payload     json.RawMessage `json:"payload"`
}

// New builds an event named name (with its .vN suffix) whose payload is the
// JSON encoding of payload. Correlation and causation come from ctx-free
// arguments on purpose: the outbox fills them from the request context.
func New(name, source string, payload any) (Event, error) {
	if _, err := ParseName(name); err != nil {
		return Event{}, err
	}
	body, err := marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: encode payload: %w", name, err)
	}
	return Event{
		ID:         uuid.NewString(),
		Name:       name,
		OccurredAt: time.Now().UTC(),
		Source:     source,
		Payload:    body,
	}, nil
}

// NewFor is New for a fact about one aggregate: aggregateID names it, and
// at is when the fact occurred, as the aggregate's rows record it.
func NewFor(name, source, aggregateID string, at time.Time, payload any) (Event, error) {
	e, err := New(name, source, payload)
	if err != nil {
		return Event{}, err
	}
	e.AggregateID, e.OccurredAt = aggregateID, at.UTC()
	return e, nil
}

// RoutingKey is the key the event is published with: its name without the
// version suffix, so bindings written as "tarefa.concluida" or "tarefa.*"
// match every version. Consumers that care about the version read Name.
func (e Event) RoutingKey() string {
	n, err := ParseName(e.Name)
	if err != nil {
		return e.Name
	}
	return n.Base
}

// MarshalJSON writes occurred_at in RFC 3339 UTC whatever the zone of the
// value, so the canonical form does not depend on the producer's clock zone.
func (e Event) MarshalJSON() ([]byte, error) {
	size := 160 + len(e.Payload) + len(e.ID) + len(e.Name) + len(e.CorrelationID) + len(e.CausationID) + len(e.Source) + len(e.AggregateID)
	if b, ok := appendEnvelope(make([]byte, 0, size), e); ok {
		return b, nil
	}
	return marshalEnvelope(e)
}

// marshalEnvelope is MarshalJSON through encoding/json, for the envelopes
// appendEnvelope leaves to it.
func marshalEnvelope(e Event) ([]byte, error) {
	type plain Event
	p := plain(e)
	p.OccurredAt = p.OccurredAt.UTC()
	if p.Payload == nil {
		p.Payload = json.RawMessage("null")
	}
	return marshal(p)
}

// marshal is json.Marshal without its HTML escaping: a payload is JSON,
// not HTML, and escaping turns each <, > and & into six bytes, on every
// encoding of the envelope, so a payload that fits can outgrow a broker's
// message limit on the way.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Validate reports every problem of the envelope, each naming its field.
func (e Event) Validate() error {
	var errs []error
	if e.ID == "" {
		errs = append(errs, errors.New("event_id is missing"))
	} else if _, err := uuid.Parse(e.ID); err != nil {
		errs = append(errs, fmt.Errorf("event_id %q is not a UUID", e.ID))
	}
	if e.Name == "" {
		errs = append(errs, errors.New("event_name is missing"))
	} else if _, err := ParseName(e.Name); err != nil {
		errs = append(errs, err)
	}
	if e.OccurredAt.IsZero() {
		errs = append(errs, errors.New("occurred_at is missing"))
	}
	if len(e.Payload) == 0 || bytes.Equal(bytes.TrimSpace(e.Payload), []byte("null")) {
		errs = append(errs, errors.New("payload is missing"))
	}
	return errors.Join(errs...)
}

// Decode parses an envelope received from a broker. Unknown fields are
// ignored so producers can add fields; an envelope that cannot be decoded or
// lacks its identity is a permanent error, classed by its reason: retrying
// cannot fix it.
func Decode(body []byte) (Event, error) {
	if !utf8.Valid(body) {
		return Event{}, Reject(ReasonInvalidEncoding, errors.New("body is not valid UTF-8"))
	}
	e, ok := decodeEnvelope(body)
	if !ok {
		e = Event{}
		if err := json.Unmarshal(body, &e); err != nil {
			return Event{}, Reject(ReasonDecode, fmt.Errorf("decode envelope: %w", err))
		}
	}
	if e.ID == "" {
		return Event{}, Reject(ReasonMissingEventID, errors.New("invalid envelope: event_id is missing"))
	}
	if err := e.Validate(); err != nil {
		return Event{}, Reject(ReasonInvalidEnvelope, fmt.Errorf("invalid envelope: %w", err))
	}
	return e, nil
}

// Name is a parsed event name such as tarefa.concluida.v1.
type Name struct {
	Base    string // tarefa.concluida: the routing key
	Version int    // 1
}

// ParseName checks that name is dot-separated words of lower-case
// letters, digits, _ and -, ending in a version suffix .vN (N >= 1). It is
// on every message's path, so it scans rather than matching a regular
// expression (a tenth of the time; a fuzz test holds the two equal).
func ParseName(name string) (Name, error) {
	i := strings.LastIndex(name, ".v")
	if i <= 0 || !validBase(name[:i]) || !validVersion(name[i+2:]) {
		return Name{}, fmt.Errorf("event_name %q must be lower-case dot-separated words ending in a version, like tarefa.concluida.v1", name)
	}
	v, err := strconv.Atoi(name[i+2:])
	if err != nil {
		return Name{}, fmt.Errorf("event_name %q: version: %w", name, err)
	}
	return Name{Base: name[:i], Version: v}, nil
}

// validBase reports whether s is words of [a-z0-9_-] joined by dots.
func validBase(s string) bool {
	word := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			if word == 0 {
				return false
			}
			word = 0
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
			word++
		default:
			return false
		}
	}
	return word > 0
}

// validVersion reports whether s is a number from 1 without leading zeros.
func validVersion(s string) bool {
	if s == "" || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Reason classes say why a message was dead-lettered. They travel in the
// moenda-reason header of every dead letter and are a stable contract:
// operators and tools group failures by them.
const (
	// ReasonDecode: the body is not a JSON envelope.
	ReasonDecode = "decode_error"
	// ReasonTooLarge: the body is larger than router.max_message_bytes.
	ReasonTooLarge = "too_large"
	// ReasonInvalidEncoding: the body is not valid UTF-8.
	ReasonInvalidEncoding = "invalid_encoding"
	// ReasonMissingEventID: the envelope has no event_id, so it cannot be
	// deduplicated.
	ReasonMissingEventID = "missing_event_id"
	// ReasonInvalidEnvelope: a field of the envelope is missing or malformed.
	ReasonInvalidEnvelope = "invalid_envelope"
	// ReasonUnknownVersion: the subscription handles the event's type, but
	// not this version of it.
	ReasonUnknownVersion = "unknown_version"
	// ReasonInvalidData: the database refused the event's data (a NUL
	// character, say); no retry can store it.
	ReasonInvalidData = "invalid_data"
	// ReasonPermanent: the handler marked its error Permanent.
	ReasonPermanent = "permanent"
	// ReasonRetriesExhausted: every attempt of the retry schedule failed.
	ReasonRetriesExhausted = "retries_exhausted"
)

// permanentError marks an error that no retry can fix.
type permanentError struct {
	reason string
	err    error
}

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as one that no retry can fix: the router sends the
// message to its dead-letter queue at once, with err as the reason.
func Permanent(err error) error { return Reject(ReasonPermanent, err) }

// DecodePayload reads e's payload into p and checks it with valid (nil:
// no check). A payload that does not decode or is not valid is marked
// Permanent, as retrying cannot fix it; the error names the event.
func DecodePayload[P any](e Event, p *P, valid func(P) error) error {
	err := json.Unmarshal(e.Payload, p)
	if err == nil && valid != nil {
		err = valid(*p)
	}
	if err != nil {
		return Permanent(fmt.Errorf("payload of %s %s: %w", e.Name, e.ID, err))
	}
	return nil
}

// Reject is Permanent with a reason class other than "permanent".
func Reject(reason string, err error) error {
	if err == nil {
		return nil
	}
	return permanentError{reason: reason, err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// ReasonOf returns the reason class of a permanent error, or "" for an
// error that may succeed when retried.
func ReasonOf(err error) string {
	var p permanentError
	if errors.As(err, &p) {
		return p.reason
	}
	return ""
}
