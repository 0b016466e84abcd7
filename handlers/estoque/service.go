package estoque

import (
	"context"
	"fmt"
	"time"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Service holds the consumer and the queries. The consumer's writes join
// its delivery's unit of work, with the inbox claim.
type Service struct {
	handlers.Store[Repository]
}

// newService returns a Service whose store is chosen per unit of work,
// with one memory store kept for its life (the memory environment).
func newService(tx handlers.Transactor, now func() time.Time) *Service {
	return &Service{Store: handlers.NewStore(tx, now, newPostgresRepository, handlers.Memory(newMemoryRepository))}
}

// handle (estoque.pedidos) reserves on pedido.criado and releases on
// pedido.cancelado. A payload that cannot be decoded or lacks its pedido
// or items is permanent: retrying cannot fix it. Database errors are
// returned as they are: the platform retries them.
func (s *Service) handle(ctx context.Context, e event.Event) error {
	switch e.Name {
	case EventPedidoCriadoV1, EventPedidoCriadoV2:
		var p pedidoCriado
		if err := event.DecodePayload(e, &p, pedidoCriado.Validate); err != nil {
			return err
		}
		return s.Write(ctx, func(ctx context.Context, repo Repository) error {
			return repo.AddReserva(ctx, p.PedidoID, p.itens(), s.Clock())
		})
	case EventPedidoCancelado:
		var p pedidoCancelado
		if err := event.DecodePayload(e, &p, pedidoCancelado.Validate); err != nil {
			return err
		}
		return s.Write(ctx, func(ctx context.Context, repo Repository) error {
			return repo.PutLiberada(ctx, p.PedidoID, s.Clock())
		})
	default: // the subscription's Handles keep others away
		return event.Permanent(fmt.Errorf("estoque: does not handle %s (event %s)", e.Name, e.ID))
	}
}

// Reserva returns the pedido's reservation; ErrNaoEncontrada when the
// stock has heard of no such pedido.
func (s *Service) Reserva(ctx context.Context, pedidoID int64) (Reserva, error) {
	return handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) (Reserva, error) {
		r, err := repo.GetReserva(ctx, pedidoID)
		r.Itens = handlers.List(r.Itens)
		return r, err
	})
}

// Produto returns how much of the product is reserved and not released;
// a product no reservation names has 0.
func (s *Service) Produto(ctx context.Context, produtoID int64) (Produto, error) {
	return handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) (Produto, error) {
		n, err := repo.SumReservado(ctx, produtoID)
		return Produto{ProdutoID: produtoID, Reservado: n}, err
	})
}
