package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var _ Store = (*Postgres)(nil)

// Postgres is the store in moenda_redrives and moenda_redrive_items
// (migrations/).
type Postgres struct{ pool *pgxpool.Pool }

// NewPostgres returns the store over pool.
func NewPostgres(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// Create implements Store, in one transaction.
func (s *Postgres) Create(ctx context.Context, r Redrive, items []Item) (int64, error) {
	sel, err := json.Marshal(r.Selection)
	if err != nil {
		return 0, fmt.Errorf("redrive: create: %w", err)
	}
	rows, err := json.Marshal(items)
	if err != nil {
		return 0, fmt.Errorf("redrive: create: %w", err)
	}
	var id int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO moenda_redrives (actor, selection, target, rate, canary, state, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, r.Actor, sel, r.To, r.Rate, r.Canary, string(r.State), r.Reason).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO moenda_redrive_items (redrive_id, seq, failure_id, queue, event_id, state, reason)
			SELECT $1, seq, failure_id, queue, event_id, state, reason
			FROM jsonb_to_recordset($2::jsonb) AS r(seq int, failure_id bigint, queue text, event_id text, state text, reason text)`, id, string(rows))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redrive: create: %w", err)
	}
	return id, nil
}

// selectRedrive is a re-drive with its counters, by id.
const selectRedrive = `SELECT r.id, r.created_at, r.actor, r.selection, r.target, r.rate, r.canary, r.state, r.reason,
	count(i.*), count(i.*) FILTER (WHERE i.state = 'pending'), count(i.*) FILTER (WHERE i.state IN ('sending', 'sent')),
	count(i.*) FILTER (WHERE i.state = 'handled'), count(i.*) FILTER (WHERE i.state = 'failed_again'),
	count(i.*) FILTER (WHERE i.state = 'skipped'), count(i.*) FILTER (WHERE i.state = 'unsettled')
	FROM moenda_redrives r LEFT JOIN moenda_redrive_items i ON i.redrive_id = r.id`

func scanRedrive(row pgx.CollectableRow) (Redrive, error) {
	var r Redrive
	var state string
	c := &r.Counters
	err := row.Scan(&r.ID, &r.CreatedAt, &r.Actor, &r.Selection, &r.To, &r.Rate, &r.Canary, &state, &r.Reason,
		&c.Planned, &c.Pending, &c.Sent, &c.Handled, &c.FailedAgain, &c.Skipped, &c.Unsettled)
	r.State, r.CreatedAt = State(state), r.CreatedAt.UTC()
	return r, err
}

// Get implements Store.
func (s *Postgres) Get(ctx context.Context, id int64) (Redrive, error) {
	rows, err := s.pool.Query(ctx, selectRedrive+` WHERE r.id = $1 GROUP BY r.id`, id)
	if err != nil {
		return Redrive{}, fmt.Errorf("redrive: get %d: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRedrive)
	if errors.Is(err, pgx.ErrNoRows) {
		return Redrive{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Redrive{}, fmt.Errorf("redrive: get %d: %w", id, err)
	}
	return r, nil
}

// List implements Store.
func (s *Postgres) List(ctx context.Context) ([]Redrive, error) {
	rows, err := s.pool.Query(ctx, selectRedrive+` GROUP BY r.id ORDER BY r.id DESC`)
	if err == nil {
		var out []Redrive
		if out, err = pgx.CollectRows(rows, scanRedrive); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("redrive: list: %w", err)
}

// Move implements Store.
func (s *Postgres) Move(ctx context.Context, id int64, from []State, to State, reason string) (bool, error) {
	names := make([]string, len(from))
	for i, st := range from {
		names[i] = string(st)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE moenda_redrives SET state = $3, reason = $4 WHERE id = $1 AND state = ANY($2)`, id, names, string(to), reason)
	if err != nil {
		return false, fmt.Errorf("redrive: %d to %s: %w", id, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Items implements Store.
func (s *Postgres) Items(ctx context.Context, id int64, st ItemState, from, n int) ([]Item, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, failure_id, queue, event_id, state, reason, coalesce(sent_at, 'epoch')
		FROM moenda_redrive_items WHERE redrive_id = $1 AND state = $2 AND seq >= $3 ORDER BY seq LIMIT $4`, id, string(st), from, n)
	if err == nil {
		var out []Item
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Item, error) {
			var it Item
			var state string
			err := row.Scan(&it.Seq, &it.FailureID, &it.Queue, &it.EventID, &state, &it.Reason, &it.SentAt)
			it.State, it.SentAt = ItemState(state), it.SentAt.UTC()
			return it, err
		})
		if err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("redrive: items of %d: %w", id, err)
}

// Mark implements Store.
func (s *Postgres) Mark(ctx context.Context, id int64, seqs []int, st ItemState, reason string, at time.Time) error {
	if len(seqs) == 0 {
		return nil
	}
	var sentAt *time.Time
	if st == Sent {
		sentAt = &at
	}
	_, err := s.pool.Exec(ctx, `UPDATE moenda_redrive_items SET state = $3, reason = $4, sent_at = coalesce($5, sent_at)
		WHERE redrive_id = $1 AND seq = ANY($2)`, id, seqs, string(st), reason, sentAt)
	if err != nil {
		return fmt.Errorf("redrive: mark %d items of %d %s: %w", len(seqs), id, st, err)
	}
	return nil
}

// OfEvent implements Store.
func (s *Postgres) OfEvent(ctx context.Context, eventID string) ([]EventItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT redrive_id, seq, failure_id, queue, event_id, state, reason, coalesce(sent_at, 'epoch')
		FROM moenda_redrive_items WHERE event_id = $1 ORDER BY redrive_id, seq`, eventID)
	if err == nil {
		var out []EventItem
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventItem, error) {
			var it EventItem
			var state string
			err := row.Scan(&it.RedriveID, &it.Seq, &it.FailureID, &it.Queue, &it.EventID, &state, &it.Reason, &it.SentAt)
			it.State, it.SentAt = ItemState(state), it.SentAt.UTC()
			return it, err
		})
		if err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("redrive: the items of event %s: %w", eventID, err)
}

// Running implements Store.
func (s *Postgres) Running(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM moenda_redrives WHERE state IN ('canary', 'running') ORDER BY id`)
	if err == nil {
		var ids []int64
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err == nil {
			return ids, nil
		}
	}
	return nil, fmt.Errorf("redrive: running: %w", err)
}
