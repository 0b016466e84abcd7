package estoque

import (
	"context"
	"slices"
	"time"

	"github.com/moenda/moenda/handlers"
)

// memoryRepository is one unit of work's view of the reservations kept
// in the process, by pedido (see handlers.Memory). Writes are staged in
// the unit of work and applied when it commits, so a rolled-back delivery
// reserves nothing.
type memoryRepository struct{ *handlers.Unit[int64, Reserva] }

func newMemoryRepository(u *handlers.Unit[int64, Reserva]) Repository { return memoryRepository{u} }

func (r memoryRepository) AddReserva(_ context.Context, pedidoID int64, itens []Item, at time.Time) error {
	if _, ok := r.Get(pedidoID); ok {
		return nil // reserved already, or cancelled first
	}
	r.Put(pedidoID, Reserva{PedidoID: pedidoID, Itens: slices.Clone(itens), CriadaEm: at})
	return nil
}

func (r memoryRepository) PutLiberada(_ context.Context, pedidoID int64, at time.Time) error {
	res, ok := r.Get(pedidoID)
	if !ok {
		res = Reserva{PedidoID: pedidoID, CriadaEm: at}
	}
	if res.Liberada {
		return nil
	}
	res.Liberada, res.LiberadaEm = true, &at
	r.Put(pedidoID, res)
	return nil
}

func (r memoryRepository) GetReserva(_ context.Context, pedidoID int64) (Reserva, error) {
	res, ok := r.Get(pedidoID)
	if !ok {
		return Reserva{}, ErrNaoEncontrada
	}
	res.Itens = slices.Clone(res.Itens)
	return res, nil
}

func (r memoryRepository) SumReservado(_ context.Context, produtoID int64) (int64, error) {
	var n int64
	for _, res := range r.All() {
		if res.Liberada {
			continue
		}
		for _, it := range res.Itens {
			if it.ProdutoID == produtoID {
				n += int64(it.Quantidade)
			}
		}
	}
	return n, nil
}
