package pedidos

import (
	"context"
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
	r.Post("/pedidos", a.criar)
	r.Get("/pedidos/{id}", a.buscar)
	r.Post("/pedidos/{id}/pagar", a.pagar)
	r.Post("/pedidos/{id}/cancelar", a.cancelar)
}

// criar answers POST /pedidos with 201 and the pedido.
func (a api) criar(w http.ResponseWriter, r *http.Request) {
	var cmd CriarPedido
	if !httpjson.Decode(w, r, &cmd) {
		return
	}
	p, err := a.svc.Criar(r.Context(), cmd)
	httpjson.Respond(w, r, a.logger, http.StatusCreated, p, err)
}

// buscar answers GET /pedidos/{id} with 200 and the pedido, or 404.
func (a api) buscar(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, a.svc.Buscar)
}

// pagar answers POST /pedidos/{id}/pagar with 200 and the pedido, paid;
// repeating it changes nothing; 409 when the pedido was cancelled.
func (a api) pagar(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, a.svc.Pagar)
}

// cancelar answers POST /pedidos/{id}/cancelar with 200 and the pedido,
// cancelled; repeating it changes nothing; 409 when the pedido was paid.
func (a api) cancelar(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, a.svc.Cancelar)
}

// answer runs a use case on the pedido named in the path and answers 200
// with what it returns.
func (a api) answer(w http.ResponseWriter, r *http.Request, use func(ctx context.Context, id int64) (Pedido, error)) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	p, err := use(r.Context(), id)
	httpjson.Respond(w, r, a.logger, http.StatusOK, p, err)
}

// pathID reads the pedido id in the path.
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: id no caminho deve ser um número inteiro positivo, como 981", ErrInvalida)
	}
	return id, nil
}
