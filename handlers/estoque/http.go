package estoque

import (
	"errors"
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
		a.fail(w, r, err)
		return
	}
	res, err := a.svc.Reserva(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// produto answers GET /estoque/produtos/{id} with 200 and the quantity
// reserved and not released (0 for a product no pedido names).
func (a api) produto(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.svc.Produto(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, p)
}

// pathID reads a positive integer id in the path.
func pathID(r *http.Request, param string) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, param), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %s no caminho deve ser um número inteiro positivo, como 981", ErrInvalida, param)
	}
	return id, nil
}

// fail answers a query's error: the client's mistakes by their kind, the
// rest with httpjson.ServerError (503 while the database is away).
func (a api) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrInvalida):
		httpjson.Error(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrNaoEncontrada):
		httpjson.Error(w, http.StatusNotFound, err.Error())
	default:
		httpjson.ServerError(w, r, a.logger, fmt.Errorf("estoque: %w", err))
	}
}
