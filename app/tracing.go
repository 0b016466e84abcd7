package app

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/tracing"
)

// Option changes how New builds the platform: a test seam.
type Option func(*Platform)

// WithTracerProvider records spans with tp, whatever tracing.exporter
// says: tests read them from an in-memory exporter.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(p *Platform) { p.tracer = tp.Tracer(tracing.Name) }
}

// startTracing makes the tracer tracing.exporter asks for; with none it
// stays nil and nothing is traced, at no cost. The stdout exporter writes
// to the process's standard output.
func (p *Platform) startTracing(ctx context.Context) error {
	if p.tracer != nil || p.cfg.Tracing.Exporter == tracing.ExporterNone {
		return nil
	}
	tp, shutdown, err := tracing.Provider(ctx, p.cfg.Tracing, os.Stdout)
	if err != nil {
		return err
	}
	p.tracer = tp.Tracer(tracing.Name)
	p.closers = append(p.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return shutdown(ctx) // flushes what is not exported yet
	})
	return nil
}

// traced gives each request a server span, continuing the caller's trace
// (traceparent), named by its route pattern once routed. Events its unit
// of work publishes carry the span into the outbox.
func (p *Platform) traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := tracing.ExtractHTTP(r.Context(), r.Header)
		ctx, span := p.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(ctx))
		if route := chi.RouteContext(r.Context()).RoutePattern(); route != "" {
			span.SetName(r.Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		status := ww.Status()
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
	})
}
