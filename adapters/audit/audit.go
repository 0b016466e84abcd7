// Package audit is the record of what was done through moenda's
// administration: who (a token's name and role), when, which action on
// which selection, and what came of it, refusals included. Entries are
// only ever added.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Outcomes of an action.
const (
	Done    = "done"
	Refused = "refused"
	Failed  = "failed"
)

// Entry is one action.
type Entry struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Role   string    `json:"role"`
	Action string    `json:"action"`
	// Selection is what the action was asked to take: ids, a group, a
	// filter, as the request gave it.
	Selection map[string]string `json:"selection"`
	Outcome   string            `json:"outcome"`
	// Detail is what came of it: counts, or why it was refused or failed.
	Detail        map[string]any `json:"detail"`
	CorrelationID string         `json:"correlation_id"`
}

// Filter selects entries; every field set must hold.
type Filter struct {
	Actor, Action, Outcome string
	Since, Until           time.Time
}

func (f Filter) match(e Entry) bool {
	eq := func(want, got string) bool { return want == "" || want == got }
	return eq(f.Actor, e.Actor) && eq(f.Action, e.Action) && eq(f.Outcome, e.Outcome) &&
		(f.Since.IsZero() || !e.At.Before(f.Since)) && (f.Until.IsZero() || e.At.Before(f.Until))
}

// Log keeps the entries: in PostgreSQL, or in memory in the memory
// environment.
type Log interface {
	// Add records e; its ID and At are the log's.
	Add(ctx context.Context, e Entry) error
	// List returns the entries f selects, newest first, with an id below
	// after (0: from the newest), limit at most.
	List(ctx context.Context, f Filter, after int64, limit int) ([]Entry, error)
}

// Postgres is the log in moenda_audit.
type Postgres struct{ pool *pgxpool.Pool }

// NewPostgres returns the log over pool.
func NewPostgres(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// Add implements Log.
func (l *Postgres) Add(ctx context.Context, e Entry) error {
	sel, err := json.Marshal(orEmpty(e.Selection))
	if err == nil {
		var detail []byte
		if detail, err = json.Marshal(orEmpty(e.Detail)); err == nil {
			_, err = l.pool.Exec(ctx, `INSERT INTO moenda_audit (actor, role, action, selection, outcome, detail, correlation_id)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.Actor, e.Role, e.Action, sel, e.Outcome, detail, e.CorrelationID)
		}
	}
	if err != nil {
		return fmt.Errorf("audit: record %s by %s: %w", e.Action, e.Actor, err)
	}
	return nil
}

// List implements Log.
func (l *Postgres) List(ctx context.Context, f Filter, after int64, limit int) ([]Entry, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, cond+" $"+strconv.Itoa(len(args)))
	}
	for col, v := range map[string]string{"actor =": f.Actor, "action =": f.Action, "outcome =": f.Outcome} {
		if v != "" {
			add(col, v)
		}
	}
	if !f.Since.IsZero() {
		add("at >=", f.Since)
	}
	if !f.Until.IsZero() {
		add("at <", f.Until)
	}
	if after > 0 {
		add("id <", after)
	}
	args = append(args, limit)
	rows, err := l.pool.Query(ctx, `SELECT id, at, actor, role, action, selection, outcome, detail, correlation_id
		FROM moenda_audit WHERE `+strings.Join(append(where, "true"), " AND ")+` ORDER BY id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err == nil {
		var out []Entry
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
			var e Entry
			err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Role, &e.Action, &e.Selection, &e.Outcome, &e.Detail, &e.CorrelationID)
			e.At = e.At.UTC()
			return e, err
		})
		if err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("audit: list: %w", err)
}

// Memory is the log of the memory environment.
type Memory struct {
	now     func() time.Time
	mu      sync.Mutex
	entries []Entry
}

// NewMemory returns an empty log whose times are now's.
func NewMemory(now func() time.Time) *Memory { return &Memory{now: now} }

// Add implements Log.
func (l *Memory) Add(_ context.Context, e Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.ID, e.At = int64(len(l.entries)+1), l.now().UTC()
	e.Selection, e.Detail = orEmpty(e.Selection), orEmpty(e.Detail)
	l.entries = append(l.entries, e)
	return nil
}

// List implements Log.
func (l *Memory) List(_ context.Context, f Filter, after int64, limit int) ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []Entry{}
	for _, e := range slices.Backward(l.entries) {
		if len(out) < limit && (after == 0 || e.ID < after) && f.match(e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// orEmpty is m, or an empty map for nil: the log keeps {} rather than
// null.
func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
