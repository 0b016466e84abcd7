package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/moenda/moenda/adapters/await"
)

// polling is the reader that polls the outbox table. It keeps
// watermill-sql's visibility rule (a row is read only once every
// transaction that could commit before it has ended) but reads a batch by
// an index range from its position. It leads its group under a
// PostgreSQL advisory lock, and only while that lock's session lives (see
// session).
type polling struct{ *Relay }

var _ reader = (*polling)(nil)

// session holds the relay lock on a connection of its own and relays
// while it lasts.
//
// Every statement of the session runs on that connection, so each one
// re-asserts leadership without a statement of its own: the idle poll stays
// one read, a batch one read and one update. PostgreSQL releases a
// session's advisory lock only when the session ends, and the relay never
// unlocks it, so a read that succeeds there ran while the relay held the
// lock; once the session is gone (its backend terminated, the network cut)
// the next read fails, or hangs, before anything more is published. The
// position UPDATE also matches only while pg_locks shows the lock held by
// the session's own backend, so only the leader writes the position and it
// cannot go backwards under the next one, whatever ended the lock; that
// condition costs little (see BENCHMARKS.md, "Relay: the position
// update's lock check").
// The one batch a relay can still publish after losing the lock is the one
// it read just before: it is not recorded, and the next leader publishes
// it again (at least once).
//
// A relay cut from the server by a network path gone black sends nothing
// more; with Config.LockIdleTimeout set, the server ends its session after
// that much silence, so a standby takes the lock then, not when TCP gives
// up. The relay keeps its own session busy meanwhile: it reads at least
// every beat, and pings while a batch waits on the broker.
func (p *polling) session(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, p.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("lock connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var locked bool
		p.queries.Add(1)
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", LockKey(p.cfg.ConsumerGroup)).Scan(&locked); err != nil {
			return fmt.Errorf("relay lock: %w", err)
		}
		if locked {
			break
		}
		if !await.Sleep(ctx, p.cfg.PollInterval) { // another replica relays
			return nil
		}
	}
	if err := p.claim(ctx, conn); err != nil {
		return err
	}
	p.active.Store(true)
	defer p.active.Store(false)
	// A slot the group streamed from before would keep WAL forever. A
	// logical relay that took it a moment ago lets it go as soon as it
	// finds the group reads poll.
	switch slot, err := RetireSlot(ctx, p.pool, p.cfg.ConsumerGroup, 5*time.Second); {
	case err != nil:
		p.logger.Warn("outbox relay: could not drop the replication slot the group streamed from, which keeps WAL while it exists;"+
			" `moenda outbox slots --drop` drops it", "error", err)
	case slot != "":
		p.logger.Info("outbox relay: reading by polling now; dropped the replication slot the group streamed from", "slot", slot)
	}
	if err := p.boundSilence(ctx, conn); err != nil {
		return err
	}
	err = p.lead(ctx, conn)
	if err != nil && conn.IsClosed() && !errors.Is(err, errLockLost) {
		// pgx closes the connection when the session ends, and the lock
		// ends with it.
		err = fmt.Errorf("%w: %w", errLockLost, err)
	}
	return err
}

// boundSilence has the server end the lock session conn after
// Config.LockIdleTimeout without a statement, once it leads: a standby,
// which only asks for the lock every PollInterval, is left alone. It is
// set now, not as a startup parameter, because a server before PostgreSQL
// 14 refuses a connection naming a setting it does not have, and the
// relay still runs there, only without the bound.
func (p *polling) boundSilence(ctx context.Context, conn *pgx.Conn) error {
	if p.cfg.LockIdleTimeout <= 0 {
		return nil
	}
	p.queries.Add(1)
	_, err := conn.Exec(ctx, "SELECT set_config('idle_session_timeout', $1, false)", strconv.FormatInt(p.cfg.LockIdleTimeout.Milliseconds(), 10))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42704": // undefined_object
		p.logger.Warn("outbox relay: this PostgreSQL has no idle_session_timeout (it came in 14), so outbox.lock_idle_timeout does nothing:"+
			" a leader cut off by a dead network path keeps the lock until TCP keepalives end its session", "error", err)
	case err != nil:
		return fmt.Errorf("relay lock: idle_session_timeout: %w", err)
	}
	return nil
}

// beat is the longest a leader leaves its lock session silent: the idle
// poll, or a third of Config.LockIdleTimeout when that is shorter, so
// the server never ends a live leader's session.
func (p *polling) beat() time.Duration {
	if t := p.cfg.LockIdleTimeout / 3; t > 0 && t < p.cfg.PollInterval {
		return t
	}
	return p.cfg.PollInterval
}

// lead relays on conn, the session holding the relay lock, until ctx ends
// or a statement fails. Once ctx ends it reads nothing more, but the batch
// in hand is still published and its position recorded (see finishing),
// so a relay stopped under load leaves nothing for the next leader to
// publish again.
//
// While one batch is decoded and published, the next is read on conn, so
// the broker and the database work at the same time; the position of a
// batch is recorded once the broker has confirmed it, and the next batch
// is published only after that, so a relay whose position update fails
// (its lock lost) publishes nothing more, and rows go out in order.
// Meanwhile it listens for the notifications of writers in other
// processes (see Notifier).
func (p *polling) lead(ctx context.Context, conn *pgx.Conn) error {
	work, cancel := finishing(ctx)
	defer cancel()
	listening, stopListening := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() { defer close(listened); p.listen(listening) }()
	defer func() { stopListening(); <-listened }()
	pos, err := p.load(work, conn)
	if err != nil {
		return err
	}
	p.logger.Info("outbox relay active")

	var sent chan published // the batch being published, if any
	var sentEnd position
	// finish waits for the batch being published and records its end,
	// with the rows it parked.
	finish := func() error {
		if sent == nil {
			return nil
		}
		res, err := p.await(work, conn, sent)
		if err != nil {
			return err
		}
		sent = nil
		if res.err != nil {
			return res.err
		}
		return p.record(work, conn, sentEnd, res.parked)
	}
	defer func() {
		if sent != nil {
			// The session failed with a batch in flight (its lock may be
			// another relay's now): stop publishing it, since it will not
			// be recorded and the next leader sends it again, and let the
			// publisher's goroutine end before the session does.
			cancel()
			<-sent
		}
	}()

	// After an empty read the relay looks again after 1, 2, 4 ... 32 ms:
	// under load rows keep coming and it never sleeps longer. Then it
	// sleeps until a writer wakes it or the idle poll comes round. A
	// writer that woke it has committed rows, though: while they are
	// still held back (behind a transaction open anywhere on the server)
	// it goes on looking, twice as late each time, up to the idle poll,
	// rather than sleeping that long at once.
	empty := 0
	woken := false
	var held heldBack
	for {
		rows, err := p.read(work, conn, pos)
		if err != nil {
			return err
		}
		if err := finish(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil // stopped: rows just read stay for the next leader
		}
		if len(rows) == 0 {
			if err := held.check(work, p, conn, pos); err != nil {
				return err
			}
		}
		if len(rows) > 0 {
			empty, woken = 0, false
			held.moved()
			pos = rows[len(rows)-1].position
			sent, sentEnd = make(chan published, 1), pos
			go func() {
				parked, err := p.publish(work, rows)
				sent <- published{parked: parked, err: err}
			}()
			continue
		}
		empty++
		wait := p.beat()
		if empty <= 6 {
			wait = time.Millisecond << (empty - 1)
		} else if woken {
			pending, err := p.pending(work, conn, pos)
			if err != nil {
				return err
			}
			if woken = pending; woken {
				wait = min(p.beat(), time.Millisecond<<min(empty-1, 30))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
			empty, woken = 0, true
		case <-time.After(wait):
		}
	}
}

// published is the outcome of publishing a batch: the rows parked, or
// why the batch failed.
type published struct {
	parked []parkedRow
	err    error
}

// await waits for the batch being published, pinging conn every beat
// meanwhile, so a broker that takes long (an alarm) does not
// leave the lock's session silent for Config.LockIdleTimeout.
func (p *polling) await(ctx context.Context, conn *pgx.Conn, sent <-chan published) (published, error) {
	select {
	case res := <-sent:
		return res, nil
	default:
	}
	tick := time.NewTicker(p.beat())
	defer tick.Stop()
	for {
		select {
		case res := <-sent:
			return res, nil
		case <-tick.C:
			p.queries.Add(1)
			if err := conn.Ping(ctx); err != nil {
				return published{}, fmt.Errorf("relay lock session: %w", err)
			}
		}
	}
}

// load reads the consumer group's position, creating it at the start.
func (p *polling) load(ctx context.Context, conn *pgx.Conn) (position, error) {
	var pos position
	p.queries.Add(2)
	_, err := conn.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, 0, '0') ON CONFLICT (consumer_group) DO NOTHING`, p.cfg.ConsumerGroup)
	if err == nil {
		pos, _, err = groupPosition(ctx, conn, p.cfg.ConsumerGroup)
	}
	if err != nil {
		return pos, fmt.Errorf("outbox position: %w", err)
	}
	return pos, nil
}

// read reads the rows after pos through conn, the session holding the
// relay lock: a batch at most.
func (p *polling) read(ctx context.Context, conn *pgx.Conn, pos position) ([]outboxRow, error) {
	p.queries.Add(1)
	// The range on the primary key (transaction_id, offset) from the
	// position makes a read cost the same however long the backlog.
	rows, err := conn.Query(ctx, `
		SELECT transaction_id::text::bigint AS tx_id, "offset", uuid, payload, metadata FROM watermill_outbox
		WHERE (transaction_id, "offset") > ($1::text::xid8, $2)
		  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY transaction_id, "offset"
		LIMIT $3`, fmt.Sprint(pos.txID), pos.offset, p.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	found, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return found, nil
}

// pendingQuery asks whether rows lie after the position ($1, $2).
const pendingQuery = `SELECT EXISTS (SELECT 1 FROM ` + lastRow + ` WHERE (l.transaction_id, l."offset") > ($1::text::xid8, $2))`

// pending reports whether rows after pos are committed, visible or not
// to read: an empty read with pending rows means they are held back.
func (p *polling) pending(ctx context.Context, conn *pgx.Conn, pos position) (bool, error) {
	p.queries.Add(1)
	var found bool
	err := conn.QueryRow(ctx, pendingQuery, fmt.Sprint(pos.txID), pos.offset).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("read outbox: %w", err)
	}
	return found, nil
}

// scanRow reads a row of the outbox selected as transaction_id (as a
// bigint), offset, uuid, payload, metadata.
func scanRow(row pgx.CollectableRow) (outboxRow, error) {
	var rw outboxRow
	err := row.Scan(&rw.txID, &rw.offset, &rw.uuid, &rw.payload, &rw.metadata)
	return rw, err
}

// record records pos as the group's position through conn, and only while
// pg_locks shows conn holding the relay lock and the position recorded
// is not past pos, with the rows of the batch it parked: in one
// statement, so the position never moves past a row that is neither
// published nor parked, and never moves back (a relay that finds it
// ahead, moved by another, stops and reads on from there).
func (p *polling) record(ctx context.Context, conn *pgx.Conn, pos position, parked []parkedRow) error {
	p.queries.Add(1)
	// pg_locks shows a bigint advisory key as classid (its high half) and
	// objid (its low half), with objsubid 1.
	key := uint64(LockKey(p.cfg.ConsumerGroup))
	const update = `UPDATE watermill_offsets_outbox SET offset_acked = $2, last_processed_transaction_id = $3::text::xid8
		WHERE consumer_group = $1 AND (last_processed_transaction_id, COALESCE(offset_acked, 0)) <= ($3::text::xid8, $2)
		  AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
		  AND granted AND classid = $4 AND objid = $5 AND objsubid = 1)`
	args := []any{p.cfg.ConsumerGroup, pos.offset, fmt.Sprint(pos.txID), uint32(key >> 32), uint32(key)}
	var moved int64
	if len(parked) == 0 {
		tag, err := conn.Exec(ctx, update, args...)
		if err != nil {
			return fmt.Errorf("record outbox position: %w", err)
		}
		moved = tag.RowsAffected()
	} else {
		err := conn.QueryRow(ctx, `WITH moved AS (`+update+` RETURNING 1), `+parkedCTE(6, "moved")+`
			SELECT count(*) FROM moved`, append(args, parkedColumns(parked)...)...).Scan(&moved)
		if err != nil {
			return fmt.Errorf("record outbox position and %d parked rows: %w", len(parked), err)
		}
	}
	if moved == 0 {
		return fmt.Errorf("record outbox position: the relay lock is not held, or the position is past (%d, %d): %w", pos.txID, pos.offset, errLockLost)
	}
	return nil
}
