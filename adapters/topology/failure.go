package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/handlers/event"
)

// FailureConfig says what happens to a message whose handler fails: how
// often it is retried at once in the consumer, after which delays it is
// handed back by the broker, and which dead-letter queue takes it when
// every attempt has failed. It is set once for the platform
// (topology.failure), and may be overridden for the queues bound on one
// exchange (topology.exchanges[].failure) and for one queue
// (topology.subscriptions[].failure). A key left out inherits.
type FailureConfig struct {
	// ImmediateRetries are retries in the consumer, before the message
	// leaves it; keep them few and short, the message holds its consumer
	// meanwhile.
	ImmediateRetries *int `koanf:"immediate_retries"`
	// ImmediateInterval is the wait before the first immediate retry;
	// each later wait doubles.
	ImmediateInterval time.Duration `koanf:"immediate_interval"`
	// Delays are the waits of the redeliveries through the broker, one per
	// attempt after the first: [1s, 5s, 25s] is four attempts. A waiting
	// message sits in a retry queue, so it blocks nothing. [] turns the
	// delayed tier off.
	Delays []time.Duration `koanf:"delays"`
	// DeadLetter names where messages go when every attempt failed.
	DeadLetter DeadLetterConfig `koanf:"dead_letter"`
}

// DeadLetterConfig names the dead-letter exchange and queue. A queue name
// with "{queue}" gives each queue its own dead-letter queue (the exchange is
// direct, bound with the queue's name); a name without it is one central
// queue that the exchange (topic) binds with "#".
type DeadLetterConfig struct {
	Exchange string `koanf:"exchange"`
	Queue    string `koanf:"queue"`
}

// SubscriptionConfig overrides the failure handling and the queue type
// of one queue, and says which envelope its publishers write.
type SubscriptionConfig struct {
	Queue   string        `koanf:"queue"`
	Failure FailureConfig `koanf:"failure"`
	// Envelope is the format of the queue's messages: moenda's,
	// tipo-versao (the envelope any AMQP client of seed 001 publishes) or
	// flat (event.Envelopes; seed001 and seed004 are their former names).
	// Unset, it is the format of the exchanges the queue is bound on,
	// moenda's by default.
	Envelope event.Format `koanf:"envelope"`
	// QueueType is the type of the queue and of its retry and dead-letter
	// queues. Unset, it is that of the exchanges the queue is bound on,
	// else topology.queue_type.
	QueueType string `koanf:"queue_type"`
}

// Policy is the failure handling of one queue, resolved.
type Policy struct {
	ImmediateRetries   int
	ImmediateInterval  time.Duration
	Delays             []time.Duration
	DeadLetterExchange string
	DeadLetterQueue    string
	// Central is true when DeadLetterQueue takes the dead letters of
	// every queue of its exchange.
	Central bool
}

// Attempts is how many deliveries a message gets before it is dead-lettered.
func (p Policy) Attempts() int { return 1 + len(p.Delays) }

// over returns c with every key set in o replaced.
func (c FailureConfig) over(o FailureConfig) FailureConfig {
	if o.ImmediateRetries != nil {
		c.ImmediateRetries = o.ImmediateRetries
	}
	if o.ImmediateInterval != 0 {
		c.ImmediateInterval = o.ImmediateInterval
	}
	if o.Delays != nil {
		c.Delays = o.Delays
	}
	if o.DeadLetter.Exchange != "" {
		c.DeadLetter.Exchange = o.DeadLetter.Exchange
	}
	if o.DeadLetter.Queue != "" {
		c.DeadLetter.Queue = o.DeadLetter.Queue
	}
	return c
}

// validate reports the problems of the keys set in c; complete says that
// c is the platform default, where every key must be set.
func (c FailureConfig) validate(path string, complete bool) error {
	var errs []error
	if c.ImmediateRetries != nil && (*c.ImmediateRetries < 0 || *c.ImmediateRetries > 10) {
		errs = append(errs, fmt.Errorf("%s.immediate_retries must be between 0 and 10, got %d", path, *c.ImmediateRetries))
	}
	if c.ImmediateInterval < 0 || c.ImmediateInterval > 10*time.Second {
		errs = append(errs, fmt.Errorf("%s.immediate_interval must be between 1ms and 10s (the message holds its consumer while it waits; use delays for longer waits), got %s", path, c.ImmediateInterval))
	}
	for i, d := range c.Delays {
		if d < time.Millisecond || d > 7*24*time.Hour {
			errs = append(errs, fmt.Errorf("%s.delays[%d] must be between 1ms and 168h, got %s", path, i, d))
		}
	}
	if c.DeadLetter.Queue != "" && strings.Count(c.DeadLetter.Queue, "{queue}") > 1 {
		errs = append(errs, fmt.Errorf("%s.dead_letter.queue %q may contain {queue} once", path, c.DeadLetter.Queue))
	}
	if complete {
		if c.ImmediateRetries == nil {
			errs = append(errs, fmt.Errorf("%s.immediate_retries is not set", path))
		} else if *c.ImmediateRetries > 0 && c.ImmediateInterval == 0 {
			errs = append(errs, fmt.Errorf("%s.immediate_interval must be set when immediate_retries is above 0", path))
		}
		if c.Delays == nil {
			errs = append(errs, fmt.Errorf("%s.delays is not set (use [] for no delayed retries)", path))
		}
		if c.DeadLetter.Exchange == "" {
			errs = append(errs, fmt.Errorf("%s.dead_letter.exchange is empty", path))
		}
		if c.DeadLetter.Queue == "" {
			errs = append(errs, fmt.Errorf("%s.dead_letter.queue is empty; use {queue}.dlq for one per queue, or a name for one central queue", path))
		}
	}
	return errors.Join(errs...)
}

// policy resolves a complete FailureConfig.
func (c FailureConfig) policy(queue string) Policy {
	p := Policy{
		ImmediateInterval:  c.ImmediateInterval,
		Delays:             slices.Clone(c.Delays),
		DeadLetterExchange: c.DeadLetter.Exchange,
		DeadLetterQueue:    strings.ReplaceAll(c.DeadLetter.Queue, "{queue}", queue),
		Central:            !strings.Contains(c.DeadLetter.Queue, "{queue}"),
	}
	if c.ImmediateRetries != nil {
		p.ImmediateRetries = *c.ImmediateRetries
	}
	return p
}

// RetryQueue names the queue where messages of queue wait delay before the
// broker hands them back: "<queue>.retry.<delay>", like
// "notificacoes.tarefas-concluidas.retry.5s".
func RetryQueue(queue string, delay time.Duration) string {
	return queue + ".retry." + shortDuration(delay)
}

// RedriveQueue names where a broker that has no queue of its own per
// consumer (Kafka: a topic is read by every group) holds the copies a
// re-drive sends back to queue alone: queue's consumer reads it at once.
func RedriveQueue(queue string) string { return queue + ".redrive" }

// shortDuration writes 1500ms, 5s, 2m or 1h rather than Go's 1m0s.
func shortDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	default:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
}
