package topology

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moenda/moenda/handlers/event"
)

// Subscription is one consuming queue and the routing-key patterns it binds.
type Subscription struct {
	Queue    string
	Patterns []string
}

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
			t.published[x.Name] = string(x.Envelope)
		}
	}
	overrides := map[string]FailureConfig{}
	envelopes := map[string]string{}
	types := map[string]string{}
	for _, o := range cfg.Subscriptions {
		overrides[o.Queue] = o.Failure
		envelopes[o.Queue] = string(o.Envelope)
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
		errs = append(errs, d.failure(s.Queue, pol, typ))
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
			return string(x.Envelope)
		}
	}
	return event.EnvelopeMoenda
}

func equalPolicy(a, b Policy) bool {
	return a.ImmediateRetries == b.ImmediateRetries && a.ImmediateInterval == b.ImmediateInterval &&
		slices.Equal(a.Delays, b.Delays) && a.DeadLetterExchange == b.DeadLetterExchange && a.DeadLetterQueue == b.DeadLetterQueue
}

// failure adds queue itself, its retry queues and its dead-letter
// exchange and queue, all of type typ. A retry queue holds messages for
// its delay, then dead-letters them through the default exchange back to
// queue. A quorum queue dead-letters at least once: RabbitMQ keeps a
// message in its source queue until the target queue has confirmed it
// (measured on 3.10: a retry queue's message whose target queue was
// missing stayed, and arrived at the next try after the queue was
// declared, three minutes after the first). The queue itself
// dead-letters only the messages that exceed DeliveryLimit; moenda
// publishes its own dead letters.
func (d *declarations) failure(queue string, pol Policy, typ string) error {
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
