package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A consumer group reads the outbox one way, whatever each of its
// processes would choose: the reader is decided once for the group and
// recorded with its position (watermill_offsets_outbox.reader), by the
// relay that first leads it. A polling relay leads under the group's
// advisory lock and a logical one by streaming the group's slot, two
// different things: a relay that would read another way than the group's
// recorded reader therefore stands by, and says why (Relay.Standby), or
// both would publish the whole stream.
//
// outbox.reader: auto follows the recorded reader, and decides only for a
// group that has none, on the server's answer (a check that failed is
// retried, never decided on). An explicit logical or poll is the
// operator's choice: it records its reader, switching the group, once no
// relay of the other reader leads it (the slot is not streamed, or the
// lock is free), so the two never publish side by side.

// standBy is why a relay may not lead its group as it would read.
type standBy struct{ reason string }

func (s *standBy) Error() string { return s.reason }

// readerState is what Relay.Reader and Relay.Standby report.
type readerState struct {
	mu      sync.Mutex
	reader  string // the reader of the relay's last session
	standBy string // why it stands by; "" while it may lead
	warned  bool   // auto polls: said why, once
}

// Reader is the reader the relay reads its group with, or would once it
// leads; "" before it has decided.
func (r *Relay) Reader() string {
	r.state.mu.Lock()
	defer r.state.mu.Unlock()
	return r.state.reader
}

// Standby says why the relay stands by while it could lead (its group
// reads another way), or "" when it does not; a replica waiting while
// another of the same reader leads is not standing by in this sense.
func (r *Relay) Standby() string {
	r.state.mu.Lock()
	defer r.state.mu.Unlock()
	return r.state.standBy
}

// standingBy records why the relay stands by ("" once it may lead
// again), and logs a change.
func (r *Relay) standingBy(reason string) {
	r.state.mu.Lock()
	changed := r.state.standBy != reason
	r.state.standBy = reason
	r.state.mu.Unlock()
	if !changed {
		return
	}
	if reason != "" {
		r.logger.Warn("outbox relay: standing by: "+reason, "configured_reader", r.cfg.Reader)
	} else {
		r.logger.Info("outbox relay: no longer standing by", "configured_reader", r.cfg.Reader)
	}
}

// recordedReader is the reader recorded for the relay's group, "" when
// none is.
func (r *Relay) recordedReader(ctx context.Context) (string, error) {
	var reader *string
	r.queries.Add(1)
	err := r.pool.QueryRow(ctx, `SELECT reader FROM watermill_offsets_outbox WHERE consumer_group = $1`, r.cfg.ConsumerGroup).Scan(&reader)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("the reader of %s: %w", r.cfg.ConsumerGroup, err)
	}
	if reader == nil {
		return "", nil
	}
	return *reader, nil
}

// decide returns the reader the relay reads its group with in its next
// session; a *standBy when it may not lead it now; or another error
// when that could not be found out (it is asked again).
func (r *Relay) decide(ctx context.Context) (string, error) {
	recorded, err := r.recordedReader(ctx)
	if err != nil {
		return "", err
	}
	switch r.cfg.Reader {
	case ReaderPoll:
		if recorded == ReaderLogical {
			if slot, err := r.streamedSlot(ctx); err != nil || slot != "" {
				return "", orStandBy(err, "the group reads logical (recorded with its position) and a logical relay streams its slot "+slot+
					"; this relay (outbox.reader: poll) switches the group to polling once that relay stops")
			}
		}
		return ReaderPoll, nil
	case ReaderLogical:
		if recorded == ReaderPoll {
			if led, err := r.lockHeld(ctx); err != nil || led {
				return "", orStandBy(err, "the group reads poll (recorded with its position) and a polling relay leads it"+
					"; this relay (outbox.reader: logical) switches the group to streaming once that relay stops")
			}
		}
		return ReaderLogical, nil
	}
	if recorded == ReaderPoll {
		return ReaderPoll, nil
	}
	chosen, why, err := serverReader(ctx, r.pool)
	switch {
	case err != nil && ctx.Err() != nil:
		return "", err
	case err != nil:
		return "", fmt.Errorf("could not check whether the server streams the outbox; deciding nothing until it can be: %w", err)
	case chosen == ReaderLogical:
		return ReaderLogical, nil
	case recorded == ReaderLogical:
		return "", &standBy{"the group reads logical (recorded with its position), but this process cannot stream: " + why.Error() +
			"; it stands by. Give this process's role what streaming needs, or set outbox.reader: poll to switch the group to polling"}
	}
	r.state.mu.Lock()
	warn := !r.state.warned
	r.state.warned = true
	r.state.mu.Unlock()
	if warn {
		warnPolling(r.logger, why)
	}
	return ReaderPoll, nil
}

// orStandBy is err, or a *standBy for reason when there is none.
func orStandBy(err error, reason string) error {
	if err != nil {
		return err
	}
	return &standBy{reason}
}

// streamedSQL finds the slot of group $1 while a relay streams it.
const streamedSQL = `SELECT s.slot_name FROM moenda_outbox_slots s JOIN pg_replication_slots p ON p.slot_name = s.slot_name
	WHERE s.consumer_group = $1 AND p.active`

// streamedSlot is the name of the group's slot while a relay streams it,
// "" otherwise.
func (r *Relay) streamedSlot(ctx context.Context) (string, error) {
	var slot string
	r.queries.Add(1)
	err := r.pool.QueryRow(ctx, streamedSQL, r.cfg.ConsumerGroup).Scan(&slot)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("the slot of %s: %w", r.cfg.ConsumerGroup, err)
	}
	return slot, nil
}

// lockHeld reports whether a session holds the group's relay lock.
func (r *Relay) lockHeld(ctx context.Context) (bool, error) {
	key := uint64(LockKey(r.cfg.ConsumerGroup))
	var held bool
	r.queries.Add(1)
	err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = $1 AND objid = $2 AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
		uint32(key>>32), uint32(key)).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("the relay lock of %s: %w", r.cfg.ConsumerGroup, err)
	}
	return held, nil
}

// claim records poll as the group's reader through conn, the session
// holding the relay lock, unless the group reads logical and this relay
// is auto, or a relay streams the group's slot; then it returns a
// *standBy. Holding the lock keeps a logical relay from recording its
// reader meanwhile (logical.claim), and a relay that streams the slot
// keeps this one from recording poll: one statement checks and records.
func (p *polling) claim(ctx context.Context, conn *pgx.Conn) error {
	var reader string
	var slot *string
	p.queries.Add(1)
	err := conn.QueryRow(ctx, `WITH streaming AS (`+streamedSQL+`),
		claimed AS (
			INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id, reader)
			VALUES ($1, 0, '0', 'poll')
			ON CONFLICT (consumer_group) DO UPDATE SET reader = 'poll'
			WHERE watermill_offsets_outbox.reader IS DISTINCT FROM 'poll' AND (watermill_offsets_outbox.reader IS NULL OR $2)
			  AND NOT EXISTS (SELECT 1 FROM streaming)
			RETURNING reader)
		SELECT COALESCE((SELECT reader FROM claimed), (SELECT reader FROM watermill_offsets_outbox WHERE consumer_group = $1), ''),
			(SELECT slot_name FROM streaming LIMIT 1)`, p.cfg.ConsumerGroup, p.cfg.Reader == ReaderPoll).Scan(&reader, &slot)
	if err != nil {
		return fmt.Errorf("record the reader of %s: %w", p.cfg.ConsumerGroup, err)
	}
	switch {
	case reader == ReaderPoll:
		return nil
	case slot != nil:
		return &standBy{"a logical relay streams the group's slot " + *slot + "; this relay would poll"}
	}
	return &standBy{"the group reads " + reader + " (recorded with its position); this relay would poll"}
}

// claim records logical as the group's reader, once the relay
// streams the group's slot, or returns a *standBy: the group reads poll
// and this relay is auto, or a polling relay leads the group (it holds
// the relay lock, which recording takes, past claimWait).
func (l *logical) claim(ctx context.Context) error {
	recorded, err := l.recordedReader(ctx)
	switch {
	case err != nil:
		return err
	case recorded == ReaderLogical:
		return nil
	case recorded == ReaderPoll && l.cfg.Reader != ReaderLogical:
		return &standBy{"the group reads poll (recorded with its position); this relay would stream"}
	}
	var claimed bool
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		l.queries.Add(3)
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(claimWait.Milliseconds(), 10)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", LockKey(l.cfg.ConsumerGroup)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id, reader)
			VALUES ($1, 0, '0', 'logical') ON CONFLICT (consumer_group) DO UPDATE SET reader = 'logical'
			WHERE watermill_offsets_outbox.reader IS DISTINCT FROM 'poll' OR $2`, l.cfg.ConsumerGroup, l.cfg.Reader == ReaderLogical)
		claimed = tag.RowsAffected() == 1
		return err
	})
	switch {
	case hasCode(err, "55P03"): // lock_not_available
		return &standBy{"a polling relay of the group leads it; this relay would stream"}
	case err != nil:
		return fmt.Errorf("record the reader of %s: %w", l.cfg.ConsumerGroup, err)
	case !claimed: // a polling relay recorded poll since, and stopped
		return &standBy{"the group reads poll (recorded with its position); this relay would stream"}
	}
	if recorded == ReaderPoll {
		l.logger.Info("outbox relay: switched the group from polling to streaming (outbox.reader: logical)")
	}
	return nil
}

// claimWait is how long a logical relay that streams its group's slot
// waits for the relay lock to record its reader. A polling relay that
// finds the group's reader unrecorded holds the lock only while it looks
// whether a slot is streamed (polling.claim), and backs off when one is;
// one that holds it longer leads the group.
const claimWait = 5 * time.Second

// GroupsStream reports whether every one of groups has recorded the
// logical reader: then no relay of theirs polls, and writers need not
// wake one.
func GroupsStream(ctx context.Context, pool *pgxpool.Pool, groups ...string) (bool, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(DISTINCT consumer_group) FROM watermill_offsets_outbox
		WHERE consumer_group = ANY($1) AND reader = 'logical'`, groups).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("outbox: the readers of %v: %w", groups, err)
	}
	return n == len(slices.Compact(slices.Sorted(slices.Values(groups)))), nil
}

// ConsumerGroup is the group whose position the relay keeps.
func (r *Relay) ConsumerGroup() string { return r.cfg.ConsumerGroup }
