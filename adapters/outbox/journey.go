package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Passage is an event's outbox row as a journey shows it: when it was
// committed, and what each relay group made of it.
type Passage struct {
	EventID       string    `json:"event_id"`
	EventName     string    `json:"event_name"`
	CorrelationID string    `json:"correlation_id"`
	CommittedAt   time.Time `json:"committed_at"`
	Groups        []Relayed `json:"relay_groups"`
}

// Relayed is what one relay group made of an outbox row: past it
// (published, or parked with the reason), or not yet.
type Relayed struct {
	Group  string `json:"consumer_group"`
	Reader string `json:"reader,omitempty"`
	Passed bool   `json:"passed"`
	Parked string `json:"parked,omitempty"`
}

// Passages returns the outbox rows of the event eventID, or of every event
// of the correlation correlationID (one of them is ""), oldest first. Both
// are looked up in the rows' metadata, which no index covers: the query
// reads the outbox table, which retention keeps short.
func Passages(ctx context.Context, pool *pgxpool.Pool, eventID, correlationID string) ([]Passage, error) {
	rows, err := pool.Query(ctx, `
		SELECT o.uuid, coalesce(o.metadata->>'event_name', ''), coalesce(o.metadata->>'correlation_id', ''), o.created_at,
			g.consumer_group, coalesce(g.reader, ''),
			(o.transaction_id, o."offset") <= (g.last_processed_transaction_id, coalesce(g.offset_acked, 0)),
			coalesce(p.reason, '')
		FROM watermill_outbox o
		LEFT JOIN watermill_offsets_outbox g ON true
		LEFT JOIN moenda_outbox_parked p ON p.transaction_id = o.transaction_id AND p."offset" = o."offset" AND p.consumer_group = g.consumer_group
		WHERE ($1 <> '' AND o.uuid = $1) OR ($2 <> '' AND o.metadata->>'correlation_id' = $2)
		ORDER BY o.transaction_id, o."offset", g.consumer_group`, eventID, correlationID)
	if err != nil {
		return nil, fmt.Errorf("outbox: the passages of %s%s: %w", eventID, correlationID, err)
	}
	defer rows.Close()
	var out []Passage
	for rows.Next() {
		var p Passage
		var group, reader, parked *string
		var passed *bool
		if err := rows.Scan(&p.EventID, &p.EventName, &p.CorrelationID, &p.CommittedAt, &group, &reader, &passed, &parked); err != nil {
			return nil, fmt.Errorf("outbox: the passages of %s%s: %w", eventID, correlationID, err)
		}
		if n := len(out); n == 0 || out[n-1].EventID != p.EventID {
			p.CommittedAt = p.CommittedAt.UTC()
			p.Groups = []Relayed{}
			out = append(out, p)
		}
		if group != nil {
			last := &out[len(out)-1]
			last.Groups = append(last.Groups, Relayed{Group: *group, Reader: *reader, Passed: passed != nil && *passed, Parked: *parked})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: the passages of %s%s: %w", eventID, correlationID, err)
	}
	return out, nil
}
