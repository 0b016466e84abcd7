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
	tx   handlers.Transactor
	repo func(handlers.Tx) Repository
	now  func() time.Time
}

// newService returns a Service whose store is chosen per unit of work,
// with one memory store kept for its life (the memory environment).
func newService(tx handlers.Transactor, now func() time.Time) *Service {
	return &Service{tx: tx, now: now, repo: handlers.Repositories(newPostgresRepository, newMemoryStore().repository)}
}

// clock is the time now as both stores keep it: UTC, to the microsecond.
func (s *Service) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

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
		return s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			return s.repo(tx).AddReserva(ctx, p.PedidoID, p.itens(), s.clock())
		})
	case EventPedidoCancelado:
		var p pedidoCancelado
		if err := event.DecodePayload(e, &p, pedidoCancelado.Validate); err != nil {
			return err
		}
		return s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			return s.repo(tx).PutLiberada(ctx, p.PedidoID, s.clock())
		})
	default: // the subscription's Handles keep others away
		return event.Permanent(fmt.Errorf("estoque: does not handle %s (event %s)", e.Name, e.ID))
	}
}

// Reserva returns the pedido's reservation; ErrNaoEncontrada when the
// stock has heard of no such pedido.
func (s *Service) Reserva(ctx context.Context, pedidoID int64) (Reserva, error) {
	r, err := handlers.Result(ctx, s.tx, func(ctx context.Context, tx handlers.Tx) (Reserva, error) {
		return s.repo(tx).GetReserva(ctx, pedidoID)
	})
	if err != nil {
		return Reserva{}, err
	}
	if r.Itens == nil {
		r.Itens = []Item{}
	}
	return r, nil
}

// Produto returns how much of the product is reserved and not released;
// a product no reservation names has 0.
func (s *Service) Produto(ctx context.Context, produtoID int64) (Produto, error) {
	n, err := handlers.Result(ctx, s.tx, func(ctx context.Context, tx handlers.Tx) (int64, error) {
		return s.repo(tx).SumReservado(ctx, produtoID)
	})
	if err != nil {
		return Produto{}, err
	}
	return Produto{ProdutoID: produtoID, Reservado: n}, nil
}
