package faultprobe

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// The probe's work is its prepare step, which the router runs before the
// delivery's unit of work opens: it waits on the context, and a payload
// it cannot read fails for good there, before any wait.
func TestWorkIsThePrepareStep(t *testing.T) {
	pl, err := build(struct{}{}, handlers.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	prepare := pl.Prepares[subscription]
	if prepare == nil {
		t.Fatalf("no prepare step for %q: the work would run inside the unit of work", subscription)
	}
	slow, _ := json.Marshal(Payload{Writer: 1, WorkMillis: 60_000})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := prepare(ctx, event.Event{ID: "e1", Name: Event, Payload: slow}); !errors.Is(err, context.Canceled) {
		t.Errorf("prepare of a minute's work on an ended context = %v, want context.Canceled", err)
	}
	none, _ := json.Marshal(Payload{Writer: 1})
	if got, err := prepare(context.Background(), event.Event{ID: "e2", Name: Event, Payload: none}); err != nil || got == nil {
		t.Errorf("prepare without work = %v, %v; want the context back", got, err)
	}
	if _, err := prepare(context.Background(), event.Event{ID: "e3", Name: Event, Payload: []byte("{")}); !event.IsPermanent(err) {
		t.Errorf("prepare of an unreadable payload = %v, want a permanent error", err)
	}
}
