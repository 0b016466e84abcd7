// Package probe is the consumer the fault-injection suite runs: it applies
// each good event with an effect that is deliberately not idempotent, and
// fails every poison event, so that a lost event, a duplicate effect or a
// poison event outside the dead-letter queue all show in its tables. It is
// no shipped plugin: only the suite's processes register it.
package probe

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// Event is what the suite's writers publish through POST /v1/events.
const Event = "faultprobe.evento.v1"

// Payload is the event's payload: who wrote it, in which order, and
// whether it is poison.
type Payload struct {
	Writer    int    `json:"writer"`
	Seq       int    `json:"seq"`
	Aggregate string `json:"aggregate"`
	Poison    bool   `json:"poison,omitempty"`
}

// ErrPoison is how a poison event fails, every time.
var ErrPoison = errors.New("faultprobe: poison event, failing as asked")

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Plugin returns the probe's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "faultprobe",
		Publishes: []string{Event},
		Exchange:  "faultprobe.eventos",
		Subscriptions: []handlers.Subscription{
			{Name: "efeitos", Events: []string{"faultprobe.#"}, Handles: []string{Event}},
		},
		Migrations:    handlers.MigrationsDir(migrationFiles, "migrations"),
		NeedsPostgres: true,
	}, struct{}{}, build)
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	p := &probe{tx: deps.Tx, deliveries: map[string]int{}}
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{"efeitos": p.apply},
		Routes:   func(r chi.Router) { r.Get("/faultprobe/entregas", p.listDeliveries) },
	}, nil
}

// probe counts its deliveries in memory: they are reported, not checked
// (a repeat is the price of at-least-once), and a process that is killed
// takes its count with it.
type probe struct {
	tx         handlers.Transactor
	mu         sync.Mutex
	deliveries map[string]int
}

// apply writes the effect in the delivery's unit of work.
func (p *probe) apply(ctx context.Context, e event.Event) error {
	p.mu.Lock()
	p.deliveries[e.ID]++
	p.mu.Unlock()
	var pl Payload
	if err := json.Unmarshal(e.Payload, &pl); err != nil {
		return event.Permanent(fmt.Errorf("faultprobe: payload: %w", err))
	}
	if pl.Poison {
		return ErrPoison
	}
	return p.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		if _, err := tx.Postgres().Exec(ctx, `INSERT INTO faultprobe_efeitos (event_id, writer, seq, aggregate) VALUES ($1, $2, $3, $4)`,
			e.ID, pl.Writer, pl.Seq, pl.Aggregate); err != nil {
			return err
		}
		_, err := tx.Postgres().Exec(ctx, `UPDATE faultprobe_contador SET n = n + 1`)
		return err
	})
}

// listDeliveries answers GET /faultprobe/entregas: the deliveries this
// process has seen, by event id.
func (p *probe) listDeliveries(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	httpjson.Write(w, http.StatusOK, p.deliveries)
}
