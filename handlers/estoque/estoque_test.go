package estoque

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/pedidos"
)

// stores returns every store the plugin runs on; the PostgreSQL one has
// the tables of the pedidos plugin too, for the end-to-end test.
func stores(t *testing.T) plugintest.StoreSet {
	return plugintest.Stores(t, Plugin(), pedidos.Plugin())
}

type fixture struct{ *plugintest.Plugin }

// newFixture builds the plugin over s with a clock that moves one second
// at each reading.
func newFixture(t *testing.T, s plugintest.Store) *fixture {
	t.Helper()
	return &fixture{plugintest.Build(t, s, plugintest.Defaults(Plugin()))}
}

func (f *fixture) get(path string, out any) {
	f.T.Helper()
	f.Must(http.StatusOK, "GET", path, "", out)
}

func (f *fixture) deliver(e event.Event) error { return f.Deliver(SubPedidos, e) }

func (f *fixture) reservado(produto int64) int64 {
	f.T.Helper()
	var p Produto
	f.get(fmt.Sprintf("/estoque/produtos/%d", produto), &p)
	if p.ProdutoID != produto {
		f.T.Fatalf("produto %+v", p)
	}
	return p.Reservado
}

// ev is an event as the pedidos plugin publishes it, with payload
// verbatim.
func ev(name, payload string) event.Event {
	return plugintest.Event(name, "pedidos", json.RawMessage(payload))
}

func criadoV1(pedido int64, itens string) event.Event {
	return ev(EventPedidoCriadoV1, fmt.Sprintf(`{"pedidoId":%d,"itens":%s,"totalCentavos":1990}`, pedido, itens))
}

func criadoV2(pedido int64, itens string) event.Event {
	return ev(EventPedidoCriadoV2, fmt.Sprintf(`{"pedidoId":%d,"itens":%s,"total":{"valor":"19.90","moeda":"BRL"}}`, pedido, itens))
}

func cancelado(pedido int64) event.Event {
	return ev(EventPedidoCancelado, fmt.Sprintf(`{"pedidoId":%d,"itens":[{"produtoId":7,"quantidade":2}]}`, pedido))
}

func TestSpec(t *testing.T) {
	def := Plugin()
	if def.Name != "estoque" || len(def.Publishes) != 0 || len(def.Subscriptions) != 1 {
		t.Fatalf("spec = %+v", def.Spec)
	}
	s := def.Subscriptions[0]
	if def.Queue(s) != "estoque.pedidos" {
		t.Fatalf("queue %s", def.Queue(s))
	}
	if !reflect.DeepEqual(s.Events, []string{"pedido.criado", "pedido.cancelado"}) ||
		!reflect.DeepEqual(s.Handles, []string{"pedido.criado.v1", "pedido.criado.v2", "pedido.cancelado.v1"}) {
		t.Fatalf("subscription %+v", s)
	}
	plugintest.CheckDefinition(t, def, "00001_estoque.sql", pedidos.Plugin())
	plugintest.CheckReach(t, s, map[string]bool{
		"pedido.criado.v1": true, "pedido.criado.v2": true, "pedido.cancelado.v1": true,
		"pedido.pago.v1": false, "pedido.criado.v3": false, "pedido.criado.extra.v1": false,
	})
	// Every event the publisher raises that the stock binds, it handles.
	for _, name := range pedidos.Plugin().Publishes {
		bound := slices.ContainsFunc(s.Events, func(p string) bool { return topology.Match(p, event.Event{Name: name}.RoutingKey()) })
		if bound != slices.Contains(s.Handles, name) {
			t.Errorf("%s bound %v but handled %v", name, bound, !bound)
		}
	}
}

// A pedido is reserved once and released once, whatever events carry it
// and in whatever order they come.
func TestReservesOnce(t *testing.T) {
	const seed = `[{"produtoId":7,"quantidade":2}]`
	v1 := criadoV1(981, seed)
	c := cancelado(981)
	tests := []struct {
		name      string
		events    []event.Event
		itens     []Item
		liberada  bool
		reservado int64 // of produto 7
	}{
		{"v1", []event.Event{v1}, []Item{{7, 2}}, false, 2},
		{"v2", []event.Event{criadoV2(981, seed)}, []Item{{7, 2}}, false, 2},
		{"the same event twice", []event.Event{v1, v1}, []Item{{7, 2}}, false, 2},
		{"v1 and v2 of one creation", []event.Event{v1, criadoV2(981, seed)}, []Item{{7, 2}}, false, 2},
		{"v2 then v1", []event.Event{criadoV2(981, seed), v1}, []Item{{7, 2}}, false, 2},
		{"two event ids for one pedido, the first wins", []event.Event{v1, criadoV1(981, `[{"produtoId":7,"quantidade":5}]`)}, []Item{{7, 2}}, false, 2},
		{"released", []event.Event{v1, c}, []Item{{7, 2}}, true, 0},
		{"released once", []event.Event{v1, c, c, cancelado(981)}, []Item{{7, 2}}, true, 0},
		{"released, then created again", []event.Event{v1, c, criadoV2(981, seed)}, []Item{{7, 2}}, true, 0},
		{"cancelled before created", []event.Event{c, v1, criadoV2(981, seed)}, []Item{}, true, 0},
		{"a product listed twice is summed", []event.Event{criadoV1(981, `[{"produtoId":9,"quantidade":1},{"produtoId":7,"quantidade":2},{"produtoId":7,"quantidade":3}]`)}, []Item{{7, 5}, {9, 1}}, false, 5},
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					f := newFixture(t, newStore())
					// Another pedido's reservation, untouched by all of it.
					if err := f.deliver(criadoV1(5, `[{"produtoId":7,"quantidade":10}]`)); err != nil {
						t.Fatal(err)
					}
					for _, e := range tt.events {
						if err := f.deliver(e); err != nil {
							t.Fatalf("deliver %s: %v", e.Name, err)
						}
					}
					var r Reserva
					f.get("/estoque/reservas/981", &r)
					if r.PedidoID != 981 || !reflect.DeepEqual(r.Itens, tt.itens) || r.Liberada != tt.liberada || (r.LiberadaEm != nil) != tt.liberada {
						t.Fatalf("reserva %+v, want itens %v liberada %v", r, tt.itens, tt.liberada)
					}
					// Written by the first event for the pedido, never again.
					if first := time.Date(2026, 1, 15, 10, 30, 2, 0, time.UTC); !r.CriadaEm.Equal(first) {
						t.Fatalf("reserva written at %v, want by the first event, at %v", r.CriadaEm, first)
					}
					if got := f.reservado(7); got != tt.reservado+10 {
						t.Fatalf("produto 7 reservado %d, want %d", got, tt.reservado+10)
					}
				})
			}
		})
	}
}

// A second cancellation leaves the first's time: released once.
func TestReleaseKeepsItsTime(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		for _, e := range []event.Event{criadoV1(1, `[{"produtoId":7,"quantidade":2}]`), cancelado(1)} {
			if err := f.deliver(e); err != nil {
				t.Fatal(err)
			}
		}
		var first, second Reserva
		f.get("/estoque/reservas/1", &first)
		if err := f.deliver(cancelado(1)); err != nil {
			t.Fatal(err)
		}
		f.get("/estoque/reservas/1", &second)
		if first.LiberadaEm == nil || !reflect.DeepEqual(first, second) {
			t.Fatalf("first %+v, then %+v", first, second)
		}
		if !first.CriadaEm.Equal(time.Date(2026, 1, 15, 10, 30, 1, 0, time.UTC)) || !first.LiberadaEm.Equal(first.CriadaEm.Add(time.Second)) {
			t.Fatalf("times %+v", first)
		}
	})
}

// A payload retrying cannot fix is permanent and writes nothing; fields
// the stock does not know are ignored.
func TestPayloads(t *testing.T) {
	tests := []struct {
		name      string
		e         event.Event
		permanent string // "" when handled
	}{
		{"unknown fields", ev(EventPedidoCriadoV1, `{"pedidoId":981,"itens":[{"produtoId":7,"quantidade":2,"cor":"azul"}],"totalCentavos":1990,"cupom":"X"}`), ""},
		{"v2 without a total", ev(EventPedidoCriadoV2, `{"pedidoId":981,"itens":[{"produtoId":7,"quantidade":2}]}`), ""},
		{"not JSON", ev(EventPedidoCriadoV1, `"pedido"`), "cannot unmarshal"},
		{"no pedidoId", ev(EventPedidoCriadoV1, `{"itens":[{"produtoId":7,"quantidade":2}]}`), "pedidoId is missing"},
		{"pedidoId a string", ev(EventPedidoCriadoV2, `{"pedidoId":"981","itens":[{"produtoId":7,"quantidade":2}]}`), "cannot unmarshal"},
		{"snake_case", ev(EventPedidoCriadoV1, `{"pedido_id":981,"itens":[{"produto_id":7,"quantidade":2}]}`), "pedidoId is missing"},
		{"no items", ev(EventPedidoCriadoV1, `{"pedidoId":981}`), "itens is missing or empty"},
		{"empty items", ev(EventPedidoCriadoV2, `{"pedidoId":981,"itens":[]}`), "itens is missing or empty"},
		{"a bad item", ev(EventPedidoCriadoV1, `{"pedidoId":981,"itens":[{"produtoId":7,"quantidade":2},{"quantidade":0}]}`), "itens[1].produtoId is missing or not positive\nitens[1].quantidade 0 is not between 1 and 1000000"},
		{"a cancel without pedidoId", ev(EventPedidoCancelado, `{"itens":[{"produtoId":7,"quantidade":2}]}`), "pedidoId is missing"},
		{"another event", ev("pedido.pago.v1", `{"pedidoId":981}`), "does not handle pedido.pago.v1"},
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					f := newFixture(t, newStore())
					err := f.deliver(tt.e)
					if tt.permanent == "" {
						if err != nil {
							t.Fatal(err)
						}
						if got := f.reservado(7); got != 2 {
							t.Fatalf("reservado %d", got)
						}
						return
					}
					if !event.IsPermanent(err) || !strings.Contains(err.Error(), tt.permanent) || !strings.Contains(err.Error(), tt.e.ID) {
						t.Fatalf("err = %v, want permanent with %q", err, tt.permanent)
					}
					if rec := f.Do("GET", "/estoque/reservas/981", ""); rec.Code != http.StatusNotFound {
						t.Fatalf("after a permanent failure: %d %s", rec.Code, rec.Body)
					}
				})
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		for _, e := range []event.Event{criadoV1(981, `[{"produtoId":7,"quantidade":2},{"produtoId":8,"quantidade":1}]`), criadoV2(982, `[{"produtoId":7,"quantidade":3}]`), cancelado(983)} {
			if err := f.deliver(e); err != nil {
				t.Fatal(err)
			}
		}
		tests := []struct {
			path string
			code int
			want string
		}{
			{"/estoque/reservas/981", http.StatusOK, `{"pedido_id":981,"itens":[{"produto_id":7,"quantidade":2},{"produto_id":8,"quantidade":1}],"liberada":false,"criada_em":"2026-01-15T10:30:01Z","liberada_em":null}`},
			{"/estoque/reservas/983", http.StatusOK, `{"pedido_id":983,"itens":[],"liberada":true,"criada_em":"2026-01-15T10:30:03Z","liberada_em":"2026-01-15T10:30:03Z"}`},
			{"/estoque/reservas/984", http.StatusNotFound, `{"error":"reserva não encontrada"}`},
			{"/estoque/reservas/x", http.StatusBadRequest, `{"error":"requisição inválida: pedido_id no caminho deve ser um número inteiro positivo, como 981"}`},
			{"/estoque/reservas/0", http.StatusBadRequest, `{"error":"requisição inválida: pedido_id no caminho deve ser um número inteiro positivo, como 981"}`},
			{"/estoque/produtos/7", http.StatusOK, `{"produto_id":7,"reservado":5}`},
			{"/estoque/produtos/8", http.StatusOK, `{"produto_id":8,"reservado":1}`},
			{"/estoque/produtos/99", http.StatusOK, `{"produto_id":99,"reservado":0}`},
			{"/estoque/produtos/-7", http.StatusBadRequest, `{"error":"requisição inválida: id no caminho deve ser um número inteiro positivo, como 981"}`},
		}
		for _, tt := range tests {
			rec := f.Do("GET", tt.path, "")
			if rec.Code != tt.code || strings.TrimSpace(rec.Body.String()) != tt.want {
				t.Errorf("GET %s = %d %s, want %d %s", tt.path, rec.Code, rec.Body, tt.code, tt.want)
			}
		}
	})
}

// The pedidos plugin's own events, in both versions, reach the stock as
// the broker would route them: reserved once, released once.
func TestWithThePublisher(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		pub := plugintest.Build(t, s, plugintest.Defaults(pedidos.Plugin()))
		post := func(path, body string) {
			if rec := pub.Do("POST", path, body); rec.Code/100 != 2 {
				t.Fatalf("POST %s = %d %s", path, rec.Code, rec.Body)
			}
		}
		delivered := 0
		pump := func() {
			events := pub.Events()
			if err := f.Relay(Plugin().Subscriptions[0], events[delivered:]); err != nil {
				t.Fatal(err)
			}
			delivered = len(events)
		}
		post("/pedidos", `{"itens":[{"produto_id":7,"quantidade":2}],"total_centavos":1990}`)
		post("/pedidos", `{"itens":[{"produto_id":7,"quantidade":3}],"total_centavos":10}`)
		pump()
		if got := f.reservado(7); got != 5 {
			t.Fatalf("after two pedidos, in v1 and v2 each: reservado %d, want 5", got)
		}
		var first Reserva
		f.get("/estoque/reservas/1", &first)
		post("/pedidos/1/pagar", "")
		post("/pedidos/2/cancelar", "")
		pump()
		if got := f.reservado(7); got != 2 {
			t.Fatalf("after one cancellation: reservado %d, want 2", got)
		}
		if delivered != 6 {
			t.Fatalf("%d events committed, want 6", delivered)
		}
	})
}
