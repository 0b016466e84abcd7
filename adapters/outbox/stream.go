package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/moenda/moenda/adapters/await"
)

// logical is the reader that streams the outbox's inserts from a
// replication slot of its consumer group, through the pgoutput plugin:
// PostgreSQL decodes each transaction at its commit, in commit order, so a
// transaction still open anywhere holds back nothing that has committed,
// and two commits leave in the order they happened.
//
// The slot is the leadership: PostgreSQL lets one connection stream a
// slot at a time, so of the replicas of a group one streams and the others
// ask again every poll interval. The slot's confirmed position is
// confirmed only once the broker has confirmed every event of the
// transactions before it. PostgreSQL keeps that position in memory, and
// saves it to disk only now and then: after a crash of the server the slot
// comes back from further behind. So the relay also records how far it has
// published (published, in moenda_outbox_slots) in the statement that
// settles each batch, down to the rows of a transaction it has only partly
// published, and a restarted relay streams from there: a crash of the
// relay or of the server repeats at most the batch in hand.
//
// The group's position in watermill_offsets_outbox stays the one that
// retention, lag and a polling reader understand: the stream moves it to
// (xmin, 0) for an xmin below which every transaction had ended by a WAL
// position the stream has confirmed (see moenda_outbox_slots). A slot
// created after the group has a position first reads from the table the
// rows after it that committed before the slot's consistent point (the
// backfill), then streams: switching readers either way skips nothing.
type logical struct{ *Relay }

var _ reader = (*logical)(nil)

// pluginArgs asks pgoutput for the outbox's publication, with values in
// binary: the payload arrives as it was written, not hex-encoded.
var pluginArgs = []string{"proto_version '1'", "publication_names '" + publication + "'", "binary 'true'"}

// StreamArgs are the pgoutput arguments the logical reader starts its
// stream with, for a client that must read the same stream (the bench's
// raw reader).
func StreamArgs() []string { return slices.Clone(pluginArgs) }

// quietGap is how long the stream must stay silent, while the relay
// waits, before rows that came while it was publishing go without more:
// under load rows arrive closer than this, and batches fill.
const quietGap = 200 * time.Microsecond

// serverEndGap is the least time between two hand-overs of the server's
// position alone, with no rows: in a busy database PostgreSQL sends it
// after each wake-up of its WAL sender, and an idle relay that took and
// confirmed each one spent 29 % of a core at 6,500 commits a second of
// other tables, 18 % since (BENCHMARKS.md, "Relay: a busy database's
// other writes"). A position held back goes once the gap is over.
const serverEndGap = 100 * time.Millisecond

// standbyInterval is how often the stream tells PostgreSQL how far it
// has got when nothing else makes it; PostgreSQL drops a stream silent
// for wal_sender_timeout (60 s by default).
const standbyInterval = 10 * time.Second

// slotState is a group's slot as moenda_outbox_slots and PostgreSQL
// know it.
type slotState struct {
	name       string
	recorded   bool   // moenda_outbox_slots has the group
	exists     bool   // PostgreSQL has the slot
	active     bool   // a connection streams it
	lost       bool   // PostgreSQL removed WAL it needed
	backfill   string // the snapshot to read from the table; "" once done
	backfilled position
	sampleLSN  pglogrepl.LSN
	published  streamPosition // how far the group's relays have published
}

// streamPosition is how far a logical relay has published, in stream
// order: every transaction that ends at or before lsn, and the first rows
// of the transaction txID, which comes next.
type streamPosition struct {
	lsn  pglogrepl.LSN
	txID uint64
	rows int64
}

// after updates p with it, published: the rows at its end that follow
// its last commit (all of them when it has none) belong to the
// transaction still open in the stream.
func (p streamPosition) after(it streamItem) streamPosition {
	if it.end != 0 {
		p.lsn, p.txID, p.rows = max(p.lsn, it.end), 0, 0
	}
	if it.open > 0 {
		p.txID = it.rows[len(it.rows)-1].txID
		p.rows += int64(it.open)
	}
	return p
}

// resume returns, for a stream started again at published.lsn, the
// position to record as it goes and the rows to skip: the transaction
// still open at published comes again from its first row, so at counts
// its rows from there, and skip drops the published.rows already out.
func resume(published streamPosition) (at, skip streamPosition) {
	return streamPosition{lsn: published.lsn}, streamPosition{txID: published.txID, rows: published.rows}
}

// skip drops from rows those a relay before this one published: the first
// p.rows of the transaction p.txID. It returns the rows left, and p with
// what it dropped counted off.
func (p streamPosition) skip(rows []outboxRow) ([]outboxRow, streamPosition) {
	n := 0
	for n < len(rows) && p.rows > 0 && rows[n].txID == p.txID {
		n, p.rows = n+1, p.rows-1
	}
	if n < len(rows) {
		p.rows = 0 // the transaction is behind: nothing more to drop
	}
	return rows[n:], p
}

// ready reports whether the slot can be streamed as it is.
func (s slotState) ready() bool { return s.recorded && s.exists && !s.lost }

// session takes the group's slot, or stands by while another
// replica streams it, then relays from it until ctx ends or it fails.
func (l *logical) session(ctx context.Context) error {
	conn, err := replicationConn(ctx, l.pool)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := l.takeSlot(ctx, conn)
	if err != nil || ctx.Err() != nil {
		return err
	}
	if err := l.claim(ctx); err != nil {
		return err // the slot is let go with conn
	}
	l.active.Store(true)
	defer l.active.Store(false)
	err = l.stream(ctx, conn, st)
	if err != nil && conn.IsClosed() && !errors.Is(err, errLockLost) {
		// The slot is released when its connection ends.
		err = fmt.Errorf("%w: %w", errLockLost, err)
	}
	return err
}

// takeSlot starts streaming the group's slot on conn, creating it first
// if needed, and returns its state; it waits while another replica
// streams it, and returns nothing once ctx ends.
func (l *logical) takeSlot(ctx context.Context, conn *pgconn.PgConn) (slotState, error) {
	for {
		st, err := l.slotState(ctx)
		if err != nil {
			return st, err
		}
		if !st.ready() {
			created, err := l.createSlot(ctx, conn)
			if err != nil {
				return st, err
			}
			if created {
				continue
			}
		} else if !st.active {
			// PostgreSQL streams from the later of the slot's confirmed
			// position and this one, skipping every transaction that
			// commits before it.
			err := pglogrepl.StartReplication(ctx, conn, st.name, st.published.lsn,
				pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: pluginArgs})
			if err == nil {
				return st, nil
			}
			if !hasCode(err, "55006") { // object_in_use: another replica took it first
				return st, fmt.Errorf("stream slot %s: %w", st.name, err)
			}
		}
		if !await.Sleep(ctx, l.cfg.PollInterval) {
			return st, nil
		}
	}
}

// hasCode reports whether err is PostgreSQL's error code.
func hasCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// slotState reads the group's slot.
func (l *logical) slotState(ctx context.Context) (slotState, error) {
	st := slotState{name: slotName(l.pool.Config().ConnConfig.Database, l.cfg.ConsumerGroup)}
	var backfill, sample, published *string
	l.queries.Add(1)
	err := l.pool.QueryRow(ctx, `
		SELECT COALESCE(s.slot_name, $2), s.consumer_group IS NOT NULL, r.slot_name IS NOT NULL, COALESCE(r.active, false),
			COALESCE(r.wal_status = 'lost', false), s.backfill::text, COALESCE(s.backfill_transaction_id::text::bigint, 0),
			COALESCE(s.backfill_offset, 0), s.sample_lsn::text,
			s.published_lsn::text, COALESCE(s.published_transaction_id::text::bigint, 0), COALESCE(s.published_rows, 0)
		FROM (SELECT 1) one
		LEFT JOIN moenda_outbox_slots s ON s.consumer_group = $1
		LEFT JOIN pg_replication_slots r ON r.slot_name = COALESCE(s.slot_name, $2)`, l.cfg.ConsumerGroup, st.name).
		Scan(&st.name, &st.recorded, &st.exists, &st.active, &st.lost, &backfill, &st.backfilled.txID, &st.backfilled.offset, &sample,
			&published, &st.published.txID, &st.published.rows)
	if err != nil {
		return st, fmt.Errorf("replication slot of %s: %w", l.cfg.ConsumerGroup, err)
	}
	if backfill != nil {
		st.backfill = *backfill
	}
	if sample != nil {
		if st.sampleLSN, err = pglogrepl.ParseLSN(*sample); err != nil {
			return st, fmt.Errorf("replication slot of %s: %w", l.cfg.ConsumerGroup, err)
		}
	}
	if published != nil {
		if st.published.lsn, err = pglogrepl.ParseLSN(*published); err != nil {
			return st, fmt.Errorf("replication slot of %s: %w", l.cfg.ConsumerGroup, err)
		}
	}
	return st, nil
}

// createSlot creates the group's slot on conn and records, with the
// snapshot at its consistent point, which rows the table still owes: it
// reports false when another replica is doing so. It holds the group's
// relay lock meanwhile, so it never runs beside a creator or a polling
// relay of the group. A slot left behind without a record, or that
// PostgreSQL invalidated, is dropped and created again.
func (l *logical) createSlot(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	lock, err := l.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("create slot: %w", err)
	}
	defer lock.Release()
	var locked bool
	l.queries.Add(1)
	if err := lock.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", LockKey(l.cfg.ConsumerGroup)).Scan(&locked); err != nil || !locked {
		return false, err
	}
	defer func() {
		_, _ = lock.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", LockKey(l.cfg.ConsumerGroup))
	}()
	st, err := l.slotState(ctx)
	if err != nil || st.ready() {
		return err == nil, err
	}
	switch {
	case st.lost:
		l.logger.Error("outbox relay: PostgreSQL invalidated replication slot "+st.name+" (it removed WAL the slot needed: max_slot_wal_keep_size);"+
			" creating it again and reading the outbox table from the group's position: events after it may be delivered twice, none is lost", "slot", st.name)
	case st.exists:
		l.logger.Warn("outbox relay: replication slot "+st.name+" has no record of what it owes (a relay stopped while creating it); creating it again", "slot", st.name)
	case st.recorded:
		l.logger.Warn("outbox relay: replication slot "+st.name+" is gone (dropped); creating it again and reading the outbox table from the group's position:"+
			" events after it may be delivered twice, none is lost", "slot", st.name)
	}
	if st.exists {
		var owner string
		l.queries.Add(1)
		err := lock.QueryRow(ctx, `SELECT consumer_group FROM moenda_outbox_slots WHERE slot_name = $1 AND consumer_group <> $2`,
			st.name, l.cfg.ConsumerGroup).Scan(&owner)
		if err == nil {
			return false, fmt.Errorf("replication slot %s is consumer group %q's: this group neither takes nor drops it; give one of the groups another name", st.name, owner)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("replication slot %s: %w", st.name, err)
		}
		l.queries.Add(1)
		if _, err := lock.Exec(ctx, "SELECT pg_drop_replication_slot($1)", st.name); err != nil {
			return false, fmt.Errorf("drop replication slot %s: %w", st.name, err)
		}
	}
	l.queries.Add(1)
	if _, err := lock.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, 0, '0') ON CONFLICT (consumer_group) DO NOTHING`, l.cfg.ConsumerGroup); err != nil {
		return false, fmt.Errorf("outbox position: %w", err)
	}
	l.logger.Info("outbox relay: creating replication slot; PostgreSQL first waits for the write transactions open on the server to end", "slot", st.name)
	created, err := pglogrepl.CreateReplicationSlot(ctx, conn, st.name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return false, fmt.Errorf("create replication slot %s: %w", st.name, err)
	}
	// The exported snapshot lives until conn's next command: record it
	// now. The rows the table owes are those after the group's position
	// that it sees; the stream brings every later commit. PostgreSQL moves
	// its xmax only past commits it decoded while creating the slot, so a
	// transaction that took an id and rolled back meanwhile can leave xmin
	// above xmax ("9:7:"), which pg_snapshot's input refuses. Such a
	// snapshot sees exactly the transactions below xmin: it is recorded as
	// xmin:xmin:, which sees the same and reads back.
	err = pgx.BeginTxFunc(ctx, lock, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		l.queries.Add(2)
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+created.SnapshotName+"'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO moenda_outbox_slots (consumer_group, slot_name, backfill, backfill_transaction_id, backfill_offset)
			SELECT $1::text, $2::text,
				CASE WHEN pg_snapshot_xmax(s) < pg_snapshot_xmin(s) THEN format('%1$s:%1$s:', pg_snapshot_xmin(s))::pg_snapshot ELSE s END,
				last_processed_transaction_id, COALESCE(offset_acked, 0)
			FROM watermill_offsets_outbox, pg_current_snapshot() s WHERE consumer_group = $1::text
			ON CONFLICT (consumer_group) DO UPDATE SET slot_name = EXCLUDED.slot_name, backfill = EXCLUDED.backfill,
				backfill_transaction_id = EXCLUDED.backfill_transaction_id, backfill_offset = EXCLUDED.backfill_offset,
				sample_xmin = NULL, sample_lsn = NULL, published_lsn = NULL, published_transaction_id = NULL, published_rows = 0,
				created_at = now()`, l.cfg.ConsumerGroup, st.name)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record replication slot %s: %w", st.name, err)
	}
	l.logger.Info("outbox relay: created replication slot", "slot", st.name, "consistent_point", created.ConsistentPoint)
	return true, nil
}

// streamItem is what the receiver hands the relay, in stream order: the
// rows of the transactions decoded since the last item, a batch at most
// (a large transaction comes in pieces), and end, the position up to
// which everything has been handed over once these rows are: the last
// commit's end, or a keepalive's position; zero when the rows are all of
// one transaction that has not ended yet. open counts the rows at the end
// that belong to a transaction not ended yet. An item without rows only
// moves end.
type streamItem struct {
	rows []outboxRow
	end  pglogrepl.LSN
	open int
}

// stream relays from the slot conn streams: the rows the table owes
// first, then the stream. Once ctx ends it takes nothing more from the
// stream, but the rows in hand are still published and recorded, and
// PostgreSQL is told how far the slot may move (see finishing), so a relay
// stopped under load leaves nothing for the next one to publish again.
func (l *logical) stream(ctx context.Context, conn *pgconn.PgConn, st slotState) error {
	work, cancel := finishing(ctx)
	defer cancel()
	// The slot may be behind what the relays published: tell PostgreSQL
	// at once.
	rc := &receiver{conn: conn, items: make(chan streamItem), batch: l.cfg.BatchSize,
		flush: st.published.lsn, dirty: st.published.lsn != 0, reports: &l.reports}
	rctx, stop := context.WithCancel(work)
	done := make(chan error, 1)
	go func() { done <- rc.run(rctx) }()
	receiving := true
	// end stops the receiver; once it has, its last confirmation goes to
	// PostgreSQL from here, before the connection closes.
	end := func() error {
		stop()
		if !receiving {
			return nil
		}
		receiving = false
		<-done // it was stopped: its error says so, and nothing more
		rc.mu.Lock()
		flush, dirty := rc.flush, rc.dirty
		rc.mu.Unlock()
		if !dirty {
			return nil
		}
		return rc.report(work, flush, false)
	}
	defer func() { _ = end() }()
	fence := slotFence{slot: st.name, pid: conn.PID()}
	if st.backfill != "" {
		if err := l.backfill(ctx, work, fence, st); err != nil || ctx.Err() != nil {
			return err
		}
	}
	l.logger.Info("outbox relay active", "reader", ReaderLogical, "slot", st.name)

	sample, fresh := st.sampleLSN, false // fresh: rows published since the sample
	at, skip := resume(st.published)
	// The next item's batch is built while the last one is published.
	// An item built but not taken when the session ends is not
	// published, and the slot gives it to the next session again.
	prepared := make(chan preparedItem)
	pctx, stopPreparing := context.WithCancel(ctx)
	preparing := make(chan struct{})
	defer func() {
		stopPreparing()
		<-preparing
	}()
	go func() {
		defer close(preparing)
		for {
			var pi preparedItem
			select {
			case pi.streamItem = <-rc.items:
			case <-pctx.Done():
				return
			}
			rows := pi.rows
			if skip.rows > 0 {
				rows, skip = skip.skip(rows)
			}
			if len(rows) > 0 {
				pi.batch = l.prepare(work, rows)
			}
			select {
			case prepared <- pi:
			case <-pctx.Done():
				if pi.batch != nil {
					pi.batch.out.drop()
				}
				return
			}
		}
	}()
	var parked []parkedRow
	var inFlight *settling
	// landed waits for the settle in flight, if any, then takes the
	// sample it returned and confirms the stream up to its end.
	landed := func() error {
		s := inFlight
		if s == nil {
			return nil
		}
		inFlight = nil
		<-s.done
		if s.err != nil {
			return s.err
		}
		if s.next != 0 {
			sample, fresh = s.next, false
		} else if s.promote {
			sample = 0
		}
		if s.end != 0 {
			rc.confirm(s.end)
		}
		return nil
	}
	defer func() { _ = landed() }() // a failed session still lets its settle end
	for {
		// An item built while the last one was sent is taken at once.
		// Only when none is does the receiver hear that the relay waits:
		// told while the relay sends, it would hand over each
		// transaction as it ends rather than gather the load in batches.
		var it preparedItem
		select {
		case it = <-prepared:
		default:
			rc.want()
			select {
			case <-ctx.Done():
				if err := landed(); err != nil {
					return err
				}
				return end()
			case err := <-done:
				receiving = false
				return err
			case it = <-prepared:
			}
		}
		upTo := it.end
		var p []parkedRow
		if it.batch != nil {
			var err error
			if p, err = l.deliver(work, it.batch); err != nil {
				return err
			}
		}
		// Publishing ahead, the last item's settle ran meanwhile.
		if err := landed(); err != nil {
			return err
		}
		if it.batch != nil {
			parked, fresh = append(parked, p...), true
		}
		if len(it.rows) > 0 {
			at = at.after(it.streamItem)
		}
		s := &settling{done: make(chan struct{}), end: upTo, promote: upTo != 0 && sample != 0 && upTo >= sample}
		if len(it.rows) > 0 || s.promote || (upTo != 0 && sample == 0 && fresh) {
			takeSample, at, settled := upTo != 0 && fresh && (s.promote || sample == 0), at, parked
			parked = nil
			run := func() {
				defer close(s.done)
				s.next, s.err = l.settle(work, fence, upTo, s.promote, takeSample, at, settled)
			}
			if l.ahead {
				go run()
			} else {
				run()
			}
		} else {
			close(s.done)
		}
		inFlight = s
		if !l.ahead {
			if err := landed(); err != nil {
				return err
			}
		}
		if upTo != 0 && ctx.Err() != nil {
			if err := landed(); err != nil {
				return err
			}
			return end()
		}
	}
}

// preparedItem is a stream item with the batch of the rows it publishes
// made ready: nil when it publishes none (rows the last session
// published, or no rows).
type preparedItem struct {
	streamItem
	batch *batch
}

// settling is the settle of an item: its outcome, once done is closed,
// and what it confirms. With Relay.ahead it runs while the next item is
// published.
type settling struct {
	done    chan struct{}
	next    pglogrepl.LSN // the sample it took
	err     error
	end     pglogrepl.LSN // the stream position to confirm after it
	promote bool
}

// slotFence makes a statement take effect only while conn's backend
// streams the slot: only the leader moves the group's position.
type slotFence struct {
	slot string
	pid  uint32
}

const fenceCTE = `fence AS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $2 AND active_pid = $3)`

// settleQuery is settle's statement: $1 the group, $2 and $3 the fence
// (slot and streaming backend), $4 the stream position confirmed, $5
// promote, $6 sample, $7 to $9 how far the relay has published (at), and
// $10 on the rows it parked.
var settleQuery = `WITH ` + fenceCTE + `,
	` + parkedCTE(10, "fence") + `,
	promoted AS (
		UPDATE watermill_offsets_outbox p SET last_processed_transaction_id = s.sample_xmin, offset_acked = 0
		FROM moenda_outbox_slots s
		WHERE $5 AND EXISTS (SELECT 1 FROM fence) AND s.consumer_group = $1 AND p.consumer_group = $1
		  AND s.backfill IS NULL AND s.sample_lsn <= $4::pg_lsn AND s.sample_xmin > p.last_processed_transaction_id),
	slot AS (
		SELECT ($6 OR $5 AND sample_lsn <= $4::pg_lsn AND EXISTS (SELECT 1 FROM ` + lastRow + ` WHERE l.transaction_id >= sample_xmin)) AS take
		FROM moenda_outbox_slots WHERE consumer_group = $1),
	sampled AS (
		UPDATE moenda_outbox_slots s SET
			sample_xmin = CASE WHEN slot.take THEN pg_snapshot_xmin(pg_current_snapshot()) ELSE s.sample_xmin END,
			sample_lsn = CASE WHEN slot.take THEN pg_current_wal_insert_lsn() ELSE s.sample_lsn END,
			published_lsn = $7::pg_lsn, published_transaction_id = NULLIF($8, '0')::xid8, published_rows = $9
		FROM slot
		WHERE s.consumer_group = $1 AND s.backfill IS NULL AND EXISTS (SELECT 1 FROM fence)
		RETURNING CASE WHEN slot.take THEN s.sample_lsn::text END AS sample_lsn)
	SELECT EXISTS (SELECT 1 FROM fence), (SELECT sample_lsn FROM sampled)`

// settle records, once the rows handed over up to end are published (end
// is zero inside a transaction), how far the relay has published (at), with
// the rows it parked meanwhile; once the stream is confirmed up to a
// non-zero end, and when promote, it moves the group's position to the
// sample taken earlier (its WAL position is at most end); when sample, it
// takes a new sample and returns its WAL position. A promotion that leaves
// rows after the new position (transactions that were open at the sample,
// or began after it) takes a new sample too, whether or not this session
// published them: a relay that took over, or went idle, would otherwise
// leave the position behind them for good.
func (l *logical) settle(ctx context.Context, fence slotFence, end pglogrepl.LSN, promote, sample bool, at streamPosition, parked []parkedRow) (pglogrepl.LSN, error) {
	l.queries.Add(1)
	var held bool
	var next *string
	// One UPDATE of the slot's row takes the sample and records at: two
	// would change the same row in one statement.
	err := l.pool.QueryRow(ctx, settleQuery,
		append([]any{l.cfg.ConsumerGroup, fence.slot, fence.pid, end.String(), promote, sample,
			at.lsn.String(), fmt.Sprint(at.txID), at.rows}, parkedColumns(parked)...)...).Scan(&held, &next)
	if err != nil {
		return 0, fmt.Errorf("record the stream's position: %w", err)
	}
	if !held {
		return 0, fmt.Errorf("record the stream's position: slot %s: %w", fence.slot, errLockLost)
	}
	if next == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*next)
}

// backfill publishes the rows the table owes the slot (those after the
// group's position that st.backfill sees), a batch at a time, recording
// how far it got, then moves the group's position past every transaction
// that snapshot saw end. Its statements run in work; once ctx ends it
// stops between batches. The snapshot is read where it is recorded, never
// through its text: one recorded with xmin above xmax (before createSlot
// wrote it as xmin:xmin:) has a text pg_snapshot's input refuses, yet
// pg_visible_in_snapshot reads it right, as the transactions below xmin.
func (l *logical) backfill(ctx, work context.Context, fence slotFence, st slotState) error {
	from := st.backfilled
	l.logger.Info("outbox relay: reading the rows committed before the slot was created from the table", "slot", st.name,
		"from_transaction_id", from.txID, "from_offset", from.offset)
	for {
		if ctx.Err() != nil {
			return nil
		}
		l.queries.Add(1)
		rows, err := l.pool.Query(work, `
			SELECT transaction_id::text::bigint AS tx_id, "offset", uuid, payload, metadata FROM watermill_outbox
			WHERE (transaction_id, "offset") > ($1::text::xid8, $2)
			  AND pg_visible_in_snapshot(transaction_id, (SELECT backfill FROM moenda_outbox_slots WHERE consumer_group = $3))
			ORDER BY transaction_id, "offset"
			LIMIT $4`, fmt.Sprint(from.txID), from.offset, l.cfg.ConsumerGroup, l.cfg.BatchSize)
		if err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		found, err := pgx.CollectRows(rows, scanRow)
		if err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		if len(found) == 0 {
			break
		}
		parked, err := l.publish(work, found)
		if err != nil {
			return err
		}
		from = found[len(found)-1].position
		l.queries.Add(1)
		var held bool
		err = l.pool.QueryRow(work, `WITH `+fenceCTE+`,
			`+parkedCTE(6, "fence")+`,
			moved AS (
				UPDATE moenda_outbox_slots SET backfill_transaction_id = $4::text::xid8, backfill_offset = $5
				WHERE consumer_group = $1 AND EXISTS (SELECT 1 FROM fence))
			SELECT EXISTS (SELECT 1 FROM fence)`,
			append([]any{l.cfg.ConsumerGroup, fence.slot, fence.pid, fmt.Sprint(from.txID), from.offset}, parkedColumns(parked)...)...).Scan(&held)
		if err != nil {
			return fmt.Errorf("backfill: record progress: %w", err)
		}
		if !held {
			return fmt.Errorf("backfill: slot %s: %w", fence.slot, errLockLost)
		}
	}
	l.queries.Add(1)
	tag, err := l.pool.Exec(work, `WITH `+fenceCTE+`,
		owed AS (SELECT pg_snapshot_xmin(backfill) AS xmin FROM moenda_outbox_slots
			WHERE consumer_group = $1 AND backfill IS NOT NULL AND EXISTS (SELECT 1 FROM fence)),
		moved AS (
			UPDATE watermill_offsets_outbox p SET last_processed_transaction_id = owed.xmin, offset_acked = 0
			FROM owed WHERE p.consumer_group = $1 AND owed.xmin > p.last_processed_transaction_id)
		UPDATE moenda_outbox_slots SET backfill = NULL WHERE consumer_group = $1 AND backfill IS NOT NULL AND EXISTS (SELECT 1 FROM fence)`,
		l.cfg.ConsumerGroup, fence.slot, fence.pid)
	if err != nil {
		return fmt.Errorf("backfill: finish: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("backfill: slot %s: %w", fence.slot, errLockLost)
	}
	return nil
}

// receiver owns the replication connection: it decodes the stream into
// items of up to a batch of rows, and tells PostgreSQL how far the relay
// has confirmed. While the relay publishes, it keeps decoding into the
// next item, so the broker and the decoding work at the same time.
type receiver struct {
	conn  *pgconn.PgConn
	items chan streamItem
	batch int

	reports *atomic.Uint64 // the standby status updates sent (Relay.Reports)

	mu     sync.Mutex
	flush  pglogrepl.LSN // confirmed by the relay
	dirty  bool          // flush not yet told to PostgreSQL
	wanted bool          // the relay waits for an item
	// readBy is the connection's read deadline, which ends a receive;
	// zero while none is set, or after an interrupt moved it to the past.
	readBy time.Time

	columns columns
}

// confirm tells the receiver that every transaction ending at or before
// lsn has been published and recorded; it reports it to PostgreSQL at
// once.
func (rc *receiver) confirm(lsn pglogrepl.LSN) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if lsn > rc.flush {
		rc.flush, rc.dirty = lsn, true
		rc.interrupt()
	}
}

// want tells the receiver that the relay is about to wait for an item:
// what it holds, it hands over now rather than after the next message.
func (rc *receiver) want() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.wanted = true
	rc.interrupt()
}

// interrupt ends the receive in progress, or makes the next one return
// at once; rc.mu is held.
func (rc *receiver) interrupt() {
	if !rc.readBy.IsZero() {
		_ = rc.conn.Conn().SetReadDeadline(time.Now())
		rc.readBy = time.Time{}
	}
}

// readUntil makes receives end at deadline; rc.mu is held.
func (rc *receiver) readUntil(deadline time.Time) error {
	if rc.readBy.Equal(deadline) {
		return nil
	}
	if err := rc.conn.Conn().SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("replication stream: %w", err)
	}
	rc.readBy = deadline
	return nil
}

// run receives until ctx ends or the stream fails. Its receives end at
// the connection's read deadline, not at a context's: under load, a
// context per receive, with the watch pgconn keeps on it, cost 4 % of the
// relay's CPU.
func (rc *receiver) run(ctx context.Context) error {
	var out streamItem // what the relay gets next
	held := rc.flush   // the stream starts there
	inTx := false
	// The server's position past held, between transactions, not yet
	// in out, and when it may go alone (see serverEndGap).
	var serverEnd pglogrepl.LSN
	var serverEndBy time.Time
	due := time.Now().Add(standbyInterval)
	quiet := false  // a short receive, while the relay waited, found nothing more
	loaded := false // rows came while the relay was publishing
	interrupt := func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.interrupt()
	}
	defer context.AfterFunc(ctx, interrupt)()
	defer func() {
		interrupt()
		_ = rc.conn.Conn().SetReadDeadline(time.Time{})
	}()
	for {
		rc.mu.Lock()
		if ctx.Err() != nil { // ended before the deadline is set
			rc.mu.Unlock()
			return nil
		}
		now := time.Now()
		periodic := !now.Before(due)
		report, flush, wanted := rc.dirty || periodic, rc.flush, rc.wanted
		holding := len(out.rows) > 0 || out.end != 0
		// Everything before the server's position has been handed over
		// once out is: it joins what out holds, or goes alone once the
		// gap since the last one is over.
		if serverEnd > held && (holding || !now.Before(serverEndBy)) {
			out.end, held, holding = serverEnd, serverEnd, true
			if len(out.rows) == 0 {
				serverEndBy = now.Add(serverEndGap)
			}
		}
		// A transaction that came while the relay waited goes at once.
		// What came while it published was load: it goes once the stream
		// pauses, and rows still arriving join it, up to a batch.
		pending := len(out.rows) >= rc.batch || wanted && holding && (quiet || !loaded && out.end != 0)
		lingering := wanted && holding && !pending
		if report {
			rc.dirty = false
		} else if pending {
			rc.wanted = false
		}
		deadline := due
		if lingering && now.Add(quietGap).Before(deadline) {
			deadline = now.Add(quietGap)
		}
		if serverEnd > held && serverEndBy.Before(deadline) {
			deadline = serverEndBy
		}
		if !report && !pending {
			if err := rc.readUntil(deadline); err != nil {
				rc.mu.Unlock()
				return err
			}
		}
		rc.mu.Unlock()
		switch {
		case report:
			if err := rc.report(ctx, flush, periodic && !inTx); err != nil {
				return err
			}
			due = time.Now().Add(standbyInterval)
			continue
		case pending:
			if err := rc.hand(ctx, &due, out); err != nil {
				return err
			}
			out, quiet, loaded = streamItem{}, false, false
			continue
		}
		msg, err := rc.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				// at the deadline, or interrupted
				quiet = lingering && !time.Now().Before(deadline)
				continue
			}
			return fmt.Errorf("replication stream: %w", err)
		}
		quiet = false
		var data []byte
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			data = msg.Data
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		default:
			return fmt.Errorf("replication stream: unexpected %T", msg)
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("replication stream: %w", err)
			}
			if ka.ReplyRequested {
				due = time.Now()
			}
			if !inTx && ka.ServerWALEnd > serverEnd {
				serverEnd = ka.ServerWALEnd
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("replication stream: %w", err)
			}
			if len(xld.WALData) > 0 && xld.WALData[0] == byte(pglogrepl.MessageTypeInsert) {
				row, err := rc.columns.insert(xld.WALData)
				if err != nil {
					return err
				}
				out.rows = append(out.rows, row)
				out.open++
				loaded = loaded || !wanted
				continue
			}
			m, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return fmt.Errorf("replication stream: %w", err)
			}
			switch m := m.(type) {
			case *pglogrepl.RelationMessage:
				if err := rc.columns.learn(m); err != nil {
					return err
				}
			case *pglogrepl.BeginMessage:
				inTx = true
			case *pglogrepl.CommitMessage:
				inTx = false
				out.end, held, out.open = m.TransactionEndLSN, m.TransactionEndLSN, 0
			}
		}
	}
}

// hand gives the relay an item, waiting while it is busy, and keeps
// telling PostgreSQL how far it got meanwhile, so a slow broker does not
// make the server drop the stream.
func (rc *receiver) hand(ctx context.Context, due *time.Time, it streamItem) error {
	for {
		t := time.NewTimer(time.Until(*due))
		select {
		case rc.items <- it:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			rc.mu.Lock()
			flush := rc.flush
			rc.dirty = false
			rc.mu.Unlock()
			if err := rc.report(ctx, flush, false); err != nil {
				return err
			}
			*due = time.Now().Add(standbyInterval)
		}
	}
}

// report tells PostgreSQL the slot may move to flush (zero: nowhere yet;
// it still counts as a sign of life). With reply, the server answers with
// a keepalive that carries how far it has decoded: the periodic report
// asks for one, because our reports keep the server from sending its own,
// and an idle stream would otherwise never learn that the WAL of the
// relay's last sample has passed (PostgreSQL streams no empty
// transaction), and the group's position would stay behind its last rows.
func (rc *receiver) report(ctx context.Context, flush pglogrepl.LSN, reply bool) error {
	rc.reports.Add(1)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, rc.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: flush, WALFlushPosition: flush, WALApplyPosition: flush, ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("replication stream: confirm %s: %w", flush, err)
	}
	return nil
}
