package analise

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/moenda/moenda/handlers"
)

// memoryStore keeps recorded events in the process. Writes are staged in
// the unit of work and applied when it commits.
type memoryStore struct {
	mu        sync.Mutex
	committed map[string]Registro // by event id
	// open is the unit of work being staged, and staged its writes; the
	// memory transactor runs one unit at a time, so a unit other than open
	// means open has ended.
	open   handlers.Tx
	staged *memoryRepository
}

func newMemoryStore() *memoryStore { return &memoryStore{committed: map[string]Registro{}} }

// memoryRepository stages one unit of work.
type memoryRepository struct {
	s      *memoryStore
	staged map[string]Registro
}

func (s *memoryStore) repository(tx handlers.Tx) Repository {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == tx {
		return s.staged
	}
	r := &memoryRepository{s: s, staged: map[string]Registro{}}
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

// seen is every record the unit sees: committed, then its own.
func (r *memoryRepository) seen() map[string]Registro {
	r.s.mu.Lock()
	all := maps.Clone(r.s.committed)
	r.s.mu.Unlock()
	maps.Copy(all, r.staged)
	return all
}

func (r *memoryRepository) Add(_ context.Context, reg Registro, _ time.Time) error {
	if _, ok := r.staged[reg.EventID]; ok {
		return nil
	}
	r.s.mu.Lock()
	_, ok := r.s.committed[reg.EventID]
	r.s.mu.Unlock()
	if !ok {
		r.staged[reg.EventID] = reg
	}
	return nil
}

func (r *memoryRepository) Resumo(_ context.Context) (Resumo, error) {
	out := Resumo{PorTipo: map[string]int64{}, PorVersao: map[string]int64{}}
	pedidos := map[string]map[int64]bool{}
	for _, reg := range r.seen() {
		out.PorVersao[fmt.Sprintf("%s.v%d", reg.Tipo, reg.Versao)]++
		if reg.PedidoID == nil {
			continue
		}
		if pedidos[reg.Tipo] == nil {
			pedidos[reg.Tipo] = map[int64]bool{}
		}
		pedidos[reg.Tipo][*reg.PedidoID] = true
	}
	for tipo, ids := range pedidos {
		out.PorTipo[tipo] = int64(len(ids))
	}
	return out, nil
}
