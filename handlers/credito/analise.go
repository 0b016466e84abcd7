package credito

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Seed 004's wire contract: the exchange, and the events by name.
const (
	Exchange               = "rental.exchange"
	EventRentalRequested   = "rental.requested.v1"
	EventAnalysisCompleted = "analysis.completed.v1"
)

// Results of an analysis, as the seed spells them.
const (
	Approved = "APPROVED"
	Rejected = "REJECTED"
)

// Source names this plugin in the events it publishes.
const Source = "credito"

// RentalRequested is the part of rental.requested the analysis reads.
type RentalRequested struct {
	RentalID string `json:"rentalId"`
	UserCpf  string `json:"userCpf"`
}

// AnalysisCompleted is the payload of analysis.completed; Motivo is set
// when the rental is rejected.
type AnalysisCompleted struct {
	RentalID  string  `json:"rentalId"`
	Resultado string  `json:"resultado"`
	Motivo    *string `json:"motivo,omitempty"`
}

type analista struct {
	tx       handlers.Transactor
	latencia time.Duration
	now      func() time.Time
	logger   *slog.Logger
}

// request reads and checks the payload of rental.requested.
func request(e event.Event) (RentalRequested, error) {
	var req RentalRequested
	if err := json.Unmarshal(e.Payload, &req); err != nil {
		return req, event.Permanent(fmt.Errorf("payload of %s: %w", e.Name, err))
	}
	if _, err := uuid.Parse(req.RentalID); err != nil {
		return req, event.Permanent(fmt.Errorf("%s: rentalId %q is not a UUID", e.Name, req.RentalID))
	}
	if !validCPF(req.UserCpf) {
		return req, event.Permanent(fmt.Errorf("%s: userCpf %q is not a CPF of 11 digits", e.Name, req.UserCpf))
	}
	return req, nil
}

// esperar is the analysis's wait, the seed's simulated 2 s: the handler's
// prepare step, so it runs before the delivery's unit of work opens and
// holds no database connection while it waits. A bad payload fails here,
// before any wait.
func (a analista) esperar(ctx context.Context, e event.Event) (context.Context, error) {
	if _, err := request(e); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(a.latencia):
	}
	return ctx, nil
}

// analisar handles rental.requested, once esperar has waited: one
// analysis per rental, whose result leaves in the same transaction as its
// record.
func (a analista) analisar(ctx context.Context, e event.Event) error {
	req, err := request(e)
	if err != nil {
		return err
	}
	return a.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		db := tx.Postgres()
		if db == nil {
			return errors.New("credito: the plugin needs PostgreSQL")
		}
		res := AnalysisCompleted{RentalID: req.RentalID, Resultado: Approved}
		var motivo string
		switch err := db.QueryRow(ctx, `SELECT motivo FROM credito_cpfs_bloqueados WHERE cpf = $1`, req.UserCpf).Scan(&motivo); {
		case err == nil:
			m := "CPF com restrição: " + motivo
			res.Resultado, res.Motivo = Rejected, &m
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("credito: blocked CPFs: %w", err)
		}
		out, err := event.NewFor(EventAnalysisCompleted, Source, req.RentalID, a.now(), res)
		if err != nil {
			return err
		}
		tag, err := db.Exec(ctx, `INSERT INTO credito_analises (rental_id, resultado, motivo, event_id, analisado_em)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (rental_id) DO NOTHING`, req.RentalID, res.Resultado, res.Motivo, out.ID, out.OccurredAt)
		if err != nil {
			return fmt.Errorf("credito: record the analysis: %w", err)
		}
		if tag.RowsAffected() == 0 {
			a.logger.InfoContext(ctx, "rental analysed already: nothing raised", "rental_id", req.RentalID, "event_id", e.ID)
			return nil
		}
		a.logger.InfoContext(ctx, "rental analysed", "rental_id", req.RentalID, "resultado", res.Resultado, "event_id", e.ID, "correlation_id", e.CorrelationID)
		return tx.Publish(ctx, out)
	})
}

// validCPF reports whether s is 11 digits; the check digits are the
// registration's business, and a blocked CPF must be found whatever they
// say.
func validCPF(s string) bool {
	if len(s) != 11 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
