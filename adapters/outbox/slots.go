package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/await"
)

// publication is the outbox's publication, created by the migrations.
const publication = "moenda_outbox"

// ChooseReader turns reader (Config.Reader) into the reader relays use
// on the server of pool. ReaderAuto becomes ReaderLogical when the server
// can stream the outbox, and ReaderPoll when it answers that it cannot,
// with one WARN that says what polling costs and what to change.
// ReaderLogical is refused, with the fix, when the server cannot stream.
// A check that could not be made (the server unreachable a moment)
// decides nothing: it is returned, to be retried. A relay given
// ReaderAuto decides for its group itself, the same way (see Relay.decide).
func ChooseReader(ctx context.Context, pool *pgxpool.Pool, reader string, logger *slog.Logger) (string, error) {
	if reader == ReaderPoll {
		return ReaderPoll, nil
	}
	chosen, why, err := serverReader(ctx, pool)
	switch {
	case err != nil && ctx.Err() != nil:
		return "", err
	case err != nil:
		return "", fmt.Errorf("outbox.reader is %s, and whether the server streams could not be checked (try again): %w", reader, err)
	case chosen == ReaderLogical:
		return ReaderLogical, nil
	case reader == ReaderLogical:
		return "", fmt.Errorf("outbox.reader is logical, but %w", why)
	}
	warnPolling(logger, why)
	return ReaderPoll, nil
}

// serverReader is the reader the server of pool allows: ReaderLogical
// when it can stream the outbox, ReaderPoll when it answers that it
// cannot, with why. A check that could not be made is err, and decides
// nothing: a connection that failed a moment would otherwise choose a
// reader for the group's whole life.
func serverReader(ctx context.Context, pool *pgxpool.Pool) (reader string, why, err error) {
	why = CanStream(ctx, pool)
	switch {
	case why == nil:
		return ReaderLogical, nil, nil
	case ctx.Err() != nil:
		return "", nil, ctx.Err()
	case !cannotStream(why):
		return "", nil, why
	}
	return ReaderPoll, why, nil
}

// warnPolling is the WARN of an auto reader that polls because the server
// cannot stream (why).
func warnPolling(logger *slog.Logger, why error) {
	logger.Warn("outbox relay: polling the outbox table, because "+why.Error()+
		"; while any transaction on the server holds a transaction id, polling delivers nothing committed after it began,"+
		" and events leave in transaction-id order, not commit order. Set outbox.reader: poll to silence this",
		"reader", ReaderPoll)
}

// noStream is the server's own answer that it cannot stream the outbox,
// as opposed to a check that failed on the way.
type noStream struct{ error }

func (e noStream) Unwrap() error { return e.error }

// cannotStream reports whether err, from CanStream, is the server's
// answer that it cannot stream: deciding on anything else (a connection
// that failed a moment) would make a reader for the group's whole life.
func cannotStream(err error) bool { return errors.As(err, new(noStream)) }

// answered marks err as the server's answer when the server sent it (a
// PostgreSQL error, such as pg_hba.conf refusing replication); a network
// failure stays a failed check.
func answered(err error) error {
	if errors.As(err, new(*pgconn.PgError)) {
		return noStream{err}
	}
	return err
}

// CanStream reports why the server of pool cannot stream the outbox to a
// logical relay, or nil when it can: wal_level must be logical, the role
// must be allowed to replicate, and the outbox's publication must exist.
// An error the server did not answer (it could not be reached) says
// nothing about streaming: cannotStream tells the two apart.
func CanStream(ctx context.Context, pool *pgxpool.Pool) error {
	var level string
	var replicates, published bool
	err := pool.QueryRow(ctx, `SELECT current_setting('wal_level'),
			(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
			EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, publication).Scan(&level, &replicates, &published)
	if err != nil {
		return fmt.Errorf("the server could not be asked whether it streams: %w", err)
	}
	switch {
	case level != "logical":
		return noStream{fmt.Errorf("PostgreSQL's wal_level is %s: set wal_level = logical (ALTER SYSTEM SET wal_level = 'logical', then restart PostgreSQL; on a managed server, its logical replication parameter)", level)}
	case !replicates:
		return noStream{errors.New("the database role may not replicate: ALTER ROLE ... WITH REPLICATION (on a managed server, grant its replication role)")}
	case !published:
		return noStream{fmt.Errorf("the publication %s is missing: run `moenda migrate`", publication)}
	}
	conn, err := replicationConn(ctx, pool)
	if err != nil {
		return answered(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := pglogrepl.IdentifySystem(ctx, conn); err != nil {
		return answered(fmt.Errorf("the server refused a replication connection: %w", err))
	}
	return nil
}

// replicationConn opens a logical replication connection to the database
// of pool, as its role.
func replicationConn(ctx context.Context, pool *pgxpool.Pool) (*pgconn.PgConn, error) {
	cfg := pool.Config().ConnConfig.Config.Copy()
	cfg.RuntimeParams["replication"] = "database"
	// The relay stops reading its stream while a batch waits on the
	// broker (an alarm, an outage), so the server's sends wait on a full
	// window; the pool's tcp_user_timeout would end the stream after that
	// long on the server's side. The walsender's own wal_sender_timeout
	// ends it when the relay stops answering instead: the relay reports
	// its position every 10 s however long it waits.
	delete(cfg.RuntimeParams, "tcp_user_timeout")
	// A cancelled receive only interrupts the read (the stream wakes
	// itself that way); it must not cancel the walsender's work.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w (a pg_hba.conf entry must allow it)", err)
	}
	return conn, nil
}

// slotName is the name of group's slot in the database named db. Slot
// names are unique across the server, so the database is part of it, and
// PostgreSQL allows only [a-z0-9_] in 63 bytes, so the readable part folds
// case and punctuation: the hash of the names as they are keeps two
// groups apart that fold alike (orders-relay, orders_relay, Orders.Relay).
func slotName(db, group string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(db + "\x00" + group))
	sum := fmt.Sprintf("_%016x", h.Sum64())
	name := "moenda_" + fold(db) + "__" + fold(group)
	return name[:min(len(name), 63-len(sum))] + sum
}

// fold is name as a slot name can hold it: lower case, and _ for anything
// but a letter or a digit.
func fold(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, name)
}

// GroupsAlike reports whether two different consumer groups differ only
// in case or punctuation: their slots, though apart, read alike in
// `moenda outbox slots`, so one configuration refuses them.
func GroupsAlike(a, b string) bool { return a != b && fold(a) == fold(b) }

// Slot is a logical relay's replication slot, as `moenda outbox slots`
// lists it.
type Slot struct {
	Name          string `json:"name"`
	ConsumerGroup string `json:"consumer_group"`
	// Active: a relay streams it now.
	Active bool `json:"active"`
	// RetainedBytes is the WAL PostgreSQL keeps for the slot.
	RetainedBytes int64 `json:"retained_bytes"`
	// LagBytes is the WAL written since the relay last confirmed.
	LagBytes int64 `json:"lag_bytes"`
	// WALStatus is PostgreSQL's: reserved, extended, unreserved, or lost
	// once WAL it needed was removed (max_slot_wal_keep_size).
	WALStatus string `json:"wal_status"`
	// Backfilling: rows committed before the slot was created are still
	// being read from the table.
	Backfilling bool `json:"backfilling"`
}

// Slots lists the logical relays' slots of the database of pool: those
// its relays created, and any other slot of the database whose name says
// moenda made it.
func Slots(ctx context.Context, pool *pgxpool.Pool) ([]Slot, error) {
	rows, err := pool.Query(ctx, `
		SELECT COALESCE(r.slot_name, s.slot_name), COALESCE(s.consumer_group, ''), COALESCE(r.active, false),
			COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), r.restart_lsn), 0)::bigint,
			COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), r.confirmed_flush_lsn), 0)::bigint,
			COALESCE(r.wal_status, CASE WHEN r.slot_name IS NULL THEN 'missing' ELSE 'lost' END), s.backfill IS NOT NULL
		FROM (SELECT * FROM pg_replication_slots WHERE database = current_database() AND slot_name LIKE 'moenda\_%') r
		FULL JOIN moenda_outbox_slots s ON s.slot_name = r.slot_name
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("outbox: replication slots: %w", err)
	}
	slots, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Slot, error) {
		var s Slot
		err := row.Scan(&s.Name, &s.ConsumerGroup, &s.Active, &s.RetainedBytes, &s.LagBytes, &s.WALStatus, &s.Backfilling)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: replication slots: %w", err)
	}
	return slots, nil
}

// RetireSlot drops group's slot and forgets it, and returns its name ("" when
// it had none). A relay that stopped a moment ago may still hold it
// while its stream closes: it waits up to patience for that.
func RetireSlot(ctx context.Context, pool *pgxpool.Pool, group string, patience time.Duration) (string, error) {
	var name string
	err := pool.QueryRow(ctx, `SELECT slot_name FROM moenda_outbox_slots WHERE consumer_group = $1`, group).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("the slot of %s: %w", group, err)
	}
	until := time.Now().Add(patience)
	for {
		err = DropSlot(ctx, pool, name)
		if !errors.Is(err, errSlotInUse) || time.Now().After(until) || !await.Sleep(ctx, 100*time.Millisecond) {
			return name, err
		}
	}
}

// errSlotInUse: a relay streams the slot.
var errSlotInUse = errors.New("in use by a running relay: stop it, or set its outbox.reader to poll, first")

// DropSlot drops the slot named name, of a relay that is retired or
// switched to polling, and forgets it, so PostgreSQL keeps no WAL for it.
// It refuses while a relay streams it. A relay that streams the group
// again creates a new slot and first reads from the table the rows after
// the group's position: some events go out twice, none is lost.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, name string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: drop slot %s: %w", name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	forgot, err := tx.Exec(ctx, `DELETE FROM moenda_outbox_slots WHERE slot_name = $1`, name)
	if err != nil {
		return fmt.Errorf("outbox: drop slot %s: %w", name, err)
	}
	var active *bool
	err = tx.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, name).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if forgot.RowsAffected() == 0 {
			return fmt.Errorf("outbox: there is no slot %s in this database (`moenda outbox slots` lists them)", name)
		}
	case err != nil:
		return fmt.Errorf("outbox: drop slot %s: %w", name, err)
	case *active:
		return fmt.Errorf("outbox: slot %s is %w", name, errSlotInUse)
	default:
		if _, err := tx.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name); err != nil {
			return fmt.Errorf("outbox: drop slot %s: %w", name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox: drop slot %s: %w", name, err)
	}
	return nil
}
