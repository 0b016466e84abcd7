package analise

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Repository stores recorded events inside one unit of work.
type Repository interface {
	// Add records r, received at at, unless its event id is recorded.
	Add(ctx context.Context, r Registro, at time.Time) error
	// Count counts the distinct pedidos of each event type and the
	// events of each versioned name.
	Count(ctx context.Context) (Resumo, error)
}

// postgresRepository works inside the unit of work's pgx transaction.
type postgresRepository struct{ tx pgx.Tx }

func newPostgresRepository(tx pgx.Tx) Repository { return postgresRepository{tx: tx} }

func (r postgresRepository) Add(ctx context.Context, reg Registro, at time.Time) error {
	_, err := r.tx.Exec(ctx, `
		INSERT INTO analise_eventos (event_id, tipo, versao, pedido_id, ocorrido_em, registrado_em)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (event_id) DO NOTHING`,
		reg.EventID, reg.Tipo, reg.Versao, reg.PedidoID, reg.OcorridoEm, at)
	if err != nil {
		return fmt.Errorf("analise: record event %s: %w", reg.EventID, err)
	}
	return nil
}

func (r postgresRepository) Count(ctx context.Context) (Resumo, error) {
	out := Resumo{PorTipo: map[string]int64{}, PorVersao: map[string]int64{}}
	if err := r.count(ctx, out.PorTipo, `
		SELECT tipo, COUNT(DISTINCT pedido_id) FROM analise_eventos
		WHERE pedido_id IS NOT NULL GROUP BY tipo`); err != nil {
		return Resumo{}, fmt.Errorf("analise: count pedidos per type: %w", err)
	}
	if err := r.count(ctx, out.PorVersao, `
		SELECT tipo || '.v' || versao, COUNT(*) FROM analise_eventos GROUP BY tipo, versao`); err != nil {
		return Resumo{}, fmt.Errorf("analise: count events per version: %w", err)
	}
	return out, nil
}

// count puts each row of query, a name and a count, into into.
func (r postgresRepository) count(ctx context.Context, into map[string]int64, query string) error {
	rows, err := r.tx.Query(ctx, query)
	if err != nil {
		return err
	}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		into[name] = n
		return nil
	})
	return err
}
