package estoque

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/moenda/moenda/handlers"
)

var (
	// ErrInvalida wraps a request that names a bad parameter. Its messages
	// are in Portuguese and name fields as they are on the wire.
	ErrInvalida = handlers.NewError(handlers.ErrInvalid, "requisição inválida")
	// ErrNaoEncontrada: no reservation for that pedido.
	ErrNaoEncontrada = handlers.NewError(handlers.ErrNotFound, "reserva não encontrada")
)

// MaxQuantidade bounds an item's quantity in a payload, so sums stay far
// from overflowing (the publisher allows the same).
const MaxQuantidade = 1_000_000

// Item is a product's quantity reserved for a pedido.
type Item struct {
	ProdutoID  int64 `json:"produto_id"`
	Quantidade int   `json:"quantidade"`
}

// Reserva is what the stock holds for one pedido: GET
// /estoque/reservas/{pedido_id}. A pedido cancelled before its creation
// reached the stock has a released reservation with no items.
type Reserva struct {
	PedidoID   int64      `json:"pedido_id"`
	Itens      []Item     `json:"itens"`
	Liberada   bool       `json:"liberada"`
	CriadaEm   time.Time  `json:"criada_em"`
	LiberadaEm *time.Time `json:"liberada_em"`
}

// Produto is how much of a product is held by reservations not released:
// GET /estoque/produtos/{id}.
type Produto struct {
	ProdutoID int64 `json:"produto_id"`
	Reservado int64 `json:"reservado"`
}

// itemDados is an item as seed 001's payloads carry it.
type itemDados struct {
	ProdutoID  int64 `json:"produtoId"`
	Quantidade int   `json:"quantidade"`
}

// pedidoCriado is the part of pedido.criado.v1 and .v2 the stock reads:
// they differ only in the total, which it ignores. Unknown fields are
// ignored, so the publisher may add some.
type pedidoCriado struct {
	PedidoID int64       `json:"pedidoId"`
	Itens    []itemDados `json:"itens"`
}

// Validate names every missing or bad field.
func (p pedidoCriado) Validate() error {
	var errs []error
	if p.PedidoID <= 0 {
		errs = append(errs, errors.New("pedidoId is missing or not positive"))
	}
	if len(p.Itens) == 0 {
		errs = append(errs, errors.New("itens is missing or empty"))
	}
	for i, it := range p.Itens {
		if it.ProdutoID <= 0 {
			errs = append(errs, fmt.Errorf("itens[%d].produtoId is missing or not positive", i))
		}
		if it.Quantidade <= 0 || it.Quantidade > MaxQuantidade {
			errs = append(errs, fmt.Errorf("itens[%d].quantidade %d is not between 1 and %d", i, it.Quantidade, MaxQuantidade))
		}
	}
	return errors.Join(errs...)
}

// itens merges the payload's lines by product, ordered by product as
// both stores list them: a product listed twice is reserved once, for the
// sum.
func (p pedidoCriado) itens() []Item {
	var out []Item
	at := map[int64]int{}
	for _, it := range p.Itens {
		if i, ok := at[it.ProdutoID]; ok {
			out[i].Quantidade += it.Quantidade
			continue
		}
		at[it.ProdutoID] = len(out)
		out = append(out, Item(it))
	}
	slices.SortFunc(out, func(a, b Item) int { return cmp.Compare(a.ProdutoID, b.ProdutoID) })
	return out
}

// pedidoCancelado is the part of pedido.cancelado.v1 the stock reads. Its
// items are not needed: what is released is what was reserved.
type pedidoCancelado struct {
	PedidoID int64 `json:"pedidoId"`
}

// Validate names a missing pedido id.
func (p pedidoCancelado) Validate() error {
	if p.PedidoID <= 0 {
		return errors.New("pedidoId is missing or not positive")
	}
	return nil
}
