package pedidos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/moenda/moenda/handlers"
)

// Service holds the use cases. Each runs in one unit of work: the pedido's
// row and its events' outbox rows commit together or not at all.
type Service struct {
	handlers.Store[Repository]
	versoes []int
}

// newService returns a Service whose store is chosen per unit of work,
// with one memory store kept for its life (the memory environment).
func newService(tx handlers.Transactor, versoes []int, now func() time.Time) *Service {
	return &Service{Store: handlers.NewStore(tx, now, newPostgresRepository, handlers.Memory(newMemoryRepository)), versoes: versoes}
}

// CriarPedido is the body of POST /pedidos.
type CriarPedido struct {
	Itens         []Item `json:"itens"`
	TotalCentavos int64  `json:"total_centavos"`
}

// Validate names every bad field. A product listed twice is refused
// rather than merged: the client most likely meant something else.
func (c CriarPedido) Validate() error {
	var errs []error
	switch {
	case len(c.Itens) == 0:
		errs = append(errs, fmt.Errorf("%w: itens deve ter pelo menos um item", ErrInvalida))
	case len(c.Itens) > MaxItens:
		errs = append(errs, fmt.Errorf("%w: itens tem mais de %d itens", ErrInvalida, MaxItens))
	}
	for i, it := range c.Itens {
		if it.ProdutoID <= 0 {
			errs = append(errs, fmt.Errorf("%w: itens[%d].produto_id deve ser um número inteiro positivo", ErrInvalida, i))
		} else if slices.IndexFunc(c.Itens, func(o Item) bool { return o.ProdutoID == it.ProdutoID }) < i {
			errs = append(errs, fmt.Errorf("%w: itens[%d].produto_id %d aparece mais de uma vez; some as quantidades num só item", ErrInvalida, i, it.ProdutoID))
		}
		if it.Quantidade <= 0 || it.Quantidade > MaxQuantidade {
			errs = append(errs, fmt.Errorf("%w: itens[%d].quantidade deve estar entre 1 e %d", ErrInvalida, i, MaxQuantidade))
		}
	}
	if c.TotalCentavos < 0 {
		errs = append(errs, fmt.Errorf("%w: total_centavos não pode ser negativo", ErrInvalida))
	}
	return errors.Join(errs...)
}

// Criar creates a pedido and raises pedido.criado in every configured
// version, in the same unit of work.
func (s *Service) Criar(ctx context.Context, cmd CriarPedido) (Pedido, error) {
	if err := cmd.Validate(); err != nil {
		return Pedido{}, err
	}
	var out Pedido
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		p := Pedido{Itens: slices.Clone(cmd.Itens), TotalCentavos: cmd.TotalCentavos, Status: StatusCriado, CriadoEm: s.Clock()}
		id, err := s.Repo(tx).Add(ctx, p)
		if err != nil {
			return err
		}
		p.ID = id
		for _, v := range s.versoes {
			name, payload := p.criado(v)
			e, err := newEvent(name, p.ID, p.CriadoEm, payload)
			if err != nil {
				return err
			}
			if err := tx.Publish(ctx, e); err != nil {
				return err
			}
		}
		out = p
		return nil
	})
	if err != nil {
		return Pedido{}, err
	}
	return out, nil
}

// Pagar marks the pedido paid and raises pedido.pago.v1. A paid pedido is
// left as it is, with no second event, so the request can be repeated; a
// cancelled one cannot be paid (ErrConflito).
func (s *Service) Pagar(ctx context.Context, id int64) (Pedido, error) {
	return s.transition(ctx, id, StatusPago, func(p *Pedido, now time.Time) (string, any, error) {
		if p.Status == StatusCancelado {
			return "", nil, fmt.Errorf("%w: o pedido %d foi cancelado e não pode ser pago", ErrConflito, p.ID)
		}
		p.PagoEm = &now
		return EventPedidoPago, PedidoPago{PedidoID: p.ID}, nil
	})
}

// Cancelar marks the pedido cancelled and raises pedido.cancelado.v1. A
// cancelled pedido is left as it is, with no second event; a paid one
// cannot be cancelled (ErrConflito): giving the money back is a refund,
// another flow, not a cancellation.
func (s *Service) Cancelar(ctx context.Context, id int64) (Pedido, error) {
	return s.transition(ctx, id, StatusCancelado, func(p *Pedido, now time.Time) (string, any, error) {
		if p.Status == StatusPago {
			return "", nil, fmt.Errorf("%w: o pedido %d já foi pago e não pode ser cancelado", ErrConflito, p.ID)
		}
		p.CanceladoEm = &now
		return EventPedidoCancelado, PedidoCancelado{PedidoID: p.ID, Itens: p.dados()}, nil
	})
}

// transition moves a pedido to status once, under its lock: change sets
// the pedido's fields and returns the event to raise, or refuses.
func (s *Service) transition(ctx context.Context, id int64, status string, change func(p *Pedido, now time.Time) (string, any, error)) (Pedido, error) {
	var out Pedido
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.Repo(tx)
		p, err := repo.Get(ctx, id)
		if err != nil {
			return err
		}
		if p.Status != status {
			now := s.Clock()
			name, payload, err := change(&p, now)
			if err != nil {
				return err
			}
			p.Status = status
			e, err := newEvent(name, p.ID, now, payload)
			if err != nil {
				return err
			}
			if err := repo.Save(ctx, p); err != nil {
				return err
			}
			if err := tx.Publish(ctx, e); err != nil {
				return err
			}
		}
		out = p
		return nil
	})
	return out, err
}

// Buscar returns the pedido.
func (s *Service) Buscar(ctx context.Context, id int64) (Pedido, error) {
	return handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) (Pedido, error) {
		return repo.Find(ctx, id)
	})
}
