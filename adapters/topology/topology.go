// Package topology describes the broker layout moenda needs: exchanges that
// carry events, one durable named queue per subscription, their bindings,
// and where failed and unroutable messages go. It is derived from
// configuration and the plugin registry, printed by `moenda topology print`,
// declared by the AMQP adapter and emulated by the memory broker.
package topology

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	// default) or seed004, the flat JSON of seed 004's Spring services
	// (event.PublishedEnvelopes). The queues bound on it read that format
	// unless their subscription says otherwise.
	Envelope string `koanf:"envelope"`
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
		if x.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name is empty", path))
		} else if seen[x.Name] {
			errs = append(errs, fmt.Errorf("%s.name: exchange %q is listed twice", path, x.Name))
		}
		seen[x.Name] = true
		for j, p := range x.Events {
			if err := ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("%s.events[%d]: %w", path, j, err))
			}
		}
		errs = append(errs, x.Failure.validate(path+".failure", false))
		if x.Envelope != "" && !slices.Contains(event.PublishedEnvelopes, x.Envelope) {
			errs = append(errs, fmt.Errorf("%s.envelope %q must be one of %s", path, x.Envelope, strings.Join(event.PublishedEnvelopes, ", ")))
		}
		errs = append(errs, validateQueueType(path+".queue_type", x.QueueType))
	}
	errs = append(errs, c.Failure.validate("topology.failure", true))
	errs = append(errs, validateQueueType("topology.queue_type", c.QueueType))
	queues := map[string]bool{}
	for i, s := range c.Subscriptions {
		path := fmt.Sprintf("topology.subscriptions[%d]", i)
		if s.Queue == "" {
			errs = append(errs, fmt.Errorf("%s.queue is empty", path))
		} else if queues[s.Queue] {
			errs = append(errs, fmt.Errorf("%s.queue: %q is listed twice", path, s.Queue))
		}
		queues[s.Queue] = true
		errs = append(errs, s.Failure.validate(path+".failure", false))
		if s.Envelope != "" && !slices.Contains(event.Envelopes, s.Envelope) {
			errs = append(errs, fmt.Errorf("%s.envelope %q must be one of %s", path, s.Envelope, strings.Join(event.Envelopes, ", ")))
		}
		errs = append(errs, validateQueueType(path+".queue_type", s.QueueType))
	}
	for i, q := range c.Queues {
		path := fmt.Sprintf("topology.queues[%d]", i)
		if q.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name is empty", path))
		} else if queues[q.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q is listed twice", path, q.Name))
		}
		queues[q.Name] = true
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

// validateQueueType accepts the queue types and empty, which inherits.
func validateQueueType(path, typ string) error {
	if typ != "" && !slices.Contains(QueueTypes, typ) {
		return fmt.Errorf("%s %q must be one of %s", path, typ, strings.Join(QueueTypes, ", "))
	}
	return nil
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

// AMQP argument names used in declarations.
const (
	ArgAlternateExchange    = "alternate-exchange"
	ArgDeadLetterExchange   = "x-dead-letter-exchange"
	ArgDeadLetterRoutingKey = "x-dead-letter-routing-key"
	ArgMessageTTL           = "x-message-ttl"
	ArgQueueType            = "x-queue-type"
	ArgDeadLetterStrategy   = "x-dead-letter-strategy"
	ArgOverflow             = "x-overflow"
	ArgDeliveryLimit        = "x-delivery-limit"
)

// Values of the quorum queues' arguments. RabbitMQ dead-letters at least
// once only from a queue that rejects publishes when full; with no length
// limit set, reject-publish never rejects anything.
const (
	atLeastOnce   = "at-least-once"
	rejectPublish = "reject-publish"
)

// DeliveryLimit is x-delivery-limit of a quorum queue that moenda
// consumes: once a message has gone back to its queue unacknowledged more
// often than this, RabbitMQ dead-letters it (x-death reason
// delivery_limit) to the queue's dead-letter queue. moenda's own retries
// ack the delivery and publish a copy, so the count grows only when a
// message goes back unacknowledged: a crash or a lost connection while it
// is in hand, a shutdown, a copy the broker did not confirm, and an
// outage of moenda's PostgreSQL (RabbitMQ 3.10 counts every return: a nack
// or reject with requeue, or a closed channel). It is a safety net for a
// message that kills its consumer, set well above RabbitMQ 4's default of
// 20. An outage counts once per pause of its queue, and the pause doubles
// up to router.UnavailablePauseMax, so an outage of many minutes sends
// nothing to the dead-letter queue (README, "Quorum or classic queues").
// It is part of each quorum
// queue's declaration: changing it makes existing quorum queues fail to
// declare.
const DeliveryLimit = 100

// Exchange is a durable exchange to declare.
type Exchange struct {
	Name string
	Kind string
	Args map[string]any
}

// Queue is a durable, non-exclusive named queue to declare. Argument
// values are strings or int64.
type Queue struct {
	Name string
	Args map[string]any
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

	routes    []ExchangeConfig
	policies  map[string]Policy // by consuming queue
	envelopes map[string]string // by consuming queue, when not moenda's
	published map[string]string // by exchange, when not moenda's
	// exchangeOf remembers ExchangeFor's answers for up to maxRemembered
	// keys: the relay asks for every event, and matching splits the key and
	// the patterns into words. The bound keeps clients that post many
	// names from growing it.
	exchangeOf sync.Map // routing key -> exchange name
	remembered atomic.Int32
}

const maxRemembered = 4096

// Build derives the layout from cfg and the subscriptions. Every
// subscription pattern is bound on each exchange that can carry a matching
// event; a pattern no exchange can carry is an error, since it would never
// receive anything. Each queue gets its failure policy, its retry queues
// and its dead-letter queue.
func Build(cfg Config, subs []Subscription) (*Topology, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// An exchange listed for its failure settings alone, with no enabled
	// plugin publishing to it, carries nothing: it is not declared.
	cfg.Exchanges = slices.DeleteFunc(slices.Clone(cfg.Exchanges), func(x ExchangeConfig) bool { return len(x.Events) == 0 })
	if cfg.QueueType == "" {
		cfg.QueueType = Classic
	}
	t := &Topology{routes: cfg.Exchanges, policies: map[string]Policy{}, envelopes: map[string]string{}, published: map[string]string{}}
	d := declarations{}
	var errs []error
	for _, x := range cfg.Exchanges {
		ex := Exchange{Name: x.Name, Kind: Topic}
		if cfg.Unrouted != "" {
			alt := strings.ReplaceAll(cfg.Unrouted, "{exchange}", x.Name)
			ex.Args = map[string]any{ArgAlternateExchange: alt}
			errs = append(errs, d.exchange(Exchange{Name: alt, Kind: Fanout}))
			d.queue(Queue{Name: alt, Args: typeArgs(cmp.Or(x.QueueType, cfg.QueueType))})
			d.bind(Binding{Exchange: alt, Queue: alt})
		}
		errs = append(errs, d.exchange(ex))
		if x.Envelope != "" && x.Envelope != event.EnvelopeMoenda {
			t.published[x.Name] = x.Envelope
		}
	}
	overrides := map[string]FailureConfig{}
	envelopes := map[string]string{}
	types := map[string]string{}
	for _, o := range cfg.Subscriptions {
		overrides[o.Queue] = o.Failure
		envelopes[o.Queue] = o.Envelope
		types[o.Queue] = o.QueueType
	}
	queues := map[string]bool{}
	for _, s := range subs {
		if queues[s.Queue] {
			errs = append(errs, fmt.Errorf("queue %q is declared by two subscriptions", s.Queue))
			continue
		}
		queues[s.Queue] = true
		var bound []ExchangeConfig
		for _, p := range s.Patterns {
			if err := ValidatePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("queue %q: %w", s.Queue, err))
				continue
			}
			n := len(bound)
			for _, x := range cfg.Exchanges {
				if slices.ContainsFunc(x.Events, func(e string) bool { return Overlap(e, p) }) {
					d.bind(Binding{Exchange: x.Name, Queue: s.Queue, Key: p})
					if !slices.ContainsFunc(bound, func(b ExchangeConfig) bool { return b.Name == x.Name }) {
						bound = append(bound, x)
					}
					n = -1
				}
			}
			if n >= 0 {
				errs = append(errs, fmt.Errorf("queue %q binds %q, but no exchange in topology.exchanges carries such events; add the pattern to an exchange's events", s.Queue, p))
			}
		}
		pol, err := resolve(cfg.Failure, bound, overrides[s.Queue], s.Queue)
		typ, terr := queueTypeOf(cfg.QueueType, bound, types[s.Queue], s.Queue)
		if err = errors.Join(err, terr); err != nil {
			errs = append(errs, err)
			continue
		}
		if format := envelopeOf(bound, envelopes[s.Queue]); format != event.EnvelopeMoenda {
			t.envelopes[s.Queue] = format
		}
		t.policies[s.Queue] = pol
		errs = append(errs, t.declareFailure(&d, s.Queue, pol, typ))
	}
	for i, q := range cfg.Queues {
		if queues[q.Name] {
			errs = append(errs, fmt.Errorf("topology.queues[%d]: queue %q is also a subscription's", i, q.Name))
			continue
		}
		d.queue(Queue{Name: q.Name})
		for j, b := range q.Bindings {
			if _, ok := d.exchanges[b.Exchange]; !ok {
				errs = append(errs, fmt.Errorf("topology.queues[%d].bindings[%d]: exchange %q carries no event of an enabled plugin, so it is not declared", i, j, b.Exchange))
				continue
			}
			d.bind(Binding{Exchange: b.Exchange, Queue: q.Name, Key: b.Key})
		}
	}
	for i, o := range cfg.Subscriptions {
		if !queues[o.Queue] {
			errs = append(errs, fmt.Errorf("topology.subscriptions[%d].queue: no enabled plugin consumes %q", i, o.Queue))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t.Exchanges, t.Queues, t.Bindings = d.sorted()
	return t, nil
}

// resolve merges the platform default, the groups of the exchanges queue
// is bound on, and its own override. Groups that disagree need an
// override that settles it.
func resolve(def FailureConfig, bound []ExchangeConfig, own FailureConfig, queue string) (Policy, error) {
	if len(bound) == 0 {
		return def.over(own).policy(queue), nil
	}
	pol := def.over(bound[0].Failure).over(own).policy(queue)
	for _, x := range bound[1:] {
		if other := def.over(x.Failure).over(own).policy(queue); !equalPolicy(pol, other) {
			return Policy{}, fmt.Errorf("queue %q is bound on exchanges %q and %q, whose failure settings differ; give the queue its own in topology.subscriptions", queue, bound[0].Name, x.Name)
		}
	}
	return pol, nil
}

// queueTypeOf is the type of queue: its own setting, else that of the
// exchange groups it is bound on, else the platform's. Groups that
// disagree need the queue's own setting to settle it.
func queueTypeOf(def string, bound []ExchangeConfig, own, queue string) (string, error) {
	if own != "" {
		return own, nil
	}
	if len(bound) == 0 {
		return def, nil
	}
	typ := cmp.Or(bound[0].QueueType, def)
	for _, x := range bound[1:] {
		if other := cmp.Or(x.QueueType, def); other != typ {
			return "", fmt.Errorf("queue %q is bound on exchanges %q (queue_type %s) and %q (queue_type %s); give the queue its own queue_type in topology.subscriptions", queue, bound[0].Name, typ, x.Name, other)
		}
	}
	return typ, nil
}

// envelopeOf is the format queue reads: its own setting, else that of
// the exchanges it is bound on. The one format an exchange may carry
// besides moenda's reads moenda's envelope too, so it settles a queue
// bound on both kinds.
func envelopeOf(bound []ExchangeConfig, own string) string {
	if own != "" {
		return own
	}
	for _, x := range bound {
		if x.Envelope != "" {
			return x.Envelope
		}
	}
	return event.EnvelopeMoenda
}

func equalPolicy(a, b Policy) bool {
	return a.ImmediateRetries == b.ImmediateRetries && a.ImmediateInterval == b.ImmediateInterval &&
		slices.Equal(a.Delays, b.Delays) && a.DeadLetterExchange == b.DeadLetterExchange && a.DeadLetterQueue == b.DeadLetterQueue
}

// declareFailure adds queue itself, its retry queues and its dead-letter
// exchange and queue, all of type typ. A retry queue holds messages for
// its delay, then dead-letters them through the default exchange back to
// queue. A quorum queue dead-letters at least once: RabbitMQ keeps a
// message in its source queue until the target queue has confirmed it
// (measured on 3.10: a retry queue's message whose target queue was
// missing stayed, and arrived at the next try after the queue was
// declared, three minutes after the first). The queue itself
// dead-letters only the messages that exceed DeliveryLimit; moenda
// publishes its own dead letters.
func (t *Topology) declareFailure(d *declarations, queue string, pol Policy, typ string) error {
	args := withType(typ, map[string]any{
		ArgDeadLetterExchange:   pol.DeadLetterExchange,
		ArgDeadLetterRoutingKey: queue,
	})
	if typ == Quorum {
		args[ArgDeliveryLimit] = int64(DeliveryLimit)
	}
	d.queue(Queue{Name: queue, Args: args})
	for _, delay := range pol.Delays {
		d.queue(Queue{Name: RetryQueue(queue, delay), Args: withType(typ, map[string]any{
			ArgMessageTTL:           delay.Milliseconds(),
			ArgDeadLetterExchange:   "",
			ArgDeadLetterRoutingKey: queue,
		})})
	}
	kind, key := Direct, queue
	if pol.Central {
		kind, key = Topic, "#"
	}
	if err := d.exchange(Exchange{Name: pol.DeadLetterExchange, Kind: kind}); err != nil {
		return fmt.Errorf("queue %q: %w (one dead-letter exchange cannot serve both per-queue and central dead-letter queues)", queue, err)
	}
	if had, ok := d.queues[pol.DeadLetterQueue]; ok && typeOf(had.Args) != typ {
		return fmt.Errorf("queue %q is %s, but its dead-letter queue %q takes the dead letters of %s queues too, and a queue has one type; give the queues that share it the same queue_type", queue, typ, pol.DeadLetterQueue, typeOf(had.Args))
	}
	d.queue(Queue{Name: pol.DeadLetterQueue, Args: typeArgs(typ)})
	d.bind(Binding{Exchange: pol.DeadLetterExchange, Queue: pol.DeadLetterQueue, Key: key})
	return nil
}

// typeArgs are the arguments of a queue of type typ that dead-letters
// nothing: none for a classic queue.
func typeArgs(typ string) map[string]any {
	if typ != Quorum {
		return nil
	}
	return map[string]any{ArgQueueType: Quorum}
}

// withType adds to args, those of a queue that dead-letters, what type
// typ needs: for a quorum queue, its type and at-least-once
// dead-lettering.
func withType(typ string, args map[string]any) map[string]any {
	if typ == Quorum {
		args[ArgQueueType] = Quorum
		args[ArgDeadLetterStrategy] = atLeastOnce
		args[ArgOverflow] = rejectPublish
	}
	return args
}

// typeOf is the type of a queue declared with args.
func typeOf(args map[string]any) string {
	if t, ok := args[ArgQueueType].(string); ok {
		return t
	}
	return Classic
}

// declarations collects the layout, each name once.
type declarations struct {
	exchanges map[string]Exchange
	queues    map[string]Queue
	bindings  map[Binding]bool
}

// exchange adds x, or fails if an exchange of that name but another kind
// was added.
func (d *declarations) exchange(x Exchange) error {
	if d.exchanges == nil {
		d.exchanges = map[string]Exchange{}
	}
	if had, ok := d.exchanges[x.Name]; ok && had.Kind != x.Kind {
		return fmt.Errorf("exchange %q is declared both %s and %s", x.Name, had.Kind, x.Kind)
	}
	d.exchanges[x.Name] = x
	return nil
}

func (d *declarations) queue(q Queue) {
	if d.queues == nil {
		d.queues = map[string]Queue{}
	}
	if _, ok := d.queues[q.Name]; !ok || len(q.Args) > 0 {
		d.queues[q.Name] = q
	}
}

func (d *declarations) bind(b Binding) {
	if d.bindings == nil {
		d.bindings = map[Binding]bool{}
	}
	d.bindings[b] = true
}

// sorted returns the declarations in a stable order.
func (d *declarations) sorted() ([]Exchange, []Queue, []Binding) {
	xs := slices.SortedFunc(maps.Values(d.exchanges), func(a, b Exchange) int { return strings.Compare(a.Name, b.Name) })
	qs := slices.SortedFunc(maps.Values(d.queues), func(a, b Queue) int { return strings.Compare(a.Name, b.Name) })
	bs := slices.SortedFunc(maps.Keys(d.bindings), func(a, b Binding) int {
		return strings.Compare(a.Exchange+"\x00"+a.Queue+"\x00"+a.Key, b.Exchange+"\x00"+b.Queue+"\x00"+b.Key)
	})
	return xs, qs, bs
}

// Policy returns the failure policy of a consuming queue, and false for a
// queue no subscription consumes.
func (t *Topology) Policy(queue string) (Policy, bool) {
	p, ok := t.policies[queue]
	return p, ok
}

// QueueType returns the type of a queue the topology declares (Classic
// or Quorum), and "" for a queue it does not declare.
func (t *Topology) QueueType(queue string) string {
	i := slices.IndexFunc(t.Queues, func(q Queue) bool { return q.Name == queue })
	if i < 0 {
		return ""
	}
	return typeOf(t.Queues[i].Args)
}

// Envelope returns the format of queue's messages (event.Envelopes).
func (t *Topology) Envelope(queue string) string {
	if e, ok := t.envelopes[queue]; ok {
		return e
	}
	return event.EnvelopeMoenda
}

// Published returns the format of the messages published to exchange
// (event.PublishedEnvelopes).
func (t *Topology) Published(exchange string) string {
	if e, ok := t.published[exchange]; ok {
		return e
	}
	return event.EnvelopeMoenda
}

// ExchangeFor returns the exchange an event with this routing key is
// published to, or an error that says how to route it.
func (t *Topology) ExchangeFor(routingKey string) (string, error) {
	if x, ok := t.exchangeOf.Load(routingKey); ok {
		return x.(string), nil
	}
	for _, x := range t.routes {
		for _, p := range x.Events {
			if Match(p, routingKey) {
				if t.remembered.Add(1) <= maxRemembered {
					t.exchangeOf.Store(routingKey, x.Name)
				}
				return x.Name, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no exchange carries events with routing key %q; add a matching pattern to topology.exchanges[].events", ErrUnroutable, routingKey)
}

// Routable reports whether an exchange carries events with routingKey:
// nil, or an error wrapping ErrUnroutable that says how to route them.
func (t *Topology) Routable(routingKey string) error {
	_, err := t.ExchangeFor(routingKey)
	return err
}

// EventExchanges lists the exchanges events are published to, in
// configuration order: on Kafka, each is a topic.
func (t *Topology) EventExchanges() []string {
	out := make([]string, len(t.routes))
	for i, x := range t.routes {
		out[i] = x.Name
	}
	return out
}

// BindingsOf returns the bindings that feed queue.
func (t *Topology) BindingsOf(queue string) []Binding {
	var out []Binding
	for _, b := range t.Bindings {
		if b.Queue == queue {
			out = append(out, b)
		}
	}
	return out
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
			alt, _ := x.Args[ArgAlternateExchange].(string)
			return alt
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

func args(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, m[k])
	}
	return b.String()
}
