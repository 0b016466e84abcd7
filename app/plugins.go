package app

import (
	"github.com/moenda/moenda/app/faults/probe"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/analise"
	"github.com/moenda/moenda/handlers/analytics"
	"github.com/moenda/moenda/handlers/car"
	"github.com/moenda/moenda/handlers/credito"
	"github.com/moenda/moenda/handlers/emails"
	"github.com/moenda/moenda/handlers/estoque"
	"github.com/moenda/moenda/handlers/locacoes"
	"github.com/moenda/moenda/handlers/notificacoes"
	"github.com/moenda/moenda/handlers/pedidos"
	"github.com/moenda/moenda/handlers/tarefas"
)

// Plugins is the registry of every plugin this binary carries. All of
// them run unless handlers.enabled chooses, but the fault suite's probe:
// it is opt-in, carried for `moenda faults`, whose serve processes enable
// it alone.
func Plugins() (*handlers.Registry, error) {
	return handlers.NewRegistry(append(shipped(), probe.Plugin())...)
}

// shipped lists the plugins: a new plugin is one folder under handlers/
// and one line here.
func shipped() []handlers.Definition {
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
