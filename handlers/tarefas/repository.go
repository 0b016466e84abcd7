package tarefas

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/handlers"
)

// Repository stores tasks inside one unit of work.
type Repository interface {
	// Add stores a new task and sets its ID.
	Add(ctx context.Context, t *Tarefa) error
	// Get loads the user's task (another user's is not found), with its count
	// of pending subtasks, locked until the unit of work ends.
	Get(ctx context.Context, id, usuarioID int64) (*Tarefa, error)
	// Find is Get for reading: it locks nothing.
	Find(ctx context.Context, id, usuarioID int64) (*Tarefa, error)
	// List returns up to limit of the user's tasks, newest (highest
	// id) first; when antesDe is not 0, only those with an id below it.
	// Their SubtarefasPendentes are not loaded.
	List(ctx context.Context, usuarioID, antesDe int64, limit int) ([]Tarefa, error)
	// Save writes a loaded task back.
	Save(ctx context.Context, t *Tarefa) error
}

// postgresRepository works inside the unit of work's pgx transaction.
type postgresRepository struct{ tx pgx.Tx }

func newPostgresRepository(tx pgx.Tx) Repository { return postgresRepository{tx: tx} }

func (r postgresRepository) Add(ctx context.Context, t *Tarefa) error {
	err := r.tx.QueryRow(ctx,
		`INSERT INTO tarefas (usuario_id, titulo, tarefa_pai_id) VALUES ($1, $2, $3) RETURNING id, criada_em`,
		t.UsuarioID, t.Titulo, t.TarefaPaiID).Scan(&t.ID, &t.CriadaEm)
	if err != nil {
		return fmt.Errorf("tarefas: insert: %w", err)
	}
	return nil
}

const loadTarefa = `
		SELECT id, usuario_id, titulo, concluida, criada_em, concluida_em, tarefa_pai_id,
		       (SELECT count(*) FROM tarefas s WHERE s.tarefa_pai_id = t.id AND NOT s.concluida)
		FROM tarefas t WHERE id = $1 AND usuario_id = $2`

func (r postgresRepository) Get(ctx context.Context, id, usuarioID int64) (*Tarefa, error) {
	return r.load(ctx, loadTarefa+" FOR UPDATE", id, usuarioID)
}

func (r postgresRepository) Find(ctx context.Context, id, usuarioID int64) (*Tarefa, error) {
	return r.load(ctx, loadTarefa, id, usuarioID)
}

func (r postgresRepository) load(ctx context.Context, query string, id, usuarioID int64) (*Tarefa, error) {
	t := &Tarefa{}
	err := r.tx.QueryRow(ctx, query, id, usuarioID).
		Scan(&t.ID, &t.UsuarioID, &t.Titulo, &t.Concluida, &t.CriadaEm, &t.ConcluidaEm, &t.TarefaPaiID, &t.SubtarefasPendentes)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNaoEncontrada
	}
	if err != nil {
		return nil, fmt.Errorf("tarefas: load %d: %w", id, err)
	}
	return t, nil
}

func (r postgresRepository) List(ctx context.Context, usuarioID, antesDe int64, limit int) ([]Tarefa, error) {
	if antesDe == 0 {
		antesDe = math.MaxInt64
	}
	rows, err := r.tx.Query(ctx, `
		SELECT id, usuario_id, titulo, concluida, criada_em, concluida_em, tarefa_pai_id
		FROM tarefas WHERE usuario_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, usuarioID, antesDe, limit)
	if err != nil {
		return nil, fmt.Errorf("tarefas: list usuario %d: %w", usuarioID, err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tarefa, error) {
		var t Tarefa
		err := row.Scan(&t.ID, &t.UsuarioID, &t.Titulo, &t.Concluida, &t.CriadaEm, &t.ConcluidaEm, &t.TarefaPaiID)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("tarefas: list usuario %d: %w", usuarioID, err)
	}
	return ts, nil
}

func (r postgresRepository) Save(ctx context.Context, t *Tarefa) error {
	_, err := r.tx.Exec(ctx, `UPDATE tarefas SET concluida = $2, concluida_em = $3 WHERE id = $1`, t.ID, t.Concluida, t.ConcluidaEm)
	if err != nil {
		return fmt.Errorf("tarefas: update %d: %w", t.ID, err)
	}
	return nil
}

// memoryRepository is one unit of work's view of the tasks kept in the
// process, staged per unit of work (see handlers.Memory). A rolled-back
// unit leaves nothing but a used id, as a PostgreSQL sequence does.
type memoryRepository struct {
	unit *handlers.Unit[int64, Tarefa]
}

func newMemoryRepository(u *handlers.Unit[int64, Tarefa]) Repository {
	return memoryRepository{unit: u}
}

func (r memoryRepository) Add(_ context.Context, t *Tarefa) error {
	t.ID = r.unit.Sequence()
	r.unit.Put(t.ID, *t)
	return nil
}

func (r memoryRepository) Get(_ context.Context, id, usuarioID int64) (*Tarefa, error) {
	t, ok := r.unit.Get(id)
	if !ok || t.UsuarioID != usuarioID {
		return nil, ErrNaoEncontrada
	}
	for _, s := range r.unit.All() {
		if s.TarefaPaiID != nil && *s.TarefaPaiID == id && !s.Concluida {
			t.SubtarefasPendentes++
		}
	}
	return &t, nil
}

// Find is Get: the memory transactor runs one unit of
// work at a time, so nothing needs locking.
func (r memoryRepository) Find(ctx context.Context, id, usuarioID int64) (*Tarefa, error) {
	return r.Get(ctx, id, usuarioID)
}

func (r memoryRepository) List(_ context.Context, usuarioID, antesDe int64, limit int) ([]Tarefa, error) {
	var out []Tarefa
	for _, t := range r.unit.All() {
		if t.UsuarioID == usuarioID && (antesDe == 0 || t.ID < antesDe) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Tarefa) int { return cmp.Compare(b.ID, a.ID) })
	return out[:min(limit, len(out))], nil
}

func (r memoryRepository) Save(_ context.Context, t *Tarefa) error {
	row := *t
	row.eventos, row.SubtarefasPendentes = nil, 0
	r.unit.Put(t.ID, row)
	return nil
}
