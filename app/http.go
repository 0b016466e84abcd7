package app

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// CorrelationHeader carries the correlation id of a request; events
// published while serving it inherit it.
const CorrelationHeader = "X-Correlation-ID"

func (p *Platform) handler(plugins []handlers.Plugin) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, p.correlate, p.limitBody)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", p.readyz)
	r.Post("/v1/events", p.postEvent)
	r.Get("/v1/catalog", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, p.cfg.catalog(p.top))
	})
	for _, pl := range plugins {
		if pl.Routes != nil {
			pl.Routes(r)
		}
	}
	return r
}

// correlate takes the request's correlation id, or makes one, and returns it.
func (p *Platform) correlate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(CorrelationHeader)
		if id == "" || len(id) > 128 {
			id = uuid.NewString()
		}
		w.Header().Set(CorrelationHeader, id)
		next.ServeHTTP(w, r.WithContext(event.WithCorrelation(r.Context(), id)))
	})
}

// limitBody caps request bodies at http.max_body_bytes; decoding a larger
// one answers 413.
func (p *Platform) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, p.cfg.HTTP.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// readyz answers 200 when PostgreSQL and the broker answer, 503 naming what
// does not otherwise. The topology was declared before the server started.
func (p *Platform) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	check := func(name string, err error) {
		checks[name] = "ok"
		if err != nil {
			checks[name] = err.Error()
			ok = false
		}
	}
	if p.pool != nil {
		check("postgres", p.pool.Ping(ctx))
	}
	check("broker", p.broker.ready())
	status, code := "ready", http.StatusOK
	if !ok {
		status, code = "unavailable", http.StatusServiceUnavailable
	}
	httpjson.Write(w, code, map[string]any{"status": status, "checks": checks})
}

// postEvent publishes an envelope through the outbox. event_id and
// occurred_at are filled in when absent, correlation_id from the request.
func (p *Platform) postEvent(w http.ResponseWriter, r *http.Request) {
	var e event.Event
	if !httpjson.DecodeTolerant(w, r, &e) {
		return
	}
	if e.ID == "" {
		e.ID = uuid.NewString()
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = time.Now().UTC()
	}
	e = event.Stamp(r.Context(), e)
	if err := e.Validate(); err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	exchange, err := p.top.ExchangeFor(e.RoutingKey())
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, "event_name "+e.Name+": "+err.Error())
		return
	}
	err = p.tx.InTx(r.Context(), func(ctx context.Context, tx handlers.Tx) error {
		return tx.Publish(ctx, e)
	})
	if err != nil {
		p.logger.ErrorContext(r.Context(), "publish event", "event_id", e.ID, "correlation_id", e.CorrelationID, "error", err)
		httpjson.Error(w, http.StatusInternalServerError, "could not store the event; see the server log")
		return
	}
	httpjson.Write(w, http.StatusAccepted, map[string]string{
		"event_id": e.ID, "event_name": e.Name, "correlation_id": e.CorrelationID,
		"exchange": exchange, "routing_key": e.RoutingKey(),
	})
}
