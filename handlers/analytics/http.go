package analytics

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts GET /analytics/contagens, which answers 200 and the
// counts, of one UTC day when dia=AAAA-MM-DD is given.
func routes(svc *service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		r.Get("/analytics/contagens", httpjson.Param(logger, http.StatusOK, diaParam, svc.contagens))
	}
}

// diaParam reads the optional dia of the query string, strictly (see
// httpjson.Query).
func diaParam(r *http.Request) (*time.Time, error) {
	p, err := httpjson.Query(r, "dia")
	if err != nil {
		return nil, err
	}
	dia, ok := p["dia"]
	if !ok {
		return nil, nil
	}
	d, err := time.Parse(dateLayout, dia)
	if err != nil {
		return nil, fmt.Errorf("%w: parâmetro dia deve ser uma data AAAA-MM-DD, como 2026-11-30; recebido %s", ErrInvalida, strconv.Quote(handlers.Cut(dia, 64)))
	}
	return &d, nil
}
