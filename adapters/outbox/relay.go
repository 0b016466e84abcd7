package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/poll"
	"github.com/moenda/moenda/handlers/event"
)

// Destination takes a batch of messages, each with its routing key, and
// returns once the broker has confirmed all of them.
type Destination interface {
	PublishBatch(ctx context.Context, routingKeys []string, msgs []*message.Message) error
}

// Relay moves committed outbox rows to the broker. It replaces Watermill's
// forwarder, which waits for each publisher confirm in turn and whose
// watermill-sql query reads every pending row per batch. It finds the rows
// one of two ways (Config.Reader): it streams them in commit order from a
// replication slot (stream.go), or it polls the table, keeping
// watermill-sql's visibility rule (a row is read only once every
// transaction that could commit before it has ended) but reading a batch by
// an index range from its position. Either way it publishes a batch with
// pipelined confirms, then records the new position in the same
// consumer-group offsets.
//
// One relay per consumer group is active at a time, the others wait on
// standby: a polling relay holds a PostgreSQL advisory lock, and keeps
// relaying only while that lock's session lives (see session); a logical
// one holds its slot. The group reads one way, recorded with its position
// (reader.go): a relay that would read another way stands by.
type Relay struct {
	queries  atomic.Uint64
	active   atomic.Bool
	wake     chan struct{}
	pool     *pgxpool.Pool
	dest     Destination
	cfg      Config
	routable func(string) error
	logger   *slog.Logger
	stats    *relayStats
	tracer   trace.Tracer // nil: no spans
	state    readerState
}

// NewRelay returns a relay connecting to the database of pool. It refuses
// a configuration it cannot run: a zero batch reads nothing, and a zero
// poll interval spins.
func NewRelay(pool *pgxpool.Pool, dest Destination, routable func(string) error, cfg Config, logger *slog.Logger) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("outbox relay: %w", err)
	}
	if pool == nil || dest == nil || routable == nil || logger == nil {
		return nil, errors.New("outbox relay: the pool, the destination, the routing rule and the logger are all required")
	}
	return &Relay{pool: pool, dest: dest, cfg: cfg, routable: routable, wake: make(chan struct{}, 1), logger: logger.With("consumer_group", cfg.ConsumerGroup),
		stats: newRelayStats(cfg.ConsumerGroup)}, nil
}

// Wake tells an idle relay that rows were committed. Writers in the same
// process call it after each commit; writers elsewhere reach a polling
// relay through a Notifier, and a logical one through its stream.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Queries counts the statements the relay has sent to PostgreSQL, so the
// cost of an idle relay can be measured.
func (r *Relay) Queries() uint64 { return r.queries.Load() }

// Destination is where the relay publishes: Republish sends the rows it
// parked the same way.
func (r *Relay) Destination() Destination { return r.dest }

// Active reports whether the relay holds its group's lock, that is, is
// the replica relaying; work that one replica is enough for (pruning)
// runs where it does.
func (r *Relay) Active() bool { return r.active.Load() }

// position is the last row the consumer group has published.
type position struct {
	txID   uint64
	offset int64
}

type outboxRow struct {
	position
	uuid     string
	payload  []byte
	metadata []byte
}

// Run relays until ctx ends. Failures (the broker or the database away) are
// logged and retried after cfg.RetryInterval, and so is the loss of the
// relay lock, after which the relay stands by; rows are never skipped except
// those it parks (their metadata names no event, or no exchange carries
// them), which stay in the table. Each session first finds the reader
// (decide); while the group reads another way, the relay stands by,
// says why (Standby), and asks again every cfg.PollInterval.
func (r *Relay) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := r.runSession(ctx)
		if err == nil || ctx.Err() != nil {
			continue
		}
		var sb *standBy
		if errors.As(err, &sb) {
			r.standingBy(sb.reason)
			poll.Sleep(ctx, r.cfg.PollInterval)
			continue
		}
		if errors.Is(err, errLockLost) {
			r.logger.Warn("outbox relay: lost the leadership of its group, standing by", "error", err, "retry_in", r.cfg.RetryInterval)
		} else {
			r.logger.Error("outbox relay: will retry", "error", err, "retry_in", r.cfg.RetryInterval)
		}
		poll.Sleep(ctx, r.cfg.RetryInterval)
	}
	return nil
}

// runSession decides the reader, then leads with it, or waits while
// another replica of the group leads.
func (r *Relay) runSession(ctx context.Context) error {
	reader, err := r.decide(ctx)
	if err != nil {
		return err
	}
	r.state.mu.Lock()
	r.state.reader = reader
	r.state.mu.Unlock()
	r.standingBy("")
	if reader == ReaderLogical {
		return r.streamSession(ctx)
	}
	return r.session(ctx)
}

// errLockLost means the relay lock, or the slot, is no longer this
// relay's: another replica may be relaying already.
var errLockLost = errors.New("the relay's lock or slot was lost")

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
func (r *Relay) session(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("lock connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var locked bool
		r.queries.Add(1)
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", LockKey(r.cfg.ConsumerGroup)).Scan(&locked); err != nil {
			return fmt.Errorf("relay lock: %w", err)
		}
		if locked {
			break
		}
		if !poll.Sleep(ctx, r.cfg.PollInterval) { // another replica relays
			return nil
		}
	}
	if err := r.claimPoll(ctx, conn); err != nil {
		return err
	}
	r.active.Store(true)
	defer r.active.Store(false)
	// A slot the group streamed from before would keep WAL forever. A
	// logical relay that took it a moment ago lets it go as soon as it
	// finds the group reads poll.
	switch slot, err := retireSlot(ctx, r.pool, r.cfg.ConsumerGroup, 5*time.Second); {
	case err != nil:
		r.logger.Warn("outbox relay: could not drop the replication slot the group streamed from, which keeps WAL while it exists;"+
			" `moenda outbox slots --drop` drops it", "error", err)
	case slot != "":
		r.logger.Info("outbox relay: reading by polling now; dropped the replication slot the group streamed from", "slot", slot)
	}
	if err := r.boundSilence(ctx, conn); err != nil {
		return err
	}
	err = r.lead(ctx, conn)
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
func (r *Relay) boundSilence(ctx context.Context, conn *pgx.Conn) error {
	if r.cfg.LockIdleTimeout <= 0 {
		return nil
	}
	r.queries.Add(1)
	_, err := conn.Exec(ctx, "SELECT set_config('idle_session_timeout', $1, false)", strconv.FormatInt(r.cfg.LockIdleTimeout.Milliseconds(), 10))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42704": // undefined_object
		r.logger.Warn("outbox relay: this PostgreSQL has no idle_session_timeout (it came in 14), so outbox.lock_idle_timeout does nothing:"+
			" a leader cut off by a dead network path keeps the lock until TCP keepalives end its session", "error", err)
	case err != nil:
		return fmt.Errorf("relay lock: idle_session_timeout: %w", err)
	}
	return nil
}

// beat is the longest a leader leaves its lock session silent: the idle
// poll, or a third of Config.LockIdleTimeout when that is shorter, so
// the server never ends a live leader's session.
func (r *Relay) beat() time.Duration {
	if t := r.cfg.LockIdleTimeout / 3; t > 0 && t < r.cfg.PollInterval {
		return t
	}
	return r.cfg.PollInterval
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
func (r *Relay) lead(ctx context.Context, conn *pgx.Conn) error {
	work, cancel := finishing(ctx)
	defer cancel()
	listening, stopListening := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() { defer close(listened); r.listen(listening) }()
	defer func() { stopListening(); <-listened }()
	pos, err := r.load(work, conn)
	if err != nil {
		return err
	}
	r.logger.Info("outbox relay active")

	var sent chan published // the batch being published, if any
	var sentEnd position
	// finish waits for the batch being published and records its end,
	// with the rows it parked.
	finish := func() error {
		if sent == nil {
			return nil
		}
		res, err := r.await(work, conn, sent)
		if err != nil {
			return err
		}
		sent = nil
		if res.err != nil {
			return res.err
		}
		return r.record(work, conn, sentEnd, res.parked)
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
		rows, err := r.read(work, conn, pos)
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
			if err := held.check(work, r, conn, pos); err != nil {
				return err
			}
		}
		if len(rows) > 0 {
			empty, woken = 0, false
			held = heldBack{}
			pos = rows[len(rows)-1].position
			sent, sentEnd = make(chan published, 1), pos
			go func() {
				parked, err := r.publish(work, rows)
				sent <- published{parked: parked, err: err}
			}()
			continue
		}
		empty++
		wait := r.beat()
		if empty <= 6 {
			wait = time.Millisecond << (empty - 1)
		} else if woken {
			pending, err := r.pending(work, conn, pos)
			if err != nil {
				return err
			}
			if woken = pending; woken {
				wait = min(r.beat(), time.Millisecond<<min(empty-1, 30))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			empty, woken = 0, true
		case <-time.After(wait):
		}
	}
}

// await waits for the batch being published, pinging conn every beat
// meanwhile, so a broker that takes long (an alarm) does not
// leave the lock's session silent for Config.LockIdleTimeout.
func (r *Relay) await(ctx context.Context, conn *pgx.Conn, sent <-chan published) (published, error) {
	select {
	case res := <-sent:
		return res, nil
	default:
	}
	tick := time.NewTicker(r.beat())
	defer tick.Stop()
	for {
		select {
		case res := <-sent:
			return res, nil
		case <-tick.C:
			r.queries.Add(1)
			if err := conn.Ping(ctx); err != nil {
				return published{}, fmt.Errorf("relay lock session: %w", err)
			}
		}
	}
}

// finishBound is how long a stopping relay may take to publish and record
// the batch in hand; past it (the broker away or blocking), the batch is
// left to the next leader, which publishes it again.
const finishBound = 10 * time.Second

// finishing returns the context a relay's statements and publishing run
// in: it ends finishBound after ctx does, so the batch in hand when the
// relay is stopped is still published and recorded.
func finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(finishBound, cancel) })
	return work, func() { stop(); cancel() }
}

// load reads the consumer group's position, creating it at the start.
func (r *Relay) load(ctx context.Context, conn *pgx.Conn) (position, error) {
	var pos position
	r.queries.Add(2)
	_, err := conn.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, 0, '0') ON CONFLICT (consumer_group) DO NOTHING`, r.cfg.ConsumerGroup)
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT COALESCE(offset_acked, 0), last_processed_transaction_id::text::bigint
			FROM watermill_offsets_outbox WHERE consumer_group = $1`, r.cfg.ConsumerGroup).Scan(&pos.offset, &pos.txID)
	}
	if err != nil {
		return pos, fmt.Errorf("outbox position: %w", err)
	}
	return pos, nil
}

// read reads the rows after pos through conn, the session holding the
// relay lock: a batch at most.
func (r *Relay) read(ctx context.Context, conn *pgx.Conn, pos position) ([]outboxRow, error) {
	r.queries.Add(1)
	// The range on the primary key (transaction_id, offset) from the
	// position makes a read cost the same however long the backlog.
	rows, err := conn.Query(ctx, `
		SELECT transaction_id::text::bigint AS tx_id, "offset", uuid, payload, metadata FROM watermill_outbox
		WHERE (transaction_id, "offset") > ($1::text::xid8, $2)
		  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY transaction_id, "offset"
		LIMIT $3`, fmt.Sprint(pos.txID), pos.offset, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	found, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return found, nil
}

// pending reports whether rows after pos are committed, visible or not
// to read: an empty read with pending rows means they are held back.
func (r *Relay) pending(ctx context.Context, conn *pgx.Conn, pos position) (bool, error) {
	r.queries.Add(1)
	var found bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM watermill_outbox WHERE (transaction_id, "offset") > ($1::text::xid8, $2))`,
		fmt.Sprint(pos.txID), pos.offset).Scan(&found)
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

// published is the outcome of publishing a batch: the rows parked, or
// why the batch failed.
type published struct {
	parked []parkedRow
	err    error
}

// publish decodes rows into messages and publishes them, returning once
// the broker has confirmed them all. A row whose metadata names no event,
// or whose event no exchange carries, is not published: it is returned,
// to be parked with the batch's position, and logged. So is a row the
// broker refused for good (ErrRefused), which sending again would refuse
// again. When the destination says which messages of the batch failed
// (BatchError), only those it may still take are sent again, after
// RetryInterval, so the others are not delivered again on every retry.
func (r *Relay) publish(ctx context.Context, rows []outboxRow) ([]parkedRow, error) {
	keys := make([]string, 0, len(rows))
	msgs := make([]*message.Message, 0, len(rows))
	from := make([]int, 0, len(rows)) // each message's row
	var parked []parkedRow
	for i, rw := range rows {
		msg, key, park := decode(rw, r.routable)
		if park != nil {
			r.logParked(*park)
			parked = append(parked, *park)
			continue
		}
		keys = append(keys, key)
		msgs = append(msgs, msg)
		from = append(from, i)
	}
	for len(msgs) > 0 {
		err := r.send(ctx, keys, msgs)
		var partly *BatchError
		if err == nil {
			break
		}
		if !errors.As(err, &partly) {
			return nil, fmt.Errorf("publish %d events: %w", len(msgs), err)
		}
		n := 0
		for i := range msgs {
			failed, ok := partly.Failed[i]
			switch {
			case !ok: // delivered
			case errors.Is(failed, ErrRefused):
				rw := rows[from[i]]
				p := parkedRow{position: rw.position, eventID: rw.uuid, eventName: msgs[i].Metadata.Get(event.MetaName), routingKey: keys[i],
					correlationID: msgs[i].Metadata.Get(event.MetaCorrelationID), reason: ReasonRefused, detail: failed.Error()}
				p.clean()
				r.logParked(p)
				parked = append(parked, p)
			default:
				keys[n], msgs[n], from[n] = keys[i], msgs[i], from[i]
				n++
			}
		}
		if n == 0 {
			break
		}
		r.logger.Error("outbox relay: will publish again only the events the broker did not take",
			"failed", n, "of", len(msgs), "error", err, "retry_in", r.cfg.RetryInterval)
		keys, msgs, from = keys[:n], msgs[:n], from[:n]
		if !poll.Sleep(ctx, r.cfg.RetryInterval) {
			return nil, fmt.Errorf("publish %d events: %w", n, err)
		}
	}
	return parked, nil
}

// logParked logs a row the relay parks, with why.
func (r *Relay) logParked(p parkedRow) {
	r.logger.Error("outbox row parked: "+p.why()+"; it stays in watermill_outbox, listed by `moenda outbox parked`",
		"offset", p.offset, "event_id", p.eventID, "correlation_id", p.correlationID, "event_name", p.eventName,
		"routing_key", p.routingKey, "reason", p.reason, "error", p.detail)
}

// record records pos as the group's position through conn, and only while
// pg_locks shows conn holding the relay lock and the position recorded
// is not past pos, with the rows of the batch it parked: in one
// statement, so the position never moves past a row that is neither
// published nor parked, and never moves back (a relay that finds it
// ahead, moved by another, stops and reads on from there).
func (r *Relay) record(ctx context.Context, conn *pgx.Conn, pos position, parked []parkedRow) error {
	r.queries.Add(1)
	// pg_locks shows a bigint advisory key as classid (its high half) and
	// objid (its low half), with objsubid 1.
	key := uint64(LockKey(r.cfg.ConsumerGroup))
	const update = `UPDATE watermill_offsets_outbox SET offset_acked = $2, last_processed_transaction_id = $3::text::xid8
		WHERE consumer_group = $1 AND (last_processed_transaction_id, COALESCE(offset_acked, 0)) <= ($3::text::xid8, $2)
		  AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
		  AND granted AND classid = $4 AND objid = $5 AND objsubid = 1)`
	args := []any{r.cfg.ConsumerGroup, pos.offset, fmt.Sprint(pos.txID), uint32(key >> 32), uint32(key)}
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

// ResetPosition sends group's relay back to the outbox's first row, for a
// destination that lost what it was given (an in-memory cluster that
// started again): it is given again every event the outbox still keeps
// (those of the last Config.Retention, and any not yet published).
// A logical relay's slot is dropped too: the group's next relay reads the
// table from its start, then streams from a new slot. Stop the group's
// relay first.
func ResetPosition(ctx context.Context, pool *pgxpool.Pool, group string) error {
	if _, err := pool.Exec(ctx, `DELETE FROM watermill_offsets_outbox WHERE consumer_group = $1`, group); err != nil {
		return fmt.Errorf("outbox: reset the position of %s: %w", group, err)
	}
	if _, err := retireSlot(ctx, pool, group, 5*time.Second); err != nil {
		return fmt.Errorf("outbox: reset the position of %s: %w", group, err)
	}
	return nil
}

// CaughtUp reports whether group's relay has published every row of the
// outbox committed so far.
func CaughtUp(ctx context.Context, pool *pgxpool.Pool, group string) (bool, error) {
	var done bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM watermill_offsets_outbox WHERE consumer_group = $1)
		AND NOT EXISTS (SELECT 1 FROM watermill_outbox o, watermill_offsets_outbox p WHERE p.consumer_group = $1
			AND (o.transaction_id, o."offset") > (p.last_processed_transaction_id, p.offset_acked))`, group).Scan(&done)
	if err != nil {
		return false, fmt.Errorf("outbox: position of %s: %w", group, err)
	}
	return done, nil
}

// LockKey is the advisory lock key of a consumer group's relay. A session
// holding it (pg_advisory_lock) keeps every relay of the group on standby:
// rows commit, and none is published until it lets go.
func LockKey(group string) int64 { return lockKey("moenda outbox relay:" + group) }

// lockKey is the advisory lock key named by name.
func lockKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}
