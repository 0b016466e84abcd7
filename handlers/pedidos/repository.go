package pedidos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Repository stores pedidos inside one unit of work.
type Repository interface {
	// Add stores a new pedido and returns its id.
	Add(ctx context.Context, p Pedido) (int64, error)
	// Get loads a pedido, locked until the unit of work ends;
	// ErrNaoEncontrado when there is none.
	Get(ctx context.Context, id int64) (Pedido, error)
	// Find is Get without the lock, for reading.
	Find(ctx context.Context, id int64) (Pedido, error)
	// Save writes a loaded pedido's status and times back.
	Save(ctx context.Context, p Pedido) error
}

// postgresRepository works inside the unit of work's pgx transaction.
type postgresRepository struct{ tx pgx.Tx }

func newPostgresRepository(tx pgx.Tx) Repository { return postgresRepository{tx: tx} }

func (r postgresRepository) Add(ctx context.Context, p Pedido) (int64, error) {
	itens, err := json.Marshal(p.Itens)
	if err != nil {
		return 0, fmt.Errorf("pedidos: encode itens: %w", err)
	}
	var id int64
	err = r.tx.QueryRow(ctx, `
		INSERT INTO pedidos_pedidos (itens, total_centavos, status, criado_em)
		VALUES ($1, $2, $3, $4) RETURNING id`, itens, p.TotalCentavos, p.Status, p.CriadoEm).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("pedidos: insert pedido: %w", err)
	}
	return id, nil
}

func (r postgresRepository) Get(ctx context.Context, id int64) (Pedido, error) {
	return r.load(ctx, id, " FOR UPDATE")
}

func (r postgresRepository) Find(ctx context.Context, id int64) (Pedido, error) {
	return r.load(ctx, id, "")
}

func (r postgresRepository) load(ctx context.Context, id int64, lock string) (Pedido, error) {
	var p Pedido
	var itens []byte
	err := r.tx.QueryRow(ctx, `
		SELECT id, itens, total_centavos, status, criado_em, pago_em, cancelado_em
		FROM pedidos_pedidos WHERE id = $1`+lock, id).
		Scan(&p.ID, &itens, &p.TotalCentavos, &p.Status, &p.CriadoEm, &p.PagoEm, &p.CanceladoEm)
	if errors.Is(err, pgx.ErrNoRows) {
		return Pedido{}, ErrNaoEncontrado
	}
	if err != nil {
		return Pedido{}, fmt.Errorf("pedidos: load pedido %d: %w", id, err)
	}
	if err := json.Unmarshal(itens, &p.Itens); err != nil {
		return Pedido{}, fmt.Errorf("pedidos: decode itens of pedido %d: %w", id, err)
	}
	p.CriadoEm = p.CriadoEm.UTC()
	p.PagoEm = utc(p.PagoEm)
	p.CanceladoEm = utc(p.CanceladoEm)
	return p, nil
}

func (r postgresRepository) Save(ctx context.Context, p Pedido) error {
	_, err := r.tx.Exec(ctx, `
		UPDATE pedidos_pedidos SET status = $2, pago_em = $3, cancelado_em = $4 WHERE id = $1`,
		p.ID, p.Status, p.PagoEm, p.CanceladoEm)
	if err != nil {
		return fmt.Errorf("pedidos: update pedido %d: %w", p.ID, err)
	}
	return nil
}

// utc is t in UTC, as the memory store keeps it.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
