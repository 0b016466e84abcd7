package analytics

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts GET /analytics/contagens, which answers 200 and the
// counts, of one UTC day when dia=AAAA-MM-DD is given.
func routes(svc *service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		r.Get("/analytics/contagens", httpjson.Param(logger, http.StatusOK, diaParam, svc.contagens))
	}
}

// diaParam reads the optional dia of the query string. A parameter other
// than dia (a misspelt name) or dia given twice is an error, as an unknown
// field in a body is.
func diaParam(r *http.Request) (*time.Time, error) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query string malformada", ErrInvalida)
	}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if name != "dia" {
			return nil, fmt.Errorf("%w: parâmetro desconhecido %s (aceitos: dia)", ErrInvalida, quote(name))
		}
	}
	vs, ok := values["dia"]
	switch {
	case !ok:
		return nil, nil
	case len(vs) > 1:
		return nil, fmt.Errorf("%w: parâmetro dia repetido", ErrInvalida)
	}
	d, err := time.Parse(dateLayout, vs[0])
	if err != nil {
		return nil, fmt.Errorf("%w: parâmetro dia deve ser uma data AAAA-MM-DD, como 2026-11-30; recebido %s", ErrInvalida, quote(vs[0]))
	}
	return &d, nil
}

// quote quotes s, cut to 64 bytes, for a message.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}
