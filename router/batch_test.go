package router

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/handlers/event"
)

// A batch runs in one unit of work with the events its route handles;
// other types are ignored, as Decode ignores them.
func TestHandleBatchRunsTheBulkHandlerOnce(t *testing.T) {
	txr := memory.NewTransactor(&collect{}, func(string) error { return nil })
	stats := NewStats(true)
	sink := &recordingSink{}
	deps := Deps{Sink: sink, Inbox: txr, Stats: stats, Logger: logger}
	rt := Route{Queue: "q", Handler: "p/q", Handles: []string{"a.b.v1"}, Handle: func(context.Context, event.Event) error {
		t.Fatal("the one-event handler ran for a batch that succeeds")
		return nil
	}}
	other, _ := event.New("a.other.v1", "test", map[string]int{})
	msgs := []*message.Message{delivered(t, newEvent(t)), delivered(t, other), delivered(t, newEvent(t))}
	var calls, got int
	bulk := func(_ context.Context, es []event.Event) error { calls++; got += len(es); return nil }
	if err := HandleBatch(context.Background(), rt, deps, txr, bulk, msgs); err != nil {
		t.Fatal(err)
	}
	st := stats.Queue("q")
	if calls != 1 || got != 2 || st.Handled.Load() != 2 || st.Ignored.Load() != 1 || len(sink.all()) != 0 {
		t.Fatalf("calls %d with %d events; handled %d, ignored %d, copies %d", calls, got, st.Handled.Load(), st.Ignored.Load(), len(sink.all()))
	}
}

// A batch that fails as a whole goes event by event through the chain:
// a bad envelope is dead-lettered with its reason and the others handled.
func TestHandleBatchFallsBackToTheChain(t *testing.T) {
	txr := memory.NewTransactor(&collect{}, func(string) error { return nil })
	sink := &recordingSink{}
	deps := Deps{Sink: sink, Inbox: txr, Stats: NewStats(true), Logger: logger}
	var handled []string
	rt := Route{Queue: "q", Consumer: "q.replay", Handler: "p/q", Handle: func(_ context.Context, e event.Event) error {
		handled = append(handled, e.ID)
		return nil
	}}
	good1, good2 := newEvent(t), newEvent(t)
	poison := message.NewMessage("poison-1", []byte("{not json"))
	msgs := []*message.Message{delivered(t, good1), poison, delivered(t, good2)}
	bulk := func(context.Context, []event.Event) error {
		t.Fatal("the bulk handler ran with an undecodable envelope")
		return nil
	}
	if err := HandleBatch(context.Background(), rt, deps, txr, bulk, msgs); err != nil {
		t.Fatal(err)
	}
	copies := sink.all()
	if len(handled) != 2 || handled[0] != good1.ID || handled[1] != good2.ID {
		t.Fatalf("handled %v, want the two good events in order", handled)
	}
	if len(copies) != 1 || !copies[0].dead || copies[0].msg.Metadata.Get(event.HeaderReason) != event.ReasonDecode {
		t.Fatalf("copies %+v, want one dead letter with reason %s", copies, event.ReasonDecode)
	}

	// The bulk handler's own error sends the batch the same way, and an
	// event handled before under the replay's inbox key is not run again.
	handled = nil
	failing := func(context.Context, []event.Event) error { return errors.New("bulk insert failed") }
	if err := HandleBatch(context.Background(), rt, deps, txr, failing, []*message.Message{delivered(t, good1), delivered(t, newEvent(t))}); err != nil {
		t.Fatal(err)
	}
	if len(handled) != 1 {
		t.Fatalf("after a failed batch %d events ran one by one, want 1 (the other was handled before)", len(handled))
	}
}
