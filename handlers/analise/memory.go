package analise

import (
	"context"
	"fmt"
	"time"

	"github.com/moenda/moenda/handlers"
)

// memoryRepository is one unit of work's view of the recorded events kept
// in the process, by event id (see handlers.Memory). Writes are staged in
// the unit of work and applied when it commits.
type memoryRepository struct {
	*handlers.Unit[string, Registro]
}

func newMemoryRepository(u *handlers.Unit[string, Registro]) Repository { return memoryRepository{u} }

func (r memoryRepository) Add(_ context.Context, reg Registro, _ time.Time) error {
	if _, ok := r.Get(reg.EventID); !ok {
		r.Put(reg.EventID, reg)
	}
	return nil
}

func (r memoryRepository) Count(_ context.Context) (Resumo, error) {
	out := Resumo{PorTipo: map[string]int64{}, PorVersao: map[string]int64{}}
	pedidos := map[string]map[int64]bool{}
	for _, reg := range r.All() {
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
