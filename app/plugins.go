package app

import (
	"slices"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/analise"
	"github.com/moenda/moenda/handlers/analytics"
	"github.com/moenda/moenda/handlers/car"
	"github.com/moenda/moenda/handlers/credito"
	"github.com/moenda/moenda/handlers/emails"
	"github.com/moenda/moenda/handlers/estoque"
	"github.com/moenda/moenda/handlers/faultprobe"
	"github.com/moenda/moenda/handlers/locacoes"
	"github.com/moenda/moenda/handlers/notificacoes"
	"github.com/moenda/moenda/handlers/pedidos"
	"github.com/moenda/moenda/handlers/tarefas"
)

// Plugins is the registry of moenda's own binary: the shipped plugins and
// the fault probe.
func Plugins() (*handlers.Registry, error) {
	return newRegistry(Shipped())
}

// newRegistry holds defs and the fault suite's probe. The probe is
// opt-in: carried by every binary, so that `moenda faults` can run it
// alone in its serve processes, and run by no environment.
func newRegistry(defs []handlers.Definition) (*handlers.Registry, error) {
	return handlers.NewRegistry(append(slices.Clip(defs), faultprobe.Plugin())...)
}

// Shipped lists the plugins moenda ships: a new plugin is one folder under
// handlers/ and one line here. A team's own binary passes them, or not,
// beside its own (WithPlugins).
func Shipped() []handlers.Definition {
	return []handlers.Definition{
		tarefas.Plugin(),
		notificacoes.Plugin(),
		analytics.Plugin(),
		car.Plugin(),
		pedidos.Plugin(),
		estoque.Plugin(),
		analise.Plugin(),
		locacoes.Plugin(),
		credito.Plugin(),
		emails.Plugin(),
	}
}
