package app

import (
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/analytics"
	"github.com/moenda/moenda/handlers/notificacoes"
	"github.com/moenda/moenda/handlers/tarefas"
)

// Plugins is the registry of every plugin this binary carries; a new plugin
// is one folder under handlers/ and one line here. Which of them run is
// chosen per environment by handlers.enabled.
func Plugins() (*handlers.Registry, error) {
	return handlers.NewRegistry(
		tarefas.Plugin(),
		notificacoes.Plugin(),
		analytics.Plugin(),
	)
}
