package estoque

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

type api struct {
	svc    *Service
	logger *slog.Logger
}

func (a api) routes(r chi.Router) {
	r.Get("/estoque/reservas/{pedido_id}", a.reserva)
	r.Get("/estoque/produtos/{id}", a.produto)
}

// reserva answers GET /estoque/reservas/{pedido_id} with 200 and the
// pedido's reservation, or 404 when the stock has not heard of it.
func (a api) reserva(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "pedido_id")
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	res, err := a.svc.Reserva(r.Context(), id)
	httpjson.Respond(w, r, a.logger, http.StatusOK, res, err)
}

// produto answers GET /estoque/produtos/{id} with 200 and the quantity
// reserved and not released (0 for a product no pedido names).
func (a api) produto(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	p, err := a.svc.Produto(r.Context(), id)
	httpjson.Respond(w, r, a.logger, http.StatusOK, p, err)
}

// pathID reads a positive integer id in the path.
func pathID(r *http.Request, param string) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, param), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %s no caminho deve ser um número inteiro positivo, como 981", ErrInvalida, param)
	}
	return id, nil
}
