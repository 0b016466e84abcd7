// Package redrive sends failures of the ledger back to the queues that
// failed them, by plan: a selection frozen into items when the re-drive is
// made, an optional canary that must be handled before the rest go, a
// rate, and a closed loop that settles each item as handled (its queue's
// inbox claims the event) or failed again (it dead-lettered again). A
// re-drive is kept in a store and survives a restart of the process that
// runs it: an item is marked sending before it is sent and sent once the
// broker has it, so a resumed re-drive sends again only the items a stop
// caught in between, whose events the queues' inboxes handle once.
package redrive

import (
	"context"
	"errors"
	"time"
)

// State is where a re-drive stands.
type State string

const (
	// Canary: the first items are sent, and the rest wait until each of
	// them is settled.
	Canary State = "canary"
	// Running: the items are sent at the re-drive's rate.
	Running State = "running"
	// Paused: nothing is sent until it is resumed; Reason says why.
	Paused State = "paused"
	// Cancelled: nothing more is sent; what was sent settles.
	Cancelled State = "cancelled"
	// Done: every item was sent and settled, or skipped.
	Done State = "done"
)

// ItemState is where one failure of a re-drive stands.
type ItemState string

const (
	Pending ItemState = "pending"
	// Sending: marked before its send, and Sent once the broker has
	// taken it. One found sending when its re-drive runs again was caught
	// by a stop between the two and goes again: should the first copy have
	// arrived, the queue's inbox handles the event once.
	Sending ItemState = "sending"
	Sent    ItemState = "sent"
	// Handled: the queue's inbox claimed the event after it was sent.
	Handled ItemState = "handled"
	// FailedAgain: it dead-lettered again after it was sent.
	FailedAgain ItemState = "failed_again"
	// Skipped: the plan left it out; Reason says why.
	Skipped ItemState = "skipped"
	// Unsettled: sent, and neither handled nor failed again within the
	// settle timeout: it may have been lost (its process died between the
	// mark and the send) or wait in a queue with no consumer.
	Unsettled ItemState = "unsettled"
)

// Redrive is one re-drive.
type Redrive struct {
	ID        int64             `json:"id"`
	CreatedAt time.Time         `json:"created_at"`
	Actor     string            `json:"actor"`
	Selection map[string]string `json:"selection"`
	// To is where the items go: "" for the queue each failed in,
	// "queue:NAME" for another queue, or ToOriginalExchange.
	To string `json:"to"`
	// Rate is items per second; 0 is as fast as the broker takes them.
	Rate float64 `json:"rate"`
	// Canary is how many items go first, alone.
	Canary   int      `json:"canary"`
	State    State    `json:"state"`
	Reason   string   `json:"reason"`
	Counters Counters `json:"counters"`
}

// Counters count a re-drive's items by state.
type Counters struct {
	Planned int `json:"planned"`
	Pending int `json:"pending"`
	// Sent counts those sent and not yet settled, with any being sent.
	Sent        int `json:"sent"`
	Handled     int `json:"handled"`
	FailedAgain int `json:"failed_again"`
	Skipped     int `json:"skipped"`
	Unsettled   int `json:"unsettled"`
}

// count adds one item of state s.
func (c *Counters) count(s ItemState) {
	c.Planned++
	switch s {
	case Pending:
		c.Pending++
	case Sending, Sent:
		c.Sent++
	case Handled:
		c.Handled++
	case FailedAgain:
		c.FailedAgain++
	case Skipped:
		c.Skipped++
	case Unsettled:
		c.Unsettled++
	}
}

// Item is one failure of a re-drive, in the order it is sent.
type Item struct {
	Seq       int       `json:"seq"`
	FailureID int64     `json:"failure_id"`
	Queue     string    `json:"queue"` // where it is sent
	EventID   string    `json:"event_id"`
	State     ItemState `json:"state"`
	Reason    string    `json:"reason"`
	SentAt    time.Time `json:"sent_at"`
}

// ErrNotFound is the error of a re-drive id the store does not hold.
var ErrNotFound = errors.New("redrive: no such re-drive")

// Store keeps re-drives and their items.
type Store interface {
	// Create stores r with its items and returns its id.
	Create(ctx context.Context, r Redrive, items []Item) (int64, error)
	// Get returns the re-drive id with its counters, or ErrNotFound.
	Get(ctx context.Context, id int64) (Redrive, error)
	// List returns every re-drive, newest first.
	List(ctx context.Context) ([]Redrive, error)
	// Move sets the re-drive's state to to, with reason, if it is in one
	// of from, and says whether it was.
	Move(ctx context.Context, id int64, from []State, to State, reason string) (bool, error)
	// Items returns up to n items of the re-drive in state s, in order,
	// from seq on.
	Items(ctx context.Context, id int64, s ItemState, from, n int) ([]Item, error)
	// Mark sets the state of the items seqs, with reason; at is their
	// sent time when they are marked Sent.
	Mark(ctx context.Context, id int64, seqs []int, s ItemState, reason string, at time.Time) error
	// Running returns the ids of the re-drives in Canary or Running.
	Running(ctx context.Context) ([]int64, error)
	// OfEvent returns every item of every re-drive that holds the event
	// eventID, by re-drive, oldest first.
	OfEvent(ctx context.Context, eventID string) ([]EventItem, error)
}

// EventItem is an item and the re-drive it is part of.
type EventItem struct {
	RedriveID int64 `json:"redrive_id"`
	Item
}
