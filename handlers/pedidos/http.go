package pedidos

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts the pedido's endpoints. Each answers 200 and the pedido
// unless it says otherwise, and 404 for a pedido that does not exist.
func routes(svc *Service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		// 201 and the new pedido.
		r.Post("/pedidos", httpjson.Command(logger, http.StatusCreated, svc.Criar))
		r.Get("/pedidos/{id}", httpjson.Param(logger, http.StatusOK, pathID, svc.Buscar))
		// The pedido, paid; repeating it changes nothing; 409 when the
		// pedido was cancelled.
		r.Post("/pedidos/{id}/pagar", httpjson.Param(logger, http.StatusOK, pathID, svc.Pagar))
		// The pedido, cancelled; repeating it changes nothing; 409 when the
		// pedido was paid.
		r.Post("/pedidos/{id}/cancelar", httpjson.Param(logger, http.StatusOK, pathID, svc.Cancelar))
	}
}

// pathID reads the pedido id in the path.
func pathID(r *http.Request) (int64, error) {
	return httpjson.PathID("id", fmt.Errorf("%w: id no caminho deve ser um número inteiro positivo, como 981", ErrInvalida))(r)
}
