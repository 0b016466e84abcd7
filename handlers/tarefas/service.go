package tarefas

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moenda/moenda/handlers"
)

// Service holds the use cases. Each runs in one unit of work: the task rows
// and the outbox rows commit together or not at all, and nothing in it calls
// the network.
type Service struct {
	tx   handlers.Transactor
	repo func(handlers.Tx) Repository
	now  func() time.Time
}

// CriarTarefa is the command to create a task.
type CriarTarefa struct {
	UsuarioID   int64  `json:"usuario_id"`
	Titulo      string `json:"titulo"`
	TarefaPaiID *int64 `json:"tarefa_pai_id"`
}

// ErrInvalida wraps a command that names a bad field.
var ErrInvalida = errors.New("invalid request")

// Validate names every bad field.
func (c CriarTarefa) Validate() error {
	var errs []error
	if c.UsuarioID <= 0 {
		errs = append(errs, fmt.Errorf("%w: usuario_id must be a positive integer", ErrInvalida))
	}
	if strings.TrimSpace(c.Titulo) == "" {
		errs = append(errs, fmt.Errorf("%w: titulo is required", ErrInvalida))
	} else if utf8.RuneCountInString(c.Titulo) > 500 {
		errs = append(errs, fmt.Errorf("%w: titulo is longer than 500 characters", ErrInvalida))
	}
	if c.TarefaPaiID != nil && *c.TarefaPaiID <= 0 {
		errs = append(errs, fmt.Errorf("%w: tarefa_pai_id must be a positive integer or null", ErrInvalida))
	}
	return errors.Join(errs...)
}

// Criar creates a task, as a subtask when TarefaPaiID is set; the parent
// must exist and belong to the same user.
func (s *Service) Criar(ctx context.Context, cmd CriarTarefa) (Tarefa, error) {
	if err := cmd.Validate(); err != nil {
		return Tarefa{}, err
	}
	t := Tarefa{UsuarioID: cmd.UsuarioID, Titulo: cmd.Titulo, TarefaPaiID: cmd.TarefaPaiID, CriadaEm: s.now().UTC()}
	err := s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.repo(tx)
		if cmd.TarefaPaiID != nil {
			if _, err := repo.GetDoUsuario(ctx, *cmd.TarefaPaiID, cmd.UsuarioID); errors.Is(err, ErrNaoEncontrada) {
				return fmt.Errorf("%w: tarefa_pai_id %d is not a task of usuario %d", ErrInvalida, *cmd.TarefaPaiID, cmd.UsuarioID)
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
	err := s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.repo(tx)
		t, err := repo.GetDoUsuario(ctx, id, usuarioID)
		if err != nil {
			return err
		}
		if err := t.Concluir(s.now()); err != nil {
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
