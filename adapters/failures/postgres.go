package failures

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var _ Ledger = (*Postgres)(nil)

// Postgres is the ledger in the table moenda_failures (migrations/).
type Postgres struct {
	pool *pgxpool.Pool
}

// NewPostgres returns the ledger over pool.
func NewPostgres(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// Record implements Ledger, in one statement: the rows travel as one
// array a column, which PostgreSQL unnests, in pgx's binary encoding.
func (l *Postgres) Record(ctx context.Context, fs []Failure) (int, error) {
	if len(fs) == 0 {
		return 0, nil
	}
	fs = once(fs)
	var c struct {
		queue, eventID, failedQueue, handler, eventName, correlationID, reason, errText, fingerprint []string
		status, originalExchange, originalRoutingKey, headers                                        []string
		attempts, occurrences                                                                        []int32
		first, last                                                                                  []time.Time
		body                                                                                         [][]byte
	}
	for _, f := range fs {
		headers, err := json.Marshal(f.Headers)
		if err != nil {
			return 0, fmt.Errorf("failures: record %d: %w", len(fs), err)
		}
		if f.Headers == nil {
			headers = []byte("{}")
		}
		c.queue, c.eventID, c.failedQueue = append(c.queue, f.Queue), append(c.eventID, f.EventID), append(c.failedQueue, f.FailedQueue)
		c.handler, c.eventName, c.correlationID = append(c.handler, f.Handler), append(c.eventName, f.EventName), append(c.correlationID, f.CorrelationID)
		c.reason, c.errText, c.fingerprint = append(c.reason, f.Reason), append(c.errText, f.Error), append(c.fingerprint, f.Fingerprint)
		c.status, c.originalExchange = append(c.status, string(f.Status)), append(c.originalExchange, f.OriginalExchange)
		c.originalRoutingKey, c.headers = append(c.originalRoutingKey, f.OriginalRoutingKey), append(c.headers, string(headers))
		c.attempts, c.occurrences = append(c.attempts, int32(f.Attempts)), append(c.occurrences, int32(f.Occurrences))
		c.first, c.last = append(c.first, f.FirstFailureAt), append(c.last, f.LastFailureAt)
		c.body = append(c.body, f.Body)
	}
	// A later failure of a row being re-driven makes it unresolved again;
	// the same dead letter read twice (its last failure no later) changes
	// nothing.
	tag, err := l.pool.Exec(ctx, `
		INSERT INTO moenda_failures (queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error,
			fingerprint, attempts, occurrences, first_failure_at, last_failure_at, status, original_exchange,
			original_routing_key, headers, body)
		SELECT queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error,
			fingerprint, attempts, occurrences, first_failure_at, last_failure_at, status, original_exchange,
			original_routing_key, headers::jsonb, coalesce(body, '')
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::int[], $11::int[], $12::timestamptz[], $13::timestamptz[], $14::text[], $15::text[],
			$16::text[], $17::text[], $18::bytea[])
			AS r(queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error,
			fingerprint, attempts, occurrences, first_failure_at, last_failure_at, status, original_exchange,
			original_routing_key, headers, body)
		ON CONFLICT (queue, event_id) WHERE status <> 'edited' DO UPDATE SET
			status = 'unresolved', occurrences = moenda_failures.occurrences + 1,
			reason = excluded.reason, error = excluded.error, fingerprint = excluded.fingerprint,
			attempts = excluded.attempts, last_failure_at = excluded.last_failure_at,
			headers = excluded.headers, body = excluded.body
		WHERE moenda_failures.status = 'redriving' AND excluded.last_failure_at > moenda_failures.last_failure_at`,
		c.queue, c.eventID, c.failedQueue, c.handler, c.eventName, c.correlationID, c.reason, c.errText,
		c.fingerprint, c.attempts, c.occurrences, c.first, c.last, c.status, c.originalExchange,
		c.originalRoutingKey, c.headers, c.body)
	if err != nil {
		return 0, fmt.Errorf("failures: record %d: %w", len(fs), err)
	}
	return int(tag.RowsAffected()), nil
}

// Mark implements Ledger.
func (l *Postgres) Mark(ctx context.Context, ids []int64, from, to Status) (int, error) {
	tag, err := l.pool.Exec(ctx, `UPDATE moenda_failures SET status = $3 WHERE id = ANY($1) AND status = $2`, ids, string(from), string(to))
	if err != nil {
		return 0, fmt.Errorf("failures: mark %d %s: %w", len(ids), to, err)
	}
	return int(tag.RowsAffected()), nil
}

// Redrive implements Ledger.
func (l *Postgres) Redrive(ctx context.Context, ids []int64, redrive int64) (int, error) {
	tag, err := l.pool.Exec(ctx, `UPDATE moenda_failures SET status = 'redriving', redrives = redrives + 1, redrive_id = $2
		WHERE id = ANY($1) AND status = 'unresolved'`, ids, redrive)
	if err != nil {
		return 0, fmt.Errorf("failures: re-drive %d: %w", len(ids), err)
	}
	return int(tag.RowsAffected()), nil
}

// Edit implements Ledger, in one transaction: the original leaves the
// live rows first, so that its edit, with the same queue and event id,
// may join them.
func (l *Postgres) Edit(ctx context.Context, id int64, e Edition) (Failure, error) {
	var n Failure
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE moenda_failures SET status = 'edited' WHERE id = $1 AND status = 'unresolved' RETURNING `+columns, id)
		if err != nil {
			return err
		}
		orig, err := pgx.CollectRows(rows, scan)
		if err != nil {
			return err
		}
		if len(orig) == 0 {
			var status string
			err := tx.QueryRow(ctx, `SELECT status FROM moenda_failures WHERE id = $1`, id).Scan(&status)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %d", ErrNotFound, id)
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: failure %d is %s", ErrNotUnresolved, id, status)
		}
		orig[0].Status = Unresolved // as it was, for its edit
		n = e.edited(orig[0])
		err = tx.QueryRow(ctx, `
			INSERT INTO moenda_failures (queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error,
				fingerprint, attempts, occurrences, first_failure_at, last_failure_at, status, original_exchange,
				original_routing_key, headers, body, edit_of)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
			RETURNING id, recorded_at`,
			n.Queue, n.EventID, n.FailedQueue, n.Handler, n.EventName, n.CorrelationID, n.Reason, n.Error, n.Fingerprint,
			n.Attempts, n.Occurrences, n.FirstFailureAt, n.LastFailureAt, string(n.Status), n.OriginalExchange,
			n.OriginalRoutingKey, n.Headers, n.Body, n.EditOf).Scan(&n.ID, &n.RecordedAt)
		if err != nil {
			return err
		}
		n.RecordedAt = n.RecordedAt.UTC()
		_, err = tx.Exec(ctx, `UPDATE moenda_failures SET edited_by = $2 WHERE id = $1`, id, n.ID)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotUnresolved) {
			return Failure{}, err
		}
		return Failure{}, fmt.Errorf("failures: edit %d: %w", id, err)
	}
	return n, nil
}

// Release implements Ledger.
func (l *Postgres) Release(ctx context.Context, ids []int64, redrive int64) error {
	_, err := l.pool.Exec(ctx, `UPDATE moenda_failures SET status = 'unresolved', redrives = redrives - 1
		WHERE id = ANY($1) AND status = 'redriving' AND redrive_id = $2`, ids, redrive)
	if err != nil {
		return fmt.Errorf("failures: release %d from re-drive %d: %w", len(ids), redrive, err)
	}
	return nil
}

// Select implements Ledger.
func (l *Postgres) Select(ctx context.Context, f Filter) ([]int64, error) {
	where, args := f.where()
	return query(ctx, l, "select", pgx.RowTo[int64], "SELECT id FROM moenda_failures WHERE "+strings.Join(where, " AND ")+" ORDER BY id", args...)
}

// Delete implements Ledger.
func (l *Postgres) Delete(ctx context.Context, ids []int64) (int, error) {
	tag, err := l.pool.Exec(ctx, `DELETE FROM moenda_failures WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, fmt.Errorf("failures: delete %d: %w", len(ids), err)
	}
	return int(tag.RowsAffected()), nil
}

// Unresolved implements Ledger, from the counts (migrations/00014),
// whose n the triggers keep exact.
func (l *Postgres) Unresolved(ctx context.Context) ([]Count, error) {
	return query(ctx, l, "count", pgx.RowToStructByPos[Count], `SELECT failed_queue, reason, sum(n)::bigint FROM moenda_failure_counts
		WHERE status = 'unresolved' GROUP BY failed_queue, reason ORDER BY failed_queue, reason`)
}

// Prune implements Ledger.
func (l *Postgres) Prune(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	tag, err := l.pool.Exec(ctx, `DELETE FROM moenda_failures WHERE id IN (
		SELECT id FROM moenda_failures f WHERE (status IN ('resolved', 'archived')
			OR status = 'edited' AND NOT EXISTS (SELECT 1 FROM moenda_failures e WHERE e.id = f.edited_by))
		AND last_failure_at < $1 LIMIT $2)`, cutoff, batch)
	if err != nil {
		return 0, fmt.Errorf("failures: prune: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// columns are a failure's columns, in scan's order.
const columns = `id, queue, event_id, failed_queue, handler, event_name, correlation_id, reason, error, fingerprint,
	attempts, occurrences, redrives, redrive_id, first_failure_at, last_failure_at, recorded_at, status, original_exchange,
	original_routing_key, headers, body, edit_of, edited_by`

func scan(row pgx.CollectableRow) (Failure, error) {
	var f Failure
	var status string
	err := row.Scan(&f.ID, &f.Queue, &f.EventID, &f.FailedQueue, &f.Handler, &f.EventName, &f.CorrelationID, &f.Reason,
		&f.Error, &f.Fingerprint, &f.Attempts, &f.Occurrences, &f.Redrives, &f.RedriveID, &f.FirstFailureAt, &f.LastFailureAt, &f.RecordedAt,
		&status, &f.OriginalExchange, &f.OriginalRoutingKey, &f.Headers, &f.Body, &f.EditOf, &f.EditedBy)
	f.Status = Status(status)
	f.FirstFailureAt, f.LastFailureAt, f.RecordedAt = f.FirstFailureAt.UTC(), f.LastFailureAt.UTC(), f.RecordedAt.UTC()
	return f, err
}

// List implements Ledger.
func (l *Postgres) List(ctx context.Context, f Filter, page Page) ([]Failure, error) {
	where, args := f.where()
	if page.After > 0 {
		args = append(args, page.After)
		where = append(where, "id < $"+strconv.Itoa(len(args)))
	}
	args = append(args, page.limit())
	return query(ctx, l, "list", scan, "SELECT "+columns+" FROM moenda_failures WHERE "+strings.Join(where, " AND ")+
		" ORDER BY id DESC LIMIT $"+strconv.Itoa(len(args)), args...)
}

// query runs sql and scans its rows with scan; what names the query in
// its error.
func query[T any](ctx context.Context, l *Postgres, what string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := l.pool.Query(ctx, sql, args...)
	if err == nil {
		var out []T
		if out, err = pgx.CollectRows(rows, scan); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("failures: %s: %w", what, err)
}

// Get implements Ledger.
func (l *Postgres) Get(ctx context.Context, id int64) (Failure, error) {
	fs, err := query(ctx, l, "get", scan, "SELECT "+columns+" FROM moenda_failures WHERE id = $1", id)
	switch {
	case err != nil:
		return Failure{}, err
	case len(fs) == 0:
		return Failure{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return fs[0], nil
}

// groupColumns are the columns groups other than a cause's are keyed by.
var groupColumns = map[GroupBy]string{ByQueue: "failed_queue", ByEventType: "event_name", ByReason: "reason"}

// groupSource is where groups are counted from: the failures
// themselves, or their counts, which hold a row for each cause, queue,
// event type and status rather than one for each failure.
type groupSource struct {
	table, count, latestError string
}

var (
	fromFailures = groupSource{"moenda_failures", "count(*)", "(array_agg(error ORDER BY id DESC))[1]"}
	fromCounts   = groupSource{"moenda_failure_counts", "sum(n)::bigint", "(array_agg(last_error ORDER BY last_id DESC))[1]"}
)

// Groups implements Ledger. A filter on the columns the counts keep (the
// console's and the API's usual ones) is answered from the counts, after
// their stale bounds are recomputed; one on ids, event, correlation,
// time or text reads the failures. The normalised error is not a column:
// a cause group's is its latest failure's, normalised here. Keys are
// ordered byte by byte (COLLATE "C"), as the memory ledger orders them.
func (l *Postgres) Groups(ctx context.Context, f Filter, by GroupBy) ([]Group, error) {
	col, ok := groupColumns[by]
	if !ok && by != "" && by != ByCause {
		_, err := ParseGroupBy(string(by))
		return nil, err
	}
	where, args := f.where()
	cond := strings.Join(where, " AND ")
	src := fromFailures
	if f.counted() {
		if err := l.refresh(ctx, cond, args); err != nil {
			return nil, err
		}
		src = fromCounts
	}
	if !ok {
		return query(ctx, l, "groups", func(row pgx.CollectableRow) (Group, error) {
			var g Group
			var text, who *string
			var at *time.Time
			err := row.Scan(&g.Fingerprint, &g.Handler, &g.Reason, &g.Error, &g.Count, &g.FirstFailureAt, &g.LastFailureAt,
				&g.Queues, &g.EventNames, &text, &who, &at)
			if text != nil {
				g.Comment = &Comment{Text: *text, By: *who, At: at.UTC()}
			}
			g.Key = g.Fingerprint
			return tidy(g), err
		}, `
			SELECT g.*, c.comment, c.set_by, c.set_at FROM (
				SELECT fingerprint, handler, reason, `+src.latestError+`, `+src.count+` AS n,
					min(first_failure_at), max(last_failure_at) AS last, array_agg(DISTINCT failed_queue), array_agg(DISTINCT event_name)
				FROM `+src.table+` WHERE `+cond+`
				GROUP BY fingerprint, handler, reason) g
			LEFT JOIN moenda_failure_group_comments c USING (fingerprint)
			ORDER BY g.n DESC, g.last DESC, g.fingerprint COLLATE "C"`, args...)
	}
	return query(ctx, l, "groups by "+string(by), func(row pgx.CollectableRow) (Group, error) {
		var g Group
		err := row.Scan(&g.Key, &g.Count, &g.FirstFailureAt, &g.LastFailureAt, &g.Queues, &g.EventNames)
		if by == ByReason {
			g.Reason = g.Key
		}
		return tidy(g), err
	}, `
		SELECT `+col+`, `+src.count+` AS n, min(first_failure_at), max(last_failure_at) AS last, array_agg(DISTINCT failed_queue),
			array_agg(DISTINCT event_name)
		FROM `+src.table+` WHERE `+cond+`
		GROUP BY `+col+`
		ORDER BY n DESC, last DESC, `+col+` COLLATE "C"`, args...)
}

// countKey is the key of the counts, in their primary key's order.
const countKey = "fingerprint, handler, reason, failed_queue, event_name, status"

// refresh recomputes, from the failures, the bounds of the stale counts
// that cond selects: a key that lost a failure may have lost its first,
// its last or its latest one. The keys are locked first, and read in a
// second statement, whose snapshot holds every change counted in them.
// A key a writer holds at the moment is skipped: it keeps bounds that may
// be wider than its failures' until the next read, and the read does
// not wait.
func (l *Postgres) refresh(ctx context.Context, cond string, args []any) error {
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var fp, handler, reason, queue, name, status []string
		rows, err := tx.Query(ctx, `SELECT `+countKey+` FROM moenda_failure_counts WHERE stale AND `+cond+`
			ORDER BY `+countKey+` FOR UPDATE SKIP LOCKED`, args...)
		if err != nil {
			return err
		}
		var k [6]string
		_, err = pgx.ForEachRow(rows, []any{&k[0], &k[1], &k[2], &k[3], &k[4], &k[5]}, func() error {
			fp, handler, reason = append(fp, k[0]), append(handler, k[1]), append(reason, k[2])
			queue, name, status = append(queue, k[3]), append(name, k[4]), append(status, k[5])
			return nil
		})
		if err != nil || len(fp) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE moenda_failure_counts s SET first_failure_at = r.first, last_failure_at = r.last, last_id = r.id,
				last_error = r.error, stale = false
			FROM (SELECT `+countKey+`, min(first_failure_at) AS first, max(last_failure_at) AS last, max(id) AS id,
					(array_agg(error ORDER BY id DESC))[1] AS error
				FROM moenda_failures
				WHERE (`+countKey+`) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]))
				GROUP BY `+countKey+`) r
			WHERE (s.fingerprint, s.handler, s.reason, s.failed_queue, s.event_name, s.status) =
				(r.fingerprint, r.handler, r.reason, r.failed_queue, r.event_name, r.status)`,
			fp, handler, reason, queue, name, status)
		return err
	})
	if err != nil {
		return fmt.Errorf("failures: refresh the counts: %w", err)
	}
	return nil
}

// tidy is g as both ledgers give it: times in UTC, lists sorted, the
// error normalised.
func tidy(g Group) Group {
	g.Error = Normalise(g.Error)
	g.FirstFailureAt, g.LastFailureAt = g.FirstFailureAt.UTC(), g.LastFailureAt.UTC()
	slices.Sort(g.Queues)
	slices.Sort(g.EventNames)
	return g
}

// SetComment implements Ledger, in one statement: the comment is
// written, or deleted, only when a failure has the fingerprint.
func (l *Postgres) SetComment(ctx context.Context, fingerprint, text, who string) (*Comment, error) {
	var found bool
	var c Comment
	err := l.pool.QueryRow(ctx, `
		WITH held AS (SELECT EXISTS (SELECT 1 FROM moenda_failures WHERE fingerprint = $1) AS found),
		cleared AS (DELETE FROM moenda_failure_group_comments WHERE fingerprint = $1 AND $2 = '' AND (SELECT found FROM held)),
		set AS (INSERT INTO moenda_failure_group_comments (fingerprint, comment, set_by)
			SELECT $1, $2, $3 WHERE $2 <> '' AND (SELECT found FROM held)
			ON CONFLICT (fingerprint) DO UPDATE SET comment = excluded.comment, set_by = excluded.set_by, set_at = now()
			RETURNING comment, set_by, set_at)
		SELECT (SELECT found FROM held), coalesce((SELECT comment FROM set), ''), coalesce((SELECT set_by FROM set), ''),
			coalesce((SELECT set_at FROM set), now())`, fingerprint, text, who).Scan(&found, &c.Text, &c.By, &c.At)
	switch {
	case err != nil:
		return nil, fmt.Errorf("failures: comment on group %s: %w", fingerprint, err)
	case !found:
		return nil, fmt.Errorf("%w: no failure of group %s", ErrNotFound, fingerprint)
	case text == "":
		return nil, nil
	}
	c.At = c.At.UTC()
	return &c, nil
}

// counted says whether f selects on the columns the counts keep alone.
func (f Filter) counted() bool {
	return len(f.IDs) == 0 && f.EventID == "" && f.CorrelationID == "" && f.Since.IsZero() && f.Until.IsZero() && f.Text == ""
}

// where is f as SQL conditions over its arguments; Filter.match is the
// same test in Go.
func (f Filter) where() ([]string, []any) {
	where := []string{"true"}
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if len(f.IDs) > 0 {
		add("id = ANY(?)", f.IDs)
	}
	switch {
	case f.AnyStatus:
	case f.Status == "":
		add("status <> ALL(?)", []string{string(Archived), string(Edited)})
	default:
		add("status = ?", string(f.Status))
	}
	for _, eq := range []struct{ col, v string }{
		{"failed_queue", f.FailedQueue}, {"handler", f.Handler}, {"reason", f.Reason}, {"event_name", f.EventName},
		{"event_id", f.EventID}, {"correlation_id", f.CorrelationID}, {"fingerprint", f.Fingerprint},
	} {
		if eq.v != "" {
			add(eq.col+" = ?", eq.v)
		}
	}
	if !f.Since.IsZero() {
		add("last_failure_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		add("last_failure_at < ?", f.Until)
	}
	if f.Text != "" {
		add("strpos(lower(error), lower(?)) > 0", f.Text)
	}
	return where, args
}
