package car

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/handlers"
)

// memoryStore keeps the CAR process in the process, one table per
// handlers.Staged, each keyed by its natural key: writes are staged in the
// unit of work and applied when it commits, so a rolled-back unit leaves
// nothing, not even a round-robin turn.
type memoryStore struct {
	processos    *handlers.Staged[string, Processo]
	documentos   *handlers.Staged[string, Documento]
	mensagens    *handlers.Staged[string, Mensagem]
	atribuicoes  *handlers.Staged[string, string]      // analyst by processo id
	notificacoes *handlers.Staged[string, Notificacao] // by event id
	ocr          *handlers.Staged[string, string]      // OCR status by documento id
	sicar        *handlers.Staged[string, SICAR]       // by processo id
	entregas     *handlers.Staged[string, time.Time]   // delivery time by mensagem id
}

func newMemoryStore() *memoryStore {
	return &memoryStore{
		processos: handlers.NewStaged[string, Processo](), documentos: handlers.NewStaged[string, Documento](),
		mensagens: handlers.NewStaged[string, Mensagem](), atribuicoes: handlers.NewStaged[string, string](),
		notificacoes: handlers.NewStaged[string, Notificacao](), ocr: handlers.NewStaged[string, string](),
		sicar: handlers.NewStaged[string, SICAR](), entregas: handlers.NewStaged[string, time.Time](),
	}
}

// memoryRepository is one unit of work's view of the store.
type memoryRepository struct {
	processos    *handlers.Unit[string, Processo]
	documentos   *handlers.Unit[string, Documento]
	mensagens    *handlers.Unit[string, Mensagem]
	atribuicoes  *handlers.Unit[string, string]
	notificacoes *handlers.Unit[string, Notificacao]
	ocr          *handlers.Unit[string, string]
	sicar        *handlers.Unit[string, SICAR]
	entregas     *handlers.Unit[string, time.Time]
}

func (s *memoryStore) repository(tx handlers.Tx) Repository {
	return &memoryRepository{
		processos: s.processos.Unit(tx), documentos: s.documentos.Unit(tx), mensagens: s.mensagens.Unit(tx),
		atribuicoes: s.atribuicoes.Unit(tx), notificacoes: s.notificacoes.Unit(tx), ocr: s.ocr.Unit(tx),
		sicar: s.sicar.Unit(tx), entregas: s.entregas.Unit(tx),
	}
}

// filter lists the rows the unit sees that keep accepts, in no order.
func filter[V any](u *handlers.Unit[string, V], keep func(V) bool) []V {
	var out []V
	for _, v := range u.All() {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func (r *memoryRepository) AddProcesso(_ context.Context, p Processo) error {
	r.processos.Put(p.ID, p)
	return nil
}

// GetProcesso locks nothing: the memory transactor runs one unit of work
// at a time.
func (r *memoryRepository) GetProcesso(_ context.Context, id string) (Processo, error) {
	p, ok := r.processos.Get(id)
	if !ok {
		return Processo{}, ErrNaoEncontrado
	}
	return p, nil
}

func (r *memoryRepository) SaveProcesso(_ context.Context, p Processo) error {
	r.processos.Put(p.ID, p)
	return nil
}

func (r *memoryRepository) AddDocumento(_ context.Context, d Documento) error {
	d.OCR = nil
	r.documentos.Put(d.ID, d)
	return nil
}

func (r *memoryRepository) AddMensagem(_ context.Context, m Mensagem) error {
	m.EntregueEm = nil
	r.mensagens.Put(m.ID, m)
	return nil
}

func (r *memoryRepository) GetFicha(ctx context.Context, id string) (Ficha, error) {
	p, err := r.GetProcesso(ctx, id)
	if err != nil {
		return Ficha{}, err
	}
	f := Ficha{Processo: p}
	if a, ok := r.atribuicoes.Get(id); ok {
		f.Analista = &a
	}
	if s, ok := r.sicar.Get(id); ok {
		f.SICAR = &s
	}
	f.Notificacoes = filter(r.notificacoes, func(n Notificacao) bool { return n.ProcessoID == id })
	slices.SortFunc(f.Notificacoes, func(a, b Notificacao) int {
		return cmp.Or(a.CriadaEm.Compare(b.CriadaEm), strings.Compare(a.EventID, b.EventID))
	})
	f.Documentos = filter(r.documentos, func(d Documento) bool { return d.ProcessoID == id })
	slices.SortFunc(f.Documentos, func(a, b Documento) int {
		return cmp.Or(a.AnexadoEm.Compare(b.AnexadoEm), strings.Compare(a.ID, b.ID))
	})
	for i, d := range f.Documentos {
		if st, ok := r.ocr.Get(d.ID); ok {
			f.Documentos[i].OCR = &OCR{Status: st}
		}
	}
	f.Mensagens = filter(r.mensagens, func(m Mensagem) bool { return m.ProcessoID == id })
	slices.SortFunc(f.Mensagens, func(a, b Mensagem) int {
		return cmp.Or(a.EnviadaEm.Compare(b.EnviadaEm), strings.Compare(a.ID, b.ID))
	})
	for i, m := range f.Mensagens {
		if at, ok := r.entregas.Get(m.ID); ok {
			f.Mensagens[i].EntregueEm = &at
		}
	}
	return f, nil
}

func (r *memoryRepository) AddAtribuicao(_ context.Context, processoID string, _ time.Time, analistas []string) error {
	if _, ok := r.atribuicoes.Get(processoID); ok {
		return nil // it has its analyst; the turn stays
	}
	vez := len(r.atribuicoes.All()) // each assignment took one turn
	r.atribuicoes.Put(processoID, analistas[vez%len(analistas)])
	return nil
}

func (r *memoryRepository) AddNotificacao(_ context.Context, n Notificacao) error {
	if _, ok := r.notificacoes.Get(n.EventID); !ok {
		r.notificacoes.Put(n.EventID, n)
	}
	return nil
}

func (r *memoryRepository) AddOCR(_ context.Context, documentoID, _ string, _ time.Time) error {
	if _, ok := r.ocr.Get(documentoID); !ok {
		r.ocr.Put(documentoID, OCRPendente)
	}
	return nil
}

func (r *memoryRepository) AddSICAR(_ context.Context, processoID string, s SICAR) error {
	if _, ok := r.sicar.Get(processoID); !ok {
		r.sicar.Put(processoID, s)
	}
	return nil
}

func (r *memoryRepository) AddEntrega(_ context.Context, mensagemID, _ string, at time.Time) error {
	if _, ok := r.entregas.Get(mensagemID); !ok {
		r.entregas.Put(mensagemID, at)
	}
	return nil
}
