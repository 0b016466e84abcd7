// Package credito is seed 004's analysis-service: it consumes
// rental.requested on the seed's queue analysis.requested.queue, looks the
// customer's CPF up in a list of blocked CPFs, waits the configured
// latency (the seed simulates a 2 s analysis; the wait runs before the
// delivery's unit of work opens, so it holds no database connection) and
// raises
// analysis.completed, APPROVED or REJECTED with the reason, in the same
// transaction as its record of the analysis.
package credito

import (
	"embed"
	"fmt"
	"time"

	"github.com/moenda/moenda/handlers"
)

// Config is the plugin's section, handlers.credito.
type Config struct {
	// Latencia is how long an analysis takes: seed 004 simulates 2 s.
	Latencia time.Duration `koanf:"latencia"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	if c.Latencia < 0 || c.Latencia > 20*time.Second {
		return fmt.Errorf("handlers.credito.latencia must be between 0s and 20s (the delivery stays in its consumer meanwhile), got %s", c.Latencia)
	}
	return nil
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SubSolicitacoes is the subscription to rental.requested; its queue is
// the seed's analysis.requested.queue.
const SubSolicitacoes = "solicitacoes"

// Plugin returns the plugin's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "credito",
		Publishes: []string{EventAnalysisCompleted},
		Payloads:  []handlers.Payload{handlers.PayloadOf[AnalysisCompleted](EventAnalysisCompleted)},
		Subscriptions: []handlers.Subscription{{
			Name:    SubSolicitacoes,
			Queue:   "analysis.requested.queue",
			Events:  []string{"rental.requested"},
			Handles: []string{EventRentalRequested},
		}},
		Exchange:      Exchange,
		Migrations:    handlers.MigrationsDir(migrationFiles, "migrations"),
		NeedsPostgres: true,
	}, Config{Latencia: 2 * time.Second}, build)
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	a := analista{tx: deps.Tx, latencia: cfg.Latencia, now: time.Now, logger: deps.Logger}
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{SubSolicitacoes: a.analisar},
		Prepares: map[string]handlers.PrepareFunc{SubSolicitacoes: a.esperar},
	}, nil
}
