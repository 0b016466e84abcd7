package app

import (
	"context"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/testenv"
)

// One trace spans the request that concluded a tarefa, the relay's
// publish, and the notification handler that consumed it, each the
// parent of the next.
func TestOneTraceFromRequestToHandler(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	cfg := load(t, Source{Env: "test", Environ: []string{
		"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL, "MOENDA_HTTP__ADDR=127.0.0.1:0"}})
	p := startResolved(t, cfg, WithTracerProvider(tp))
	if code, body := call(t, "POST", p.base+"/tarefas", `{"usuario_id":1,"titulo":"Escrever relatório"}`); code != 201 {
		t.Fatalf("POST /tarefas = %d %v", code, body)
	}
	if code, body := call(t, "PATCH", p.base+"/tarefas/1/concluir", `{"usuario_id":1}`); code != 200 {
		t.Fatalf("PATCH = %d %v", code, body)
	}
	byName := func(name string) (sdktrace.ReadOnlySpan, bool) {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				return s, true
			}
		}
		return nil, false
	}
	// The relay ends its publish span when the broker confirms, which may
	// come after the handler has already run: wait until the handler and
	// every ancestor of it have ended, so the chain is whole.
	var chain []string
	var missing string
	err := await.Until(context.Background(), 10*time.Second, "the handler's span and its ancestors", func() (bool, error) {
		chain, missing = ancestry(rec.Ended(), "process notificacoes.tarefas-concluidas")
		return chain != nil && missing == "", nil
	})
	if err != nil {
		t.Fatalf("%v: span %q's parent is not in the trace; ended: %v", err, missing, names(rec.Ended()))
	}
	request, ok := byName("PATCH /tarefas/{id}/concluir")
	if !ok || request.SpanKind() != trace.SpanKindServer {
		t.Fatalf("no server span for the request: %v", names(rec.Ended()))
	}
	handler, _ := byName("process notificacoes.tarefas-concluidas")
	if handler.SpanContext().TraceID() != request.SpanContext().TraceID() {
		t.Fatalf("the handler's span is in trace %s, the request's in %s", handler.SpanContext().TraceID(), request.SpanContext().TraceID())
	}
	if want := []string{handler.Name(), "publish tarefa.concluida", request.Name()}; !slices.Equal(chain, want) {
		t.Fatalf("the handler's ancestry is %v, want %v", chain, want)
	}
}

// ancestry returns the names of the ended span called name and of its
// ancestors, nearest first, and the name of the first span whose parent
// has not ended (yet). It returns a nil chain while no such span has ended.
func ancestry(ended []sdktrace.ReadOnlySpan, name string) (chain []string, missing string) {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var s sdktrace.ReadOnlySpan
	for _, e := range ended {
		byID[e.SpanContext().SpanID()] = e
		if e.Name() == name {
			s = e
		}
	}
	if s == nil {
		return nil, ""
	}
	chain = []string{s.Name()}
	for s.Parent().IsValid() {
		parent, ok := byID[s.Parent().SpanID()]
		if !ok || parent.SpanContext().TraceID() != s.SpanContext().TraceID() {
			return chain, s.Name()
		}
		s = parent
		chain = append(chain, s.Name())
	}
	return chain, ""
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}
