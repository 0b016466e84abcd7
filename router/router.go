// Package router builds the Watermill router that runs plugin handlers, and
// its middleware chain: the whole chain is in this file, in one order.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Config is what YAML sets for the router.
type Config struct {
	Retry RetryConfig `koanf:"retry"`
	// CloseTimeout bounds how long handlers may finish at shutdown.
	CloseTimeout time.Duration `koanf:"close_timeout"`
}

// RetryConfig sets the immediate, in-process retries of a failing handler.
// Keep them short: the handler's queue waits while they run.
type RetryConfig struct {
	MaxRetries      int           `koanf:"max_retries"`
	InitialInterval time.Duration `koanf:"initial_interval"`
	MaxInterval     time.Duration `koanf:"max_interval"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Retry.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("router.retry.max_retries must not be negative, got %d", c.Retry.MaxRetries))
	}
	if c.Retry.InitialInterval <= 0 || c.Retry.MaxInterval < c.Retry.InitialInterval {
		errs = append(errs, fmt.Errorf("router.retry: need 0 < initial_interval (%s) <= max_interval (%s)", c.Retry.InitialInterval, c.Retry.MaxInterval))
	}
	if c.CloseTimeout <= 0 {
		errs = append(errs, fmt.Errorf("router.close_timeout must be positive, got %s", c.CloseTimeout))
	}
	return errors.Join(errs...)
}

// Route is one plugin subscription to run. Its queue, "<plugin>.<subscription>",
// also names the handler in logs.
type Route struct {
	Queue  string
	Handle handlers.HandlerFunc
	// Consumers is how many messages of the queue are handled at once:
	// watermill-amqp hands one message at a time to each subscription,
	// whatever the prefetch, so parallelism takes more subscriptions.
	Consumers int
}

// New returns an empty router.
func New(cfg Config, logger watermill.LoggerAdapter) (*message.Router, error) {
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, logger)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return r, nil
}

// AddRoutes adds one consumer handler per route, consuming its queue from
// sub, each with the chain below (outermost first):
//
//  1. dead-letter: an error that is left when retries are spent publishes
//     the message, with the reason in its reason_poisoned header, to the
//     queue's DLQ through deadLetter, then acks it. It must sit outside
//     retry, or a message would be dead-lettered after one attempt. A
//     shutdown (context canceled) is not a failure: the message is nacked
//     and redelivered.
//  2. retry: short immediate retries with doubling waits.
//  3. dead-letter at once: a permanent error goes to the DLQ the same way,
//     and retry sees success. (Watermill's ShouldRetry would skip retries
//     too, but it spends a backoff step on every call, doubling each wait.)
//  4. recover: a panic becomes an error.
//  5. decode: the envelope is decoded (a bad one is a permanent error) and
//     its ids put in the handler's context.
func AddRoutes(r *message.Router, sub message.Subscriber, deadLetter message.Publisher, cfg Config, logger *slog.Logger, routes []Route) error {
	for _, rt := range routes {
		log := logger.With("queue", rt.Queue)
		spent, err := deadLetterOn(deadLetter, rt.Queue, log, func(err error) bool { return !errors.Is(err, context.Canceled) })
		if err != nil {
			return err
		}
		permanent, err := deadLetterOn(deadLetter, rt.Queue, log, event.IsPermanent)
		if err != nil {
			return err
		}
		retry := middleware.Retry{
			MaxRetries:          cfg.Retry.MaxRetries,
			InitialInterval:     cfg.Retry.InitialInterval,
			MaxInterval:         cfg.Retry.MaxInterval,
			Multiplier:          2,
			RandomizationFactor: 0.2,
			ResetContextOnRetry: true,
		}
		for i := range max(rt.Consumers, 1) {
			name := rt.Queue
			if i > 0 {
				name = fmt.Sprintf("%s#%d", rt.Queue, i+1)
			}
			h := r.AddConsumerHandler(name, rt.Queue, sub, decode(rt.Handle, log))
			h.AddMiddleware(spent, retry.Middleware, permanent, middleware.Recoverer)
		}
	}
	return nil
}

// deadLetterOn sends a message whose handler failed with an error matching
// filter to queue's DLQ, and logs it.
func deadLetterOn(pub message.Publisher, queue string, logger *slog.Logger, filter func(error) bool) (message.HandlerMiddleware, error) {
	poison, err := middleware.PoisonQueueWithFilter(pub, queue, filter)
	if err != nil {
		return nil, fmt.Errorf("router: %s: %w", queue, err)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return poison(func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil && filter(err) {
				logger.ErrorContext(msg.Context(), "event sent to dead-letter queue",
					"event_id", msg.UUID, "event_name", msg.Metadata.Get(event.MetaName),
					"correlation_id", msg.Metadata.Get(event.MetaCorrelationID),
					"permanent", event.IsPermanent(err), "reason", err.Error())
			}
			return out, err
		})
	}, nil
}

// decode turns a Watermill message into the event the plugin handles.
func decode(handle handlers.HandlerFunc, logger *slog.Logger) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		e, err := event.Decode(msg.Payload)
		if err != nil {
			return err
		}
		ctx := event.WithCausation(event.WithCorrelation(msg.Context(), e.CorrelationID), e.ID)
		if err := handle(ctx, e); err != nil {
			logger.WarnContext(ctx, "handler failed", "event_id", e.ID, "event_name", e.Name, "correlation_id", e.CorrelationID, "error", err)
			return err
		}
		logger.DebugContext(ctx, "event handled", "event_id", e.ID, "event_name", e.Name, "correlation_id", e.CorrelationID)
		return nil
	}
}
