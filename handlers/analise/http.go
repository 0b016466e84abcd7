package analise

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts GET /analise/pedidos, which answers 200, the distinct
// pedidos per event type and the events per version: {"por_tipo":
// {"pedido.criado": 3, ...}, "por_versao": {"pedido.criado.v1": 3, ...}}.
func routes(svc *Service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		r.Get("/analise/pedidos", httpjson.Run(logger, http.StatusOK, svc.Resumo))
	}
}
