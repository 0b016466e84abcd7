package router

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Dedup runs the handler once per event and queue, inside a unit of work
// the handler's own InTx joins; a failed run leaves no claim.
func TestDedup(t *testing.T) {
	pub := &collect{}
	txr := memory.NewTransactor(pub, func(string) error { return nil })
	stats := NewStats(true).Queue("q")
	e := newEvent(t)
	var runs int
	fail := true
	h := Dedup("q", txr, stats, logger)(handlerFunc(func(msg *message.Message) error {
		runs++
		return txr.InTx(msg.Context(), func(ctx context.Context, tx handlers.Tx) error {
			follow, _ := event.New("a.c.v1", "test", map[string]int{})
			if err := tx.Publish(ctx, follow); err != nil {
				return err
			}
			if fail {
				return errors.New("boom")
			}
			return nil
		})
	}))
	if _, err := h(decoded(t, e)); err == nil {
		t.Fatal("the failure was swallowed")
	}
	if len(pub.msgs) != 0 {
		t.Fatal("a failed run published its event")
	}
	fail = false
	for range 3 {
		if _, err := h(decoded(t, e)); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 || stats.Duplicates.Load() != 2 || len(pub.msgs) != 1 {
		t.Fatalf("%d runs, %d duplicates, %d events published", runs, stats.Duplicates.Load(), len(pub.msgs))
	}
	// Another queue processes the same event on its own.
	other := Dedup("other", txr, NewStats(true).Queue("other"), logger)(handlerFunc(func(*message.Message) error { runs++; return nil }))
	if _, err := other(decoded(t, e)); err != nil || runs != 3 {
		t.Fatalf("other queue: %d runs, %v", runs, err)
	}
}

type collect struct{ msgs []*message.Message }

func (c *collect) Publish(_ string, msgs ...*message.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return nil
}

func (c *collect) Close() error { return nil }
