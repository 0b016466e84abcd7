package app

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/moenda/moenda/app/asyncapi"
)

// The AsyncAPI document and the catalog come from the same sources: with
// every shipped plugin enabled, each event of the catalog is a message on
// the channel of its exchange and routing key, each subscription a queue
// channel receiving exactly the events the catalog sends it, with its
// dead-letter queue and retry delays, and each plugin's operations name
// the events it publishes.
func TestAsyncAPIDocumentAgreesWithTheCatalog(t *testing.T) {
	cfg := load(t, Source{Env: "test"})
	top, err := cfg.BuildTopology()
	if err != nil {
		t.Fatal(err)
	}
	cat := cfg.catalog(top)
	doc, err := cfg.asyncAPI(top)
	if err != nil {
		t.Fatal(err)
	}

	var plugins []string
	for _, p := range cfg.plugins {
		plugins = append(plugins, p.def.Name)
	}
	for _, d := range Shipped() {
		if !slices.Contains(plugins, d.Name) {
			t.Fatalf("plugin %s is not enabled in the test environment: the comparison would miss it", d.Name)
		}
	}

	exchanges := map[string]bool{}
	for _, e := range cat.Events {
		exchanges[e.Exchange] = true
		m := doc.Components.Messages[e.Name]
		if m == nil || m.Moenda.Exchange != e.Exchange || m.Moenda.RoutingKey != e.RoutingKey || !slices.Equal(m.Moenda.PublishedBy, e.PublishedBy) {
			t.Errorf("event %s: message %+v, want it on %s with key %s by %v", e.Name, m, e.Exchange, e.RoutingKey, e.PublishedBy)
			continue
		}
		if !m.Moenda.PayloadDeclared || m.Payload.Properties["payload"] == nil && m.Moenda.Envelope == "moenda" {
			t.Errorf("event %s: the shipped plugin does not declare its payload type", e.Name)
		}
		ch := doc.Channels["exchange:"+e.Exchange+":"+e.RoutingKey]
		if ch == nil || ch.Address != e.RoutingKey || ch.Bindings.AMQP.Exchange.Name != e.Exchange {
			t.Errorf("event %s: no channel for exchange %s and key %s", e.Name, e.Exchange, e.RoutingKey)
			continue
		}
		if _, ok := ch.Messages[e.Name]; !ok {
			t.Errorf("channel of %s lacks message %s", e.RoutingKey, e.Name)
		}
		var subscribers []string
		for _, s := range e.Subscribers {
			subscribers = append(subscribers, s.Queue)
			if _, ok := doc.Channels["queue:"+s.Queue].Messages[e.Name]; !ok {
				t.Errorf("queue %s's channel lacks %s, which the catalog sends it", s.Queue, e.Name)
			}
		}
		if slices.Sort(subscribers); !slices.Equal(subscribers, slices.Sorted(slices.Values(ch.Moenda.Queues))) {
			t.Errorf("event %s reaches %v by the document, %v by the catalog", e.Name, ch.Moenda.Queues, subscribers)
		}
		for _, by := range e.PublishedBy {
			op := doc.Operations["send:"+by+":"+e.Exchange+":"+e.RoutingKey]
			if op == nil || op.Action != "send" || !slices.Contains(op.Messages, asyncapi.Ref{Ref: "#/channels/exchange:" + e.Exchange + ":" + e.RoutingKey + "/messages/" + e.Name}) {
				t.Errorf("no send operation of %s by %s: %+v", e.Name, by, op)
			}
		}
	}
	if len(doc.Components.Messages) != len(cat.Events) {
		t.Errorf("%d messages, %d events in the catalog", len(doc.Components.Messages), len(cat.Events))
	}
	for _, c := range doc.Channels {
		if x := c.Bindings.AMQP.Exchange; x != nil {
			delete(exchanges, x.Name)
		}
	}
	if len(exchanges) > 0 {
		t.Errorf("exchanges without a channel: %v", exchanges)
	}

	for _, s := range cat.Subscriptions {
		ch := doc.Channels["queue:"+s.Queue]
		if ch == nil || ch.Bindings.AMQP.Queue.Name != s.Queue {
			t.Errorf("queue %s has no channel", s.Queue)
			continue
		}
		ext := ch.Moenda
		var delays []string
		for _, r := range ext.RetryQueues {
			delays = append(delays, r.Delay)
		}
		if ext.Plugin != s.Plugin || ext.Handler != s.Handler || ext.DeadLetterQueue != s.DeadLetterQueue || !slices.Equal(delays, s.RetryDelays) && len(s.RetryDelays)+len(delays) > 0 {
			t.Errorf("queue %s: x-moenda %+v, catalog %+v", s.Queue, ext, s)
		}
		for _, r := range ext.RetryQueues {
			if top.QueueType(r.Name) == "" {
				t.Errorf("queue %s: retry queue %s is not declared by the topology", s.Queue, r.Name)
			}
		}
		if top.QueueType(ext.DeadLetterQueue) == "" {
			t.Errorf("queue %s: dead-letter queue %s is not declared by the topology", s.Queue, ext.DeadLetterQueue)
		}
		op := doc.Operations["receive:"+s.Plugin+":"+s.Handler]
		if op == nil || op.Action != "receive" || op.Channel.Ref != "#/channels/queue:"+s.Queue {
			t.Errorf("no receive operation for %s: %+v", s.Queue, op)
		}
	}
	if n := len(doc.Channels); n != len(exchangeKeys(cat))+len(cat.Subscriptions)+len(cfg.Topology.Queues) {
		t.Errorf("%d channels, want one per exchange and key and one per queue", n)
	}
}

// exchangeKeys are the catalog's exchanges and routing keys, each once.
func exchangeKeys(cat Catalog) map[string]bool {
	out := map[string]bool{}
	for _, e := range cat.Events {
		out[e.Exchange+" "+e.RoutingKey] = true
	}
	return out
}

// GET /v1/asyncapi.json serves what `moenda asyncapi` prints, and the
// YAML form holds the same document.
func TestAsyncAPIServedAndPrinted(t *testing.T) {
	p := start(t, "memory")
	resp, err := http.Get(p.base + "/v1/asyncapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/asyncapi.json = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	code, printed, stderr := run(t, nil, "--env", "memory", "asyncapi")
	if code != 0 {
		t.Fatalf("moenda asyncapi = %d %s", code, stderr)
	}
	var fromHTTP, fromCLI, fromYAML map[string]any
	if err := json.Unmarshal(served, &fromHTTP); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(printed), &fromCLI); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromHTTP, fromCLI) {
		t.Fatal("GET /v1/asyncapi.json and moenda asyncapi differ")
	}
	if fromHTTP["asyncapi"] != "3.0.0" {
		t.Fatalf("asyncapi = %v", fromHTTP["asyncapi"])
	}
	code, printed, stderr = run(t, nil, "--env", "memory", "asyncapi", "--yaml")
	if code != 0 || strings.HasPrefix(printed, "{") {
		t.Fatalf("moenda asyncapi --yaml = %d %s%s", code, printed[:min(len(printed), 200)], stderr)
	}
	if err := yaml.Unmarshal([]byte(printed), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(jsonRoundTrip(t, fromYAML), fromCLI) {
		t.Fatal("the YAML document differs from the JSON one")
	}
}

// jsonRoundTrip gives v as encoding/json would decode it.
func jsonRoundTrip(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// A payload that does not match the type its plugin declares is refused
// with 422 naming the first failing path; fields the type does not know
// are accepted, since consumers must tolerate them.
func TestEventsEndpointHoldsPayloadsToTheirDeclaredType(t *testing.T) {
	p := start(t, "memory")
	for _, tt := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"a match", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":2,"titulo":"x"}}`, http.StatusAccepted, ""},
		{"an unknown field", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"usuario_id":2,"titulo":"x","prioridade":"alta"}}`, http.StatusAccepted, ""},
		{"a wrong type", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":"1","usuario_id":2,"titulo":"x"}}`, http.StatusUnprocessableEntity,
			"payload does not match the type of tarefa.concluida.v1: payload.tarefa_id must be integer, got string"},
		{"a missing field", `{"event_name":"tarefa.concluida.v1","payload":{"tarefa_id":1,"titulo":"x"}}`, http.StatusUnprocessableEntity, "payload.usuario_id is missing"},
		{"the first of several by path", `{"event_name":"tarefa.concluida.v1","payload":{"titulo":7}}`, http.StatusUnprocessableEntity, "payload.tarefa_id is missing"},
		{"deep in a list", `{"event_name":"pedido.criado.v1","payload":{"pedidoId":1,"itens":[{"produtoId":1,"quantidade":1},{"produtoId":"x","quantidade":1}],"totalCentavos":100}}`,
			http.StatusUnprocessableEntity, "payload.itens[1].produtoId must be integer, got string"},
		{"an unknown nested field", `{"event_name":"pedido.criado.v2","payload":{"pedidoId":1,"itens":[],"total":{"valor":"1.00","moeda":"BRL","cambio":1}}}`, http.StatusAccepted, ""},
		{"not an object", `{"event_name":"processo.submetido.v1","payload":[1]}`, http.StatusUnprocessableEntity, "payload must be object, got array"},
		{"the envelope is checked first", `{"event_id":"7","event_name":"tarefa.concluida.v1","payload":{"a":1}}`, http.StatusBadRequest, "event_id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, "POST", p.base+"/v1/events", tt.body)
			msg, _ := body["error"].(string)
			if code != tt.code || !strings.Contains(msg, tt.want) {
				t.Fatalf("POST /v1/events = %d %v, want %d %q", code, body, tt.code, tt.want)
			}
		})
	}
}
