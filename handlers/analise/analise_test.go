package analise

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/pedidos"
)

// stores returns every store the plugin runs on; the PostgreSQL one has
// the tables of the pedidos plugin too, for the end-to-end test.
func stores(t *testing.T) plugintest.StoreSet {
	return plugintest.Stores(t, Plugin(), pedidos.Plugin())
}

type fixture struct{ *plugintest.Plugin }

func newFixture(t *testing.T, s plugintest.Store) *fixture {
	t.Helper()
	return &fixture{plugintest.Build(t, s, plugintest.Defaults(Plugin()))}
}

func (f *fixture) deliver(e event.Event) error { return f.Deliver(SubPedidos, e) }

func (f *fixture) resumo() (string, Resumo) {
	f.T.Helper()
	rec := f.Do("GET", "/analise/pedidos", "")
	if rec.Code != http.StatusOK {
		f.T.Fatalf("GET /analise/pedidos = %d %s", rec.Code, rec.Body)
	}
	var out Resumo
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		f.T.Fatal(err)
	}
	return strings.TrimSpace(rec.Body.String()), out
}

func ev(name, payload string) event.Event {
	return plugintest.Event(name, "pedidos", json.RawMessage(payload))
}

func TestSpec(t *testing.T) {
	def := Plugin()
	if def.Name != "analise" || len(def.Publishes) != 0 || len(def.Subscriptions) != 1 {
		t.Fatalf("spec = %+v", def.Spec)
	}
	s := def.Subscriptions[0]
	if def.Queue(s) != "analise.pedidos" || !reflect.DeepEqual(s.Events, []string{"pedido.#"}) || len(s.Handles) != 0 {
		t.Fatalf("subscription %+v, queue %s", s, def.Queue(s))
	}
	plugintest.CheckDefinition(t, def, "00001_analise.sql", pedidos.Plugin())
	plugintest.CheckReach(t, s, map[string]bool{
		"pedido.criado.v1": true, "pedido.criado.v2": true, "pedido.pago.v1": true, "pedido.cancelado.v1": true,
		"pedido.criado.v9": true, "pedido.item.devolvido.v1": true, "produto.criado.v1": false, "pedidos.criado.v1": false,
	})
}

// Distinct pedidos per type: versions and redeliveries of one fact count
// once; every event id is recorded once.
func TestCountsDistinctPedidos(t *testing.T) {
	criado := func(id int, v int) event.Event {
		if v == 1 {
			return ev("pedido.criado.v1", fmt.Sprintf(`{"pedidoId":%d,"itens":[{"produtoId":7,"quantidade":2}],"totalCentavos":1990}`, id))
		}
		return ev("pedido.criado.v2", fmt.Sprintf(`{"pedidoId":%d,"itens":[{"produtoId":7,"quantidade":2}],"total":{"valor":"19.90","moeda":"BRL"}}`, id))
	}
	pago := ev("pedido.pago.v1", `{"pedidoId":1}`)
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		if body, _ := f.resumo(); body != `{"por_tipo":{},"por_versao":{}}` {
			t.Fatalf("empty: %s", body)
		}
		events := []event.Event{
			criado(1, 1), criado(1, 2), criado(2, 1), criado(2, 2), criado(3, 2),
			pago, pago, // a redelivery under the same id
			ev("pedido.pago.v1", `{"pedidoId":1}`), // the same fact under another id
			ev("pedido.cancelado.v1", `{"pedidoId":2,"itens":[{"produtoId":7,"quantidade":2}]}`),
			ev("pedido.auditado.v1", `{"motivo":"x"}`),        // names no pedido
			ev("pedido.criado.v3", `{"pedidoId":4,"novo":1}`), // a version nobody publishes yet
		}
		for _, e := range events {
			if err := f.deliver(e); err != nil {
				t.Fatalf("deliver %s: %v", e.Name, err)
			}
		}
		body, got := f.resumo()
		want := Resumo{
			PorTipo:   map[string]int64{"pedido.criado": 4, "pedido.pago": 1, "pedido.cancelado": 1},
			PorVersao: map[string]int64{"pedido.criado.v1": 2, "pedido.criado.v2": 3, "pedido.criado.v3": 1, "pedido.pago.v1": 2, "pedido.cancelado.v1": 1, "pedido.auditado.v1": 1},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("resumo %s, want %+v", body, want)
		}
		if !strings.HasPrefix(body, `{"por_tipo":{"pedido.cancelado":1,"pedido.criado":4,"pedido.pago":1},`) {
			t.Fatalf("resumo %s", body)
		}
	})
}

// A payload retrying cannot fix is permanent and records nothing.
func TestMalformedIsPermanent(t *testing.T) {
	tests := []struct {
		name, payload, want string
	}{
		{"not an object", `"pedido"`, "cannot unmarshal"},
		{"a list", `[1]`, "cannot unmarshal"},
		{"pedidoId a string", `{"pedidoId":"1"}`, "cannot unmarshal"},
		{"pedidoId a fraction", `{"pedidoId":1.5}`, "cannot unmarshal"},
		{"pedidoId zero", `{"pedidoId":0}`, "pedidoId 0 is not positive"},
		{"pedidoId negative", `{"pedidoId":-3}`, "pedidoId -3 is not positive"},
	}
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		for _, tt := range tests {
			e := ev("pedido.pago.v1", tt.payload)
			err := f.deliver(e)
			if !event.IsPermanent(err) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), e.ID) {
				t.Errorf("%s: err = %v, want permanent with %q", tt.name, err, tt.want)
			}
		}
		if body, _ := f.resumo(); body != `{"por_tipo":{},"por_versao":{}}` {
			t.Fatalf("after permanent failures: %s", body)
		}
	})
}

// The pedidos plugin's events, as the broker would route them.
func TestWithThePublisher(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		pub := plugintest.Build(t, s, plugintest.Defaults(pedidos.Plugin()))
		for _, req := range []string{"/pedidos", "/pedidos", "/pedidos", "/pedidos/1/pagar", "/pedidos/2/cancelar", "/pedidos/1/pagar"} {
			if rec := pub.Do("POST", req, `{"itens":[{"produto_id":7,"quantidade":2}],"total_centavos":1990}`); rec.Code/100 != 2 {
				t.Fatalf("POST %s = %d %s", req, rec.Code, rec.Body)
			}
		}
		if err := f.Relay(Plugin().Subscriptions[0], pub.Events()); err != nil {
			t.Fatal(err)
		}
		body, _ := f.resumo()
		if want := `{"por_tipo":{"pedido.cancelado":1,"pedido.criado":3,"pedido.pago":1},"por_versao":{"pedido.cancelado.v1":1,"pedido.criado.v1":3,"pedido.criado.v2":3,"pedido.pago.v1":1}}`; body != want {
			t.Fatalf("resumo %s, want %s", body, want)
		}
	})
}
