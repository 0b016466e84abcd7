// Package outbox is the transactional outbox: events are written as rows by
// the watermill-sql publisher bound to the caller's pgx transaction, so they
// commit or roll back with the business rows; the Relay, with its own
// consumer group on the outbox topic, publishes committed rows to the
// broker. A row's payload is the event envelope itself and its metadata
// carries the event's name, from which the relay takes the routing key.
// The relay never deletes a row: the table is also the log of what was
// published, kept for Config.Retention once every relay has published it
// (see Prune). A row a relay cannot publish is parked (see ListParked and
// Republish) and kept until it is republished.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/tracing"
	"github.com/moenda/moenda/handlers/event"
)

// Topic is the watermill-sql topic of the outbox: its rows live in
// watermill_outbox and the relay's offsets in watermill_offsets_outbox,
// both created by the migrations.
const Topic = "outbox"

// Config is what YAML sets for the relay.
type Config struct {
	// ConsumerGroup names the relay's position in the outbox.
	ConsumerGroup string `koanf:"consumer_group"`
	// PollInterval is how often an idle relay looks at the outbox when no
	// commit of its process wakes it (and how often a standby replica asks
	// for the relay lock).
	PollInterval time.Duration `koanf:"poll_interval"`
	// RetryInterval is how long it waits before trying again after the
	// broker or the database failed.
	RetryInterval time.Duration `koanf:"retry_interval"`
	// BatchSize is how many rows one read takes.
	BatchSize int `koanf:"batch_size"`
	// ConfirmWindow is how many published messages may await the broker's
	// confirmation at once.
	ConfirmWindow int `koanf:"confirm_window"`
	// Retention is how long a row is kept once every relay of the
	// configuration has published it; 0 keeps rows forever. A relay that
	// is switched off for longer than this finds the rows it missed gone.
	Retention time.Duration `koanf:"retention"`
	// RetentionInterval is how often rows past Retention are deleted.
	RetentionInterval time.Duration `koanf:"retention_interval"`
	// Reader is how the relay finds committed rows: ReaderLogical streams
	// them in commit order from PostgreSQL's logical replication,
	// ReaderPoll queries the table, ReaderAuto follows the reader the
	// consumer group recorded, and a group with none takes logical where
	// the server allows it (see reader.go). An explicit reader switches
	// the group once no relay of the other reader leads it.
	Reader string `koanf:"reader"`
	// MaxEventBytes is the largest event the outbox takes, as event.Size
	// counts it (its envelope and metadata); a larger one fails its unit
	// of work, since a broker would refuse it. 0 takes what the configured
	// brokers take (the app works it out).
	MaxEventBytes int `koanf:"max_event_bytes"`
	// SlotWarnSize is how much WAL a logical relay's replication slot may
	// hold back before moenda warns: PostgreSQL keeps the WAL a slot has
	// not confirmed, for as long as its relay is down.
	SlotWarnSize ByteSize `koanf:"slot_warn_size"`
	// LockIdleTimeout is how long the session holding a polling relay's
	// lock may send nothing before PostgreSQL ends it (its
	// idle_session_timeout), which lets the lock go to a standby: a relay
	// whose network path went black sends nothing, and the server would
	// otherwise keep its session until TCP gave up. A leader sends a
	// statement at least every PollInterval or every third of this,
	// whichever is shorter, waiting on the broker included; 0 leaves the
	// session alone.
	LockIdleTimeout time.Duration `koanf:"lock_idle_timeout"`
}

// How a relay reads the outbox (Config.Reader).
const (
	ReaderAuto    = "auto"
	ReaderLogical = "logical"
	ReaderPoll    = "poll"
)

// DefaultConfig is what the benchmarks were measured with: an idle look
// every second, batches of 1,000 rows, 256 confirms in flight; published
// rows are kept a week, as the inbox keeps its claims. The reader is
// logical where the server allows it, and a slot holding back more than
// 1 GiB of WAL is warned about. A polling relay's lock goes to a standby
// after 20 s of silence from its session.
func DefaultConfig() Config {
	return Config{ConsumerGroup: "moenda-relay", PollInterval: time.Second, RetryInterval: time.Second, BatchSize: 256, ConfirmWindow: 256,
		Retention: 7 * 24 * time.Hour, RetentionInterval: 5 * time.Minute, Reader: ReaderAuto, SlotWarnSize: 1 << 30,
		LockIdleTimeout: 20 * time.Second}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.ConsumerGroup == "" {
		errs = append(errs, errors.New("outbox.consumer_group is empty"))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("outbox.poll_interval must be positive, got %s", c.PollInterval))
	}
	if c.RetryInterval <= 0 {
		errs = append(errs, fmt.Errorf("outbox.retry_interval must be positive, got %s", c.RetryInterval))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("outbox.batch_size must be at least 1, got %d", c.BatchSize))
	}
	if c.ConfirmWindow < 1 {
		errs = append(errs, fmt.Errorf("outbox.confirm_window must be at least 1, got %d", c.ConfirmWindow))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("outbox.retention must not be negative, got %s (0 keeps published rows forever)", c.Retention))
	}
	if c.Retention > 0 && c.RetentionInterval < time.Second {
		errs = append(errs, fmt.Errorf("outbox.retention_interval must be at least 1s while outbox.retention is set, got %s", c.RetentionInterval))
	}
	switch c.Reader {
	case ReaderAuto, ReaderLogical, ReaderPoll:
	default:
		errs = append(errs, fmt.Errorf("outbox.reader must be auto, logical or poll, got %q", c.Reader))
	}
	if c.MaxEventBytes < 0 {
		errs = append(errs, fmt.Errorf("outbox.max_event_bytes must not be negative, got %d (0 takes what the brokers take)", c.MaxEventBytes))
	}
	if c.LockIdleTimeout != 0 && (c.LockIdleTimeout < time.Second || c.LockIdleTimeout%time.Millisecond != 0) {
		errs = append(errs, fmt.Errorf("outbox.lock_idle_timeout must be 0 or whole milliseconds of at least 1s, got %s", c.LockIdleTimeout))
	}
	if c.SlotWarnSize < 0 {
		errs = append(errs, fmt.Errorf("outbox.slot_warn_size must not be negative, got %d", c.SlotWarnSize))
	}
	return errors.Join(errs...)
}

// Schema is watermill-sql's PostgreSQL schema with the outbox's BYTEA
// payload column; every reader and writer of the outbox uses it.
func Schema() wsql.DefaultPostgreSQLSchema {
	return wsql.DefaultPostgreSQLSchema{GeneratePayloadType: func(string) string { return "BYTEA" }}
}

// Outbox writes events into a transaction.
type Outbox struct {
	routable func(routingKey string) error
	maxBytes int
	logger   watermill.LoggerAdapter
	wake     wakeup
}

// New returns an Outbox that refuses events whose routing key routable
// rejects, so an event nothing can deliver fails its request instead of
// stalling the relay.
func New(routable func(routingKey string) error, logger watermill.LoggerAdapter) *Outbox {
	return &Outbox{routable: routable, logger: logger}
}

// Limit makes o refuse, with an event.TooLargeError, events larger than
// maxBytes as event.Size counts them (0: any size), for the same reason:
// a broker would refuse them, and the relay could only park them. serve
// gives it Config.MaxEventBytes, or what the configured brokers take.
func (o *Outbox) Limit(maxBytes int) *Outbox {
	o.maxBytes = maxBytes
	return o
}

// Publish writes events as outbox rows inside tx. Nothing leaves before tx
// commits; if it rolls back, nothing ever leaves.
func (o *Outbox) Publish(ctx context.Context, tx pgx.Tx, events ...event.Event) error {
	if len(events) == 0 {
		return nil
	}
	pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: Schema()}, o.logger)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	msgs := make([]*message.Message, len(events))
	for i, e := range events {
		var key string
		if msgs[i], key, err = Prepare(ctx, e, o.routable); err != nil {
			return err
		}
		if o.maxBytes > 0 {
			if size := event.Size(msgs[i]); size > o.maxBytes {
				return fmt.Errorf("outbox: %w", &event.TooLargeError{Event: e.Name, Size: size, Limit: o.maxBytes, Setting: "outbox.max_event_bytes"})
			}
		}
		// A relay of the version before took the key from the metadata;
		// while one may still run during a rolling update, rows carry it.
		msgs[i].Metadata.Set(legacyRoutingKey, key)
	}
	if err := pub.Publish(Topic, msgs...); err != nil { // one INSERT for all
		return fmt.Errorf("outbox: write %d events: %w", len(events), err)
	}
	return nil
}

// Prepare stamps e with the correlation carried by ctx, checks it, and
// returns it as a Watermill message with its routing key beside it. Every
// outbox, the in-memory one included, goes through it. The key is not
// stored: it is the event's name without its version, which the row
// carries (event.MetaName).
func Prepare(ctx context.Context, e event.Event, routable func(string) error) (*message.Message, string, error) {
	e = event.Stamp(ctx, e)
	if err := e.Validate(); err != nil {
		return nil, "", fmt.Errorf("outbox: event %s: %w", e.Name, err)
	}
	key := e.RoutingKey()
	if err := routable(key); err != nil {
		return nil, "", fmt.Errorf("outbox: event %s: %w", e.Name, err)
	}
	msg, err := event.ToMessage(e)
	if err != nil {
		return nil, "", fmt.Errorf("outbox: %w", err)
	}
	tracing.Inject(ctx, msg.Metadata) // the relay continues the writer's trace
	msg.SetContext(ctx)
	return msg, key, nil
}

// legacyRoutingKey is where a relay of the version before reads a row's
// routing key. Rows still carry it, so that one running beside this
// version during a rolling update skips nothing; this relay derives the
// key from the event's name and drops it rather than send it on as a
// header.
const legacyRoutingKey = "routing_key"
