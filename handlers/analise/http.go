package analise

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

type api struct {
	svc    *Service
	logger *slog.Logger
}

func (a api) routes(r chi.Router) {
	r.Get("/analise/pedidos", a.resumo)
}

// resumo answers GET /analise/pedidos with 200, the distinct pedidos per
// event type and the events per version: {"por_tipo": {"pedido.criado":
// 3, ...}, "por_versao": {"pedido.criado.v1": 3, ...}}.
func (a api) resumo(w http.ResponseWriter, r *http.Request) {
	out, err := a.svc.Resumo(r.Context())
	httpjson.Respond(w, r, a.logger, http.StatusOK, out, err)
}
