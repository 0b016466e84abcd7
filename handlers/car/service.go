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
	return addToProcesso(ctx, s, processoID, cmd, Repository.AddDocumento, func(at time.Time) Documento {
		return Documento{ID: uuid.NewString(), ProcessoID: processoID, Nome: cmd.Nome, AnexadoEm: at}
	})
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
	return addToProcesso(ctx, s, processoID, cmd, Repository.AddMensagem, func(at time.Time) Mensagem {
		return Mensagem{ID: uuid.NewString(), ProcessoID: processoID, Texto: cmd.Texto, EnviadaEm: at}
	})
}

// anexo is what is added to a processo: a documento or a mensagem, and
// the event that records it.
type anexo interface {
	evento(Referencia) (name string, payload any)
}

// addToProcesso adds what a valid cmd makes, made now, to the processo
// processoID, which must exist, with add, in one unit of work, and raises
// its event with the processo's Referencia: both or neither.
func addToProcesso[T anexo](ctx context.Context, s *Service, processoID string, cmd interface{ Validate() error },
	add func(Repository, context.Context, T) error, made func(at time.Time) T) (T, error) {
	var zero T
	if err := cmd.Validate(); err != nil {
		return zero, err
	}
	at := s.Clock()
	v := made(at)
	err := s.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		repo := s.Repo(tx)
		p, err := repo.GetProcesso(ctx, processoID)
		if err != nil {
			return err
		}
		name, payload := v.evento(p.referencia())
		return raise(ctx, tx, name, p.ID, at, payload, func() error { return add(repo, ctx, v) })
	})
	if err != nil {
		return zero, err
	}
	return v, nil
}

// Buscar returns the processo with every effect of the consumers.
func (s *Service) Buscar(ctx context.Context, id string) (Ficha, error) {
	return handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) (Ficha, error) {
		f, err := repo.GetFicha(ctx, id)
		f.Notificacoes, f.Documentos, f.Mensagens = handlers.List(f.Notificacoes), handlers.List(f.Documentos), handlers.List(f.Mensagens)
		return f, err
	})
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
