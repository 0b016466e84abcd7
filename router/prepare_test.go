package router

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers/event"
)

// unitInbox runs fn as a unit of work would, and says whether one is open.
type unitInbox struct{ open atomic.Bool }

func (u *unitInbox) Once(ctx context.Context, _, _ string, fn func(ctx context.Context) error) (bool, error) {
	u.open.Store(true)
	defer u.open.Store(false)
	return true, fn(ctx)
}

type prepared struct{}

// A handler's prepare step runs before its unit of work opens, on every
// attempt, and what it puts in the context reaches the handler; its error
// fails the attempt without opening the unit.
func TestPrepareRunsBeforeTheUnitOfWork(t *testing.T) {
	inbox := &unitInbox{}
	var prepares, handled atomic.Int32
	fail := errors.New("the bureau is away")
	failing := true
	prepare := func(ctx context.Context, e event.Event) (context.Context, error) {
		prepares.Add(1)
		if inbox.open.Load() {
			t.Error("prepare ran inside the unit of work")
		}
		if failing {
			return nil, fail
		}
		return context.WithValue(ctx, prepared{}, e.ID), nil
	}
	h := Prepare(prepare)(Dedup("q", inbox, NewStats(true).Queue("q"), logger)(handlerFunc(func(msg *message.Message) error {
		handled.Add(1)
		e, _ := eventOf(msg.Context())
		if msg.Context().Value(prepared{}) != e.ID {
			t.Error("the handler did not get the prepare step's context")
		}
		if !inbox.open.Load() {
			t.Error("the handler ran outside the unit of work")
		}
		return nil
	})))
	msg := decoded(t, newEvent(t))
	if _, err := h(msg); !errors.Is(err, fail) || handled.Load() != 0 {
		t.Fatalf("a failing prepare: %v, handler ran %d times", err, handled.Load())
	}
	failing = false
	if _, err := h(msg); err != nil || prepares.Load() != 2 || handled.Load() != 1 {
		t.Fatalf("%v; prepares %d, handled %d", err, prepares.Load(), handled.Load())
	}
}
