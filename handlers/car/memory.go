package car

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moenda/moenda/handlers"
)

// memoryStore keeps the CAR process in the process. Writes are staged in
// the unit of work and applied when it commits, so a rolled-back unit
// leaves nothing, not even a round-robin turn.
type memoryStore struct {
	mu        sync.Mutex
	committed memoryRows
	// open is the unit of work being staged, and staged its writes: every
	// repository asked for in one unit (a handler's InTx joining its
	// delivery's) must see the others' writes. The memory transactor runs
	// one unit at a time, so a unit other than open means open has ended,
	// committed or rolled back.
	open   handlers.Tx
	staged *memoryRepository
}

// memoryRows is one set of rows, each table keyed by its natural key.
type memoryRows struct {
	processos    map[string]Processo
	documentos   map[string]Documento
	mensagens    map[string]Mensagem
	atribuicoes  map[string]string      // analyst by processo id
	notificacoes map[string]Notificacao // by event id
	ocr          map[string]string      // OCR status by documento id
	sicar        map[string]SICAR       // by processo id
	entregas     map[string]time.Time   // delivery time by mensagem id
	vez          int64                  // the round robin's turns taken
}

func newMemoryRows() memoryRows {
	return memoryRows{
		processos: map[string]Processo{}, documentos: map[string]Documento{}, mensagens: map[string]Mensagem{},
		atribuicoes: map[string]string{}, notificacoes: map[string]Notificacao{}, ocr: map[string]string{},
		sicar: map[string]SICAR{}, entregas: map[string]time.Time{},
	}
}

func newMemoryStore() *memoryStore { return &memoryStore{committed: newMemoryRows()} }

// memoryRepository stages one unit of work.
type memoryRepository struct {
	s      *memoryStore
	staged memoryRows // vez counts the turns this unit took
}

func (s *memoryStore) repository(tx handlers.Tx) Repository {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == tx {
		return s.staged
	}
	r := &memoryRepository{s: s, staged: newMemoryRows()}
	s.open, s.staged = tx, r
	tx.OnCommit(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		c, st := &s.committed, &r.staged
		maps.Copy(c.processos, st.processos)
		maps.Copy(c.documentos, st.documentos)
		maps.Copy(c.mensagens, st.mensagens)
		maps.Copy(c.atribuicoes, st.atribuicoes)
		maps.Copy(c.notificacoes, st.notificacoes)
		maps.Copy(c.ocr, st.ocr)
		maps.Copy(c.sicar, st.sicar)
		maps.Copy(c.entregas, st.entregas)
		c.vez += st.vez
		if s.staged == r {
			s.open, s.staged = nil, nil
		}
	})
	return r
}

// get reads key from the unit's writes, then from what is committed.
func get[V any](r *memoryRepository, table func(*memoryRows) map[string]V, key string) (V, bool) {
	if v, ok := table(&r.staged)[key]; ok {
		return v, true
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	v, ok := table(&r.s.committed)[key]
	return v, ok
}

// all lists the rows the unit sees that keep accepts, in no order.
func all[V any](r *memoryRepository, table func(*memoryRows) map[string]V, keep func(V) bool) []V {
	r.s.mu.Lock()
	seen := maps.Clone(table(&r.s.committed))
	r.s.mu.Unlock()
	maps.Copy(seen, table(&r.staged))
	var out []V
	for _, v := range seen {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func (r *memoryRepository) AddProcesso(_ context.Context, p Processo) error {
	r.staged.processos[p.ID] = p
	return nil
}

// GetProcesso locks nothing: the memory transactor runs one unit of work
// at a time.
func (r *memoryRepository) GetProcesso(_ context.Context, id string) (Processo, error) {
	p, ok := get(r, func(m *memoryRows) map[string]Processo { return m.processos }, id)
	if !ok {
		return Processo{}, ErrNaoEncontrado
	}
	return p, nil
}

func (r *memoryRepository) SaveProcesso(_ context.Context, p Processo) error {
	r.staged.processos[p.ID] = p
	return nil
}

func (r *memoryRepository) AddDocumento(_ context.Context, d Documento) error {
	d.OCR = nil
	r.staged.documentos[d.ID] = d
	return nil
}

func (r *memoryRepository) AddMensagem(_ context.Context, m Mensagem) error {
	m.EntregueEm = nil
	r.staged.mensagens[m.ID] = m
	return nil
}

func (r *memoryRepository) Ficha(ctx context.Context, id string) (Ficha, error) {
	p, err := r.GetProcesso(ctx, id)
	if err != nil {
		return Ficha{}, err
	}
	f := Ficha{Processo: p}
	if a, ok := get(r, func(m *memoryRows) map[string]string { return m.atribuicoes }, id); ok {
		f.Analista = &a
	}
	if s, ok := get(r, func(m *memoryRows) map[string]SICAR { return m.sicar }, id); ok {
		f.SICAR = &s
	}
	f.Notificacoes = all(r, func(m *memoryRows) map[string]Notificacao { return m.notificacoes },
		func(n Notificacao) bool { return n.ProcessoID == id })
	slices.SortFunc(f.Notificacoes, func(a, b Notificacao) int {
		return cmp.Or(a.CriadaEm.Compare(b.CriadaEm), strings.Compare(a.EventID, b.EventID))
	})
	f.Documentos = all(r, func(m *memoryRows) map[string]Documento { return m.documentos },
		func(d Documento) bool { return d.ProcessoID == id })
	slices.SortFunc(f.Documentos, func(a, b Documento) int {
		return cmp.Or(a.AnexadoEm.Compare(b.AnexadoEm), strings.Compare(a.ID, b.ID))
	})
	for i, d := range f.Documentos {
		if st, ok := get(r, func(m *memoryRows) map[string]string { return m.ocr }, d.ID); ok {
			f.Documentos[i].OCR = &OCR{Status: st}
		}
	}
	f.Mensagens = all(r, func(m *memoryRows) map[string]Mensagem { return m.mensagens },
		func(m Mensagem) bool { return m.ProcessoID == id })
	slices.SortFunc(f.Mensagens, func(a, b Mensagem) int {
		return cmp.Or(a.EnviadaEm.Compare(b.EnviadaEm), strings.Compare(a.ID, b.ID))
	})
	for i, m := range f.Mensagens {
		if at, ok := get(r, func(m *memoryRows) map[string]time.Time { return m.entregas }, m.ID); ok {
			f.Mensagens[i].EntregueEm = &at
		}
	}
	return f, nil
}

func (r *memoryRepository) Atribuir(_ context.Context, processoID string, _ time.Time, analistas []string) error {
	if _, ok := get(r, func(m *memoryRows) map[string]string { return m.atribuicoes }, processoID); ok {
		return nil // it has its analyst; the turn stays
	}
	r.s.mu.Lock()
	vez := r.s.committed.vez + r.staged.vez
	r.s.mu.Unlock()
	r.staged.atribuicoes[processoID] = analistas[vez%int64(len(analistas))]
	r.staged.vez++
	return nil
}

func (r *memoryRepository) AddNotificacao(_ context.Context, n Notificacao) error {
	if _, ok := get(r, func(m *memoryRows) map[string]Notificacao { return m.notificacoes }, n.EventID); !ok {
		r.staged.notificacoes[n.EventID] = n
	}
	return nil
}

func (r *memoryRepository) AddOCR(_ context.Context, documentoID, _ string, _ time.Time) error {
	if _, ok := get(r, func(m *memoryRows) map[string]string { return m.ocr }, documentoID); !ok {
		r.staged.ocr[documentoID] = OCRPendente
	}
	return nil
}

func (r *memoryRepository) AddSICAR(_ context.Context, processoID string, s SICAR) error {
	if _, ok := get(r, func(m *memoryRows) map[string]SICAR { return m.sicar }, processoID); !ok {
		r.staged.sicar[processoID] = s
	}
	return nil
}

func (r *memoryRepository) AddEntrega(_ context.Context, mensagemID, _ string, at time.Time) error {
	if _, ok := get(r, func(m *memoryRows) map[string]time.Time { return m.entregas }, mensagemID); !ok {
		r.staged.entregas[mensagemID] = at
	}
	return nil
}
