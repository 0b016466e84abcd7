package pedidos

import (
	"context"
	"slices"

	"github.com/moenda/moenda/handlers"
)

// memoryRepository is one unit of work's view of the pedidos kept in the
// process (see handlers.Memory). Writes are staged in the unit of work and
// applied when it commits, so a rolled-back unit leaves nothing but a
// used id, as a PostgreSQL sequence does.
type memoryRepository struct {
	unit *handlers.Unit[int64, Pedido]
}

func newMemoryRepository(u *handlers.Unit[int64, Pedido]) Repository {
	return memoryRepository{unit: u}
}

func (r memoryRepository) Add(_ context.Context, p Pedido) (int64, error) {
	p.ID = r.unit.Sequence()
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
