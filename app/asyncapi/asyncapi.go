// Package asyncapi builds the AsyncAPI 3.0 document of an installation:
// its servers, a channel for each exchange and routing key and for each
// queue, the operations of its plugins, and its messages with their
// headers and payload schemas. It is derived from the enabled plugins and
// the topology, the sources of the catalog, so it cannot drift from the
// code. Retry and dead-letter queues, which AsyncAPI has no words for,
// are told in x-moenda extensions.
package asyncapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/moenda/moenda/adapters/redact"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/schema"
)

// Version is the AsyncAPI version of the document.
const Version = "3.0.0"

// bindingVersion is the version of the AMQP bindings: 0.3.0 is the one
// the 3.x schemas accept.
const bindingVersion = "0.3.0"

// Input is what the document is built from.
type Input struct {
	// Env names the environment, in the document's description.
	Env string
	// Version is the document's info.version: the binary's.
	Version string
	// RabbitMQ are the AMQP URLs of the nodes (passwords are hidden in
	// the document); none when RabbitMQ is not the broker.
	RabbitMQ []string
	// Kafka is the Kafka cluster, when anything publishes there.
	Kafka *Kafka
	// Plugins are the enabled plugins, in order.
	Plugins []handlers.Definition
	// Topology is the layout built from them.
	Topology *topology.Topology
	// ExternalQueues are the queues declared for consumers outside moenda
	// (topology.queues).
	ExternalQueues []string
}

// Kafka is the Kafka cluster the events are published to too.
type Kafka struct {
	Brokers     []string
	Embedded    bool
	TopicPrefix string
}

// Build derives the document from in.
func Build(in Input) (*Document, error) {
	if in.Topology == nil {
		return nil, errors.New("asyncapi: no topology")
	}
	b := builder{in: in, doc: &Document{
		AsyncAPI: Version,
		Info: Info{
			Title:   "moenda",
			Version: in.Version,
			Description: "The events of the plugins enabled in environment " + in.Env + ": where they are published, " +
				"which queues receive them, their headers and the JSON Schema of their payloads. " +
				"Each event travels in an envelope (event_id, event_name, occurred_at, correlation_id, causation_id, source, aggregate_id, payload) " +
				"unless its exchange publishes another format. Consumers must tolerate fields they do not know.",
		},
		DefaultContentType: "application/json",
		Servers:            map[string]*Server{},
		Channels:           map[string]*Channel{},
		Operations:         map[string]*Operation{},
		Components: Components{
			Messages: map[string]*Message{},
			Schemas:  map[string]*schema.Schema{headersSchema: headers()},
		},
	}}
	if err := b.servers(); err != nil {
		return nil, err
	}
	if err := b.messages(); err != nil {
		return nil, err
	}
	b.exchanges()
	b.queues()
	b.sends()
	b.receives()
	return b.doc, nil
}

type builder struct {
	in  Input
	doc *Document
	// rabbit are references to the RabbitMQ servers, for the channels.
	rabbit []Ref
	// events are the published events by name, with where they go.
	events map[string]*published
	// order lists the events' names sorted.
	order []string
}

// published is one event some enabled plugin publishes.
type published struct {
	name, key, exchange string
	by                  []string
}

// servers adds a server per RabbitMQ node and per Kafka broker.
func (b *builder) servers() error {
	for i, raw := range b.in.RabbitMQ {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("asyncapi: amqp node %s is not a URL like amqp://user:password@host:5672/", redact.URL(raw))
		}
		id := serverID("rabbitmq", i, len(b.in.RabbitMQ))
		path := u.Path
		if path == "" {
			path = "/"
		}
		b.doc.Servers[id] = &Server{
			Host: u.Host, Pathname: path, Protocol: u.Scheme, ProtocolVersion: "0.9.1",
			Title:       "RabbitMQ",
			Description: "RabbitMQ at " + redact.URL(raw) + ": the exchanges and queues below are declared there.",
		}
		b.rabbit = append(b.rabbit, Ref{Ref: "#/servers/" + id})
	}
	if k := b.in.Kafka; k != nil {
		for i, broker := range k.Brokers {
			desc := "Kafka: each exchange above is a topic of the same name"
			if k.TopicPrefix != "" {
				desc += " after the prefix " + k.TopicPrefix
			}
			desc += ", carrying the same events."
			if k.Embedded {
				desc += " This one is an in-process cluster, which keeps records in memory only."
			}
			b.doc.Servers[serverID("kafka", i, len(k.Brokers))] = &Server{Host: broker, Protocol: "kafka", Title: "Kafka", Description: desc}
		}
	}
	return nil
}

// serverID names the i-th of n servers of a kind.
func serverID(kind string, i, n int) string {
	if n == 1 {
		return kind
	}
	return fmt.Sprintf("%s-%d", kind, i+1)
}

// messages adds a message for each event the plugins publish, with its
// payload's schema where the plugin declares its type.
func (b *builder) messages() error {
	b.events = map[string]*published{}
	declared := map[string]handlers.Payload{}
	for _, p := range b.in.Plugins {
		for _, name := range p.Publishes {
			if e, ok := b.events[name]; ok {
				e.by = append(e.by, p.Name)
				continue
			}
			n, err := event.ParseName(name)
			if err != nil {
				return fmt.Errorf("asyncapi: plugin %s: %w", p.Name, err)
			}
			x, err := b.in.Topology.ExchangeFor(n.Base)
			if err != nil {
				return fmt.Errorf("asyncapi: plugin %s publishes %s: %w", p.Name, name, err)
			}
			b.events[name] = &published{name: name, key: n.Base, exchange: x, by: []string{p.Name}}
			b.order = append(b.order, name)
		}
		for _, pl := range p.Payloads {
			if _, ok := declared[pl.Event]; !ok {
				declared[pl.Event] = pl
			}
		}
	}
	slices.Sort(b.order)
	for _, name := range b.order {
		e := b.events[name]
		payload := &schema.Schema{Description: "Not declared by its plugin: any JSON value."}
		pl, ok := declared[name]
		if ok {
			s, err := pl.Schema()
			if err != nil {
				return fmt.Errorf("asyncapi: %w", err)
			}
			payload = s
		}
		format := b.in.Topology.Published(e.exchange)
		b.doc.Components.Messages[messageID(name)] = &Message{
			Name:          name,
			Title:         name,
			Summary:       fmt.Sprintf("%s, published by %s to exchange %s with routing key %s.", name, strings.Join(e.by, ", "), e.exchange, e.key),
			ContentType:   "application/json",
			Headers:       Ref{Ref: "#/components/schemas/" + headersSchema},
			Payload:       body(format, name, payload),
			CorrelationID: &CorrelationID{Location: "$message.header#/" + event.MetaCorrelationID},
			Bindings:      &MessageBindings{AMQP: &AMQPMessage{MessageType: name, BindingVersion: bindingVersion}},
			Moenda: &MessageExt{Event: name, RoutingKey: e.key, Exchange: e.exchange, Envelope: format,
				PublishedBy: e.by, PayloadDeclared: ok},
		}
	}
	return nil
}

// messageID is the key of an event's message in components.
func messageID(name string) string { return name }

// messageRefs are references to the messages of names, keyed as in a
// channel's messages.
func messageRefs(names []string, ref func(string) string) map[string]Ref {
	out := map[string]Ref{}
	for _, n := range names {
		out[messageID(n)] = Ref{Ref: ref(n)}
	}
	return out
}

// exchanges adds a channel for each exchange and routing key the
// plugins publish to.
func (b *builder) exchanges() {
	top := b.in.Topology
	byChannel := map[string][]string{}
	for _, name := range b.order {
		e := b.events[name]
		id := exchangeChannel(e.exchange, e.key)
		byChannel[id] = append(byChannel[id], name)
	}
	for id, names := range byChannel {
		e := b.events[names[0]]
		alt := top.AlternateOf(e.exchange)
		b.doc.Channels[id] = &Channel{
			Address:     e.key,
			Title:       e.exchange + " " + e.key,
			Description: fmt.Sprintf("Exchange %s (topic, durable), routing key %s: the queues bound to it receive a copy.", e.exchange, e.key),
			Servers:     b.rabbit,
			Messages:    messageRefs(names, func(n string) string { return "#/components/messages/" + messageID(n) }),
			Bindings: &ChannelBindings{AMQP: &AMQPChannel{Is: "routingKey", BindingVersion: bindingVersion,
				Exchange: &AMQPExchange{Name: e.exchange, Type: topology.Topic, Durable: true, AutoDelete: false, VHost: b.vhost()}}},
			Moenda: &ChannelExt{Exchange: e.exchange, RoutingKey: e.key, Envelope: top.Published(e.exchange),
				Queues: orEmpty(top.QueuesFor(e.exchange, e.key)), AlternateExchange: alt, UnroutedQueue: unroutedQueue(top, alt)},
		}
	}
}

// unroutedQueue is the queue bound to the alternate exchange alt.
func unroutedQueue(top *topology.Topology, alt string) string {
	if alt == "" {
		return ""
	}
	for _, bd := range top.Bindings {
		if bd.Exchange == alt {
			return bd.Queue
		}
	}
	return ""
}

// exchangeChannel and queueChannel are the keys of the channels.
func exchangeChannel(exchange, key string) string { return "exchange:" + exchange + ":" + key }
func queueChannel(queue string) string            { return "queue:" + queue }

// queues adds a channel for each queue the plugins consume and each
// queue declared for others, with the messages the topology routes to it.
func (b *builder) queues() {
	top := b.in.Topology
	for _, p := range b.in.Plugins {
		for _, s := range p.Subscriptions {
			q := p.Queue(s)
			pol, _ := top.Policy(q)
			ext := &ChannelExt{
				Plugin: p.Name, Handler: s.Name, Bindings: b.bindings(q), Handles: s.Handles,
				Envelope: top.Envelope(q), QueueType: top.QueueType(q),
				ImmediateRetries: &pol.ImmediateRetries, DeadLetterExchange: pol.DeadLetterExchange, DeadLetterQueue: pol.DeadLetterQueue,
				RetryQueues: []RetryQueue{},
			}
			if pol.ImmediateRetries > 0 {
				ext.ImmediateInterval = pol.ImmediateInterval.String()
			}
			for _, d := range pol.Delays {
				ext.RetryQueues = append(ext.RetryQueues, RetryQueue{Name: topology.RetryQueue(q, d), Delay: d.String()})
			}
			b.doc.Channels[queueChannel(q)] = b.queue(q, fmt.Sprintf("Queue %s, consumed by plugin %s (%s). %s", q, p.Name, s.Name, failing(pol)), ext)
		}
	}
	for _, q := range b.in.ExternalQueues {
		b.doc.Channels[queueChannel(q)] = b.queue(q, "Queue "+q+", declared for a consumer outside moenda.",
			&ChannelExt{External: true, Bindings: b.bindings(q)})
	}
}

// queue is the channel of queue q.
func (b *builder) queue(q, description string, ext *ChannelExt) *Channel {
	return &Channel{
		Address:     q,
		Title:       q,
		Description: description,
		Servers:     b.rabbit,
		Messages:    messageRefs(b.routedTo(q), func(n string) string { return "#/components/messages/" + messageID(n) }),
		Bindings: &ChannelBindings{AMQP: &AMQPChannel{Is: "queue", BindingVersion: bindingVersion,
			Queue: &AMQPQueue{Name: q, Durable: true, Exclusive: false, AutoDelete: false, VHost: b.vhost()}}},
		Moenda: ext,
	}
}

// routedTo lists the published events the broker routes to queue q.
func (b *builder) routedTo(q string) []string {
	var out []string
	for _, name := range b.order {
		e := b.events[name]
		if slices.Contains(b.in.Topology.QueuesFor(e.exchange, e.key), q) {
			out = append(out, name)
		}
	}
	return out
}

// bindings are the bindings that feed queue q.
func (b *builder) bindings(q string) []Binding {
	out := []Binding{}
	for _, bd := range b.in.Topology.BindingsOf(q) {
		out = append(out, Binding{Exchange: bd.Exchange, Key: bd.Key})
	}
	return out
}

// vhost is the RabbitMQ virtual host of the first node, "/" by default.
func (b *builder) vhost() string {
	if len(b.in.RabbitMQ) == 0 {
		return "/"
	}
	u, err := url.Parse(b.in.RabbitMQ[0])
	if err != nil || u.Path == "" || u.Path == "/" {
		return "/"
	}
	return strings.TrimPrefix(u.Path, "/")
}

// sends adds, for each plugin, an operation per channel it publishes to.
func (b *builder) sends() {
	for _, p := range b.in.Plugins {
		byChannel := map[string][]string{}
		for _, name := range p.Publishes {
			e := b.events[name]
			id := exchangeChannel(e.exchange, e.key)
			byChannel[id] = append(byChannel[id], name)
		}
		for id, names := range byChannel {
			slices.Sort(names)
			b.doc.Operations["send:"+p.Name+":"+strings.TrimPrefix(id, "exchange:")] = &Operation{
				Action:      "send",
				Channel:     Ref{Ref: "#/channels/" + id},
				Title:       p.Name + " publishes " + strings.Join(names, ", "),
				Description: "Through the outbox: written in the transaction of the change it records, then relayed to the broker with publisher confirms. Delivery is at least once.",
				Messages:    b.channelMessages(id, names),
				Bindings:    &OperationBindings{AMQP: &AMQPOperation{DeliveryMode: 2, Timestamp: true, BindingVersion: bindingVersion}},
				Moenda:      &OperationExt{Plugin: p.Name},
			}
		}
	}
}

// receives adds an operation per subscription.
func (b *builder) receives() {
	for _, p := range b.in.Plugins {
		for _, s := range p.Subscriptions {
			q := p.Queue(s)
			id := queueChannel(q)
			names := b.routedTo(q)
			if len(s.Handles) > 0 {
				names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(s.Handles, n) })
			}
			b.doc.Operations["receive:"+p.Name+":"+s.Name] = &Operation{
				Action:  "receive",
				Channel: Ref{Ref: "#/channels/" + id},
				Title:   p.Name + " consumes " + q,
				Description: "Each message is handled once: its event_id is claimed in the inbox in the transaction of the handler's effects; " +
					"a failure is retried, then dead-lettered (see x-moenda of the channel). Events of types the handler does not list are acknowledged and ignored.",
				Messages: b.channelMessages(id, names),
				Bindings: &OperationBindings{AMQP: &AMQPOperation{Ack: true, BindingVersion: bindingVersion}},
				Moenda:   &OperationExt{Plugin: p.Name, Handler: s.Name},
			}
		}
	}
}

// channelMessages are references to the messages names of channel id.
func (b *builder) channelMessages(id string, names []string) []Ref {
	out := []Ref{}
	for _, n := range names {
		out = append(out, Ref{Ref: "#/channels/" + id + "/messages/" + messageID(n)})
	}
	return out
}

// failing says what becomes of a message whose handling fails under pol.
func failing(pol topology.Policy) string {
	var steps []string
	if n := pol.ImmediateRetries; n > 0 {
		steps = append(steps, "tried again "+times(n)+" at once")
	}
	if n := len(pol.Delays); n > 0 {
		var delays []string
		for _, d := range pol.Delays {
			delays = append(delays, d.String())
		}
		steps = append(steps, "tried again "+times(n)+" through retry queues (after "+strings.Join(delays, ", ")+")")
	}
	if pol.DeadLetterQueue != "" {
		steps = append(steps, "sent to dead-letter queue "+pol.DeadLetterQueue)
	}
	if len(steps) == 0 {
		return ""
	}
	return "A message whose handling fails is " + strings.Join(steps, ", then ") + "."
}

// times is n as a count of times.
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// JSON is the document, indented.
func (d *Document) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("asyncapi: %w", err)
	}
	return buf.Bytes(), nil
}

// YAML is the document in YAML, its keys in the JSON's order.
func (d *Document) YAML() ([]byte, error) {
	raw, err := d.JSON()
	if err != nil {
		return nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil { // JSON is YAML; a Node keeps the order
		return nil, fmt.Errorf("asyncapi: %w", err)
	}
	plainStyle(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, fmt.Errorf("asyncapi: %w", err)
	}
	return buf.Bytes(), enc.Close()
}

// plainStyle drops the JSON flow style and quotes from n, so it is
// written as block YAML (strings still quoted where YAML needs it).
func plainStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle
	for _, c := range n.Content {
		plainStyle(c)
	}
}
