package tarefas

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/moenda/moenda/handlers"
)

// Service holds the use cases. Each runs in one unit of work: the task rows
// and the outbox rows commit together or not at all, and nothing in it calls
// the network.
type Service struct {
	handlers.Store[Repository]
}

// CriarTarefa is the command to create a task.
type CriarTarefa struct {
	UsuarioID   int64  `json:"usuario_id"`
	Titulo      string `json:"titulo"`
	TarefaPaiID *int64 `json:"tarefa_pai_id"`
}

// ErrInvalida wraps a request that names a bad field or parameter. Its
// messages, like all the plugin's own, are in Portuguese and name fields
// as they are on the wire.
var ErrInvalida = handlers.NewError(handlers.ErrInvalid, "requisição inválida")

// Validate names every bad field.
func (c CriarTarefa) Validate() error {
	var errs []error
	if c.UsuarioID <= 0 {
		errs = append(errs, fmt.Errorf("%w: usuario_id deve ser um inteiro positivo", ErrInvalida))
	}
	if strings.TrimSpace(c.Titulo) == "" {
		errs = append(errs, fmt.Errorf("%w: titulo é obrigatório", ErrInvalida))
	} else if utf8.RuneCountInString(c.Titulo) > 500 {
		errs = append(errs, fmt.Errorf("%w: titulo tem mais de 500 caracteres", ErrInvalida))
	}
	if c.TarefaPaiID != nil && *c.TarefaPaiID <= 0 {
		errs = append(errs, fmt.Errorf("%w: tarefa_pai_id deve ser um inteiro positivo ou null", ErrInvalida))
	}
	return errors.Join(errs...)
}

// Criar creates a task, as a subtask when TarefaPaiID is set; the parent
// must exist and belong to the same user.
func (s *Service) Criar(ctx context.Context, cmd CriarTarefa) (Tarefa, error) {
	if err := cmd.Validate(); err != nil {
		return Tarefa{}, err
	}
	t := Tarefa{UsuarioID: cmd.UsuarioID, Titulo: cmd.Titulo, TarefaPaiID: cmd.TarefaPaiID, CriadaEm: s.Now().UTC()}
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.Repo(tx)
		if cmd.TarefaPaiID != nil {
			if _, err := repo.Get(ctx, *cmd.TarefaPaiID, cmd.UsuarioID); errors.Is(err, ErrNaoEncontrada) {
				return fmt.Errorf("%w: tarefa_pai_id %d não é uma tarefa do usuario_id %d", ErrInvalida, *cmd.TarefaPaiID, cmd.UsuarioID)
			} else if err != nil {
				return err
			}
		}
		return repo.Add(ctx, &t)
	})
	return t, err
}

// Concluir concludes the user's task and, in the same transaction, writes
// the TarefaConcluida event to the outbox.
func (s *Service) Concluir(ctx context.Context, id, usuarioID int64) (Tarefa, error) {
	var out Tarefa
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.Repo(tx)
		t, err := repo.Get(ctx, id, usuarioID)
		if err != nil {
			return err
		}
		if err := t.Concluir(s.Now()); err != nil {
			return err
		}
		if err := repo.Save(ctx, t); err != nil {
			return err
		}
		if err := tx.Publish(ctx, t.Eventos()...); err != nil {
			return err
		}
		out = *t
		return nil
	})
	return out, err
}

// Buscar returns the user's task. Another user's task is not found, like
// a missing one, so the answer tells nothing about other users.
func (s *Service) Buscar(ctx context.Context, id, usuarioID int64) (Tarefa, error) {
	var errs []error
	if id <= 0 {
		errs = append(errs, fmt.Errorf("%w: id deve ser um inteiro positivo", ErrInvalida))
	}
	if usuarioID <= 0 {
		errs = append(errs, fmt.Errorf("%w: usuario_id deve ser um inteiro positivo", ErrInvalida))
	}
	if err := errors.Join(errs...); err != nil {
		return Tarefa{}, err
	}
	var out Tarefa
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		t, err := s.Repo(tx).Find(ctx, id, usuarioID)
		if err != nil {
			return err
		}
		out = *t
		return nil
	})
	return out, err
}

// Bounds of a page of Listar.
const (
	DefaultLimite = 20
	MaxLimite     = 100
)

// ListarTarefas asks for a page of the user's tasks, newest first.
type ListarTarefas struct {
	UsuarioID int64
	// Limite is the page's size, 1 to MaxLimite; 0 means DefaultLimite.
	Limite int
	// AntesDe, when not 0, lists only the tasks with a smaller id: the
	// page after the one that ended with that task.
	AntesDe int64
}

// Validate names every bad parameter.
func (q ListarTarefas) Validate() error {
	var errs []error
	if q.UsuarioID <= 0 {
		errs = append(errs, fmt.Errorf("%w: usuario_id deve ser um inteiro positivo", ErrInvalida))
	}
	if q.Limite < 0 || q.Limite > MaxLimite {
		errs = append(errs, fmt.Errorf("%w: limite deve ser um inteiro de 1 a %d", ErrInvalida, MaxLimite))
	}
	if q.AntesDe < 0 {
		errs = append(errs, fmt.Errorf("%w: antes_de deve ser um inteiro positivo", ErrInvalida))
	}
	return errors.Join(errs...)
}

// PaginaDeTarefas is one page of the user's tasks, newest first.
type PaginaDeTarefas struct {
	Tarefas []Tarefa `json:"tarefas"`
	// ProximoAntesDe is the antes_de that asks for the next page; nil
	// (null) on the last one.
	ProximoAntesDe *int64 `json:"proximo_antes_de"`
}

// Listar returns a page of the user's tasks, newest first.
func (s *Service) Listar(ctx context.Context, q ListarTarefas) (PaginaDeTarefas, error) {
	if err := q.Validate(); err != nil {
		return PaginaDeTarefas{}, err
	}
	limite := q.Limite
	if limite == 0 {
		limite = DefaultLimite
	}
	ts, err := handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) ([]Tarefa, error) {
		return repo.List(ctx, q.UsuarioID, q.AntesDe, limite+1) // one more tells whether a next page exists
	})
	if err != nil {
		return PaginaDeTarefas{}, err
	}
	page := PaginaDeTarefas{Tarefas: ts}
	if len(ts) > limite {
		page.Tarefas = ts[:limite]
		next := ts[limite-1].ID
		page.ProximoAntesDe = &next
	}
	page.Tarefas = handlers.List(page.Tarefas)
	return page, nil
}
