package tarefas

import (
	"fmt"
	"strconv"
	"time"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// EventTarefaConcluida is published when a task is concluded.
const EventTarefaConcluida = "tarefa.concluida.v1"

// Source names this plugin in the envelopes it publishes.
const Source = "tarefas"

var (
	// ErrNaoEncontrada: no such task for that user.
	ErrNaoEncontrada = handlers.NewError(handlers.ErrNotFound, "tarefa não encontrada")
	// ErrSubtarefasPendentes: the task has subtasks not yet concluded.
	ErrSubtarefasPendentes = handlers.NewError(handlers.ErrConflict, "tarefa tem subtarefas pendentes")
)

// Tarefa is a user's task. It decides alone whether it may be concluded,
// and records the TarefaConcluida event when it is.
type Tarefa struct {
	ID          int64      `json:"id"`
	UsuarioID   int64      `json:"usuario_id"`
	Titulo      string     `json:"titulo"`
	Concluida   bool       `json:"concluida"`
	CriadaEm    time.Time  `json:"criada_em"`
	ConcluidaEm *time.Time `json:"concluida_em"`
	TarefaPaiID *int64     `json:"tarefa_pai_id"`

	// SubtarefasPendentes counts subtasks not yet concluded, as loaded.
	SubtarefasPendentes int `json:"-"`

	eventos []event.Event
}

// TarefaConcluida is the payload of tarefa.concluida.v1.
type TarefaConcluida struct {
	TarefaID  int64  `json:"tarefa_id"`
	UsuarioID int64  `json:"usuario_id"`
	Titulo    string `json:"titulo"`
}

// Concluir concludes the task at now. It fails while a subtask is pending;
// concluding a concluded task changes nothing and raises no event, so the
// request can be repeated safely.
func (t *Tarefa) Concluir(now time.Time) error {
	if t.SubtarefasPendentes > 0 {
		return fmt.Errorf("tarefa %d: %w (%d)", t.ID, ErrSubtarefasPendentes, t.SubtarefasPendentes)
	}
	if t.Concluida {
		return nil
	}
	now = now.UTC()
	e, err := event.NewFor(EventTarefaConcluida, Source, strconv.FormatInt(t.ID, 10), now, TarefaConcluida{TarefaID: t.ID, UsuarioID: t.UsuarioID, Titulo: t.Titulo})
	if err != nil {
		return err
	}
	t.Concluida = true
	t.ConcluidaEm = &now
	t.eventos = append(t.eventos, e)
	return nil
}

// Eventos returns the events raised since the task was loaded.
func (t *Tarefa) Eventos() []event.Event { return t.eventos }
