package locacoes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Service holds the plugin's use cases. Each runs in one unit of work:
// a rental's state, its history, the car it reserves and the saga's next
// event commit together or not at all, which closes the seed's
// dual-write gap (saved, then published: a crash in between lost the
// event).
type Service struct {
	tx         handlers.Transactor
	tokens     tokens
	custoSenha int
	// dummyHash is compared when no user has the e-mail, so a login takes
	// as long whether the e-mail is registered or not.
	dummyHash []byte
	now       func() time.Time
	logger    *slog.Logger
}

// inTx runs fn in a unit of work with its PostgreSQL transaction.
func (s *Service) inTx(ctx context.Context, fn func(ctx context.Context, db pgx.Tx, tx handlers.Tx) error) error {
	return s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		db := tx.Postgres()
		if db == nil {
			return errors.New("locacoes: the plugin keeps its state in PostgreSQL")
		}
		return fn(ctx, db, tx)
	})
}

// carros lists the catalog.
func (s *Service) carros(ctx context.Context) ([]Carro, error) {
	var out []Carro
	err := s.inTx(ctx, func(ctx context.Context, db pgx.Tx, _ handlers.Tx) error {
		rows, err := db.Query(ctx, `SELECT id, placa, modelo, marca, cor, ano, valor_diaria::text, status FROM locacoes_carros ORDER BY marca, modelo, placa`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Carro, error) {
			var c Carro
			err := row.Scan(&c.ID, &c.Placa, &c.Modelo, &c.Marca, &c.Cor, &c.Ano, &c.ValorDiaria, &c.Status)
			return c, err
		})
		return err
	})
	return out, err
}

// Solicitacao is the body of POST /rentals.
type Solicitacao struct {
	CarroID string `json:"carroId"`
}

// solicitar stores the caller's rental as PENDENTE and raises
// rental.requested in the same transaction. Whether the car is free is
// the saga's question, answered when the analysis approves.
func (s *Service) solicitar(ctx context.Context, c Claims, req Solicitacao) (Locacao, error) {
	if _, err := uuid.Parse(req.CarroID); err != nil {
		return Locacao{}, fmt.Errorf("%w: carroId %q não é um UUID; os ids estão em GET /carros", ErrInvalida, req.CarroID)
	}
	now := s.now()
	l := Locacao{ID: uuid.NewString(), CarroID: req.CarroID, Status: StatusPendente, CriadoEm: now, AtualizadoEm: now,
		Historico: []Passo{{Status: StatusPendente, Em: now}}}
	l.StatusDescricao = descricoes[l.Status]
	err := s.inTx(ctx, func(ctx context.Context, db pgx.Tx, tx handlers.Tx) error {
		var exists bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM locacoes_carros WHERE id = $1)`, req.CarroID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("%w: carro %s; os ids estão em GET /carros", ErrNaoEncontrado, req.CarroID)
		}
		_, err := db.Exec(ctx, `INSERT INTO locacoes (id, user_id, user_email, user_cpf, carro_id, status, criado_em, atualizado_em)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`, l.ID, c.UserID, c.Email, c.Cpf, l.CarroID, l.Status, now)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.ConstraintName == "locacoes_uma_pendente":
			return fmt.Errorf("%w: você já tem uma locação em análise; acompanhe-a em GET /rentals/{id}", ErrConflito)
		case errors.As(err, &pe) && pe.Code == "23503": // the user is gone
			return fmt.Errorf("%w: o usuário do token não existe mais; cadastre-se de novo", ErrConflito)
		case err != nil:
			return err
		}
		if err := historico(ctx, db, l.ID, StatusPendente, nil, "", now); err != nil {
			return err
		}
		e, err := newEvent(EventRentalRequested, l.ID, now, RentalRequested{
			RentalID: l.ID, UserID: c.UserID, UserEmail: c.Email, UserCpf: c.Cpf, CarroID: l.CarroID,
		})
		if err != nil {
			return err
		}
		return tx.Publish(ctx, e)
	})
	return l, err
}

// buscar returns the caller's rental with its history; another user's is
// not found.
func (s *Service) buscar(ctx context.Context, c Claims, id string) (Locacao, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Locacao{}, fmt.Errorf("%w: id no caminho deve ser um UUID", ErrInvalida)
	}
	var l Locacao
	err := s.inTx(ctx, func(ctx context.Context, db pgx.Tx, _ handlers.Tx) error {
		err := db.QueryRow(ctx, `SELECT id, carro_id, status, motivo, criado_em, atualizado_em FROM locacoes WHERE id = $1 AND user_id = $2`, id, c.UserID).
			Scan(&l.ID, &l.CarroID, &l.Status, &l.Motivo, &l.CriadoEm, &l.AtualizadoEm)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: locação %s", ErrNaoEncontrado, id)
		}
		if err != nil {
			return err
		}
		rows, err := db.Query(ctx, `SELECT status, motivo, em FROM locacoes_historico WHERE rental_id = $1 ORDER BY id`, id)
		if err != nil {
			return err
		}
		l.Historico, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Passo, error) {
			var p Passo
			err := row.Scan(&p.Status, &p.Motivo, &p.Em)
			return p, err
		})
		return err
	})
	l.StatusDescricao = descricoes[l.Status]
	return l, err
}

// devolver ends the caller's confirmed rental and releases its car.
// Repeating it changes nothing.
func (s *Service) devolver(ctx context.Context, c Claims, id string) (Locacao, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Locacao{}, fmt.Errorf("%w: id no caminho deve ser um UUID", ErrInvalida)
	}
	err := s.inTx(ctx, func(ctx context.Context, db pgx.Tx, _ handlers.Tx) error {
		var status, carro string
		err := db.QueryRow(ctx, `SELECT status, carro_id FROM locacoes WHERE id = $1 AND user_id = $2 FOR UPDATE`, id, c.UserID).Scan(&status, &carro)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: locação %s", ErrNaoEncontrado, id)
		case err != nil:
			return err
		case status == StatusDevolvido:
			return nil
		case status != StatusConfirmado:
			return fmt.Errorf("%w: só uma locação CONFIRMADO é devolvida; esta está %s", ErrConflito, status)
		}
		if err := liberar(ctx, db, carro, id); err != nil {
			return err
		}
		return mudar(ctx, db, id, StatusDevolvido, nil, "", s.now())
	})
	if err != nil {
		return Locacao{}, err
	}
	return s.buscar(ctx, c, id)
}

// concluirAnalise handles analysis.completed: approved, it reserves the
// car and confirms the rental, or fails it when the car is not free;
// rejected, it rejects it. The next event leaves with the state change.
// A rental already decided is left alone, so a second delivery under
// another event id changes nothing either.
func (s *Service) concluirAnalise(ctx context.Context, e event.Event) error {
	var a AnalysisCompleted
	if err := json.Unmarshal(e.Payload, &a); err != nil {
		return event.Permanent(fmt.Errorf("payload of %s: %w", e.Name, err))
	}
	if _, err := uuid.Parse(a.RentalID); err != nil {
		return event.Permanent(fmt.Errorf("%s: rentalId %q is not a UUID", e.Name, a.RentalID))
	}
	if a.Resultado != Approved && a.Resultado != Rejected {
		return event.Permanent(fmt.Errorf("%s: resultado %q must be %s or %s", e.Name, a.Resultado, Approved, Rejected))
	}
	return s.inTx(ctx, func(ctx context.Context, db pgx.Tx, tx handlers.Tx) error {
		var status, email, carro string
		err := db.QueryRow(ctx, `SELECT status, user_email, carro_id FROM locacoes WHERE id = $1 FOR UPDATE`, a.RentalID).Scan(&status, &email, &carro)
		if errors.Is(err, pgx.ErrNoRows) {
			return event.Permanent(fmt.Errorf("%s: no rental %s", e.Name, a.RentalID))
		}
		if err != nil {
			return err
		}
		if status != StatusPendente {
			s.logger.InfoContext(ctx, "rental decided already: analysis ignored", "rental_id", a.RentalID, "status", status, "event_id", e.ID)
			return nil
		}
		next, motivo := StatusRejeitado, "reprovado na análise de crédito"
		if a.Motivo != nil && *a.Motivo != "" {
			motivo = *a.Motivo
		}
		var c Carro
		if a.Resultado == Approved {
			var reserved bool
			if c, reserved, err = reservar(ctx, db, carro, a.RentalID); err != nil {
				return err
			}
			next = StatusConfirmado
			if !reserved {
				next, motivo = StatusFalhou, fmt.Sprintf("o carro %s não está disponível (%s)", c.Descricao(), c.Status)
			}
		}
		now := s.now()
		var out event.Event
		var why *string
		if next == StatusConfirmado {
			out, err = newEvent(EventRentalConfirmed, a.RentalID, now, RentalConfirmed{RentalID: a.RentalID, UserEmail: email, CarroDescricao: c.Descricao()})
		} else {
			why = &motivo
			out, err = newEvent(EventRentalFailed, a.RentalID, now, RentalFailed{RentalID: a.RentalID, UserEmail: email, Motivo: motivo})
		}
		if err != nil {
			return err
		}
		if err := mudar(ctx, db, a.RentalID, next, why, e.ID, now); err != nil {
			return err
		}
		s.logger.InfoContext(ctx, "rental decided", "rental_id", a.RentalID, "status", next, "event_id", e.ID, "correlation_id", e.CorrelationID)
		return tx.Publish(ctx, out)
	})
}

// reservar reserves car for rental, the synchronous step of the saga: one
// conditional update, so of two rentals racing for one car exactly one
// wins (the other's update waits for the first to commit, then finds the
// car taken). A rental that holds the car already keeps it. It returns the
// car and whether it is now the rental's.
func reservar(ctx context.Context, db pgx.Tx, carro, rental string) (Carro, bool, error) {
	var c Carro
	err := db.QueryRow(ctx, `UPDATE locacoes_carros SET status = $3, rental_id = $2
		WHERE id = $1 AND (status = $4 OR (status = $3 AND rental_id = $2))
		RETURNING id, placa, modelo, marca, cor, ano, valor_diaria::text, status`, carro, rental, CarroReservado, CarroDisponivel).
		Scan(&c.ID, &c.Placa, &c.Modelo, &c.Marca, &c.Cor, &c.Ano, &c.ValorDiaria, &c.Status)
	if err == nil {
		return c, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return c, false, fmt.Errorf("reserve car %s: %w", carro, err)
	}
	err = db.QueryRow(ctx, `SELECT id, placa, modelo, marca, cor, ano, valor_diaria::text, status FROM locacoes_carros WHERE id = $1`, carro).
		Scan(&c.ID, &c.Placa, &c.Modelo, &c.Marca, &c.Cor, &c.Ano, &c.ValorDiaria, &c.Status)
	if err != nil {
		return c, false, fmt.Errorf("car %s: %w", carro, err)
	}
	return c, false, nil
}

// liberar releases car, held by rental.
func liberar(ctx context.Context, db pgx.Tx, carro, rental string) error {
	_, err := db.Exec(ctx, `UPDATE locacoes_carros SET status = $3, rental_id = NULL WHERE id = $1 AND rental_id = $2`, carro, rental, CarroDisponivel)
	if err != nil {
		return fmt.Errorf("release car %s: %w", carro, err)
	}
	return nil
}

// mudar moves rental to status and writes the step in its history.
func mudar(ctx context.Context, db pgx.Tx, rental, status string, motivo *string, eventID string, at time.Time) error {
	if _, err := db.Exec(ctx, `UPDATE locacoes SET status = $2, motivo = $3, atualizado_em = $4 WHERE id = $1`, rental, status, motivo, at); err != nil {
		return fmt.Errorf("rental %s: %w", rental, err)
	}
	return historico(ctx, db, rental, status, motivo, eventID, at)
}

func historico(ctx context.Context, db pgx.Tx, rental, status string, motivo *string, eventID string, at time.Time) error {
	var ev *string
	if eventID != "" {
		ev = &eventID
	}
	if _, err := db.Exec(ctx, `INSERT INTO locacoes_historico (rental_id, status, motivo, event_id, em) VALUES ($1, $2, $3, $4, $5)`, rental, status, motivo, ev, at); err != nil {
		return fmt.Errorf("rental %s: history: %w", rental, err)
	}
	return nil
}

// newEvent builds one of the saga's events about rental: its AggregateID
// keeps a rental's events in order on Kafka.
func newEvent(name, rental string, at time.Time, payload any) (event.Event, error) {
	return event.NewFor(name, Source, rental, at, payload)
}
