package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/handlers/event"
)

// Why a relay parks a row (Parked.Reason).
const (
	// ReasonNoEvent: the row's metadata names no event, so it has no
	// routing key; no configuration can publish it.
	ReasonNoEvent = "no_event"
	// ReasonUnroutable: no exchange carries the row's routing key; once
	// the configuration routes it, Republish sends it.
	ReasonUnroutable = "unroutable"
	// ReasonRefused: the broker refused the message for good (larger than
	// its record limit, a record it calls invalid); Detail says why. Once
	// the broker takes it (its limit raised), Republish sends it.
	ReasonRefused = "refused"
)

// Parked is an outbox row a relay moved past without publishing it. The
// row stays in watermill_outbox (retention keeps it) until Republish sends
// it.
type Parked struct {
	EventID       string    `json:"event_id"`
	EventName     string    `json:"event_name"`
	RoutingKey    string    `json:"routing_key"`
	ConsumerGroup string    `json:"consumer_group"`
	Reason        string    `json:"reason"`
	Detail        string    `json:"detail"`
	ParkedAt      time.Time `json:"parked_at"`
	// TransactionID and Offset are the row's key in watermill_outbox.
	TransactionID uint64 `json:"transaction_id"`
	Offset        int64  `json:"offset"`
}

// parkedRow is a row of a batch the relay parks with the batch's position.
type parkedRow struct {
	position
	eventID, eventName, routingKey, reason, detail string
	correlationID                                  string // for the log only
}

// parkedCTE is the part of a WITH statement that records the parked rows
// of a batch for the group in $1, given as the seven arrays of
// parkedColumns from $first on, once the CTE named after has a row (the
// position moved, or the slot is still the relay's). A row parked before
// (a batch read again after a crash) keeps its first entry.
func parkedCTE(first int, after string) string {
	return fmt.Sprintf(`parked AS (
		INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
		SELECT t::xid8, o, $1, id, name, key, reason, detail
		FROM unnest($%d::text[], $%d::bigint[], $%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::text[]) AS u (t, o, id, name, key, reason, detail)
		WHERE EXISTS (SELECT 1 FROM %s)
		ON CONFLICT DO NOTHING)`, first, first+1, first+2, first+3, first+4, first+5, first+6, after)
}

// why says in words why the row was parked.
func (p parkedRow) why() string {
	switch p.reason {
	case ReasonNoEvent:
		return "its metadata names no event"
	case ReasonRefused:
		return "the broker refused it for good"
	}
	return "no exchange carries its routing key"
}

// decode makes rw the message the relay publishes, with its routing key,
// or says why it cannot be published. The relay and Republish both go
// through it, so a republished row leaves as the relay would have sent it.
func decode(rw outboxRow, routable func(string) error) (*message.Message, string, *parkedRow) {
	msg := message.NewMessage(rw.uuid, rw.payload)
	var err error
	msg.Metadata, err = decodeMetadata(rw.metadata)
	park := &parkedRow{position: rw.position, eventID: rw.uuid,
		eventName: msg.Metadata.Get(event.MetaName), correlationID: msg.Metadata.Get(event.MetaCorrelationID)}
	key := msg.Metadata.Get(legacyRoutingKey) // as written; saves parsing the name
	if err == nil && key == "" {
		var name event.Name
		name, err = event.ParseName(msg.Metadata.Get(event.MetaName))
		key = name.Base
	}
	if err != nil {
		park.reason, park.detail = ReasonNoEvent, err.Error()
		return nil, "", park.clean()
	}
	park.routingKey = key
	if err := routable(key); err != nil {
		park.reason, park.detail = ReasonUnroutable, err.Error()
		return nil, "", park.clean()
	}
	delete(msg.Metadata, legacyRoutingKey)
	return msg, key, nil
}

// clean makes p's text storable: metadata that names no event may hold
// anything, and a value PostgreSQL refuses would stop the relay on it.
func (p *parkedRow) clean() *parkedRow {
	p.eventName = storable(p.eventName, 255)
	p.routingKey = storable(p.routingKey, 255)
	p.detail = storable(p.detail, 1000)
	p.correlationID = storable(p.correlationID, 128)
	return p
}

// storable is s as PostgreSQL text (valid UTF-8, no NUL) of at most n bytes.
func storable(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") // drops a rune cut in two
	}
	return s
}

// parkedColumns are the parked rows as the arrays the relay's position
// statement unnests ($6 to $12).
func parkedColumns(parked []parkedRow) []any {
	var (
		txIDs   = make([]string, len(parked))
		offsets = make([]int64, len(parked))
		ids     = make([]string, len(parked))
		names   = make([]string, len(parked))
		keys    = make([]string, len(parked))
		reasons = make([]string, len(parked))
		details = make([]string, len(parked))
	)
	for i, p := range parked {
		txIDs[i], offsets[i] = fmt.Sprint(p.txID), p.offset
		ids[i], names[i], keys[i], reasons[i], details[i] = p.eventID, p.eventName, p.routingKey, p.reason, p.detail
	}
	return []any{txIDs, offsets, ids, names, keys, reasons, details}
}

// ListParked returns the parked rows, oldest first, at most limit of
// them (every one when limit is 0), and how many there are in all.
func ListParked(ctx context.Context, pool *pgxpool.Pool, limit int) ([]Parked, int, error) {
	if limit < 0 {
		return nil, 0, fmt.Errorf("outbox: list parked rows: limit must not be negative, got %d", limit)
	}
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM moenda_outbox_parked`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("outbox: list parked rows: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT `+parkedFields+` FROM moenda_outbox_parked p
		ORDER BY p.parked_at, p.transaction_id, p."offset", p.consumer_group LIMIT NULLIF($1, 0)`, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: list parked rows: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Parked, error) {
		var p Parked
		err := row.Scan(&p.TransactionID, &p.Offset, &p.ConsumerGroup, &p.EventID, &p.EventName, &p.RoutingKey, &p.Reason, &p.Detail, &p.ParkedAt)
		return p, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: list parked rows: %w", err)
	}
	return list, max(total, len(list)), nil
}

// CountParked is how many rows group's relays have parked and
// Republish has not sent yet. It counts the table, so read it every few
// seconds, as Lag, not per request.
func CountParked(ctx context.Context, pool *pgxpool.Pool, group string) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM moenda_outbox_parked WHERE consumer_group = $1`, group).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: count the parked rows of %s: %w", group, err)
	}
	return n, nil
}

// parkedFields are the columns of moenda_outbox_parked p read into a
// Parked, in its scan order.
const parkedFields = `p.transaction_id::text::bigint, p."offset", p.consumer_group, p.event_id, p.event_name, p.routing_key, p.reason, p.detail, p.parked_at`

// Republished is what Republish did: how many rows it published, how
// many it left parked, and the first StillShown of those, each with the
// reason it could not send it now in Detail (`moenda outbox parked` lists
// them all).
type Republished struct {
	Republished     int      `json:"republished"`
	StillParked     int      `json:"still_parked"`
	StillUnroutable []Parked `json:"still_unroutable"`
}

// StillShown bounds the parked rows a Republished lists, so an answer
// stays small however many rows stay parked.
const StillShown = 100

// left counts a row Republish leaves parked, and lists it while the list
// has room.
func (r *Republished) left(p Parked) {
	r.StillParked++
	if len(r.StillUnroutable) < StillShown {
		r.StillUnroutable = append(r.StillUnroutable, p)
	}
}

// republishBatch is how many parked rows Republish reads and publishes at
// a time.
const republishBatch = 500

// republishLock names the advisory lock that keeps two Republish calls
// (the command line and the admin endpoint, two replicas) from sending the
// same rows twice. It is a session lock, not a row lock: a row lock would
// give the transaction an id and hold back every outbox reader of the
// cluster while the broker confirms.
const republishLock = "moenda outbox republish"

// Republish publishes the parked rows whose routing key routable now
// accepts, each through dests[group], the destination of the relay whose
// consumer group parked it (as that relay would have sent it), and
// removes them from the parked rows once the broker confirmed them. The
// others stay parked and are returned: still unroutable, naming no event,
// gone from watermill_outbox, or of a group no relay of this configuration
// runs. On an error, the result says what was republished before it.
//
// Republished events arrive after events written later: consumers that
// depend on order must already cope with redeliveries.
func Republish(ctx context.Context, pool *pgxpool.Pool, dests map[string]Destination, routable func(string) error) (res Republished, err error) {
	res.StillUnroutable = []Parked{}
	if routable == nil {
		return res, errors.New("outbox: republish: the routing rule is required")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("outbox: republish: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey(republishLock)); err != nil {
		return res, fmt.Errorf("outbox: republish: wait for another republish to end: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey(republishLock)); uerr != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // the lock ends with the session
		}
	}()
	rows, err := conn.Query(ctx, `SELECT DISTINCT consumer_group FROM moenda_outbox_parked ORDER BY 1`)
	if err != nil {
		return res, fmt.Errorf("outbox: republish: %w", err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("outbox: republish: %w", err)
	}
	for _, group := range groups {
		if err := republishGroup(ctx, conn.Conn(), group, dests[group], routable, &res); err != nil {
			return res, fmt.Errorf("outbox: republish the rows %s parked (%d republished before this failure): %w", group, res.Republished, err)
		}
	}
	return res, nil
}

// republishGroup republishes the rows group parked through dest (nil when
// no relay of this configuration runs group), adding to res.
func republishGroup(ctx context.Context, conn *pgx.Conn, group string, dest Destination, routable func(string) error, res *Republished) error {
	var after position
	for {
		rows, err := conn.Query(ctx, `SELECT `+parkedFields+`, o.uuid IS NOT NULL, o.payload, o.metadata
			FROM moenda_outbox_parked p LEFT JOIN watermill_outbox o ON o.transaction_id = p.transaction_id AND o."offset" = p."offset"
			WHERE p.consumer_group = $1 AND (p.transaction_id, p."offset") > ($2::text::xid8, $3)
			ORDER BY p.transaction_id, p."offset" LIMIT $4`, group, fmt.Sprint(after.txID), after.offset, republishBatch)
		if err != nil {
			return err
		}
		type candidate struct {
			Parked
			present bool
			row     outboxRow
		}
		batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			err := row.Scan(&c.TransactionID, &c.Offset, &c.ConsumerGroup, &c.EventID, &c.EventName, &c.RoutingKey, &c.Reason, &c.Detail, &c.ParkedAt,
				&c.present, &c.row.payload, &c.row.metadata)
			c.row.position = position{txID: c.TransactionID, offset: c.Offset}
			c.row.uuid = c.EventID
			return c, err
		})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		after = batch[len(batch)-1].row.position

		var keys []string
		var msgs []*message.Message
		var sent []Parked
		for _, c := range batch {
			if dest == nil {
				c.Detail = fmt.Sprintf("no relay of this configuration publishes for consumer group %s", group)
				res.left(c.Parked)
				continue
			}
			if !c.present {
				c.Detail = "the row is no longer in watermill_outbox"
				res.left(c.Parked)
				continue
			}
			msg, key, park := decode(c.row, routable)
			if park != nil {
				c.Reason, c.RoutingKey, c.Detail = park.reason, park.routingKey, park.detail
				res.left(c.Parked)
				continue
			}
			keys, msgs, sent = append(keys, key), append(msgs, msg), append(sent, c.Parked)
		}
		if len(msgs) == 0 {
			continue
		}
		if err := dest.PublishBatch(ctx, keys, msgs); err != nil {
			// Delivered in part: those delivered leave the parked rows, the
			// others stay, with why.
			var partly *BatchError
			if !errors.As(err, &partly) {
				return fmt.Errorf("publish %d events: %w", len(msgs), err)
			}
			delivered := sent[:0:0]
			for i, p := range sent {
				if failed, ok := partly.Failed[i]; ok {
					p.Detail = storable(failed.Error(), 1000)
					res.left(p)
					continue
				}
				delivered = append(delivered, p)
			}
			sent = delivered
		}
		txIDs, offsets := make([]string, len(sent)), make([]int64, len(sent))
		for i, p := range sent {
			txIDs[i], offsets[i] = fmt.Sprint(p.TransactionID), p.Offset
		}
		// Published and confirmed: if this fails, the rows stay parked and
		// a later republish sends them again (at least once).
		if _, err := conn.Exec(ctx, `DELETE FROM moenda_outbox_parked
			WHERE consumer_group = $1 AND (transaction_id, "offset") IN (SELECT t::xid8, o FROM unnest($2::text[], $3::bigint[]) AS u (t, o))`,
			group, txIDs, offsets); err != nil {
			return fmt.Errorf("%d events published, but not removed from the parked rows: %w", len(sent), err)
		}
		res.Republished += len(sent)
	}
}
