package estoque

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Repository stores reservations inside one unit of work.
type Repository interface {
	// AddReserva stores a reservation of itens for the pedido unless the
	// stock already knows the pedido (reserved, or cancelled first): never
	// twice.
	AddReserva(ctx context.Context, pedidoID int64, itens []Item, at time.Time) error
	// PutLiberada marks the pedido's reservation released unless it was.
	// A pedido the stock does not know yet is stored released, with no
	// items, so its creation arriving later reserves nothing.
	PutLiberada(ctx context.Context, pedidoID int64, at time.Time) error
	// GetReserva reads the pedido's reservation; ErrNaoEncontrada when
	// none.
	GetReserva(ctx context.Context, pedidoID int64) (Reserva, error)
	// SumReservado sums the product's quantity in reservations not
	// released.
	SumReservado(ctx context.Context, produtoID int64) (int64, error)
}

// postgresRepository works inside the unit of work's pgx transaction.
// Two deliveries for one pedido at once (v1 and v2 on two consumers) meet
// on the reservation's primary key: the second waits for the first to
// commit, then finds the row.
type postgresRepository struct{ tx pgx.Tx }

func newPostgresRepository(tx pgx.Tx) Repository { return postgresRepository{tx: tx} }

func (r postgresRepository) AddReserva(ctx context.Context, pedidoID int64, itens []Item, at time.Time) error {
	tag, err := r.tx.Exec(ctx, `
		INSERT INTO estoque_reservas (pedido_id, liberada, criada_em) VALUES ($1, FALSE, $2)
		ON CONFLICT (pedido_id) DO NOTHING`, pedidoID, at)
	if err != nil {
		return fmt.Errorf("estoque: reserve pedido %d: %w", pedidoID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil // reserved already, or cancelled first
	}
	for _, it := range itens {
		_, err := r.tx.Exec(ctx, `
			INSERT INTO estoque_reserva_itens (pedido_id, produto_id, quantidade) VALUES ($1, $2, $3)`,
			pedidoID, it.ProdutoID, it.Quantidade)
		if err != nil {
			return fmt.Errorf("estoque: reserve produto %d for pedido %d: %w", it.ProdutoID, pedidoID, err)
		}
	}
	return nil
}

func (r postgresRepository) PutLiberada(ctx context.Context, pedidoID int64, at time.Time) error {
	_, err := r.tx.Exec(ctx, `
		INSERT INTO estoque_reservas (pedido_id, liberada, criada_em, liberada_em) VALUES ($1, TRUE, $2, $2)
		ON CONFLICT (pedido_id) DO UPDATE SET liberada = TRUE, liberada_em = EXCLUDED.liberada_em
		WHERE NOT estoque_reservas.liberada`, pedidoID, at)
	if err != nil {
		return fmt.Errorf("estoque: release pedido %d: %w", pedidoID, err)
	}
	return nil
}

func (r postgresRepository) GetReserva(ctx context.Context, pedidoID int64) (Reserva, error) {
	res := Reserva{PedidoID: pedidoID}
	err := r.tx.QueryRow(ctx, `
		SELECT liberada, criada_em, liberada_em FROM estoque_reservas WHERE pedido_id = $1`, pedidoID).
		Scan(&res.Liberada, &res.CriadaEm, &res.LiberadaEm)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reserva{}, ErrNaoEncontrada
	}
	if err != nil {
		return Reserva{}, fmt.Errorf("estoque: load reserva of pedido %d: %w", pedidoID, err)
	}
	res.CriadaEm = res.CriadaEm.UTC()
	if res.LiberadaEm != nil {
		t := res.LiberadaEm.UTC()
		res.LiberadaEm = &t
	}
	rows, err := r.tx.Query(ctx, `
		SELECT produto_id, quantidade FROM estoque_reserva_itens WHERE pedido_id = $1 ORDER BY produto_id`, pedidoID)
	if err == nil {
		res.Itens, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Item])
	}
	if err != nil {
		return Reserva{}, fmt.Errorf("estoque: load itens of pedido %d: %w", pedidoID, err)
	}
	return res, nil
}

func (r postgresRepository) SumReservado(ctx context.Context, produtoID int64) (int64, error) {
	var n int64
	err := r.tx.QueryRow(ctx, `
		SELECT COALESCE(SUM(i.quantidade), 0) FROM estoque_reserva_itens i
		JOIN estoque_reservas r ON r.pedido_id = i.pedido_id
		WHERE i.produto_id = $1 AND NOT r.liberada`, produtoID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("estoque: sum reservations of produto %d: %w", produtoID, err)
	}
	return n, nil
}
