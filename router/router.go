// Package router builds the Watermill router that runs plugin handlers
// behind moenda's middleware chain. The chain is assembled in chain.go, in
// one documented order; each middleware lives in a file of its own.
package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
)

// Config is what YAML sets for the router. The retry schedules and dead
// letters are per queue, in topology.failure.
type Config struct {
	// CloseTimeout bounds how long handlers may finish at shutdown. The
	// consumers stop taking deliveries at once; the messages in hand keep
	// their contexts for nine tenths of it (the subscribers see to that,
	// since Watermill closes them before it waits for the handlers), and
	// the last tenth lets a handler cancelled then send its message back
	// to its queue.
	CloseTimeout time.Duration `koanf:"close_timeout"`
	// MaxMessageBytes bounds the body of a consumed message: a larger one
	// goes to the dead-letter queue (too_large) without being decoded.
	MaxMessageBytes int `koanf:"max_message_bytes"`
}

// DefaultConfig gives handlers 30 s to finish at shutdown, and takes
// messages of up to 4 MiB: four times what the API accepts in a body.
func DefaultConfig() Config { return Config{CloseTimeout: 30 * time.Second, MaxMessageBytes: 4 << 20} }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.CloseTimeout <= 0 {
		errs = append(errs, fmt.Errorf("router.close_timeout must be positive, got %s", c.CloseTimeout))
	}
	if c.MaxMessageBytes < 1024 {
		errs = append(errs, fmt.Errorf("router.max_message_bytes must be at least 1024, got %d", c.MaxMessageBytes))
	}
	return errors.Join(errs...)
}

// New returns an empty router.
func New(cfg Config, logger watermill.LoggerAdapter) (*message.Router, error) {
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, logger)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return r, nil
}

// Route is one plugin subscription to run.
type Route struct {
	// Queue is consumed; it also keys the statistics and, unless Consumer
	// is set, the inbox.
	Queue string
	// Consumer keys the inbox when set. A replay reads a queue again under
	// a key of its own, so the live reader's claims do not skip its events.
	Consumer string
	// Handler names the plugin's handler in logs and dead letters.
	Handler string
	// Handles are the versioned event names the handler understands; empty
	// is every event the queue receives (handlers.Subscription.Handles).
	Handles []string
	// Envelope is the format of the queue's messages; empty is moenda's
	// (event.Envelopes).
	Envelope string
	// Policy is the queue's failure handling.
	Policy topology.Policy
	Handle handlers.HandlerFunc
	// Prepare, when set, runs before each attempt's unit of work opens
	// (handlers.PrepareFunc).
	Prepare handlers.PrepareFunc
}

// consumer is the route's inbox key.
func (rt Route) consumer() string {
	if rt.Consumer != "" {
		return rt.Consumer
	}
	return rt.Queue
}

// Inbox runs a handler once per consumer and event (handlers' unit of
// work with the inbox claim); ran is false for an event processed before.
type Inbox interface {
	Once(ctx context.Context, consumer, key string, fn func(ctx context.Context) error) (ran bool, err error)
}

// Sink takes the copies the chain makes of a failed message. Each call
// returns once the broker holds the copy, so the failed delivery may be
// acknowledged without losing it.
type Sink interface {
	// Delay hands msg to queue's retry tier; the broker delivers it to
	// queue again after delay.
	Delay(ctx context.Context, queue string, delay time.Duration, msg *message.Message) error
	// DeadLetter publishes msg to queue's dead-letter queue.
	DeadLetter(ctx context.Context, queue string, msg *message.Message) error
}

// stopping reports whether a message's own context has ended: the process
// is stopping, and the message goes back to its queue untouched. A
// handler's error that merely wraps context.Canceled while that context
// lives is a failure like any other.
func stopping(ctx context.Context) bool { return ctx.Err() != nil }
