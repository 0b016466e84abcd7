// Package estoque is the stock service of seed 001, a subscriber: on its
// durable queue estoque.pedidos it reserves a pedido's items when the
// pedido is created (pedido.criado, v1 or v2) and releases them when it is
// cancelled. A pedido is reserved at most once and released at most once,
// whatever events carry it and in whatever order they arrive: the
// reservation is keyed by the pedido id, not by the event id.
package estoque

import (
	"embed"

	"github.com/moenda/moenda/handlers"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SubPedidos is the subscription to the pedidos exchange; its queue is
// estoque.pedidos, the seed's, named after the service, not an instance.
const SubPedidos = "pedidos"

// Events the plugin reads.
const (
	EventPedidoCriadoV1  = "pedido.criado.v1"
	EventPedidoCriadoV2  = "pedido.criado.v2"
	EventPedidoCancelado = "pedido.cancelado.v1"
)

// Plugin returns the plugin's definition. The bindings are the seed's
// (pedido.criado and pedido.cancelado); Handles lists both versions of
// pedido.criado, so the plugin reads either while the publisher migrates.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name: "estoque",
		Subscriptions: []handlers.Subscription{{
			Name:    SubPedidos,
			Events:  []string{"pedido.criado", "pedido.cancelado"},
			Handles: []string{EventPedidoCriadoV1, EventPedidoCriadoV2, EventPedidoCancelado},
		}},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
	}, struct{}{}, build) // no settings: handlers.estoque has no keys
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	svc := newService(deps.Tx, deps.Clock())
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{SubPedidos: svc.handle},
		Routes:   routes(svc, deps.Logger),
	}, nil
}
