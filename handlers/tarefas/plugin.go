// Package tarefas is the Tarefas API of seed 002: tasks with subtasks, and
// their conclusion, which raises tarefa.concluida.v1 through the outbox in
// the same transaction that marks the task concluded.
package tarefas

import (
	"embed"

	"github.com/moenda/moenda/handlers"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Plugin returns the plugin's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:       "tarefas",
		Publishes:  []string{EventTarefaConcluida},
		Payloads:   []handlers.Payload{handlers.PayloadOf[TarefaConcluida](EventTarefaConcluida)},
		Exchange:   "eventos.dominio", // seed 002
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
	}, struct{}{}, build) // no settings: handlers.tarefas has no keys
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	svc := &Service{handlers.NewStore(deps.Tx, deps.Clock(), newPostgresRepository, handlers.Memory(newMemoryRepository))}
	return handlers.Plugin{Routes: routes(svc, deps.Logger)}, nil
}
