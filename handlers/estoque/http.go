package estoque

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts the stock's endpoints.
func routes(svc *Service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		// 200 and the pedido's reservation, or 404 when the stock has not
		// heard of it.
		r.Get("/estoque/reservas/{pedido_id}", httpjson.Param(logger, http.StatusOK, pathID("pedido_id"), svc.Reserva))
		// 200 and the quantity reserved and not released (0 for a product
		// no pedido names).
		r.Get("/estoque/produtos/{id}", httpjson.Param(logger, http.StatusOK, pathID("id"), svc.Produto))
	}
}

// pathID reads a positive integer id in the path parameter param.
func pathID(param string) func(*http.Request) (int64, error) {
	return httpjson.PathID(param, fmt.Errorf("%w: %s no caminho deve ser um número inteiro positivo, como 981", ErrInvalida, param))
}
