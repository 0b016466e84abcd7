package handlers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// The plugin of the README's "Adding a handler plugin", word for word from
// "type Config" to the end of build: compiled here, so the README cannot
// drift from the API.

type Config struct {
	Warehouse string `koanf:"warehouse"`
}

// Reservado is the payload of estoque.reservado.v1.
type Reservado struct {
	PedidoID int64 `json:"pedidoId"`
}

func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "estoque", // stable: names the queues below
		Publishes: []string{"estoque.reservado.v1"},
		// the Go type of its payload: its JSON Schema in the AsyncAPI
		// document, held to at POST /v1/events
		Payloads: []handlers.Payload{handlers.PayloadOf[Reservado]("estoque.reservado.v1")},
		Exchange: "estoque.eventos", // unless topology.exchanges routes them elsewhere
		Subscriptions: []handlers.Subscription{
			// consumes queue estoque.pedidos
			{Name: "pedidos", Events: []string{"pedido.criado", "pedido.cancelado"},
				// versions it reads; other types reaching the queue are ignored
				Handles: []string{"pedido.criado.v1", "pedido.cancelado.v1"}},
		},
	}, Config{Warehouse: "main"}, build)
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{
			"pedidos": func(ctx context.Context, e event.Event) error {
				// decode e.Payload; return event.Permanent(err) for input no
				// retry can fix. The handler runs inside the unit of work
				// that records the event in the inbox: deps.Tx.InTx(ctx, ...)
				// joins it, so its writes and follow-up events commit with
				// the claim: deps.Tx.InTx(ctx, func(ctx, tx) error { ...; return tx.Publish(ctx, ev) })
				return nil
			},
		},
		Routes: func(r chi.Router) { /* optional HTTP routes */ },
	}, nil
}

// Example registers the README's plugin and builds it, as the platform
// does at start.
func Example() {
	reg, err := handlers.NewRegistry(Plugin())
	if err != nil {
		panic(err)
	}
	def, _ := reg.Lookup("estoque")
	built, err := def.Build(def.NewConfig(), handlers.Deps{})
	if err != nil {
		panic(err)
	}
	fmt.Println(def.Queue(def.Subscriptions[0]), len(built.Handlers))
	// Output: estoque.pedidos 1
}

// The README shows the code above: a change to one without the other
// fails here.
func TestReadmePluginExampleIsCompiledHere(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := func(s, end string) string {
		i := strings.Index(s, "type Config struct {")
		if i < 0 {
			return ""
		}
		j := strings.Index(s[i:], end)
		if j < 0 {
			return ""
		}
		return strings.TrimSpace(s[i : i+j])
	}
	shown, compiled := block(string(readme), "\n```"), block(string(self), "\n// Example registers")
	if shown == "" || shown != compiled {
		t.Fatalf("README.md's plugin example and handlers/example_test.go differ; make them the same code.\nREADME:\n%s\n\ncompiled:\n%s", shown, compiled)
	}
}
