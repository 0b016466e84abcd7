package pedidos

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/moenda/moenda/handlers"
)

// memoryStore keeps pedidos in the process. Writes are staged in the unit
// of work and applied when it commits, so a rolled-back unit leaves
// nothing but a used id, as a PostgreSQL sequence does.
type memoryStore struct {
	rows   *handlers.Staged[int64, Pedido]
	lastID atomic.Int64
}

func newMemoryStore() *memoryStore { return &memoryStore{rows: handlers.NewStaged[int64, Pedido]()} }

// memoryRepository is one unit of work's view of the store.
type memoryRepository struct {
	unit *handlers.Unit[int64, Pedido]
	s    *memoryStore
}

func (s *memoryStore) repository(tx handlers.Tx) Repository {
	return memoryRepository{unit: s.rows.Unit(tx), s: s}
}

func (r memoryRepository) Add(_ context.Context, p Pedido) (int64, error) {
	p.ID = r.s.lastID.Add(1)
	p.Itens = slices.Clone(p.Itens)
	r.unit.Put(p.ID, p)
	return p.ID, nil
}

// Get locks nothing: the memory transactor runs one unit of work at a
// time.
func (r memoryRepository) Get(_ context.Context, id int64) (Pedido, error) {
	p, ok := r.unit.Get(id)
	if !ok {
		return Pedido{}, ErrNaoEncontrado
	}
	p.Itens = slices.Clone(p.Itens)
	return p, nil
}

func (r memoryRepository) Find(ctx context.Context, id int64) (Pedido, error) { return r.Get(ctx, id) }

func (r memoryRepository) Save(_ context.Context, p Pedido) error {
	r.unit.Put(p.ID, p)
	return nil
}
