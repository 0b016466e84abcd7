// Package analise is the analytics service of seed 001, a subscriber to
// every pedido event (binding pedido.#) on its durable queue
// analise.pedidos. It records each event once, whatever its type or
// version, and counts the distinct pedidos per event type: v1 and v2 of
// one creation are one fact, counted once.
package analise

import (
	"embed"

	"github.com/moenda/moenda/handlers"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SubPedidos is the subscription to the pedidos exchange; its queue is
// analise.pedidos, the seed's.
const SubPedidos = "pedidos"

// Plugin returns the plugin's definition. Handles is empty: every version
// of every pedido event is recorded, including types added later.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name: "analise",
		Subscriptions: []handlers.Subscription{{
			Name:   SubPedidos,
			Events: []string{"pedido.#"},
		}},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
	}, struct{}{}, build) // no settings: handlers.analise has no keys
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	svc := newService(deps.Tx, deps.Clock())
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{SubPedidos: svc.registrar},
		Routes:   routes(svc, deps.Logger),
	}, nil
}
