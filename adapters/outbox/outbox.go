// Package outbox is the transactional outbox: events are written as rows by
// the watermill-sql publisher bound to the caller's pgx transaction, so they
// commit or roll back with the business rows, and Watermill's forwarder,
// with its own consumer group on the outbox topic, publishes committed rows
// to the broker. Rows are never deleted by the forwarder: the table is also
// the audit log of what was published.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// Topic is the watermill-sql topic of the outbox: its rows live in
// watermill_outbox and the forwarder's offsets in watermill_offsets_outbox,
// both created by the migrations.
const Topic = "outbox"

// Config is what YAML sets for the forwarder.
type Config struct {
	// ConsumerGroup names the forwarder's position in the outbox.
	ConsumerGroup string `koanf:"consumer_group"`
	// PollInterval is how long the forwarder waits before looking again
	// when the outbox is empty.
	PollInterval time.Duration `koanf:"poll_interval"`
	// RetryInterval is how long it waits before trying a row again after
	// the broker refused it or a query failed.
	RetryInterval time.Duration `koanf:"retry_interval"`
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
	return errors.Join(errs...)
}

// Schema is watermill-sql's PostgreSQL schema with the outbox's BYTEA
// payload column; every reader and writer of the outbox uses it.
func Schema() wsql.DefaultPostgreSQLSchema {
	return wsql.DefaultPostgreSQLSchema{GeneratePayloadType: func(string) string { return "BYTEA" }}
}

// SubscriberConfig is how the forwarder reads the outbox with watermill-sql.
func (c Config) SubscriberConfig() wsql.SubscriberConfig {
	return wsql.SubscriberConfig{
		ConsumerGroup:  c.ConsumerGroup,
		PollInterval:   c.PollInterval,
		ResendInterval: c.RetryInterval,
		RetryInterval:  c.RetryInterval,
		SchemaAdapter:  Schema(),
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
	}
}

// Outbox writes events into a transaction.
type Outbox struct {
	routable func(routingKey string) error
	logger   watermill.LoggerAdapter
}

// New returns an Outbox that refuses events whose routing key routable
// rejects, so an event nothing can deliver fails its request instead of
// stalling the forwarder.
func New(routable func(routingKey string) error, logger watermill.LoggerAdapter) *Outbox {
	return &Outbox{routable: routable, logger: logger}
}

// Publish writes events as outbox rows inside tx. Nothing leaves before tx
// commits; if it rolls back, nothing ever leaves.
func (o *Outbox) Publish(ctx context.Context, tx pgx.Tx, events ...event.Event) error {
	sqlPub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: Schema()}, o.logger)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: Topic})
	for _, e := range events {
		msg, key, err := Prepare(ctx, e, o.routable)
		if err != nil {
			return err
		}
		if err := pub.Publish(key, msg); err != nil {
			return fmt.Errorf("outbox: write event %s: %w", e.ID, err)
		}
	}
	return nil
}

// Prepare stamps e with the correlation carried by ctx, checks it, and
// returns it as a Watermill message with its routing key. Every outbox, the
// in-memory one included, goes through it.
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
	msg.SetContext(ctx)
	return msg, key, nil
}

// NewForwarder adds the forwarder to router: it reads the outbox as
// consumer group cfg.ConsumerGroup and publishes each row to out with the
// row's routing key as topic. A row is marked forwarded only after out
// confirms it; a crash in between publishes it again (consumers deduplicate
// by event id).
//
// It runs, and its subscriber is closed, with the router.
func NewForwarder(pool *pgxpool.Pool, out message.Publisher, router *message.Router, cfg Config, logger watermill.LoggerAdapter) error {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), cfg.SubscriberConfig(), logger)
	if err != nil {
		return fmt.Errorf("outbox: subscriber: %w", err)
	}
	_, err = forwarder.NewForwarder(sub, out, logger, forwarder.Config{
		ForwarderTopic: Topic,
		HandlerName:    "outbox_forwarder",
		Router:         router,
		// A row that is not a forwarder envelope would otherwise block the
		// outbox for ever; it stays in the table for inspection.
		AckWhenCannotUnwrap: true,
		Middlewares:         []message.HandlerMiddleware{skipUnroutable(logger)},
	})
	if err != nil {
		return errors.Join(fmt.Errorf("outbox: forwarder: %w", err), sub.Close())
	}
	return nil
}

// skipUnroutable moves past a row whose routing key no exchange carries any
// more (the outbox checks routes when it writes, so only a configuration
// change gets here). Retrying it would stall every row behind it for ever;
// it stays in watermill_outbox, and the log line says which it is.
func skipUnroutable(logger watermill.LoggerAdapter) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if errors.Is(err, topology.ErrUnroutable) {
				logger.Error("Outbox row skipped: no exchange carries its routing key; it stays in watermill_outbox", err, watermill.LogFields{"outbox_uuid": msg.UUID})
				return out, nil
			}
			return out, err
		}
	}
}
