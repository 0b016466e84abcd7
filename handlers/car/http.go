package car

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts the processo's endpoints; each answers 404 for a
// processo that does not exist.
func routes(svc *Service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		// 201 and the processo.
		r.Post("/processos", httpjson.Command(logger, http.StatusCreated, svc.Submeter))
		// 200 and the processo with the consumers' effects.
		r.Get("/processos/{id}", httpjson.Param(logger, http.StatusOK, pathID, svc.Buscar))
		// 200 and the processo, regular; repeating it changes nothing.
		r.Post("/processos/{id}/regularizar", httpjson.Param(logger, http.StatusOK, pathID, svc.Regularizar))
		// 201 and the documento; its OCR job is null until the ocr consumer
		// creates it.
		r.Post("/processos/{id}/documentos", httpjson.ParamCommand(logger, http.StatusCreated, pathID, svc.Anexar))
		// 201 and the mensagem, not yet delivered (entregue_em null).
		r.Post("/processos/{id}/mensagens", httpjson.ParamCommand(logger, http.StatusCreated, pathID, svc.Enviar))
	}
}

// pathID reads the processo id in the path, in its canonical form.
func pathID(r *http.Request) (string, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return "", fmt.Errorf("%w: id no caminho deve ser um UUID, como 550e8400-e29b-41d4-a716-446655440000", ErrInvalida)
	}
	return id.String(), nil
}
