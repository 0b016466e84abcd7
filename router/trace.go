package router

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/tracing"
)

// Trace continues the trace a message carries (its traceparent header,
// set by the relay) with one span for its handling on queue, retries in
// the consumer included. Events the handler raises carry the span on,
// through the context.
func Trace(queue, handler string, tracer trace.Tracer) message.HandlerMiddleware {
	name := "process " + queue
	route := trace.WithAttributes( // the same for every message: built once
		attribute.String("messaging.system", "moenda"),
		attribute.String("messaging.destination.name", queue),
		attribute.String("moenda.handler", handler),
	)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := tracing.Extract(msg.Context(), msg.Metadata)
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), route)
			span.SetAttributes(attribute.String("messaging.message.id", msg.UUID))
			defer span.End()
			msg.SetContext(ctx)
			out, err := h(msg)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return out, err
		}
	}
}
