// Package failures is the failure ledger: every dead letter of the
// topology's dead-letter queues (and of the foreign queues a configuration
// names) read into one table, keyed by the queue it came from and its
// event id, and grouped by the fingerprint of its cause. The dead-letter
// queues empty into the ledger: a delivery is acknowledged only once the
// transaction that records it has committed.
package failures

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers/event"
)

// Status is where a failure stands. Its names are a stable contract: the
// API and the CLI print them.
type Status string

const (
	// Unresolved: in the ledger, waiting for an operator.
	Unresolved Status = "unresolved"
	// Redriving: sent back by a re-drive that has not seen its outcome yet.
	Redriving Status = "redriving"
	// Resolved: handled after a re-drive.
	Resolved Status = "resolved"
	// Archived: hidden from the default views, kept for failures.retention.
	Archived Status = "archived"
	// Edited: an operator edited its body, and the edit, a failure of its
	// own (EditedBy), stands for it from then on; hidden from the default
	// views, and kept as long as its edit is.
	Edited Status = "edited"
)

// Headers RabbitMQ sets on a message it dead-letters itself (a consumer's
// reject, a TTL, a quorum queue's delivery limit): the story of a dead
// letter that carries no moenda header.
const (
	brokerFirstDeathQueue  = "x-first-death-queue"
	brokerFirstDeathReason = "x-first-death-reason"
	brokerFirstDeathExch   = "x-first-death-exchange"
	brokerDeliveryCount    = "x-delivery-count"
)

// Failure is one dead letter in the ledger.
type Failure struct {
	// ID is the ledger's own key, in the order failures were recorded:
	// pages follow it.
	ID int64 `json:"id"`
	// Queue is the dead-letter queue the failure was read from.
	Queue string `json:"queue"`
	// EventID is the event's id; with Queue, what makes a failure one.
	EventID string `json:"event_id"`
	// FailedQueue and Handler name the consumer that failed: the queue a
	// re-drive sends the failure back to.
	FailedQueue   string `json:"failed_queue"`
	Handler       string `json:"handler"`
	EventName     string `json:"event_name"`
	CorrelationID string `json:"correlation_id"`
	// Reason is moenda's reason class (event.Reason*), or the broker's own
	// word for a message it dead-lettered (rejected, expired,
	// delivery_limit, maxlen).
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// Fingerprint names the failure's group: see Fingerprint.
	Fingerprint string `json:"fingerprint"`
	// Attempts counts the deliveries that failed before the dead letter.
	Attempts int `json:"attempts"`
	// Occurrences counts the times the event reached the dead-letter
	// queue: more than one when it failed again after a re-drive.
	Occurrences int `json:"occurrences"`
	// Redrives counts the times it was sent back by a re-drive, and
	// RedriveID names the last re-drive that took it (0: none).
	Redrives       int       `json:"redrives"`
	RedriveID      int64     `json:"redrive_id"`
	FirstFailureAt time.Time `json:"first_failure_at"`
	LastFailureAt  time.Time `json:"last_failure_at"`
	RecordedAt     time.Time `json:"recorded_at"`
	Status         Status    `json:"status"`
	// OriginalExchange and OriginalRoutingKey say where the event was
	// first published.
	OriginalExchange   string `json:"original_exchange"`
	OriginalRoutingKey string `json:"original_routing_key"`
	// Headers are every header and property the dead letter carried.
	Headers map[string]string `json:"headers"`
	Body    []byte            `json:"body"`
	// EditOf names the failure this one is an edit of, and EditedBy the
	// edit of this one (0: none): the original and the edit are both kept.
	EditOf   int64 `json:"edit_of"`
	EditedBy int64 `json:"edited_by"`
}

// FromMessage reads the dead letter msg, taken from the dead-letter queue
// queue, into a Failure. moenda's headers tell its story; a message the
// broker dead-lettered itself, or a foreign consumer rejected, is told by
// the broker's death headers instead, and one with neither by what it has.
// now stands for the times the message does not carry.
func FromMessage(queue string, msg *message.Message, now time.Time) Failure {
	md := msg.Metadata
	f := Failure{
		Queue:              queue,
		EventID:            first(md.Get(event.HeaderEventID), msg.UUID),
		FailedQueue:        first(md.Get(event.HeaderQueue), md.Get(brokerFirstDeathQueue), queue),
		Handler:            md.Get(event.HeaderHandler),
		EventName:          md.Get(event.MetaName),
		CorrelationID:      first(md.Get(event.HeaderCorrelationID), md.Get(event.MetaCorrelationID)),
		Reason:             first(md.Get(event.HeaderReason), md.Get(brokerFirstDeathReason), "unknown"),
		Error:              md.Get(event.HeaderError),
		OriginalExchange:   md.Get(event.HeaderOriginalExchange),
		OriginalRoutingKey: md.Get(event.HeaderOriginalRoutingKey),
		FirstFailureAt:     timeOr(md.Get(event.HeaderFirstFailureAt), now),
		LastFailureAt:      timeOr(md.Get(event.HeaderLastFailureAt), now),
		Occurrences:        1,
		Status:             Unresolved,
		Headers:            make(map[string]string, len(md)),
		Body:               msg.Payload,
	}
	f.Attempts, _ = strconv.Atoi(first(md.Get(event.HeaderAttempts), md.Get(brokerDeliveryCount)))
	if f.EventID == "" {
		// A foreign message with no id at all: its content names it, so
		// the same message read twice is still one failure.
		sum := sha256.Sum256(msg.Payload)
		f.EventID = "sha256:" + hex.EncodeToString(sum[:])
	}
	if f.Error == "" && md.Get(event.HeaderReason) == "" {
		f.Error = "dead-lettered by the broker: " + f.Reason + " at queue " + f.FailedQueue
	}
	if f.OriginalRoutingKey == "" {
		// The broker keeps a dead letter's routing key, and says where it
		// was first published.
		f.OriginalExchange = first(md.Get(brokerFirstDeathExch), md.Get(event.MetaDeliveryExchange))
		f.OriginalRoutingKey = md.Get(event.MetaDeliveryRoutingKey)
	}
	for k, v := range md {
		if k != event.MetaDeliveryExchange && k != event.MetaDeliveryRoutingKey && k != event.MetaRedelivered {
			f.Headers[text(k)] = text(v)
		}
	}
	for _, s := range []*string{&f.EventID, &f.FailedQueue, &f.Handler, &f.EventName, &f.CorrelationID, &f.Reason,
		&f.Error, &f.OriginalExchange, &f.OriginalRoutingKey} {
		*s = text(*s)
	}
	f.Fingerprint = Fingerprint(f.Handler, f.Reason, f.Error)
	return f
}

// text is s as PostgreSQL's text and jsonb take it: valid UTF-8 without
// NUL. A foreign dead letter can carry anything in its headers, and one
// that the ledger could not store would hold back the rest of its queue.
func text(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// first is the first of vs that is not empty.
func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// timeOr parses an RFC 3339 header, or is or when there is none.
func timeOr(s string, or time.Time) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return or.UTC()
	}
	return t.UTC()
}
