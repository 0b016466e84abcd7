// Package faultprobe is the consumer the fault-injection suite runs: it applies
// each good event with an effect that is deliberately not idempotent, and
// fails every poison event, so that a lost event, a duplicate effect or a
// poison event outside the dead-letter queue all show in its tables. It is
// registered so that `moenda faults` can run it in its own serve
// processes, and enabled in no environment: its events carry nothing of
// use.
package faultprobe

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Name is the plugin's name, for handlers.enabled. It keys the plugin's
// migration history (moenda_migrations_faultprobe): keep it.
const Name = "faultprobe"

// Event is what the suite's writers publish through POST /v1/events.
const Event = "faultprobe.event.v1"

// Exchange and Queue are where the probe's events go and are consumed.
const (
	Exchange = "faultprobe.events"
	Queue    = Name + "." + subscription
)

// Payload is the event's payload: who wrote it, in which order, and how
// the probe is to treat it.
type Payload struct {
	Writer    int    `json:"writer"`
	Seq       int    `json:"seq"`
	Aggregate string `json:"aggregate,omitempty"`
	// Note is stored with the effect, as a handler stores what it was
	// sent: text PostgreSQL refuses makes the delivery fail.
	Note string `json:"note,omitempty"`
	// Poison fails every delivery.
	Poison bool `json:"poison,omitempty"`
	// FailFirst fails the event's first deliveries to this process, as a
	// dependency that answers 503 for a while.
	FailFirst int `json:"fail_first,omitempty"`
	// FailUntil fails every delivery before this time, in any process,
	// as a dependency that is down until then: an event that runs out of
	// retries meanwhile dead-letters, and is handled once re-driven
	// after it.
	FailUntil time.Time `json:"fail_until,omitzero"`
	// HoldMillis keeps the handler's unit of work open after the effect
	// is written, so that a crash can land between the write and the
	// commit.
	HoldMillis int `json:"hold_ms,omitempty"`
	// WorkMillis is time the handler waits before its unit of work opens,
	// as a call to a slow service would: its prepare step, so the wait
	// holds no connection, transaction or claim.
	WorkMillis int `json:"work_ms,omitempty"`
}

// ErrPoison is how a poison event fails, every time.
var ErrPoison = errors.New("faultprobe: poison event, failing as asked")

// ErrTransient is how an event asked to fail its first deliveries, or
// until a time, fails.
var ErrTransient = errors.New("faultprobe: failing this delivery as asked (fail_first)")

// subscription names the probe's one subscription, and so its queue.
const subscription = "effects"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Plugin returns the probe's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      Name,
		Publishes: []string{Event},
		Exchange:  Exchange,
		Subscriptions: []handlers.Subscription{
			{Name: subscription, Events: []string{Name + ".#"}, Handles: []string{Event}},
		},
		Migrations:    handlers.MigrationsDir(migrationFiles, "migrations"),
		NeedsPostgres: true,
		OptIn:         true, // `moenda faults` enables it alone; no environment runs it
	}, struct{}{}, build)
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	p := &probe{tx: deps.Tx, failed: map[string]int{}}
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{subscription: p.apply},
		Prepares: map[string]handlers.PrepareFunc{subscription: work},
	}, nil
}

type probe struct {
	tx handlers.Transactor
	mu sync.Mutex
	// failed counts the deliveries failed on purpose (fail_first), by
	// event id; a restarted process starts again from none.
	failed map[string]int
}

// counterShards is how many rows the counter is split over (migration
// 00002); a delivery adds to the row its writer and sequence pick.
const counterShards = 16

// work waits the event's work_ms, as the handler's prepare step: before
// the delivery's unit of work opens, as a handler that calls a slow service
// is told to wait (README, "The inbox").
func work(ctx context.Context, e event.Event) (context.Context, error) {
	pl, err := payload(e)
	if err != nil {
		return nil, err
	}
	if pl.WorkMillis > 0 && !await.Sleep(ctx, time.Duration(pl.WorkMillis)*time.Millisecond) {
		return nil, ctx.Err()
	}
	return ctx, nil
}

// payload decodes the event's payload; one the probe cannot read is
// permanent.
func payload(e event.Event) (Payload, error) {
	var pl Payload
	if err := json.Unmarshal(e.Payload, &pl); err != nil {
		return pl, event.Permanent(fmt.Errorf("faultprobe: payload: %w", err))
	}
	return pl, nil
}

// apply writes the effect in the delivery's unit of work.
func (p *probe) apply(ctx context.Context, e event.Event) error {
	pl, err := payload(e)
	if err != nil {
		return err
	}
	if pl.Poison {
		return ErrPoison
	}
	if time.Now().Before(pl.FailUntil) {
		return ErrTransient
	}
	if pl.FailFirst > 0 {
		p.mu.Lock()
		fail := p.failed[e.ID] < pl.FailFirst
		if fail {
			p.failed[e.ID]++
		}
		p.mu.Unlock()
		if fail {
			return ErrTransient
		}
	}
	return p.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
		if _, err := tx.Postgres().Exec(ctx, `INSERT INTO faultprobe_effects (event_id, writer, seq, aggregate, note) VALUES ($1, $2, $3, $4, $5)`,
			e.ID, pl.Writer, pl.Seq, pl.Aggregate, pl.Note); err != nil {
			return err
		}
		if _, err := tx.Postgres().Exec(ctx, `UPDATE faultprobe_counter SET n = n + 1 WHERE shard = $1`, (pl.Writer+pl.Seq)%counterShards); err != nil {
			return err
		}
		if pl.HoldMillis > 0 && !await.Sleep(ctx, time.Duration(pl.HoldMillis)*time.Millisecond) {
			return ctx.Err()
		}
		return nil
	})
}
