package bench

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/tracing"
	"github.com/moenda/moenda/handlers"
)

// observability measures what metrics and tracing cost, each on against
// off in the same run, alternating, on the outbox write and the consume
// rows. Tracing records every span (sample ratio 1) and exports them in
// batches to an exporter that drops them, so all but the network is
// counted. Metrics cost nothing on the write path: the only metric there
// is the HTTP middleware's, which the write row does not go through.
func observability(ctx context.Context, e *env, r *Result) error {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	tracer := tp.Tracer(tracing.Name)

	// Writes: a span per transaction, as a request's, which the outbox
	// row then carries.
	const writers = 4
	write := func(traced bool) func() (flow, error) {
		return func() (flow, error) {
			return transactionRate(ctx, writers, e.sz.txDuration, func(ctx context.Context) error {
				if traced {
					var span trace.Span
					ctx, span = tracer.Start(ctx, "POST /bench")
					defer span.End()
				}
				return e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
					if _, err := tx.Postgres().Exec(ctx, `INSERT INTO bench_business (data) VALUES ($1)`, "pedido"); err != nil {
						return err
					}
					return tx.Publish(ctx, benchEvent())
				})
			})
		}
	}
	rounds, err := alternate(e, "outbox write with tracing", e.sz.rounds, write(false), write(true))
	if err != nil {
		return err
	}
	r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: outbox write with tracing on, against off, %d writers", writers),
		Unit: "tx/s", Target: "ratio >= 0.95"}), 0.95, 0)
	if err := e.relayCatchUp(ctx, e.reader); err != nil { // the rows written, out of later steps' way
		return err
	}

	// Consumes: the whole chain with its handler timed (metrics), or with
	// a span per message (tracing), against neither.
	if err := e.effectTable(ctx); err != nil {
		return err
	}
	consume := func(timed bool, t trace.Tracer) func() (flow, error) {
		return func() (flow, error) {
			e.timed, e.tracer = timed, t
			defer func() { e.timed, e.tracer = false, nil }()
			if _, err := e.publishEvents(ctx, e.sz.consumed); err != nil {
				return flow{}, err
			}
			return inProcess(e.sz.consumed, func() (float64, error) { return e.routeEffects(ctx, e.sz.consumed, nil) })
		}
	}
	for _, c := range []struct {
		what   string
		timed  bool
		tracer trace.Tracer
	}{{"metrics", true, nil}, {"tracing", false, tracer}} {
		if err := e.purge(); err != nil {
			return err
		}
		rounds, err := alternate(e, "consume with "+c.what, e.sz.rounds, consume(false, nil), consume(c.timed, c.tracer))
		if err != nil {
			return err
		}
		r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: consume through the router with %s on, against off, prefetch %d", c.what, e.set.AMQP.Prefetch),
			Unit: "msg/s", Target: "ratio >= 0.95"}), 0.95, 0)
	}
	return e.purge()
}
