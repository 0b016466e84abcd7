// Package car is the CAR environmental registry process of seed 000: a
// requerente submits a processo, attaches documentos, exchanges messages on
// the web channel, and the processo is regularized. Each write raises its
// event through the outbox, in the same transaction, on exchange
// car.events; the plugin's consumers, on the seed's queues, assign an
// analyst, notify the requerente, queue OCR, ask SICAR for integration and
// deliver web messages. GET /processos/{id} shows all of it.
package car

import (
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moenda/moenda/handlers"
)

// Config is the plugin's section, handlers.car.
type Config struct {
	// Analistas are assigned submitted processos in turn (round robin).
	Analistas []string `koanf:"analistas"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	if len(c.Analistas) == 0 {
		return errors.New("handlers.car.analistas is empty: list at least one analyst, e.g. [ana, bruno, carla]")
	}
	var errs []error
	for i, a := range c.Analistas {
		switch {
		case strings.TrimSpace(a) == "":
			errs = append(errs, fmt.Errorf("handlers.car.analistas[%d] is empty: give the analyst's name or remove the entry", i))
		case slices.Index(c.Analistas, a) < i:
			errs = append(errs, fmt.Errorf("handlers.car.analistas[%d] %q is listed twice: the round robin would give them two turns", i, a))
		}
	}
	return errors.Join(errs...)
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Subscription names; the queues are the seed's.
const (
	SubAnalista    = "analista"
	SubNotificacao = "notificacao"
	SubOCR         = "ocr"
	SubSICAR       = "sicar"
	SubMensagens   = "mensagens"
)

// Plugin returns the plugin's definition. Its queues keep the seed's
// names (processos.analista and the rest), not "car.<subscription>".
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "car",
		Exchange:  "car.events", // seed 000
		Publishes: []string{EventProcessoSubmetido, EventProcessoRegular, EventDocumentoAnexado, EventMensagemWeb},
		Payloads: []handlers.Payload{
			handlers.PayloadOf[Referencia](EventProcessoSubmetido),
			handlers.PayloadOf[Referencia](EventProcessoRegular),
			handlers.PayloadOf[DocumentoAnexado](EventDocumentoAnexado),
			handlers.PayloadOf[MensagemWeb](EventMensagemWeb),
		},
		Subscriptions: []handlers.Subscription{
			{Name: SubAnalista, Queue: "processos.analista", Events: []string{"processo.*"}, Handles: []string{EventProcessoSubmetido}},
			{Name: SubNotificacao, Queue: "processos.notificacao", Events: []string{"processo.*"}, Handles: []string{EventProcessoSubmetido, EventProcessoRegular}},
			{Name: SubOCR, Queue: "documentos.ocr", Events: []string{"documento.*"}, Handles: []string{EventDocumentoAnexado}},
			{Name: SubSICAR, Queue: "integracao.sicar", Events: []string{"*.regular"}, Handles: []string{EventProcessoRegular}},
			{Name: SubMensagens, Queue: "canal.web.mensagens", Events: []string{"canal.web.*"}, Handles: []string{EventMensagemWeb}},
		},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
	}, defaultConfig(), build)
}

// defaultConfig is made afresh for each Definition: the config decoder
// writes a configured list into the default's backing array.
func defaultConfig() Config {
	return Config{Analistas: []string{"ana", "bruno", "carla"}}
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return handlers.Plugin{}, err
	}
	svc := newService(deps.Tx, slices.Clone(cfg.Analistas), deps.Clock())
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{
			SubAnalista:    svc.atribuirAnalista,
			SubNotificacao: svc.notificar,
			SubOCR:         svc.solicitarOCR,
			SubSICAR:       svc.solicitarSICAR,
			SubMensagens:   svc.entregarMensagem,
		},
		Routes: routes(svc, deps.Logger),
	}, nil
}
