// Package topology describes the broker layout moenda needs: exchanges that
// carry events, one durable named queue per subscription, their bindings,
// and where failed and unroutable messages go. It is derived from
// configuration and the plugin registry, printed by `moenda topology print`,
// declared by the AMQP adapter and emulated by the memory broker.
package topology

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Config is the part of the topology that configuration sets; queues and
// bindings come from the plugins.
type Config struct {
	// Exchanges are durable topic exchanges; an event is published to the
	// first one whose events patterns match its routing key.
	Exchanges []ExchangeConfig `koanf:"exchanges"`
	// DeadLetter names where messages that failed for good are kept.
	DeadLetter DeadLetterConfig `koanf:"dead_letter"`
	// Unrouted names the alternate exchange and queue that keep messages no
	// binding matched ("{exchange}" is replaced); empty turns it off.
	Unrouted string `koanf:"unrouted"`
}

// ExchangeConfig is one topic exchange and the events published to it.
type ExchangeConfig struct {
	Name   string   `koanf:"name"`
	Events []string `koanf:"events"`
}

// DeadLetterConfig names the dead-letter exchange (direct) and the per-queue
// dead-letter queue, where "{queue}" is replaced by the queue's name.
type DeadLetterConfig struct {
	Exchange string `koanf:"exchange"`
	Queue    string `koanf:"queue"`
}

// Validate reports every problem at once, each with its config path.
func (c Config) Validate() error {
	var errs []error
	if len(c.Exchanges) == 0 {
		errs = append(errs, errors.New("topology.exchanges: at least one exchange is required"))
	}
	seen := map[string]bool{}
	for i, x := range c.Exchanges {
		path := fmt.Sprintf("topology.exchanges[%d]", i)
		if x.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name is empty", path))
		} else if seen[x.Name] {
			errs = append(errs, fmt.Errorf("%s.name: exchange %q is listed twice", path, x.Name))
		}
		seen[x.Name] = true
		if len(x.Events) == 0 {
			errs = append(errs, fmt.Errorf("%s.events: list the routing-key patterns of the events published to %q", path, x.Name))
		}
		for j, p := range x.Events {
			if err := ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("%s.events[%d]: %w", path, j, err))
			}
		}
	}
	if c.DeadLetter.Exchange == "" {
		errs = append(errs, errors.New("topology.dead_letter.exchange is empty"))
	}
	if !strings.Contains(c.DeadLetter.Queue, "{queue}") {
		errs = append(errs, fmt.Errorf("topology.dead_letter.queue %q must contain {queue}, e.g. {queue}.dlq", c.DeadLetter.Queue))
	}
	if c.Unrouted != "" && !strings.Contains(c.Unrouted, "{exchange}") {
		errs = append(errs, fmt.Errorf("topology.unrouted %q must contain {exchange}, e.g. {exchange}.unrouted", c.Unrouted))
	}
	return errors.Join(errs...)
}

// Subscription is one consuming queue and the routing-key patterns it binds.
type Subscription struct {
	Queue    string
	Patterns []string
}

// ErrUnroutable is returned for a routing key no exchange carries.
var ErrUnroutable = errors.New("unroutable event")

// Exchange kinds.
const (
	Topic  = "topic"
	Direct = "direct"
	Fanout = "fanout"
)

// AMQP argument names used in declarations.
const (
	ArgAlternateExchange    = "alternate-exchange"
	ArgDeadLetterExchange   = "x-dead-letter-exchange"
	ArgDeadLetterRoutingKey = "x-dead-letter-routing-key"
)

// Exchange is a durable exchange to declare.
type Exchange struct {
	Name string
	Kind string
	Args map[string]string
}

// Queue is a durable, non-exclusive named queue to declare.
type Queue struct {
	Name string
	Args map[string]string
}

// Binding routes messages from Exchange whose key matches Key to Queue.
type Binding struct {
	Exchange string
	Queue    string
	Key      string
}

// Topology is the whole declared layout.
type Topology struct {
	Exchanges []Exchange
	Queues    []Queue
	Bindings  []Binding

	routes     []ExchangeConfig
	deadLetter DeadLetterConfig
}

// Build derives the layout from cfg and the subscriptions. Every
// subscription pattern is bound on each exchange that can carry a matching
// event; a pattern no exchange can carry is an error, since it would never
// receive anything.
func Build(cfg Config, subs []Subscription) (*Topology, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Topology{routes: cfg.Exchanges, deadLetter: cfg.DeadLetter}
	var errs []error
	for _, x := range cfg.Exchanges {
		ex := Exchange{Name: x.Name, Kind: Topic}
		if cfg.Unrouted != "" {
			alt := strings.ReplaceAll(cfg.Unrouted, "{exchange}", x.Name)
			ex.Args = map[string]string{ArgAlternateExchange: alt}
			t.Exchanges = append(t.Exchanges, Exchange{Name: alt, Kind: Fanout})
			t.Queues = append(t.Queues, Queue{Name: alt})
			t.Bindings = append(t.Bindings, Binding{Exchange: alt, Queue: alt})
		}
		t.Exchanges = append(t.Exchanges, ex)
	}
	if len(subs) > 0 {
		t.Exchanges = append(t.Exchanges, Exchange{Name: cfg.DeadLetter.Exchange, Kind: Direct})
	}
	queues := map[string]bool{}
	for _, s := range subs {
		if queues[s.Queue] {
			errs = append(errs, fmt.Errorf("queue %q is declared by two subscriptions", s.Queue))
			continue
		}
		queues[s.Queue] = true
		dlq := t.DeadLetterQueue(s.Queue)
		t.Queues = append(t.Queues,
			Queue{Name: s.Queue, Args: map[string]string{
				ArgDeadLetterExchange:   cfg.DeadLetter.Exchange,
				ArgDeadLetterRoutingKey: s.Queue,
			}},
			Queue{Name: dlq},
		)
		t.Bindings = append(t.Bindings, Binding{Exchange: cfg.DeadLetter.Exchange, Queue: dlq, Key: s.Queue})
		for _, p := range s.Patterns {
			if err := ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("queue %q: %w", s.Queue, err))
				continue
			}
			bound := false
			for _, x := range cfg.Exchanges {
				if slices.ContainsFunc(x.Events, func(e string) bool { return Overlap(e, p) }) {
					t.Bindings = append(t.Bindings, Binding{Exchange: x.Name, Queue: s.Queue, Key: p})
					bound = true
				}
			}
			if !bound {
				errs = append(errs, fmt.Errorf("queue %q binds %q, but no exchange in topology.exchanges carries such events; add the pattern to an exchange's events", s.Queue, p))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(t.Exchanges, func(i, j int) bool { return t.Exchanges[i].Name < t.Exchanges[j].Name })
	sort.Slice(t.Queues, func(i, j int) bool { return t.Queues[i].Name < t.Queues[j].Name })
	sort.Slice(t.Bindings, func(i, j int) bool {
		a, b := t.Bindings[i], t.Bindings[j]
		return a.Exchange+"\x00"+a.Queue+"\x00"+a.Key < b.Exchange+"\x00"+b.Queue+"\x00"+b.Key
	})
	return t, nil
}

// ExchangeFor returns the exchange an event with this routing key is
// published to, or an error that says how to route it.
func (t *Topology) ExchangeFor(routingKey string) (string, error) {
	for _, x := range t.routes {
		for _, p := range x.Events {
			if Match(p, routingKey) {
				return x.Name, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no exchange carries events with routing key %q; add a matching pattern to topology.exchanges[].events", ErrUnroutable, routingKey)
}

// DeadLetterExchange is the direct exchange failed messages are sent to,
// with their queue's name as the routing key.
func (t *Topology) DeadLetterExchange() string { return t.deadLetter.Exchange }

// DeadLetterQueue is the name of queue's dead-letter queue.
func (t *Topology) DeadLetterQueue(queue string) string {
	return strings.ReplaceAll(t.deadLetter.Queue, "{queue}", queue)
}

// QueuesFor returns the queues a message published to exchange with key
// reaches, as the broker would route it.
func (t *Topology) QueuesFor(exchange, key string) []string {
	var out []string
	for _, b := range t.Bindings {
		if b.Exchange == exchange && (Match(b.Key, key) || t.kind(exchange) == Fanout) && !slices.Contains(out, b.Queue) {
			out = append(out, b.Queue)
		}
	}
	return out
}

// AlternateOf returns the alternate exchange of exchange, or "".
func (t *Topology) AlternateOf(exchange string) string {
	for _, x := range t.Exchanges {
		if x.Name == exchange {
			return x.Args[ArgAlternateExchange]
		}
	}
	return ""
}

func (t *Topology) kind(exchange string) string {
	for _, x := range t.Exchanges {
		if x.Name == exchange {
			return x.Kind
		}
	}
	return ""
}

// Print writes the layout, one declaration a line, in a stable order.
func (t *Topology) Print(w io.Writer) error {
	var b strings.Builder
	for _, x := range t.Exchanges {
		fmt.Fprintf(&b, "exchange %s type=%s durable%s\n", x.Name, x.Kind, args(x.Args))
	}
	for _, q := range t.Queues {
		fmt.Fprintf(&b, "queue %s durable%s\n", q.Name, args(q.Args))
	}
	for _, bd := range t.Bindings {
		fmt.Fprintf(&b, "binding %s -> %s key=%q\n", bd.Exchange, bd.Queue, bd.Key)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func args(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, m[k])
	}
	return b.String()
}
