package app

import (
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

// Plugins is the registry of every plugin this binary carries. Which of
// them run is chosen per environment by handlers.enabled. The fault
// suite's probe is carried for `moenda faults`, whose serve processes
// enable it alone; no environment does.
func Plugins() (*handlers.Registry, error) {
	return handlers.NewRegistry(append(shipped(), faultprobe.Plugin())...)
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
