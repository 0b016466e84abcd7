package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/handlers/event"
)

// Destination takes a batch of messages, each with its routing key, and
// returns once the broker has confirmed all of them.
type Destination interface {
	PublishBatch(ctx context.Context, routingKeys []string, msgs []*message.Message) error
}

// AheadDestination is a Destination the logical relay publishes a batch
// ahead of its recorded position: the next batch goes out while the last
// one's position is recorded, which PostgreSQL takes a millisecond or
// more to do (see BENCHMARKS.md, "Kafka relay: publishing ahead"). The
// cost is what a crash repeats: the two batches published since the last
// recorded position, where otherwise it is one. A relay that finds it
// lost its slot still publishes nothing more.
type AheadDestination interface {
	Destination
	PublishAhead() bool
}

// PreparingDestination is a Destination that builds a batch apart from
// sending it: the logical relay builds the next batch while the last one
// is sent, as a raw client that reads on one goroutine and sends on
// another does (see BENCHMARKS.md, "Kafka relay: the next batch built
// while the last is sent"). Building publishes nothing, so what a crash
// repeats does not change.
type PreparingDestination interface {
	Destination
	// Prepare builds what PublishBatch would send for the batch.
	Prepare(routingKeys []string, msgs []*message.Message) (Prepared, error)
}

// Prepared is a batch a PreparingDestination built. Publish sends it, and
// returns what PublishBatch would have.
type Prepared interface {
	Publish(ctx context.Context) error
}

// Relay moves committed outbox rows to the broker. It replaces Watermill's
// forwarder, which waits for each publisher confirm in turn and whose
// watermill-sql query reads every pending row per batch. A reader finds
// the rows (Config.Reader): logical streams them in commit order from a
// replication slot (stream.go), polling reads the table (polling.go).
// Either way the relay publishes a batch with pipelined confirms, then the
// reader records the new position in the same consumer-group offsets.
//
// One relay per consumer group is active at a time, the others wait on
// standby: a polling relay holds a PostgreSQL advisory lock, and keeps
// relaying only while that lock's session lives; a logical one holds its
// slot. The group reads one way, recorded with its position (reader.go): a
// relay that would read another way stands by.
type Relay struct {
	queries  atomic.Uint64
	reports  atomic.Uint64 // a logical relay's standby status updates
	active   atomic.Bool
	wake     chan struct{}
	pool     *pgxpool.Pool
	dest     Destination
	cfg      Config
	routable func(string) error
	logger   *slog.Logger
	stats    *relayStats
	tracer   trace.Tracer         // nil: no spans
	ahead    bool                 // the destination is published ahead (AheadDestination)
	preparer PreparingDestination // the destination, where it builds apart; nil otherwise
	state    readerState
	readers  map[string]reader // by Config.Reader's name for it
}

// reader is one way of reading a consumer group's committed rows. Its
// session takes the group's leadership that way, or waits while another
// replica holds it; records the reader with the group's position (or
// returns a *standBy when the group reads another way); then relays,
// publishing through the relay, until ctx ends or it fails. A session that
// loses the leadership returns an error wrapping errLockLost.
type reader interface {
	session(ctx context.Context) error
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
	r := &Relay{pool: pool, dest: dest, cfg: cfg, routable: routable, wake: make(chan struct{}, 1), logger: logger.With("consumer_group", cfg.ConsumerGroup),
		stats: newRelayStats(cfg.ConsumerGroup)}
	if a, ok := dest.(AheadDestination); ok {
		r.ahead = a.PublishAhead()
	}
	r.preparer, _ = dest.(PreparingDestination)
	r.readers = map[string]reader{ReaderPoll: &polling{r}, ReaderLogical: &logical{r}}
	return r, nil
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

// Reports counts the standby status updates a logical relay has sent to
// PostgreSQL, so the cost of its stream in a busy database can be
// measured.
func (r *Relay) Reports() uint64 { return r.reports.Load() }

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
			await.Sleep(ctx, r.cfg.PollInterval)
			continue
		}
		if errors.Is(err, errLockLost) {
			r.logger.Warn("outbox relay: lost the leadership of its group, standing by", "error", err, "retry_in", r.cfg.RetryInterval)
		} else {
			r.logger.Error("outbox relay: will retry", "error", err, "retry_in", r.cfg.RetryInterval)
		}
		await.Sleep(ctx, r.cfg.RetryInterval)
	}
	return nil
}

// runSession decides the reader, then leads with it, or waits while
// another replica of the group leads.
func (r *Relay) runSession(ctx context.Context) error {
	name, err := r.decide(ctx)
	if err != nil {
		return err
	}
	r.state.mu.Lock()
	r.state.reader = name
	r.state.mu.Unlock()
	r.standingBy("")
	return r.readers[name].session(ctx)
}

// errLockLost means the relay lock, or the slot, is no longer this
// relay's: another replica may be relaying already.
var errLockLost = errors.New("the relay's lock or slot was lost")

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

// publish decodes rows into messages and publishes them, returning once
// the broker has confirmed them all. A row whose metadata names no event,
// or whose event no exchange carries, is not published: it is returned,
// to be parked with the batch's position, and logged. So is a row the
// broker refused for good (ErrRefused), which sending again would refuse
// again. When the destination says which messages of the batch failed
// (BatchError), only those it may still take are sent again, after
// RetryInterval, so the others are not delivered again on every retry.
func (r *Relay) publish(ctx context.Context, rows []outboxRow) ([]parkedRow, error) {
	return r.deliver(ctx, r.prepare(ctx, rows))
}

// batch is a batch of rows made ready to publish: the messages of the
// rows that decode, on their way out, each with its row, and the rows
// parked.
type batch struct {
	rows   []outboxRow
	out    *outgoing
	from   []int // each message's row
	parked []parkedRow
}

// prepare decodes rows and builds their messages for the destination.
func (r *Relay) prepare(ctx context.Context, rows []outboxRow) *batch {
	keys := make([]string, 0, len(rows))
	msgs := make([]*message.Message, 0, len(rows))
	b := &batch{rows: rows, from: make([]int, 0, len(rows))}
	for i, rw := range rows {
		msg, key, park := decode(rw, r.routable)
		if park != nil {
			r.logParked(*park)
			b.parked = append(b.parked, *park)
			continue
		}
		keys = append(keys, key)
		msgs = append(msgs, msg)
		b.from = append(b.from, i)
	}
	b.out = r.build(ctx, keys, msgs)
	return b
}

// deliver publishes a prepared batch and returns the rows it parked.
func (r *Relay) deliver(ctx context.Context, b *batch) ([]parkedRow, error) {
	out, from, parked := b.out, b.from, b.parked
	for len(out.msgs) > 0 {
		err := r.send(ctx, out)
		var partly *BatchError
		if err == nil {
			break
		}
		if !errors.As(err, &partly) {
			return nil, fmt.Errorf("publish %d events: %w", len(out.msgs), err)
		}
		keys, msgs := out.keys, out.msgs
		n := 0
		for i := range msgs {
			failed, ok := partly.Failed[i]
			switch {
			case !ok: // delivered
			case errors.Is(failed, ErrRefused):
				rw := b.rows[from[i]]
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
		if !await.Sleep(ctx, r.cfg.RetryInterval) {
			return nil, fmt.Errorf("publish %d events: %w", n, err)
		}
		out, from = r.build(ctx, keys[:n], msgs[:n]), from[:n]
	}
	return parked, nil
}

// logParked logs a row the relay parks, with why.
func (r *Relay) logParked(p parkedRow) {
	r.logger.Error("outbox row parked: "+p.why()+"; it stays in watermill_outbox, listed by `moenda outbox parked`",
		"offset", p.offset, "event_id", p.eventID, "correlation_id", p.correlationID, "event_name", p.eventName,
		"routing_key", p.routingKey, "reason", p.reason, "error", p.detail)
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
	if _, err := RetireSlot(ctx, pool, group, 5*time.Second); err != nil {
		return fmt.Errorf("outbox: reset the position of %s: %w", group, err)
	}
	return nil
}

// CaughtUp reports whether group's relay has published every row of the
// outbox committed so far.
func CaughtUp(ctx context.Context, pool *pgxpool.Pool, group string) (bool, error) {
	pos, found, err := groupPosition(ctx, pool, group)
	var behind bool
	if err == nil && found {
		err = pool.QueryRow(ctx, pendingQuery, fmt.Sprint(pos.txID), pos.offset).Scan(&behind)
	}
	if err != nil {
		return false, fmt.Errorf("outbox: position of %s: %w", group, err)
	}
	return found && !behind, nil
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
