package app

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// journey is one event's life in moenda: its outbox row and what each
// relay group made of it, each queue its bindings route it to and
// whether that queue handled it, its failures and its re-drives.
type journey struct {
	EventID   string `json:"event_id"`
	EventName string `json:"event_name"`
	// Outbox is nil for an event not in the outbox: published by a
	// foreign service, pruned by outbox.retention, or with the memory
	// broker, which keeps no outbox.
	Outbox   *outbox.Passage     `json:"outbox"`
	Queues   []queueVisit        `json:"queues"`
	Failures []failures.Failure  `json:"failures"`
	Redrives []redrive.EventItem `json:"redrives"`
}

// queueVisit is a queue an event reaches, and when it handled it.
type queueVisit struct {
	Queue     string     `json:"queue"`
	Handled   bool       `json:"handled"`
	HandledAt *time.Time `json:"handled_at,omitempty"`
}

// journeys returns the journey of the event eventID, or of every event of
// the correlation correlationID (one of them is ""), oldest first.
func (b *workbench) journeys(ctx context.Context, eventID, correlationID string) ([]journey, error) {
	var passages []outbox.Passage
	if b.pool != nil {
		var err error
		if passages, err = outbox.Passages(ctx, b.pool, eventID, correlationID); err != nil {
			return nil, err
		}
	}
	ids := []string{}
	byID := map[string]*outbox.Passage{}
	for i := range passages {
		ids = append(ids, passages[i].EventID)
		byID[passages[i].EventID] = &passages[i]
	}
	fs, err := b.ledger.List(ctx, failures.Filter{EventID: eventID, CorrelationID: correlationID, AnyStatus: true}, failures.Page{})
	if err != nil {
		return nil, err
	}
	slices.Reverse(fs)
	for _, f := range fs {
		if !slices.Contains(ids, f.EventID) {
			ids = append(ids, f.EventID)
		}
	}
	if len(ids) == 0 && eventID != "" {
		ids = append(ids, eventID) // it may still have been handled
	}
	out := []journey{}
	for _, id := range ids {
		j := journey{EventID: id, Outbox: byID[id], Failures: []failures.Failure{}}
		for _, f := range fs {
			if f.EventID == id {
				j.Failures = append(j.Failures, f)
				j.EventName = f.EventName
			}
		}
		if j.Outbox != nil {
			j.EventName = j.Outbox.EventName
		}
		if j.Queues, err = b.visits(ctx, id, j.EventName); err != nil {
			return nil, err
		}
		if j.Redrives, err = b.redrives.OfEvent(ctx, id); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// visits are the queues the topology routes an event of name to, and the
// consumers whose inbox claimed it, with when.
func (b *workbench) visits(ctx context.Context, id, name string) ([]queueVisit, error) {
	claims, err := b.claims(ctx, id)
	if err != nil {
		return nil, err
	}
	var queues []string
	if n, err := event.ParseName(name); err == nil {
		if x, err := b.top.ExchangeFor(n.Base); err == nil {
			queues = b.top.QueuesFor(x, n.Base)
		}
	}
	for c := range claims {
		if !slices.Contains(queues, c) {
			queues = append(queues, c)
		}
	}
	slices.Sort(queues)
	out := []queueVisit{}
	for _, q := range queues {
		v := queueVisit{Queue: q}
		if at, ok := claims[q]; ok {
			v.Handled, v.HandledAt = true, &at
		}
		out = append(out, v)
	}
	return out, nil
}

// journeyQuery reads GET /v1/admin/journeys' event_id or correlation_id.
func journeyQuery(r *http.Request) ([2]string, error) {
	q, err := httpjson.Query(r, "event_id", "correlation_id")
	if err != nil {
		return [2]string{}, err
	}
	if (q["event_id"] == "") == (q["correlation_id"] == "") {
		return [2]string{}, invalid("give event_id or correlation_id, one of them")
	}
	return [2]string{q["event_id"], q["correlation_id"]}, nil
}
