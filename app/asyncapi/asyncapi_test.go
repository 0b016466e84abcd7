package asyncapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/app/asyncapi"
	"github.com/moenda/moenda/handlers"
)

// pago is a payload type.
type pago struct {
	PedidoID int64  `json:"pedidoId"`
	Nota     string `json:"nota,omitempty"`
}

// plugins: a publisher of two versions of one event and one more (its
// payload type declared for one), a consumer of both keys that handles
// one version, and a consumer on a flat exchange.
func plugins() []handlers.Definition {
	none := func(struct{}, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil }
	return []handlers.Definition{
		handlers.Define(handlers.Spec{Name: "loja", Exchange: "pedidos",
			Publishes: []string{"pedido.criado.v1", "pedido.criado.v2", "pedido.pago.v1"},
			Payloads:  []handlers.Payload{handlers.PayloadOf[pago]("pedido.pago.v1")}}, struct{}{}, none),
		handlers.Define(handlers.Spec{Name: "estoque", Subscriptions: []handlers.Subscription{
			{Name: "pedidos", Events: []string{"pedido.*"}, Handles: []string{"pedido.criado.v2"}}}}, struct{}{}, none),
		handlers.Define(handlers.Spec{Name: "saga", Exchange: "rental.exchange", Publishes: []string{"rental.failed.v1"},
			Payloads:      []handlers.Payload{handlers.PayloadOf[pago]("rental.failed.v1")},
			Subscriptions: []handlers.Subscription{{Name: "falhas", Queue: "rental.failed.queue", Events: []string{"rental.failed"}}}}, struct{}{}, none),
	}
}

// build makes the document of plugins() on RabbitMQ at amqp.
func build(t *testing.T, in asyncapi.Input) *asyncapi.Document {
	t.Helper()
	defs := plugins()
	if _, err := handlers.NewRegistry(defs...); err != nil {
		t.Fatal(err)
	}
	cfg := topology.DefaultConfig()
	cfg.Exchanges = []topology.ExchangeConfig{
		{Name: "pedidos", Events: []string{"pedido.*"}},
		{Name: "rental.exchange", Events: []string{"rental.*"}, Envelope: "flat",
			Failure: topology.FailureConfig{Delays: []time.Duration{time.Second, 2 * time.Second}, DeadLetter: topology.DeadLetterConfig{Exchange: "rental.dlx", Queue: "rental.dlq"}}},
	}
	cfg.Queues = []topology.QueueConfig{{Name: "auditoria", Bindings: []topology.BindingConfig{{Exchange: "pedidos", Key: "#"}}}}
	var subs []topology.Subscription
	for _, d := range defs {
		for _, s := range d.Subscriptions {
			subs = append(subs, topology.Subscription{Queue: d.Queue(s), Patterns: s.Events})
		}
	}
	top, err := topology.Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	in.Plugins, in.Topology, in.ExternalQueues = defs, top, []string{"auditoria"}
	doc, err := asyncapi.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestServers(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   asyncapi.Input
		want map[string]asyncapi.Server // by id, description: a part of it
	}{
		{"one node, its password hidden", asyncapi.Input{RabbitMQ: []string{"amqp://moenda:s3cret@rabbit:5672/prod"}},
			map[string]asyncapi.Server{"rabbitmq": {Host: "rabbit:5672", Pathname: "/prod", Protocol: "amqp", ProtocolVersion: "0.9.1", Description: "amqp://moenda:xxxxx@rabbit:5672/prod"}}},
		{"a cluster over TLS", asyncapi.Input{RabbitMQ: []string{"amqps://a:1@r1:5671/", "amqps://a:1@r2:5671/"}},
			map[string]asyncapi.Server{"rabbitmq-1": {Host: "r1:5671", Pathname: "/", Protocol: "amqps", ProtocolVersion: "0.9.1", Description: "amqps://a:xxxxx@r1"},
				"rabbitmq-2": {Host: "r2:5671", Pathname: "/", Protocol: "amqps", ProtocolVersion: "0.9.1", Description: "amqps://a:xxxxx@r2"}}},
		{"RabbitMQ and Kafka", asyncapi.Input{RabbitMQ: []string{"amqp://r/"}, Kafka: &asyncapi.Kafka{Brokers: []string{"k:9092"}, TopicPrefix: "moenda."}},
			map[string]asyncapi.Server{"rabbitmq": {Host: "r", Pathname: "/", Protocol: "amqp", ProtocolVersion: "0.9.1", Description: "amqp://r/"},
				"kafka": {Host: "k:9092", Protocol: "kafka", Description: "after the prefix moenda."}}},
		{"Kafka embedded", asyncapi.Input{Kafka: &asyncapi.Kafka{Brokers: []string{"127.0.0.1:9092"}, Embedded: true}},
			map[string]asyncapi.Server{"kafka": {Host: "127.0.0.1:9092", Protocol: "kafka", Description: "in-process cluster"}}},
		{"in memory: none", asyncapi.Input{}, map[string]asyncapi.Server{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := build(t, tt.in)
			if len(doc.Servers) != len(tt.want) {
				t.Fatalf("servers %v, want %v", doc.Servers, tt.want)
			}
			for id, want := range tt.want {
				got := doc.Servers[id]
				if got == nil || got.Host != want.Host || got.Pathname != want.Pathname || got.Protocol != want.Protocol ||
					got.ProtocolVersion != want.ProtocolVersion || !strings.Contains(got.Description, want.Description) || strings.Contains(got.Description, "s3cret") {
					t.Errorf("server %s = %+v, want %+v", id, got, want)
				}
			}
			for id, ch := range doc.Channels {
				if len(ch.Servers) != len(tt.in.RabbitMQ) {
					t.Errorf("channel %s is on %v, want the RabbitMQ servers alone", id, ch.Servers)
				}
			}
		})
	}
}

func TestChannels(t *testing.T) {
	doc := build(t, asyncapi.Input{RabbitMQ: []string{"amqp://guest:guest@127.0.0.1:5672/moenda"}})
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range doc.Channels {
			if !yield(id) {
				return
			}
		}
	})
	want := []string{"exchange:pedidos:pedido.criado", "exchange:pedidos:pedido.pago", "exchange:rental.exchange:rental.failed",
		"queue:auditoria", "queue:estoque.pedidos", "queue:rental.failed.queue"}
	if !slices.Equal(ids, want) {
		t.Fatalf("channels %v, want %v", ids, want)
	}
	for _, tt := range []struct {
		id, address, is string
		messages        []string
		check           func(*asyncapi.Channel) string // what is wrong, or ""
	}{
		{"exchange:pedidos:pedido.criado", "pedido.criado", "routingKey", []string{"pedido.criado.v1", "pedido.criado.v2"}, func(c *asyncapi.Channel) string {
			x := c.Bindings.AMQP.Exchange
			if x.Name != "pedidos" || x.Type != "topic" || !x.Durable || x.VHost != "moenda" || c.Moenda.AlternateExchange != "pedidos.unrouted" || c.Moenda.UnroutedQueue != "pedidos.unrouted" ||
				!slices.Equal(c.Moenda.Queues, []string{"auditoria", "estoque.pedidos"}) {
				return "exchange"
			}
			return ""
		}},
		{"queue:estoque.pedidos", "estoque.pedidos", "queue", []string{"pedido.criado.v1", "pedido.criado.v2", "pedido.pago.v1"}, func(c *asyncapi.Channel) string {
			m := c.Moenda
			retries := []asyncapi.RetryQueue{{Name: "estoque.pedidos.retry.1s", Delay: "1s"}, {Name: "estoque.pedidos.retry.5s", Delay: "5s"}, {Name: "estoque.pedidos.retry.25s", Delay: "25s"}}
			if q := c.Bindings.AMQP.Queue; q.Name != "estoque.pedidos" || !q.Durable || q.Exclusive || q.AutoDelete {
				return "queue binding"
			}
			if m.Plugin != "estoque" || m.Handler != "pedidos" || *m.ImmediateRetries != 2 || m.ImmediateInterval != "100ms" || !slices.Equal(m.RetryQueues, retries) ||
				m.DeadLetterExchange != "moenda.dlx" || m.DeadLetterQueue != "estoque.pedidos.dlq" || m.QueueType != "classic" ||
				!slices.Equal(m.Bindings, []asyncapi.Binding{{Exchange: "pedidos", Key: "pedido.*"}}) {
				return "x-moenda"
			}
			return ""
		}},
		{"queue:rental.failed.queue", "rental.failed.queue", "queue", []string{"rental.failed.v1"}, func(c *asyncapi.Channel) string {
			m := c.Moenda
			if len(m.RetryQueues) != 2 || m.DeadLetterQueue != "rental.dlq" || m.Envelope != "flat" {
				return "x-moenda"
			}
			return ""
		}},
		{"queue:auditoria", "auditoria", "queue", []string{"pedido.criado.v1", "pedido.criado.v2", "pedido.pago.v1"}, func(c *asyncapi.Channel) string {
			if !c.Moenda.External || c.Moenda.Plugin != "" || c.Moenda.DeadLetterQueue != "" {
				return "x-moenda of a queue for others"
			}
			return ""
		}},
	} {
		t.Run(tt.id, func(t *testing.T) {
			c := doc.Channels[tt.id]
			var messages []string
			for id, ref := range c.Messages {
				messages = append(messages, id)
				if ref.Ref != "#/components/messages/"+id {
					t.Errorf("message %s refers to %s", id, ref.Ref)
				}
			}
			slices.Sort(messages)
			if c.Address != tt.address || c.Bindings.AMQP.Is != tt.is || c.Bindings.AMQP.BindingVersion != "0.3.0" || !slices.Equal(messages, tt.messages) {
				t.Fatalf("channel = %+v with messages %v, want address %s, is %s, messages %v", c, messages, tt.address, tt.is, tt.messages)
			}
			if wrong := tt.check(c); wrong != "" {
				raw, _ := json.Marshal(c)
				t.Fatalf("%s: %s", wrong, raw)
			}
		})
	}
}

func TestOperations(t *testing.T) {
	doc := build(t, asyncapi.Input{RabbitMQ: []string{"amqp://r/"}})
	for _, tt := range []struct {
		id, action, channel string
		messages            []string
	}{
		{"send:loja:pedidos:pedido.criado", "send", "exchange:pedidos:pedido.criado", []string{"pedido.criado.v1", "pedido.criado.v2"}},
		{"send:loja:pedidos:pedido.pago", "send", "exchange:pedidos:pedido.pago", []string{"pedido.pago.v1"}},
		{"send:saga:rental.exchange:rental.failed", "send", "exchange:rental.exchange:rental.failed", []string{"rental.failed.v1"}},
		// estoque handles pedido.criado.v2 alone; the rest it acknowledges and ignores.
		{"receive:estoque:pedidos", "receive", "queue:estoque.pedidos", []string{"pedido.criado.v2"}},
		{"receive:saga:falhas", "receive", "queue:rental.failed.queue", []string{"rental.failed.v1"}},
	} {
		t.Run(tt.id, func(t *testing.T) {
			op := doc.Operations[tt.id]
			if op == nil {
				t.Fatalf("no operation %s in %v", tt.id, doc.Operations)
			}
			var want []asyncapi.Ref
			for _, m := range tt.messages {
				want = append(want, asyncapi.Ref{Ref: "#/channels/" + tt.channel + "/messages/" + m})
				if _, ok := doc.Channels[tt.channel].Messages[m]; !ok {
					t.Errorf("message %s is not the channel's", m)
				}
			}
			if op.Action != tt.action || op.Channel.Ref != "#/channels/"+tt.channel || !slices.Equal(op.Messages, want) || op.Bindings.AMQP.BindingVersion != "0.3.0" {
				t.Fatalf("operation = %+v, want %s on %s with %v", op, tt.action, tt.channel, want)
			}
		})
	}
	if len(doc.Operations) != 5 {
		t.Fatalf("%d operations, want 5", len(doc.Operations))
	}
}

func TestMessages(t *testing.T) {
	doc := build(t, asyncapi.Input{})
	for _, tt := range []struct {
		name, want string // want: a part of the message's JSON
	}{
		// moenda's envelope around the declared payload.
		{"pedido.pago.v1", `"event_id":{"type":"string","format":"uuid"},"event_name":{"type":"string","const":"pedido.pago.v1"}`},
		{"pedido.pago.v1", `"required":["event_id","event_name","occurred_at","payload"]`},
		{"pedido.pago.v1", `"payload":{"type":"object","properties":{"nota":{"type":"string"},"pedidoId":{"type":"integer"}},"required":["pedidoId"]}`},
		{"pedido.pago.v1", `"x-moenda":{"event":"pedido.pago.v1","routing_key":"pedido.pago","exchange":"pedidos","envelope":"moenda","published_by":["loja"],"payload_declared":true}`},
		{"pedido.pago.v1", `"correlationId":{"location":"$message.header#/correlation_id"}`},
		{"pedido.pago.v1", `"headers":{"$ref":"#/components/schemas/MoendaHeaders"}`},
		{"pedido.pago.v1", `"bindings":{"amqp":{"messageType":"pedido.pago.v1","bindingVersion":"0.3.0"}}`},
		// Undeclared: any payload, and it says so.
		{"pedido.criado.v1", `"payload":{"description":"Not declared by its plugin: any JSON value."}`},
		{"pedido.criado.v1", `"payload_declared":false`},
		// A flat exchange: the payload's fields with eventId and occurredAt.
		{"rental.failed.v1", `"properties":{"eventId":{"type":"string","format":"uuid"},"nota":{"type":"string"},"occurredAt":{"type":"string","format":"date-time"},"pedidoId":{"type":"integer"}},"required":["eventId","occurredAt","pedidoId"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := json.Marshal(doc.Components.Messages[tt.name])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), tt.want) {
				t.Fatalf("message %s\n%s\nlacks %s", tt.name, raw, tt.want)
			}
		})
	}
	headers, _ := json.Marshal(doc.Components.Schemas["MoendaHeaders"])
	for _, h := range []string{"correlation_id", "causation_id", "moenda-attempts", "moenda-reason", "moenda-error", "moenda-queue", "moenda-handler",
		"moenda-first-failure-at", "moenda-original-exchange", "moenda-event-id", "moenda-truncated"} {
		if !strings.Contains(string(headers), `"`+h+`":`) {
			t.Errorf("headers lack %s: %s", h, headers)
		}
	}
}

// The same installation always gives the same document, byte for byte.
func TestDocumentIsStable(t *testing.T) {
	first, err := build(t, asyncapi.Input{RabbitMQ: []string{"amqp://r/"}}).JSON()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		again, err := build(t, asyncapi.Input{RabbitMQ: []string{"amqp://r/"}}).JSON()
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatal("two builds of one installation differ")
		}
	}
}

func TestBuildRefusesAnUnroutedEvent(t *testing.T) {
	cfg := topology.DefaultConfig()
	cfg.Exchanges = []topology.ExchangeConfig{{Name: "x", Events: []string{"a.*"}}}
	top, err := topology.Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	def := handlers.Define(handlers.Spec{Name: "p", Publishes: []string{"b.c.v1"}}, struct{}{},
		func(struct{}, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
	if _, err := asyncapi.Build(asyncapi.Input{Topology: top, Plugins: []handlers.Definition{def}}); err == nil || !strings.Contains(err.Error(), "plugin p publishes b.c.v1") {
		t.Fatalf("Build = %v, want an error naming the event", err)
	}
}
