package car

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers/event"
)

// The consumers. Each decodes its payload (a payload that cannot be
// decoded or lacks its ids is permanent: retrying cannot fix it), then
// writes its effect through InTx, which joins the delivery's unit of work.
// Each effect is keyed by its natural key and written only once, so a
// redelivery the inbox let through changes nothing. Database errors are
// returned as they are: the platform retries them.

// atribuirAnalista (processos.analista) assigns the next analyst in turn
// to a submitted processo; a processo keeps its first analyst.
func (s *Service) atribuirAnalista(ctx context.Context, e event.Event) error {
	return consume(ctx, s, e, Referencia.Validate, func(ctx context.Context, repo Repository, p Referencia) error {
		return repo.AddAtribuicao(ctx, canonical(p.ProcessoID), s.Clock(), s.analistas)
	})
}

// notificar (processos.notificacao) records one notification for the
// requerente per event.
func (s *Service) notificar(ctx context.Context, e event.Event) error {
	var p Referencia
	if err := event.DecodePayload(e, &p, Referencia.Validate); err != nil {
		return err
	}
	var texto string
	switch e.Name {
	case EventProcessoSubmetido:
		texto = fmt.Sprintf("Seu processo %s foi submetido e aguarda análise.", p.ProcessoID)
	case EventProcessoRegular:
		texto = fmt.Sprintf("Seu processo %s está regular.", p.ProcessoID)
	default: // the subscription's Handles keep others away
		return event.Permanent(fmt.Errorf("car: notificacao does not handle %s", e.Name))
	}
	n := Notificacao{EventID: e.ID, ProcessoID: canonical(p.ProcessoID), Evento: e.RoutingKey(), RequerenteID: p.RequerenteID, Texto: texto, CriadaEm: s.Clock()}
	return s.Write(ctx, func(ctx context.Context, repo Repository) error {
		return repo.AddNotificacao(ctx, n)
	})
}

// solicitarOCR (documentos.ocr) creates the documento's OCR job, pending.
func (s *Service) solicitarOCR(ctx context.Context, e event.Event) error {
	valid := func(p DocumentoAnexado) error { return p.Referencia.ValidateWith("documento_id", p.DocumentoID) }
	return consume(ctx, s, e, valid, func(ctx context.Context, repo Repository, p DocumentoAnexado) error {
		return repo.AddOCR(ctx, canonical(p.DocumentoID), canonical(p.ProcessoID), s.Clock())
	})
}

// solicitarSICAR (integracao.sicar) records the request to integrate a
// regular processo with SICAR.
func (s *Service) solicitarSICAR(ctx context.Context, e event.Event) error {
	return consume(ctx, s, e, Referencia.Validate, func(ctx context.Context, repo Repository, p Referencia) error {
		req := SICAR{Status: SICARSolicitada, MunicipioIBGE: p.MunicipioIBGE, SolicitadaEm: s.Clock()}
		return repo.AddSICAR(ctx, canonical(p.ProcessoID), req)
	})
}

// entregarMensagem (canal.web.mensagens) delivers a message on the web
// channel, the core's own interface: delivering is recording it as
// delivered, with the time, for the requerente's page to show.
func (s *Service) entregarMensagem(ctx context.Context, e event.Event) error {
	valid := func(p MensagemWeb) error { return p.Referencia.ValidateWith("mensagem_id", p.MensagemID) }
	return consume(ctx, s, e, valid, func(ctx context.Context, repo Repository, p MensagemWeb) error {
		return repo.AddEntrega(ctx, canonical(p.MensagemID), canonical(p.ProcessoID), s.Clock())
	})
}

// consume decodes e's payload P, checked by valid, and writes its effect
// with write in the delivery's unit of work.
func consume[P any](ctx context.Context, s *Service, e event.Event, valid func(P) error, write func(context.Context, Repository, P) error) error {
	var p P
	if err := event.DecodePayload(e, &p, valid); err != nil {
		return err
	}
	return s.Write(ctx, func(ctx context.Context, repo Repository) error { return write(ctx, repo, p) })
}

// canonical writes a UUID already checked as one in its canonical form,
// as PostgreSQL prints it, so both stores key it alike.
func canonical(id string) string {
	return uuid.MustParse(id).String()
}
