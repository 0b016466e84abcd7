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

// Route is one plugin subscription to run.
type Route struct {
	Queue   string // the durable queue consumed
	Handler string // "<plugin>.<subscription>", for logs
	Handle  handlers.HandlerFunc
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
//  1. dead-letter: an error that reaches it publishes the message, with the
//     reason, to the queue's DLQ through deadLetter, then acks. It must sit
//     outside retry, or a message would be dead-lettered after one attempt.
//     A shutdown (context canceled) is not a failure: the message is nacked
//     and redelivered.
//  2. log: the error that ends in the DLQ, with event and correlation ids.
//  3. retry: short immediate retries, skipped for permanent errors.
//  4. recover: a panic becomes an error.
//  5. decode: the envelope is decoded (a bad one is a permanent error) and
//     its ids put in the handler's context and logger.
func AddRoutes(r *message.Router, sub message.Subscriber, deadLetter message.Publisher, cfg Config, logger *slog.Logger, routes []Route) error {
	for _, rt := range routes {
		dlq, err := middleware.PoisonQueueWithFilter(deadLetter, rt.Queue, func(err error) bool {
			return !errors.Is(err, context.Canceled)
		})
		if err != nil {
			return fmt.Errorf("router: %s: %w", rt.Handler, err)
		}
		log := logger.With("handler", rt.Handler, "queue", rt.Queue)
		retry := middleware.Retry{
			MaxRetries:          cfg.Retry.MaxRetries,
			InitialInterval:     cfg.Retry.InitialInterval,
			MaxInterval:         cfg.Retry.MaxInterval,
			Multiplier:          2,
			RandomizationFactor: 0.2,
			ResetContextOnRetry: true,
			ShouldRetry:         func(p middleware.RetryParams) bool { return !event.IsPermanent(p.Err) },
		}
		h := r.AddConsumerHandler(rt.Handler, rt.Queue, sub, decode(rt.Handle, log))
		h.AddMiddleware(dlq, logFailure(log), retry.Middleware, middleware.Recoverer)
	}
	return nil
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

// logFailure logs the error that sends a message to its dead-letter queue.
func logFailure(logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil && !errors.Is(err, context.Canceled) {
				logger.ErrorContext(msg.Context(), "event sent to dead-letter queue",
					"event_id", msg.UUID, "event_name", msg.Metadata.Get(event.MetaName),
					"correlation_id", msg.Metadata.Get(event.MetaCorrelationID),
					"permanent", event.IsPermanent(err), "reason", err.Error())
			}
			return out, err
		}
	}
}
