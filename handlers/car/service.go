package car

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers"
)

// Bounds of the text fields, in characters.
const (
	MaxRequerenteID = 100
	MaxNome         = 255
	MaxTexto        = 4000
)

// Service holds the use cases and the consumers. Each runs in one unit of
// work: the rows and the outbox rows commit together or not at all, and a
// consumer's writes join its delivery's unit, with the inbox claim.
type Service struct {
	handlers.Store[Repository]
	analistas []string
}

// newService returns a Service whose store is chosen per unit of work,
// with one memory store kept for its life (the memory environment).
func newService(tx handlers.Transactor, analistas []string, now func() time.Time) *Service {
	return &Service{Store: handlers.NewStore(tx, now, newPostgresRepository, newMemoryStore().repository), analistas: analistas}
}

// SubmeterProcesso is the body of POST /processos.
type SubmeterProcesso struct {
	RequerenteID  string `json:"requerente_id"`
	MunicipioIBGE string `json:"municipio_ibge"`
}

// Validate names every bad field.
func (c SubmeterProcesso) Validate() error {
	var errs []error
	if strings.TrimSpace(c.RequerenteID) == "" {
		errs = append(errs, fmt.Errorf("%w: requerente_id é obrigatório", ErrInvalida))
	} else if utf8.RuneCountInString(c.RequerenteID) > MaxRequerenteID {
		errs = append(errs, fmt.Errorf("%w: requerente_id tem mais de %d caracteres", ErrInvalida, MaxRequerenteID))
	}
	if !ibge(c.MunicipioIBGE) {
		errs = append(errs, fmt.Errorf("%w: municipio_ibge deve ter exatamente 7 dígitos (o código IBGE do município, como 2111300)", ErrInvalida))
	}
	return errors.Join(errs...)
}

// Submeter creates a processo and raises processo.submetido.v1 with it.
func (s *Service) Submeter(ctx context.Context, cmd SubmeterProcesso) (Processo, error) {
	if err := cmd.Validate(); err != nil {
		return Processo{}, err
	}
	p := Processo{ID: uuid.NewString(), RequerenteID: cmd.RequerenteID, MunicipioIBGE: cmd.MunicipioIBGE, Status: StatusSubmetido, SubmetidoEm: s.Clock()}
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		return raise(ctx, tx, EventProcessoSubmetido, p.ID, p.SubmetidoEm, p.referencia(), func() error { return s.Repo(tx).AddProcesso(ctx, p) })
	})
	if err != nil {
		return Processo{}, err
	}
	return p, nil
}

// Regularizar marks the processo regular and raises processo.regular.v1.
// A regular processo is left as it is, with no second event, so the
// request can be repeated safely.
func (s *Service) Regularizar(ctx context.Context, id string) (Processo, error) {
	return handlers.Result(ctx, s.Tx, func(ctx context.Context, tx handlers.Tx) (Processo, error) {
		repo := s.Repo(tx)
		p, err := repo.GetProcesso(ctx, id)
		if err != nil || p.Status == StatusRegular {
			return p, err
		}
		now := s.Clock()
		p.Status, p.RegularizadoEm = StatusRegular, &now
		return p, raise(ctx, tx, EventProcessoRegular, p.ID, now, p.referencia(), func() error { return repo.SaveProcesso(ctx, p) })
	})
}

// AnexarDocumento is the body of POST /processos/{id}/documentos.
type AnexarDocumento struct {
	Nome string `json:"nome"`
}

// Validate names every bad field.
func (c AnexarDocumento) Validate() error {
	return checkText("nome", c.Nome, MaxNome)
}

// Anexar attaches a documento to the processo and raises
// documento.anexado.v1.
func (s *Service) Anexar(ctx context.Context, processoID string, cmd AnexarDocumento) (Documento, error) {
	if err := cmd.Validate(); err != nil {
		return Documento{}, err
	}
	d := Documento{ID: uuid.NewString(), ProcessoID: processoID, Nome: cmd.Nome, AnexadoEm: s.Clock()}
	err := s.addToProcesso(ctx, processoID, EventDocumentoAnexado, d.AnexadoEm,
		func(ref Referencia) any { return DocumentoAnexado{Referencia: ref, DocumentoID: d.ID, Nome: d.Nome} },
		func(ctx context.Context, repo Repository) error { return repo.AddDocumento(ctx, d) })
	if err != nil {
		return Documento{}, err
	}
	return d, nil
}

// EnviarMensagem is the body of POST /processos/{id}/mensagens.
type EnviarMensagem struct {
	Texto string `json:"texto"`
}

// Validate names every bad field.
func (c EnviarMensagem) Validate() error {
	return checkText("texto", c.Texto, MaxTexto)
}

// Enviar records a message to the processo's requerente and raises
// canal.web.mensagem.v1; the mensagens consumer delivers it.
func (s *Service) Enviar(ctx context.Context, processoID string, cmd EnviarMensagem) (Mensagem, error) {
	if err := cmd.Validate(); err != nil {
		return Mensagem{}, err
	}
	m := Mensagem{ID: uuid.NewString(), ProcessoID: processoID, Texto: cmd.Texto, EnviadaEm: s.Clock()}
	err := s.addToProcesso(ctx, processoID, EventMensagemWeb, m.EnviadaEm,
		func(ref Referencia) any { return MensagemWeb{Referencia: ref, MensagemID: m.ID, Texto: m.Texto} },
		func(ctx context.Context, repo Repository) error { return repo.AddMensagem(ctx, m) })
	if err != nil {
		return Mensagem{}, err
	}
	return m, nil
}

// addToProcesso runs add on the processo processoID, which must exist, in
// one unit of work, and raises the event name, at at, with the payload
// made from the processo's Referencia: both or neither.
func (s *Service) addToProcesso(ctx context.Context, processoID, name string, at time.Time, payload func(Referencia) any, add func(context.Context, Repository) error) error {
	return s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.Repo(tx)
		p, err := repo.GetProcesso(ctx, processoID)
		if err != nil {
			return err
		}
		return raise(ctx, tx, name, p.ID, at, payload(p.referencia()), func() error { return add(ctx, repo) })
	})
}

// Buscar returns the processo with every effect of the consumers.
func (s *Service) Buscar(ctx context.Context, id string) (Ficha, error) {
	f, err := handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) (Ficha, error) {
		return repo.GetFicha(ctx, id)
	})
	if err != nil {
		return Ficha{}, err
	}
	// Empty lists, not null, whatever the store.
	if f.Notificacoes == nil {
		f.Notificacoes = []Notificacao{}
	}
	if f.Documentos == nil {
		f.Documentos = []Documento{}
	}
	if f.Mensagens == nil {
		f.Mensagens = []Mensagem{}
	}
	return f, nil
}

// checkText checks a required text field of at most max characters.
func checkText(field, v string, max int) error {
	switch {
	case strings.TrimSpace(v) == "":
		return fmt.Errorf("%w: %s é obrigatório", ErrInvalida, field)
	case utf8.RuneCountInString(v) > max:
		return fmt.Errorf("%w: %s tem mais de %d caracteres", ErrInvalida, field, max)
	}
	return nil
}
