package car

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers/httpjson"
)

type api struct {
	svc    *Service
	logger *slog.Logger
}

func (a api) routes(r chi.Router) {
	r.Post("/processos", a.submeter)
	r.Get("/processos/{id}", a.buscar)
	r.Post("/processos/{id}/regularizar", a.regularizar)
	r.Post("/processos/{id}/documentos", a.anexar)
	r.Post("/processos/{id}/mensagens", a.enviar)
}

// submeter answers POST /processos with 201 and the processo.
func (a api) submeter(w http.ResponseWriter, r *http.Request) {
	var cmd SubmeterProcesso
	if !httpjson.Decode(w, r, &cmd) {
		return
	}
	p, err := a.svc.Submeter(r.Context(), cmd)
	httpjson.Respond(w, r, a.logger, http.StatusCreated, p, err)
}

// buscar answers GET /processos/{id} with 200 and the processo with the
// consumers' effects, or 404.
func (a api) buscar(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	f, err := a.svc.Buscar(r.Context(), id)
	httpjson.Respond(w, r, a.logger, http.StatusOK, f, err)
}

// regularizar answers POST /processos/{id}/regularizar with 200 and the
// processo, regular; repeating it changes nothing.
func (a api) regularizar(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	p, err := a.svc.Regularizar(r.Context(), id)
	httpjson.Respond(w, r, a.logger, http.StatusOK, p, err)
}

// anexar answers POST /processos/{id}/documentos with 201 and the
// documento; its OCR job is null until the ocr consumer creates it.
func (a api) anexar(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	var cmd AnexarDocumento
	if !httpjson.Decode(w, r, &cmd) {
		return
	}
	d, err := a.svc.Anexar(r.Context(), id, cmd)
	httpjson.Respond(w, r, a.logger, http.StatusCreated, d, err)
}

// enviar answers POST /processos/{id}/mensagens with 201 and the
// mensagem, not yet delivered (entregue_em null).
func (a api) enviar(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	var cmd EnviarMensagem
	if !httpjson.Decode(w, r, &cmd) {
		return
	}
	m, err := a.svc.Enviar(r.Context(), id, cmd)
	httpjson.Respond(w, r, a.logger, http.StatusCreated, m, err)
}

// pathID reads the processo id in the path, in its canonical form.
func pathID(r *http.Request) (string, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return "", fmt.Errorf("%w: id no caminho deve ser um UUID, como 550e8400-e29b-41d4-a716-446655440000", ErrInvalida)
	}
	return id.String(), nil
}
