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
	"sync"
	"sync/atomic"

	"github.com/moenda/moenda/handlers/event"
)

// ErrUnroutable is returned for a routing key no exchange carries.
var ErrUnroutable = errors.New("unroutable event")

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

// Policy returns the failure policy of a consuming queue, and false for a
// queue no subscription consumes.
func (t *Topology) Policy(queue string) (Policy, bool) {
	p, ok := t.policies[queue]
	return p, ok
}

// DeadLetterQueues returns the dead-letter queues of the consumed queues,
// sorted, each once.
func (t *Topology) DeadLetterQueues() []string {
	var out []string
	for _, p := range t.policies {
		if p.DeadLetterQueue != "" && !slices.Contains(out, p.DeadLetterQueue) {
			out = append(out, p.DeadLetterQueue)
		}
	}
	slices.Sort(out)
	return out
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
