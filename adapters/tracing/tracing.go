// Package tracing carries OpenTelemetry traces across moenda: an HTTP
// request's trace context is stored with its outbox rows, the relay
// continues it in the message headers, and the handler's span continues it
// again, so one trace shows request, relay, broker and handler, and the
// events the handler raises. Off by default.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/moenda/moenda/adapters/redact"
)

// Exporters.
const (
	ExporterNone   = "none"
	ExporterOTLP   = "otlp"
	ExporterStdout = "stdout"
)

// Config is what YAML sets for tracing.
type Config struct {
	// Exporter is none (the default: no spans are made), otlp (OTLP over
	// HTTP to Endpoint) or stdout (one JSON span a line, for development).
	Exporter string `koanf:"exporter"`
	// Endpoint is the OTLP/HTTP collector, like http://otel-collector:4318.
	Endpoint string `koanf:"endpoint"`
	// SampleRatio is the share of new traces recorded, 0 to 1; a trace
	// that arrives sampled (traceparent) is recorded whatever it says.
	SampleRatio float64 `koanf:"sample_ratio"`
}

// DefaultConfig records nothing.
func DefaultConfig() Config { return Config{Exporter: ExporterNone, SampleRatio: 1} }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Exporter {
	case ExporterNone, ExporterStdout:
	case ExporterOTLP:
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tracing.endpoint %q must be the collector's OTLP/HTTP URL, like http://otel-collector:4318", redact.URL(c.Endpoint)))
		}
	default:
		errs = append(errs, fmt.Errorf("tracing.exporter %q must be none, otlp or stdout", c.Exporter))
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio must be between 0 and 1, got %g", c.SampleRatio))
	}
	return errors.Join(errs...)
}

// Provider returns the tracer provider cfg asks for, and its shutdown,
// which flushes the spans not yet exported. stdout writes to w.
func Provider(ctx context.Context, cfg Config, w io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Exporter {
	case ExporterOTLP:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	case ExporterStdout:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	default:
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %s exporter: %w", cfg.Exporter, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("moenda"))),
	)
	return tp, tp.Shutdown, nil
}

// Name is the instrumentation scope of moenda's spans.
const Name = "github.com/moenda/moenda"

// propagator writes and reads W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// Inject writes the span context of ctx, if any, into md: the outbox
// stores it with the row, and brokers carry it as headers.
func Inject(ctx context.Context, md message.Metadata) {
	propagator.Inject(ctx, propagation.MapCarrier(md))
}

// Extract returns ctx with the span context md carries, if any.
func Extract(ctx context.Context, md message.Metadata) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(md))
}

// ExtractHTTP returns ctx with the span context of an HTTP request's
// headers, if any.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}
