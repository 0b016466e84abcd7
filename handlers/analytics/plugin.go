// Package analytics is seed 000's reader analytics.metricas: it consumes
// every event (bound to #) and counts them per event type and UTC day, and
// per municipio_ibge when the payload names one. It keeps facts, one row
// per event id, rather than counters, so a redelivery or a replay counts
// nothing twice and Rewind can forget exactly what a replay will read again.
package analytics

import (
	"embed"

	"github.com/moenda/moenda/handlers"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// subscription is the seed's queue name: analytics.metricas.
const subscription = "metricas"

// Plugin returns the plugin's definition. It is replayable: with
// analytics.kafka.enabled it reads the event log, and `moenda replay
// analytics` rebuilds its counts from it.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name: "analytics",
		Subscriptions: []handlers.Subscription{
			{Name: subscription, Events: []string{"#"}},
		},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
		Replayable: true,
	}, struct{}{}, build) // no settings: handlers.analytics has no keys
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	svc := &service{handlers.NewStore(deps.Tx, deps.Clock(), newPostgresRepository, handlers.Memory(newMemoryRepository))}
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{subscription: svc.handle},
		Batches:  map[string]handlers.BatchHandlerFunc{subscription: svc.handleBatch},
		Routes:   routes(svc, deps.Logger),
		Rewind:   svc.rewind,
	}, nil
}
