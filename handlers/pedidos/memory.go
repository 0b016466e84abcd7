package pedidos

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/moenda/moenda/handlers"
)

// memoryStore keeps pedidos in the process. Writes are staged in the unit
// of work and applied when it commits, so a rolled-back unit leaves
// nothing but a used id, as a PostgreSQL sequence does.
type memoryStore struct {
	mu        sync.Mutex
	committed map[int64]Pedido
	lastID    int64
	// open is the unit of work being staged, and staged its writes: every
	// repository asked for in one unit must see the others' writes. The
	// memory transactor runs one unit at a time, so a unit other than open
	// means open has ended.
	open   handlers.Tx
	staged *memoryRepository
}

func newMemoryStore() *memoryStore { return &memoryStore{committed: map[int64]Pedido{}} }

// memoryRepository stages one unit of work.
type memoryRepository struct {
	s      *memoryStore
	staged map[int64]Pedido
}

func (s *memoryStore) repository(tx handlers.Tx) Repository {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == tx {
		return s.staged
	}
	r := &memoryRepository{s: s, staged: map[int64]Pedido{}}
	s.open, s.staged = tx, r
	tx.OnCommit(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		maps.Copy(s.committed, r.staged)
		if s.staged == r {
			s.open, s.staged = nil, nil
		}
	})
	return r
}

func (r *memoryRepository) Add(_ context.Context, p Pedido) (int64, error) {
	r.s.mu.Lock()
	r.s.lastID++
	p.ID = r.s.lastID
	r.s.mu.Unlock()
	p.Itens = slices.Clone(p.Itens)
	r.staged[p.ID] = p
	return p.ID, nil
}

// Get locks nothing: the memory transactor runs one unit of work at a
// time.
func (r *memoryRepository) Get(_ context.Context, id int64) (Pedido, error) {
	p, ok := r.staged[id]
	if !ok {
		r.s.mu.Lock()
		p, ok = r.s.committed[id]
		r.s.mu.Unlock()
	}
	if !ok {
		return Pedido{}, ErrNaoEncontrado
	}
	p.Itens = slices.Clone(p.Itens)
	return p, nil
}

func (r *memoryRepository) Find(ctx context.Context, id int64) (Pedido, error) { return r.Get(ctx, id) }

func (r *memoryRepository) Save(_ context.Context, p Pedido) error {
	r.staged[p.ID] = p
	return nil
}
