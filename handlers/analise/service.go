package analise

import (
	"context"
	"fmt"
	"time"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Registro is one event as the analytics keep it.
type Registro struct {
	EventID string
	// Tipo is the routing key: the name without its version.
	Tipo       string
	Versao     int
	PedidoID   *int64 // nil when the payload names no pedido
	OcorridoEm time.Time
}

// Resumo answers GET /analise/pedidos.
type Resumo struct {
	// PorTipo counts the distinct pedidos per event type (routing key):
	// both versions of one creation count once. Events that name no pedido
	// are not counted.
	PorTipo map[string]int64 `json:"por_tipo"`
	// PorVersao counts the events recorded per versioned name, each event
	// id once: while pedido.criado migrates, it shows both versions flow.
	PorVersao map[string]int64 `json:"por_versao"`
}

// Service holds the consumer and the query. The consumer's write joins
// its delivery's unit of work, with the inbox claim.
type Service struct {
	handlers.Store[Repository]
}

// newService returns a Service whose store is chosen per unit of work,
// with one memory store kept for its life (the memory environment).
func newService(tx handlers.Transactor, now func() time.Time) *Service {
	return &Service{Store: handlers.NewStore(tx, now, newPostgresRepository, handlers.Memory(newMemoryRepository))}
}

// dados is the part of every pedido event's payload the analytics read.
// Other fields are ignored, and a payload without pedidoId is recorded
// without one.
type dados struct {
	PedidoID *int64 `json:"pedidoId"`
}

// Validate refuses a pedidoId that is not positive; none at all is fine.
func (d dados) Validate() error {
	if d.PedidoID != nil && *d.PedidoID <= 0 {
		return fmt.Errorf("pedidoId %d is not positive", *d.PedidoID)
	}
	return nil
}

// registrar (analise.pedidos) records e once, by its event id. A payload
// that is not a JSON object, or whose pedidoId is not a positive integer,
// is permanent: retrying cannot fix it.
func (s *Service) registrar(ctx context.Context, e event.Event) error {
	name, err := event.ParseName(e.Name)
	if err != nil {
		return event.Permanent(fmt.Errorf("analise: event %s: %w", e.ID, err))
	}
	var d dados
	if err := event.DecodePayload(e, &d, dados.Validate); err != nil {
		return err
	}
	r := Registro{EventID: e.ID, Tipo: name.Base, Versao: name.Version, PedidoID: d.PedidoID, OcorridoEm: e.OccurredAt.UTC().Truncate(time.Microsecond)}
	return s.Write(ctx, func(ctx context.Context, repo Repository) error {
		return repo.Add(ctx, r, s.Clock())
	})
}

// Resumo counts what was recorded.
func (s *Service) Resumo(ctx context.Context) (Resumo, error) {
	return handlers.Read(ctx, s.Store, func(ctx context.Context, repo Repository) (Resumo, error) {
		return repo.Count(ctx)
	})
}
