package car

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Events the plugin publishes. The routing key is the name without .vN.
const (
	// EventProcessoSubmetido: a requerente submitted a processo (key
	// processo.submetido, bound by processo.*).
	EventProcessoSubmetido = "processo.submetido.v1"
	// EventProcessoRegular: a processo was regularized (key
	// processo.regular, bound by processo.* and *.regular).
	EventProcessoRegular = "processo.regular.v1"
	// EventDocumentoAnexado: a documento was attached (documento.*).
	EventDocumentoAnexado = "documento.anexado.v1"
	// EventMensagemWeb: a message for the web channel (canal.web.*).
	EventMensagemWeb = "canal.web.mensagem.v1"
)

// Source names this plugin in the envelopes it publishes.
const Source = "car"

// States of a processo, an OCR job and a SICAR request.
const (
	StatusSubmetido = "submetido"
	StatusRegular   = "regular"
	OCRPendente     = "pendente"
	SICARSolicitada = "solicitada"
)

var (
	// ErrInvalida wraps a request that names a bad field or parameter. Its
	// messages are in Portuguese and name fields as they are on the wire.
	ErrInvalida = handlers.NewError(handlers.ErrInvalid, "requisição inválida")
	// ErrNaoEncontrado: no processo with that id.
	ErrNaoEncontrado = handlers.NewError(handlers.ErrNotFound, "processo não encontrado")
)

// Processo is a CAR registration process.
type Processo struct {
	ID             string     `json:"id"`
	RequerenteID   string     `json:"requerente_id"`
	MunicipioIBGE  string     `json:"municipio_ibge"`
	Status         string     `json:"status"`
	SubmetidoEm    time.Time  `json:"submetido_em"`
	RegularizadoEm *time.Time `json:"regularizado_em"`
}

// Documento is a file attached to a processo, with its OCR job once the
// ocr consumer has queued it.
type Documento struct {
	ID         string    `json:"id"`
	ProcessoID string    `json:"-"`
	Nome       string    `json:"nome"`
	AnexadoEm  time.Time `json:"anexado_em"`
	OCR        *OCR      `json:"ocr"`
}

// OCR is a documento's OCR job.
type OCR struct {
	Status string `json:"status"`
}

// Mensagem is a message to the requerente on the web channel; EntregueEm
// is set when the mensagens consumer has delivered it.
type Mensagem struct {
	ID         string     `json:"id"`
	ProcessoID string     `json:"-"`
	Texto      string     `json:"texto"`
	EnviadaEm  time.Time  `json:"enviada_em"`
	EntregueEm *time.Time `json:"entregue_em"`
}

// Notificacao is what the notificacao consumer told the requerente about
// one event.
type Notificacao struct {
	EventID      string    `json:"event_id"`
	ProcessoID   string    `json:"-"`
	Evento       string    `json:"evento"`
	RequerenteID string    `json:"requerente_id"`
	Texto        string    `json:"texto"`
	CriadaEm     time.Time `json:"criada_em"`
}

// SICAR is the request to integrate a regular processo with SICAR.
type SICAR struct {
	Status        string    `json:"status"`
	MunicipioIBGE string    `json:"municipio_ibge"`
	SolicitadaEm  time.Time `json:"solicitada_em"`
}

// Ficha is a processo with every effect of the consumers: the answer of
// GET /processos/{id}. Analista and SICAR are null until their consumer
// has run.
type Ficha struct {
	Processo
	Analista     *string       `json:"analista"`
	Notificacoes []Notificacao `json:"notificacoes"`
	Documentos   []Documento   `json:"documentos"`
	SICAR        *SICAR        `json:"sicar"`
	Mensagens    []Mensagem    `json:"mensagens"`
}

// Referencia is what every event's payload holds (seed 000's schema).
type Referencia struct {
	ProcessoID    string `json:"processo_id"`
	RequerenteID  string `json:"requerente_id"`
	MunicipioIBGE string `json:"municipio_ibge"`
}

// DocumentoAnexado is the payload of documento.anexado.v1.
type DocumentoAnexado struct {
	Referencia
	DocumentoID string `json:"documento_id"`
	Nome        string `json:"nome"`
}

// MensagemWeb is the payload of canal.web.mensagem.v1.
type MensagemWeb struct {
	Referencia
	MensagemID string `json:"mensagem_id"`
	Texto      string `json:"texto"`
}

// evento is the event that records d, attached to the processo ref names.
func (d Documento) evento(ref Referencia) (string, any) {
	return EventDocumentoAnexado, DocumentoAnexado{Referencia: ref, DocumentoID: d.ID, Nome: d.Nome}
}

// evento is the event that records m, sent on the processo ref names.
func (m Mensagem) evento(ref Referencia) (string, any) {
	return EventMensagemWeb, MensagemWeb{Referencia: ref, MensagemID: m.ID, Texto: m.Texto}
}

// referencia is the part of every payload that names the processo.
func (p Processo) referencia() Referencia {
	return Referencia{ProcessoID: p.ID, RequerenteID: p.RequerenteID, MunicipioIBGE: p.MunicipioIBGE}
}

// Validate names every missing or malformed id. The ids are the
// plugin's own UUIDs; the processo_id keys the consumers' rows.
func (r Referencia) Validate() error {
	var errs []error
	if err := checkUUID("processo_id", r.ProcessoID); err != nil {
		errs = append(errs, err)
	}
	if r.RequerenteID == "" {
		errs = append(errs, errors.New("requerente_id is missing"))
	}
	if !ibge(r.MunicipioIBGE) {
		errs = append(errs, fmt.Errorf("municipio_ibge %q is not 7 digits", handlers.Cut(r.MunicipioIBGE, 32)))
	}
	return errors.Join(errs...)
}

// ValidateWith is Validate, then checks the payload's own id, field,
// which must be a UUID.
func (r Referencia) ValidateWith(field, id string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return checkUUID(field, id)
}

// checkUUID says what is wrong with an id that must be a UUID.
func checkUUID(field, v string) error {
	if v == "" {
		return fmt.Errorf("%s is missing", field)
	}
	if _, err := uuid.Parse(v); err != nil {
		return fmt.Errorf("%s %q is not a UUID", field, handlers.Cut(v, 64))
	}
	return nil
}

// ibge tells whether s is a municipality's IBGE code: exactly 7 digits.
func ibge(s string) bool {
	if len(s) != 7 {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// raise writes with write and publishes in tx one of the plugin's events
// about processoID, occurring at at: both or neither. Its AggregateID
// keeps a processo's events in order on Kafka.
func raise(ctx context.Context, tx handlers.Tx, name, processoID string, at time.Time, payload any, write func() error) error {
	e, err := event.NewFor(name, Source, processoID, at, payload)
	if err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	return tx.Publish(ctx, e)
}
