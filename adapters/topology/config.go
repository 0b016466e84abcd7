package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/handlers/event"
)

// Config is the part of the topology that configuration sets; queues and
// bindings come from the plugins.
type Config struct {
	// Exchanges are durable topic exchanges; an event is published to the
	// first one whose events patterns match its routing key.
	Exchanges []ExchangeConfig `koanf:"exchanges"`
	// Failure is the platform's failure handling: retries, delays and dead
	// letters, for every queue that no exchange or subscription overrides.
	Failure FailureConfig `koanf:"failure"`
	// Subscriptions override the failure handling of single queues.
	Subscriptions []SubscriptionConfig `koanf:"subscriptions"`
	// Queues are declared for consumers outside moenda (an adapter
	// service): durable queues bound as listed, with no retry or
	// dead-letter tier of moenda's, since moenda does not consume them.
	Queues []QueueConfig `koanf:"queues"`
	// Unrouted names the alternate exchange and queue that keep messages no
	// binding matched ("{exchange}" is replaced); empty turns it off.
	Unrouted string `koanf:"unrouted"`
	// QueueType is the type of the queues moenda consumes and of their
	// retry, dead-letter and unrouted queues, unless an exchange or a
	// subscription says otherwise: classic (one copy, on one node) or
	// quorum (replicated; see the README). Empty is classic.
	QueueType string `koanf:"queue_type"`
}

// DefaultConfig is seed 000's schedule (after two immediate retries: 1 s,
// 5 s and 25 s through the broker), a dead-letter queue per queue on
// moenda.dlx, and an alternate exchange keeping what no binding matched.
func DefaultConfig() Config {
	retries := 2
	return Config{
		Failure: FailureConfig{
			ImmediateRetries:  &retries,
			ImmediateInterval: 100 * time.Millisecond,
			Delays:            []time.Duration{time.Second, 5 * time.Second, 25 * time.Second},
			DeadLetter:        DeadLetterConfig{Exchange: "moenda.dlx", Queue: "{queue}.dlq"},
		},
		Unrouted:  "{exchange}.unrouted",
		QueueType: Classic,
	}
}

// QueueConfig is a queue that a service outside moenda consumes.
type QueueConfig struct {
	Name     string          `koanf:"name"`
	Bindings []BindingConfig `koanf:"bindings"`
}

// BindingConfig binds a queue to an exchange that carries events.
type BindingConfig struct {
	Exchange string `koanf:"exchange"`
	Key      string `koanf:"key"`
}

// ExchangeConfig is one topic exchange, the events published to it, and
// the failure handling of the queues bound on it.
type ExchangeConfig struct {
	Name    string        `koanf:"name"`
	Events  []string      `koanf:"events"`
	Failure FailureConfig `koanf:"failure"`
	// Envelope is the format published to the exchange: moenda (the
	// default) or flat, the flat JSON of seed 004's Spring services
	// (event.PublishedEnvelopes; seed004 is its former name). The queues
	// bound on it read that format unless their subscription says
	// otherwise.
	Envelope event.Format `koanf:"envelope"`
	// QueueType is the type of the queues bound on the exchange, unless
	// their subscription says otherwise, and of its unrouted queue; empty
	// inherits topology.queue_type.
	QueueType string `koanf:"queue_type"`
}

// Validate reports every problem at once, each with its config path.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, x := range c.Exchanges {
		path := fmt.Sprintf("topology.exchanges[%d]", i)
		errs = append(errs, unique(seen, path+".name", "exchange ", x.Name))
		for j, p := range x.Events {
			if err := ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("%s.events[%d]: %w", path, j, err))
			}
		}
		errs = append(errs, x.Failure.validate(path+".failure", false))
		errs = append(errs, oneOf(path+".envelope", string(x.Envelope), event.PublishedEnvelopes))
		errs = append(errs, oneOf(path+".queue_type", x.QueueType, QueueTypes))
	}
	errs = append(errs, c.Failure.validate("topology.failure", true))
	errs = append(errs, oneOf("topology.queue_type", c.QueueType, QueueTypes))
	queues := map[string]bool{}
	for i, s := range c.Subscriptions {
		path := fmt.Sprintf("topology.subscriptions[%d]", i)
		errs = append(errs, unique(queues, path+".queue", "", s.Queue))
		errs = append(errs, s.Failure.validate(path+".failure", false))
		errs = append(errs, oneOf(path+".envelope", string(s.Envelope), event.Envelopes))
		errs = append(errs, oneOf(path+".queue_type", s.QueueType, QueueTypes))
	}
	for i, q := range c.Queues {
		path := fmt.Sprintf("topology.queues[%d]", i)
		errs = append(errs, unique(queues, path+".name", "", q.Name))
		if len(q.Bindings) == 0 {
			errs = append(errs, fmt.Errorf("%s.bindings is empty: the queue would receive nothing", path))
		}
		for j, b := range q.Bindings {
			if b.Exchange == "" {
				errs = append(errs, fmt.Errorf("%s.bindings[%d].exchange is empty", path, j))
			}
			if err := ValidatePattern(b.Key); err != nil {
				errs = append(errs, fmt.Errorf("%s.bindings[%d].key: %w", path, j, err))
			}
		}
	}
	if c.Unrouted != "" && !strings.Contains(c.Unrouted, "{exchange}") {
		errs = append(errs, fmt.Errorf("topology.unrouted %q must contain {exchange}, e.g. {exchange}.unrouted", c.Unrouted))
	}
	return errors.Join(errs...)
}

// oneOf accepts value at path if it is one of valid, or empty, which
// inherits.
func oneOf(path, value string, valid []string) error {
	if value != "" && !slices.Contains(valid, value) {
		return fmt.Errorf("%s %q must be one of %s", path, value, strings.Join(valid, ", "))
	}
	return nil
}

// unique rejects a name at path that is empty or already in seen (a
// "kind" such as "exchange " prefixes it in the message), and adds it to
// seen.
func unique(seen map[string]bool, path, kind, name string) error {
	defer func() { seen[name] = true }()
	if name == "" {
		return fmt.Errorf("%s is empty", path)
	}
	if seen[name] {
		return fmt.Errorf("%s: %s%q is listed twice", path, kind, name)
	}
	return nil
}

// Queue types (topology.queue_type).
const (
	// Classic queues keep one copy of each message, on one node: no
	// arguments are added for them.
	Classic = "classic"
	// Quorum queues replicate each message on several nodes, confirming
	// it once a majority holds it (one node runs them too), and
	// dead-letter at least once.
	Quorum = "quorum"
)

// QueueTypes lists the valid values of queue_type.
var QueueTypes = []string{Classic, Quorum}
