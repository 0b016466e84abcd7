package tracing

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{DefaultConfig(), ""},
		{Config{Exporter: ExporterStdout, SampleRatio: 0.1}, ""},
		{Config{Exporter: ExporterOTLP, Endpoint: "http://otel-collector:4318", SampleRatio: 1}, ""},
		{Config{Exporter: ExporterOTLP, SampleRatio: 1}, "tracing.endpoint"},
		{Config{Exporter: "jaeger", SampleRatio: 1}, `tracing.exporter "jaeger" must be none, otlp or stdout`},
		{Config{Exporter: ExporterNone, SampleRatio: 2}, "tracing.sample_ratio must be between 0 and 1"},
	} {
		err := tt.cfg.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// A span's context goes into a message's metadata and comes back out;
// without a span nothing is written.
func TestInjectAndExtract(t *testing.T) {
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "request")
	md := message.Metadata{}
	Inject(ctx, md)
	if !strings.Contains(md.Get("traceparent"), span.SpanContext().TraceID().String()) {
		t.Fatalf("metadata %v", md)
	}
	if got := trace.SpanContextFromContext(Extract(context.Background(), md)); got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("extracted %v", got)
	}
	empty := message.Metadata{}
	Inject(context.Background(), empty)
	if len(empty) != 0 {
		t.Fatalf("a context without a span wrote %v", empty)
	}
}

func TestProviders(t *testing.T) {
	ctx := context.Background()
	tp, shutdown, err := Provider(ctx, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, span := tp.Tracer(Name).Start(ctx, "x"); span.IsRecording() {
		t.Fatal("exporter none records spans")
	}
	_ = shutdown(ctx)
	var out bytes.Buffer
	tp, shutdown, err = Provider(ctx, Config{Exporter: ExporterStdout, SampleRatio: 1}, &out)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer(Name).Start(ctx, "GET /v1/catalog")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"Name":"GET /v1/catalog"`) || !strings.Contains(out.String(), "moenda") {
		t.Fatalf("stdout exporter wrote %s", out.String())
	}
}
