package car

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Repository stores the CAR process inside one unit of work. Ids are
// canonical UUIDs.
type Repository interface {
	// AddProcesso stores a new processo.
	AddProcesso(ctx context.Context, p Processo) error
	// GetProcesso loads a processo, locked until the unit of work ends;
	// ErrNaoEncontrado when there is none.
	GetProcesso(ctx context.Context, id string) (Processo, error)
	// SaveProcesso writes a loaded processo's status back.
	SaveProcesso(ctx context.Context, p Processo) error
	// AddDocumento stores a new documento of an existing processo.
	AddDocumento(ctx context.Context, d Documento) error
	// AddMensagem stores a new mensagem of an existing processo.
	AddMensagem(ctx context.Context, m Mensagem) error
	// GetFicha reads a processo with the consumers' effects; ErrNaoEncontrado
	// when there is none.
	GetFicha(ctx context.Context, id string) (Ficha, error)

	// AddAtribuicao gives the processo the analyst whose turn it is, unless it
	// has one: turn n goes to analistas[n % len(analistas)], and a turn is
	// taken only by an assignment that commits.
	AddAtribuicao(ctx context.Context, processoID string, at time.Time, analistas []string) error
	// AddNotificacao stores n unless its event's is stored.
	AddNotificacao(ctx context.Context, n Notificacao) error
	// AddOCR stores a pending OCR job for the documento unless it has one.
	AddOCR(ctx context.Context, documentoID, processoID string, at time.Time) error
	// AddSICAR stores the processo's SICAR request unless it has one.
	AddSICAR(ctx context.Context, processoID string, s SICAR) error
	// AddEntrega records the mensagem as delivered at at, unless it was.
	AddEntrega(ctx context.Context, mensagemID, processoID string, at time.Time) error
}

// postgresRepository works inside the unit of work's pgx transaction.
type postgresRepository struct{ tx pgx.Tx }

func newPostgresRepository(tx pgx.Tx) Repository { return postgresRepository{tx: tx} }

func (r postgresRepository) AddProcesso(ctx context.Context, p Processo) error {
	return r.exec(ctx, "insert processo "+p.ID, `
		INSERT INTO car_processos (id, requerente_id, municipio_ibge, status, submetido_em, regularizado_em)
		VALUES ($1, $2, $3, $4, $5, $6)`, p.ID, p.RequerenteID, p.MunicipioIBGE, p.Status, p.SubmetidoEm, p.RegularizadoEm)
}

func (r postgresRepository) GetProcesso(ctx context.Context, id string) (Processo, error) {
	return r.loadProcesso(ctx, id, " FOR UPDATE")
}

func (r postgresRepository) loadProcesso(ctx context.Context, id, lock string) (Processo, error) {
	var p Processo
	err := r.tx.QueryRow(ctx, `
		SELECT id::text, requerente_id, municipio_ibge, status, submetido_em, regularizado_em
		FROM car_processos WHERE id = $1`+lock, id).
		Scan(&p.ID, &p.RequerenteID, &p.MunicipioIBGE, &p.Status, &p.SubmetidoEm, &p.RegularizadoEm)
	if errors.Is(err, pgx.ErrNoRows) {
		return Processo{}, ErrNaoEncontrado
	}
	if err != nil {
		return Processo{}, fmt.Errorf("car: load processo %s: %w", id, err)
	}
	p.SubmetidoEm = p.SubmetidoEm.UTC()
	if p.RegularizadoEm != nil {
		t := p.RegularizadoEm.UTC()
		p.RegularizadoEm = &t
	}
	return p, nil
}

func (r postgresRepository) SaveProcesso(ctx context.Context, p Processo) error {
	return r.exec(ctx, "update processo "+p.ID, `UPDATE car_processos SET status = $2, regularizado_em = $3 WHERE id = $1`, p.ID, p.Status, p.RegularizadoEm)
}

func (r postgresRepository) AddDocumento(ctx context.Context, d Documento) error {
	return r.exec(ctx, "insert documento "+d.ID, `INSERT INTO car_documentos (id, processo_id, nome, anexado_em) VALUES ($1, $2, $3, $4)`,
		d.ID, d.ProcessoID, d.Nome, d.AnexadoEm)
}

func (r postgresRepository) AddMensagem(ctx context.Context, m Mensagem) error {
	return r.exec(ctx, "insert mensagem "+m.ID, `INSERT INTO car_mensagens (id, processo_id, texto, enviada_em) VALUES ($1, $2, $3, $4)`,
		m.ID, m.ProcessoID, m.Texto, m.EnviadaEm)
}

func (r postgresRepository) GetFicha(ctx context.Context, id string) (Ficha, error) {
	p, err := r.loadProcesso(ctx, id, "")
	if err != nil {
		return Ficha{}, err
	}
	f := Ficha{Processo: p}
	var analista string
	err = r.tx.QueryRow(ctx, `SELECT analista FROM car_atribuicoes WHERE processo_id = $1`, id).Scan(&analista)
	switch {
	case err == nil:
		f.Analista = &analista
	case !errors.Is(err, pgx.ErrNoRows):
		return Ficha{}, fmt.Errorf("car: load analista of %s: %w", id, err)
	}
	var s SICAR
	err = r.tx.QueryRow(ctx, `SELECT status, municipio_ibge, solicitada_em FROM car_sicar WHERE processo_id = $1`, id).
		Scan(&s.Status, &s.MunicipioIBGE, &s.SolicitadaEm)
	switch {
	case err == nil:
		s.SolicitadaEm = s.SolicitadaEm.UTC()
		f.SICAR = &s
	case !errors.Is(err, pgx.ErrNoRows):
		return Ficha{}, fmt.Errorf("car: load sicar of %s: %w", id, err)
	}

	f.Notificacoes, err = collect(ctx, r.tx, "notificacoes", id, `
		SELECT event_id, evento, requerente_id, texto, criada_em FROM car_notificacoes
		WHERE processo_id = $1 ORDER BY criada_em, event_id`,
		func(row pgx.CollectableRow) (Notificacao, error) {
			n := Notificacao{ProcessoID: id}
			err := row.Scan(&n.EventID, &n.Evento, &n.RequerenteID, &n.Texto, &n.CriadaEm)
			n.CriadaEm = n.CriadaEm.UTC()
			return n, err
		})
	if err != nil {
		return Ficha{}, err
	}
	f.Documentos, err = collect(ctx, r.tx, "documentos", id, `
		SELECT d.id::text, d.nome, d.anexado_em, o.status FROM car_documentos d
		LEFT JOIN car_ocr o ON o.documento_id = d.id
		WHERE d.processo_id = $1 ORDER BY d.anexado_em, d.id`,
		func(row pgx.CollectableRow) (Documento, error) {
			d := Documento{ProcessoID: id}
			var ocr *string
			err := row.Scan(&d.ID, &d.Nome, &d.AnexadoEm, &ocr)
			d.AnexadoEm = d.AnexadoEm.UTC()
			if ocr != nil {
				d.OCR = &OCR{Status: *ocr}
			}
			return d, err
		})
	if err != nil {
		return Ficha{}, err
	}
	f.Mensagens, err = collect(ctx, r.tx, "mensagens", id, `
		SELECT m.id::text, m.texto, m.enviada_em, e.entregue_em FROM car_mensagens m
		LEFT JOIN car_entregas e ON e.mensagem_id = m.id
		WHERE m.processo_id = $1 ORDER BY m.enviada_em, m.id`,
		func(row pgx.CollectableRow) (Mensagem, error) {
			m := Mensagem{ProcessoID: id}
			err := row.Scan(&m.ID, &m.Texto, &m.EnviadaEm, &m.EntregueEm)
			m.EnviadaEm = m.EnviadaEm.UTC()
			if m.EntregueEm != nil {
				t := m.EntregueEm.UTC()
				m.EntregueEm = &t
			}
			return m, err
		})
	if err != nil {
		return Ficha{}, err
	}
	return f, nil
}

// exec runs one statement; what names it in an error.
func (r postgresRepository) exec(ctx context.Context, what, sql string, args ...any) error {
	if _, err := r.tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("car: %s: %w", what, err)
	}
	return nil
}

// collect reads the rows of query about the processo id, one T each by
// scan; what names the rows in an error.
func collect[T any](ctx context.Context, tx pgx.Tx, what, id, query string, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := tx.Query(ctx, query, id)
	var out []T
	if err == nil {
		out, err = pgx.CollectRows(rows, scan)
	}
	if err != nil {
		return nil, fmt.Errorf("car: load %s of %s: %w", what, id, err)
	}
	return out, nil
}

// AddAtribuicao locks the turn counter first: a second delivery for the same
// processo then waits, and sees the first's assignment once it commits,
// so no turn is taken twice or skipped. The lock is held to the end of the
// delivery's unit of work, which serializes assignments: they are one
// short statement each, and one queue's consumer.
func (r postgresRepository) AddAtribuicao(ctx context.Context, processoID string, at time.Time, analistas []string) error {
	var vez int64
	if err := r.tx.QueryRow(ctx, `SELECT proxima_vez FROM car_rodizio FOR UPDATE`).Scan(&vez); err != nil {
		return fmt.Errorf("car: lock the round robin: %w", err)
	}
	tag, err := r.tx.Exec(ctx, `
		INSERT INTO car_atribuicoes (processo_id, analista, vez, atribuido_em) VALUES ($1, $2, $3, $4)
		ON CONFLICT (processo_id) DO NOTHING`, processoID, analistas[vez%int64(len(analistas))], vez, at)
	if err != nil {
		return fmt.Errorf("car: assign processo %s: %w", processoID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil // it has its analyst; the turn stays
	}
	if _, err := r.tx.Exec(ctx, `UPDATE car_rodizio SET proxima_vez = proxima_vez + 1`); err != nil {
		return fmt.Errorf("car: advance the round robin: %w", err)
	}
	return nil
}

func (r postgresRepository) AddNotificacao(ctx context.Context, n Notificacao) error {
	return r.exec(ctx, "insert notificacao of "+n.EventID, `
		INSERT INTO car_notificacoes (event_id, processo_id, evento, requerente_id, texto, criada_em)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (event_id) DO NOTHING`,
		n.EventID, n.ProcessoID, n.Evento, n.RequerenteID, n.Texto, n.CriadaEm)
}

func (r postgresRepository) AddOCR(ctx context.Context, documentoID, processoID string, at time.Time) error {
	return r.exec(ctx, "insert ocr of documento "+documentoID, `
		INSERT INTO car_ocr (documento_id, processo_id, status, criado_em) VALUES ($1, $2, $3, $4)
		ON CONFLICT (documento_id) DO NOTHING`, documentoID, processoID, OCRPendente, at)
}

func (r postgresRepository) AddSICAR(ctx context.Context, processoID string, s SICAR) error {
	return r.exec(ctx, "insert sicar of processo "+processoID, `
		INSERT INTO car_sicar (processo_id, municipio_ibge, status, solicitada_em) VALUES ($1, $2, $3, $4)
		ON CONFLICT (processo_id) DO NOTHING`, processoID, s.MunicipioIBGE, s.Status, s.SolicitadaEm)
}

func (r postgresRepository) AddEntrega(ctx context.Context, mensagemID, processoID string, at time.Time) error {
	return r.exec(ctx, "insert entrega of mensagem "+mensagemID, `
		INSERT INTO car_entregas (mensagem_id, processo_id, entregue_em) VALUES ($1, $2, $3)
		ON CONFLICT (mensagem_id) DO NOTHING`, mensagemID, processoID, at)
}
