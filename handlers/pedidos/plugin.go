// Package pedidos is the publisher of seed 001: the orders service. Each
// write raises its event through the outbox, in the same transaction, on
// exchange pedidos: pedido.criado (in the versions the config lists, so a
// migration to v2 can publish both while subscribers move one at a time),
// pedido.pago and pedido.cancelado. Payloads keep the seed's camelCase
// dados shape; the HTTP routes speak snake_case like the other plugins.
package pedidos

import (
	"embed"
	"errors"
	"fmt"
	"slices"

	"github.com/moenda/moenda/handlers"
)

// Config is the plugin's section, handlers.pedidos.
type Config struct {
	// VersoesCriado are the versions of pedido.criado raised for each new
	// pedido, in this order: [1, 2] during the migration of seed 001's
	// "migrar um evento", [2] once no subscriber reads v1.
	VersoesCriado []int `koanf:"versoes_criado"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	if len(c.VersoesCriado) == 0 {
		return errors.New("handlers.pedidos.versoes_criado is empty: list the versions of pedido.criado to publish, e.g. [1, 2]")
	}
	var errs []error
	for i, v := range c.VersoesCriado {
		switch {
		case v != 1 && v != 2:
			errs = append(errs, fmt.Errorf("handlers.pedidos.versoes_criado[%d] is %d: pedido.criado has versions 1 and 2 only", i, v))
		case slices.Index(c.VersoesCriado, v) < i:
			errs = append(errs, fmt.Errorf("handlers.pedidos.versoes_criado[%d] %d is listed twice: each version is published once per pedido", i, v))
		}
	}
	return errors.Join(errs...)
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Plugin returns the plugin's definition: a publisher with no
// subscriptions.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "pedidos",
		Exchange:  "pedidos", // seed 001
		Publishes: []string{EventPedidoCriadoV1, EventPedidoCriadoV2, EventPedidoPago, EventPedidoCancelado},
		Payloads: []handlers.Payload{
			handlers.PayloadOf[PedidoCriadoV1](EventPedidoCriadoV1),
			handlers.PayloadOf[PedidoCriadoV2](EventPedidoCriadoV2),
			handlers.PayloadOf[PedidoPago](EventPedidoPago),
			handlers.PayloadOf[PedidoCancelado](EventPedidoCancelado),
		},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
	}, defaultConfig(), build)
}

// defaultConfig is made afresh for each Definition: the config decoder
// writes a configured list into the default's backing array.
func defaultConfig() Config {
	return Config{VersoesCriado: []int{1, 2}}
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return handlers.Plugin{}, err
	}
	svc := newService(deps.Tx, slices.Clone(cfg.VersoesCriado), deps.Clock())
	return handlers.Plugin{Routes: routes(svc, deps.Logger)}, nil
}
