package pedidos

import (
	"fmt"
	"time"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Events the plugin publishes. The routing key is the name without .vN,
// so a binding to pedido.criado receives both versions.
const (
	// EventPedidoCriadoV1: a pedido was created; total in centavos.
	EventPedidoCriadoV1 = "pedido.criado.v1"
	// EventPedidoCriadoV2: the same fact, the total as valor and moeda.
	EventPedidoCriadoV2 = "pedido.criado.v2"
	// EventPedidoPago: a pedido was paid.
	EventPedidoPago = "pedido.pago.v1"
	// EventPedidoCancelado: a pedido was cancelled; it carries the items so
	// a subscriber can release what it held for them.
	EventPedidoCancelado = "pedido.cancelado.v1"
)

// Source names this plugin in the envelopes it publishes.
const Source = "pedidos"

// Moeda is the currency of every total: the plugin sells in reais.
const Moeda = "BRL"

// States of a pedido.
const (
	StatusCriado    = "criado"
	StatusPago      = "pago"
	StatusCancelado = "cancelado"
)

// Bounds of a request.
const (
	MaxItens      = 100
	MaxQuantidade = 1_000_000
)

var (
	// ErrInvalida wraps a request that names a bad field or parameter. Its
	// messages are in Portuguese and name fields as they are on the wire.
	ErrInvalida = handlers.NewError(handlers.ErrInvalid, "requisição inválida")
	// ErrNaoEncontrado: no pedido with that id.
	ErrNaoEncontrado = handlers.NewError(handlers.ErrNotFound, "pedido não encontrado")
	// ErrConflito wraps a transition the pedido's status forbids (paying a
	// cancelled pedido, cancelling a paid one).
	ErrConflito = handlers.NewError(handlers.ErrConflict, "conflito")
)

// Item is one line of a pedido.
type Item struct {
	ProdutoID  int64 `json:"produto_id"`
	Quantidade int   `json:"quantidade"`
}

// Pedido is an order, as GET /pedidos/{id} shows it.
type Pedido struct {
	ID            int64      `json:"id"`
	Itens         []Item     `json:"itens"`
	TotalCentavos int64      `json:"total_centavos"`
	Status        string     `json:"status"`
	CriadoEm      time.Time  `json:"criado_em"`
	PagoEm        *time.Time `json:"pago_em"`
	CanceladoEm   *time.Time `json:"cancelado_em"`
}

// ItemDados is an item in the events' payloads (seed 001's camelCase).
type ItemDados struct {
	ProdutoID  int64 `json:"produtoId"`
	Quantidade int   `json:"quantidade"`
}

// PedidoCriadoV1 is the payload of pedido.criado.v1.
type PedidoCriadoV1 struct {
	PedidoID      int64       `json:"pedidoId"`
	Itens         []ItemDados `json:"itens"`
	TotalCentavos int64       `json:"totalCentavos"`
}

// Total is an amount as pedido.criado.v2 carries it: a decimal string,
// never a float, and its currency.
type Total struct {
	Valor string `json:"valor"`
	Moeda string `json:"moeda"`
}

// PedidoCriadoV2 is the payload of pedido.criado.v2: v1 with the total in
// centavos replaced by a Total (the incompatible change of seed 001).
type PedidoCriadoV2 struct {
	PedidoID int64       `json:"pedidoId"`
	Itens    []ItemDados `json:"itens"`
	Total    Total       `json:"total"`
}

// PedidoPago is the payload of pedido.pago.v1.
type PedidoPago struct {
	PedidoID int64 `json:"pedidoId"`
}

// PedidoCancelado is the payload of pedido.cancelado.v1.
type PedidoCancelado struct {
	PedidoID int64       `json:"pedidoId"`
	Itens    []ItemDados `json:"itens"`
}

// dados is the items as the payloads carry them.
func (p Pedido) dados() []ItemDados {
	out := make([]ItemDados, len(p.Itens))
	for i, it := range p.Itens {
		out[i] = ItemDados(it)
	}
	return out
}

// valor writes centavos as a decimal string with two places: 1990 is
// "19.90".
func valor(centavos int64) string {
	return fmt.Sprintf("%d.%02d", centavos/100, centavos%100)
}

// criado is the payload of pedido.criado in version v (1 or 2, checked by
// Config.Validate).
func (p Pedido) criado(v int) (string, any) {
	if v == 2 {
		return EventPedidoCriadoV2, PedidoCriadoV2{PedidoID: p.ID, Itens: p.dados(), Total: Total{Valor: valor(p.TotalCentavos), Moeda: Moeda}}
	}
	return EventPedidoCriadoV1, PedidoCriadoV1{PedidoID: p.ID, Itens: p.dados(), TotalCentavos: p.TotalCentavos}
}

// newEvent builds one of the plugin's events about pedido id, occurring
// at at: its AggregateID keeps a pedido's events in order on Kafka.
func newEvent(name string, id int64, at time.Time, payload any) (event.Event, error) {
	return event.NewFor(name, Source, fmt.Sprint(id), at, payload)
}
