package pedidos

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// stores returns every store the plugin runs on.
func stores(t *testing.T) plugintest.StoreSet { return plugintest.Stores(t, Plugin()) }

type fixture struct{ *plugintest.Plugin }

// newFixture builds the plugin over s with cfg and a clock that moves one
// second at each reading.
func newFixture(t *testing.T, s plugintest.Store, cfg Config) *fixture {
	t.Helper()
	return &fixture{plugintest.Build(t, s, func(deps handlers.Deps) (handlers.Plugin, error) { return build(cfg, deps) })}
}

func (f *fixture) criar(body string) Pedido {
	f.T.Helper()
	var p Pedido
	f.Must(http.StatusCreated, "POST", "/pedidos", body, &p)
	return p
}

func TestSpec(t *testing.T) {
	def := Plugin()
	if def.Name != "pedidos" || def.Exchange != "pedidos" || len(def.Subscriptions) != 0 {
		t.Fatalf("spec = %+v", def.Spec)
	}
	want := []string{"pedido.criado.v1", "pedido.criado.v2", "pedido.pago.v1", "pedido.cancelado.v1"}
	if !reflect.DeepEqual(def.Publishes, want) {
		t.Fatalf("publishes %v, want %v", def.Publishes, want)
	}
	if p := plugintest.CheckDefinition(t, def, "00001_pedidos.sql"); p.Routes == nil {
		t.Fatalf("Build = %+v", p)
	}
}

func TestConfig(t *testing.T) {
	plugintest.CheckConfigs(t, Plugin(), []plugintest.ConfigCase{
		{Name: "defaults", Config: &Config{VersoesCriado: defaultConfig().VersoesCriado}, Want: ""},
		{Name: "v1 only", Config: &Config{VersoesCriado: []int{1}}, Want: ""},
		{Name: "v2 only", Config: &Config{VersoesCriado: []int{2}}, Want: ""},
		{Name: "v2 then v1", Config: &Config{VersoesCriado: []int{2, 1}}, Want: ""},
		{Name: "none", Config: &Config{VersoesCriado: nil}, Want: "handlers.pedidos.versoes_criado is empty"},
		{Name: "v3", Config: &Config{VersoesCriado: []int{1, 3}}, Want: "handlers.pedidos.versoes_criado[1] is 3: pedido.criado has versions 1 and 2 only"},
		{Name: "v0", Config: &Config{VersoesCriado: []int{0}}, Want: "handlers.pedidos.versoes_criado[0] is 0"},
		{Name: "twice", Config: &Config{VersoesCriado: []int{2, 1, 2}}, Want: "handlers.pedidos.versoes_criado[2] 2 is listed twice"},
	})
	if got := Plugin().NewConfig().(*Config).VersoesCriado; !reflect.DeepEqual(got, []int{1, 2}) {
		t.Fatalf("default versoes_criado = %v", got)
	}
}

const seedPedido = `{"itens":[{"produto_id":7,"quantidade":2}],"total_centavos":1990}`

func TestRoutes(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s, defaultConfig())
		p := f.criar(seedPedido)
		if p.ID <= 0 {
			t.Fatalf("id = %d", p.ID)
		}
		pago := f.criar(seedPedido)
		cancelado := f.criar(seedPedido)
		id := func(n int64) string { return "/pedidos/" + itoa(n) }
		tests := []struct {
			method, path, body string
			code               int
			want               string // a part of the answer
		}{
			{"POST", "/pedidos", `{"itens":[{"produto_id":1,"quantidade":1},{"produto_id":2,"quantidade":3}],"total_centavos":0}`, http.StatusCreated, `"itens":[{"produto_id":1,"quantidade":1},{"produto_id":2,"quantidade":3}],"total_centavos":0,"status":"criado","criado_em":"2026-01-15T10:30:`},
			{"POST", "/pedidos", `{"itens":[],"total_centavos":10}`, http.StatusBadRequest, `{"error":"requisição inválida: itens deve ter pelo menos um item"}`},
			{"POST", "/pedidos", `{"total_centavos":10}`, http.StatusBadRequest, `itens deve ter pelo menos um item`},
			{"POST", "/pedidos", `{"itens":[{"produto_id":0,"quantidade":0}],"total_centavos":-1}`, http.StatusBadRequest, `{"error":"requisição inválida: itens[0].produto_id deve ser um número inteiro positivo\nrequisição inválida: itens[0].quantidade deve estar entre 1 e 1000000\nrequisição inválida: total_centavos não pode ser negativo"}`},
			{"POST", "/pedidos", `{"itens":[{"produto_id":-7,"quantidade":-2}],"total_centavos":1}`, http.StatusBadRequest, `itens[0].produto_id deve ser um número inteiro positivo`},
			{"POST", "/pedidos", `{"itens":[{"produto_id":7,"quantidade":1000001}],"total_centavos":1}`, http.StatusBadRequest, `itens[0].quantidade deve estar entre 1 e 1000000`},
			{"POST", "/pedidos", `{"itens":[{"produto_id":7,"quantidade":1},{"produto_id":7,"quantidade":2}],"total_centavos":1}`, http.StatusBadRequest, `itens[1].produto_id 7 aparece mais de uma vez`},
			{"POST", "/pedidos", `{"itens":[{"produtoId":7,"quantidade":2}],"total_centavos":1}`, http.StatusBadRequest, `unknown field \"produtoId\"`},
			{"POST", "/pedidos", `{"itens":[{"produto_id":7,"quantidade":1.5}],"total_centavos":1}`, http.StatusBadRequest, `quantidade`},
			{"POST", "/pedidos", ``, http.StatusBadRequest, `body is empty`},
			{"GET", id(p.ID), "", http.StatusOK, `"itens":[{"produto_id":7,"quantidade":2}],"total_centavos":1990,"status":"criado","criado_em":"2026-01-15T10:30:01Z","pago_em":null,"cancelado_em":null}`},
			{"GET", "/pedidos/999999", "", http.StatusNotFound, `{"error":"pedido não encontrado"}`},
			{"GET", "/pedidos/abc", "", http.StatusBadRequest, `{"error":"requisição inválida: id no caminho deve ser um número inteiro positivo, como 981"}`},
			{"GET", "/pedidos/0", "", http.StatusBadRequest, `id no caminho deve ser um número inteiro positivo`},
			{"POST", "/pedidos/999999/pagar", "", http.StatusNotFound, `{"error":"pedido não encontrado"}`},
			{"POST", "/pedidos/-1/cancelar", "", http.StatusBadRequest, `id no caminho deve ser um número inteiro positivo`},
			{"POST", id(pago.ID) + "/pagar", "", http.StatusOK, `"status":"pago","criado_em":"2026-01-15T10:30:02Z","pago_em":"2026-01-15T10:30:`},
			{"POST", id(pago.ID) + "/pagar", "", http.StatusOK, `"status":"pago"`},
			{"POST", id(pago.ID) + "/cancelar", "", http.StatusConflict, `já foi pago e não pode ser cancelado`},
			{"POST", id(cancelado.ID) + "/cancelar", "", http.StatusOK, `"status":"cancelado","criado_em":"2026-01-15T10:30:03Z","pago_em":null,"cancelado_em":"2026-01-15T10:30:`},
			{"POST", id(cancelado.ID) + "/cancelar", "", http.StatusOK, `"status":"cancelado"`},
			{"POST", id(cancelado.ID) + "/pagar", "", http.StatusConflict, `foi cancelado e não pode ser pago`},
		}
		for _, tt := range tests {
			rec := f.Do(tt.method, tt.path, tt.body)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%s %s %s = %d %s, want %d with %s", tt.method, tt.path, tt.body, rec.Code, rec.Body, tt.code, tt.want)
			}
		}
		var got Pedido
		f.Must(http.StatusOK, "GET", id(p.ID), "", &got)
		if got.Status != StatusCriado {
			t.Fatalf("the first pedido changed: %+v", got)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// raised is what the tests check of an event: its name, aggregate and
// payload, verbatim.
type raised struct {
	name, aggregate, payload string
}

func raisedOf(es []event.Event) []raised {
	out := []raised{}
	for _, e := range es {
		out = append(out, raised{e.Name, e.AggregateID, string(e.Payload)})
	}
	return out
}

// Every write raises its events, once, in its unit of work, with the
// seed's payloads; pedido.criado in each configured version.
func TestWritesRaiseTheirEvents(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s, defaultConfig())
		a := f.criar(seedPedido)
		b := f.criar(`{"itens":[{"produto_id":7,"quantidade":2},{"produto_id":9,"quantidade":1}],"total_centavos":5}`)
		f.Must(http.StatusOK, "POST", "/pedidos/"+itoa(a.ID)+"/pagar", "", nil)
		f.Must(http.StatusOK, "POST", "/pedidos/"+itoa(a.ID)+"/pagar", "", nil)
		f.Must(http.StatusOK, "POST", "/pedidos/"+itoa(b.ID)+"/cancelar", "", nil)
		f.Must(http.StatusOK, "POST", "/pedidos/"+itoa(b.ID)+"/cancelar", "", nil)
		f.Must(http.StatusConflict, "POST", "/pedidos/"+itoa(b.ID)+"/pagar", "", nil)
		f.Must(http.StatusBadRequest, "POST", "/pedidos", `{"itens":[],"total_centavos":1}`, nil)

		A, B := itoa(a.ID), itoa(b.ID)
		want := []raised{
			{"pedido.criado.v1", A, `{"pedidoId":` + A + `,"itens":[{"produtoId":7,"quantidade":2}],"totalCentavos":1990}`},
			{"pedido.criado.v2", A, `{"pedidoId":` + A + `,"itens":[{"produtoId":7,"quantidade":2}],"total":{"valor":"19.90","moeda":"BRL"}}`},
			{"pedido.criado.v1", B, `{"pedidoId":` + B + `,"itens":[{"produtoId":7,"quantidade":2},{"produtoId":9,"quantidade":1}],"totalCentavos":5}`},
			{"pedido.criado.v2", B, `{"pedidoId":` + B + `,"itens":[{"produtoId":7,"quantidade":2},{"produtoId":9,"quantidade":1}],"total":{"valor":"0.05","moeda":"BRL"}}`},
			{"pedido.pago.v1", A, `{"pedidoId":` + A + `}`},
			{"pedido.cancelado.v1", B, `{"pedidoId":` + B + `,"itens":[{"produtoId":7,"quantidade":2},{"produtoId":9,"quantidade":1}]}`},
		}
		es := f.Events()
		if got := raisedOf(es); !reflect.DeepEqual(got, want) {
			t.Fatalf("raised\n%v\nwant\n%v", got, want)
		}
		for _, e := range es {
			if e.Source != Source || e.RoutingKey() == e.Name || e.OccurredAt.IsZero() {
				t.Errorf("event %+v", e)
			}
		}
		// Both versions of one creation are one fact: same time, distinct ids.
		if es[0].ID == es[1].ID || !es[0].OccurredAt.Equal(es[1].OccurredAt) || es[0].RoutingKey() != "pedido.criado" {
			t.Errorf("v1 %+v and v2 %+v of one creation", es[0], es[1])
		}
	})
}

// A migration publishes what the config lists, in its order: subscribers
// move from v1 to v2 one at a time, then v1 stops.
func TestVersoesCriado(t *testing.T) {
	for name, newStore := range stores(t) {
		for _, versoes := range [][]int{{1}, {2}, {2, 1}} {
			t.Run(name+"/"+strings.Trim(strings.ReplaceAll(string(must(json.Marshal(versoes))), ",", "_"), "[]"), func(t *testing.T) {
				f := newFixture(t, newStore(), Config{VersoesCriado: versoes})
				f.criar(seedPedido)
				var got []string
				for _, e := range f.Events() {
					got = append(got, e.Name)
				}
				var want []string
				for _, v := range versoes {
					want = append(want, "pedido.criado.v"+itoa(int64(v)))
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("raised %v, want %v", got, want)
				}
			})
		}
	}
}

// A unit of work that fails leaves neither the row nor its events.
func TestNothingWithoutCommit(t *testing.T) {
	stores(t).Each(t, func(t *testing.T, s plugintest.Store) {
		svc := newService(s.Tx, []int{1, 2}, time.Now)
		var id int64
		err := s.Tx.InTx(context.Background(), func(ctx context.Context, tx handlers.Tx) error {
			p, err := svc.Criar(ctx, CriarPedido{Itens: []Item{{ProdutoID: 7, Quantidade: 2}}, TotalCentavos: 1990})
			if err != nil {
				return err
			}
			id = p.ID
			return context.Canceled
		})
		if err != context.Canceled {
			t.Fatalf("InTx = %v", err)
		}
		if _, err := svc.Buscar(context.Background(), id); err != ErrNaoEncontrado {
			t.Fatalf("Buscar after a rollback = %v", err)
		}
		if n := len(s.Committed()); n != 0 {
			t.Fatalf("%d events left a rolled-back unit", n)
		}
	})
}

func TestValor(t *testing.T) {
	for c, want := range map[int64]string{0: "0.00", 5: "0.05", 99: "0.99", 100: "1.00", 1990: "19.90", 123456: "1234.56"} {
		if got := valor(c); got != want {
			t.Errorf("valor(%d) = %q, want %q", c, got, want)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
