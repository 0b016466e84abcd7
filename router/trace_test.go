package router

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/tracing"
)

// The handling span continues the trace the message carries, is the
// parent of what the handler does, and records a failure.
func TestTraceContinuesTheMessagesTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	parent, relay := tracer.Start(context.Background(), "publish")
	relay.End()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	tracing.Inject(parent, msg.Metadata)

	var inside trace.SpanContext
	failure := errors.New("webhook answered 503")
	_, err := Trace("q", "p/h", tracer)(func(m *message.Message) ([]*message.Message, error) {
		inside = trace.SpanContextFromContext(m.Context())
		return nil, failure
	})(msg)
	if !errors.Is(err, failure) {
		t.Fatalf("err %v", err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[1]
	if s.Name() != "process q" || s.SpanKind() != trace.SpanKindConsumer || s.Parent().SpanID() != relay.SpanContext().SpanID() ||
		s.SpanContext().TraceID() != relay.SpanContext().TraceID() || inside.SpanID() != s.SpanContext().SpanID() || s.Status().Code != codes.Error {
		t.Fatalf("span %q kind %v parent %v status %v; handler saw %v", s.Name(), s.SpanKind(), s.Parent().SpanID(), s.Status(), inside.SpanID())
	}
}

// BenchmarkTrace is what tracing adds to each message: the trace read
// from its headers, a span started and ended around the handler, and the
// span handed to a batching exporter, as serve exports them.
func BenchmarkTrace(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("bench")
	parent, relay := tracer.Start(context.Background(), "publish")
	relay.End()
	md := message.Metadata{}
	tracing.Inject(parent, md)
	h := Trace("queue", "plugin/handler", tracer)(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for b.Loop() {
		msg := message.NewMessage("0193ab4e-1c2d-7e3f-8a9b-0c1d2e3f4a5b", nil)
		msg.Metadata = md
		if _, err := h(msg); err != nil {
			b.Fatal(err)
		}
	}
}
