package estoque

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/moenda/moenda/handlers"
)

// memoryStore keeps reservations in the process. Writes are staged in the
// unit of work and applied when it commits, so a rolled-back delivery
// reserves nothing.
type memoryStore struct {
	mu        sync.Mutex
	committed map[int64]Reserva
	// open is the unit of work being staged, and staged its writes: every
	// repository asked for in one unit must see the others' writes. The
	// memory transactor runs one unit at a time, so a unit other than open
	// means open has ended.
	open   handlers.Tx
	staged *memoryRepository
}

func newMemoryStore() *memoryStore { return &memoryStore{committed: map[int64]Reserva{}} }

// memoryRepository stages one unit of work.
type memoryRepository struct {
	s      *memoryStore
	staged map[int64]Reserva
}

func (s *memoryStore) repository(tx handlers.Tx) Repository {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == tx {
		return s.staged
	}
	r := &memoryRepository{s: s, staged: map[int64]Reserva{}}
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

// get reads the pedido's reservation from the unit's writes, then from
// what is committed.
func (r *memoryRepository) get(pedidoID int64) (Reserva, bool) {
	if v, ok := r.staged[pedidoID]; ok {
		return v, true
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	v, ok := r.s.committed[pedidoID]
	return v, ok
}

func (r *memoryRepository) Reservar(_ context.Context, pedidoID int64, itens []Item, at time.Time) error {
	if _, ok := r.get(pedidoID); ok {
		return nil // reserved already, or cancelled first
	}
	r.staged[pedidoID] = Reserva{PedidoID: pedidoID, Itens: slices.Clone(itens), CriadaEm: at}
	return nil
}

func (r *memoryRepository) Liberar(_ context.Context, pedidoID int64, at time.Time) error {
	res, ok := r.get(pedidoID)
	if !ok {
		res = Reserva{PedidoID: pedidoID, CriadaEm: at}
	}
	if res.Liberada {
		return nil
	}
	res.Liberada, res.LiberadaEm = true, &at
	r.staged[pedidoID] = res
	return nil
}

func (r *memoryRepository) Reserva(_ context.Context, pedidoID int64) (Reserva, error) {
	res, ok := r.get(pedidoID)
	if !ok {
		return Reserva{}, ErrNaoEncontrada
	}
	res.Itens = slices.Clone(res.Itens)
	return res, nil
}

func (r *memoryRepository) Reservado(_ context.Context, produtoID int64) (int64, error) {
	r.s.mu.Lock()
	seen := maps.Clone(r.s.committed)
	r.s.mu.Unlock()
	maps.Copy(seen, r.staged)
	var n int64
	for _, res := range seen {
		if res.Liberada {
			continue
		}
		for _, it := range res.Itens {
			if it.ProdutoID == produtoID {
				n += int64(it.Quantidade)
			}
		}
	}
	return n, nil
}
