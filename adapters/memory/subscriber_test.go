package memory

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/testenv"
)

// TestRouterCloseLetsTheHandlerInFlightFinish: a handler waits 500 ms on
// its message's context; the router closes 100 ms into it. The context is
// not cancelled and the handler finishes.
func TestRouterCloseLetsTheHandlerInFlightFinish(t *testing.T) {
	b := NewBroker(nil, 5*time.Second, watermill.NopLogger{})
	defer b.Close()
	handle, started, finished := testenv.WaitingHandler(500 * time.Millisecond)
	r, done := testenv.Router(t, b.Subscriber, "q", 5*time.Second, handle)
	if err := b.ch.Publish("q", message.NewMessage(watermill.NewUUID(), []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	<-started
	time.Sleep(100 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("the handler's context ended: %v", err)
	}
}

// TestRouterCloseEndsTheGraceOfAHandler: with a close timeout of 1 s, a
// handler waiting on its context has it cancelled at 900 ms, and the
// router closes within the close timeout.
func TestRouterCloseEndsTheGraceOfAHandler(t *testing.T) {
	b := NewBroker(nil, time.Second, watermill.NopLogger{})
	defer b.Close()
	started := make(chan struct{}, 1)
	r, done := testenv.Router(t, b.Subscriber, "q", time.Second, func(msg *message.Message) error {
		started <- struct{}{}
		<-msg.Context().Done()
		return msg.Context().Err()
	})
	if err := b.ch.Publish("q", message.NewMessage(watermill.NewUUID(), []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	<-started
	at := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(at); took < 800*time.Millisecond || took > 1100*time.Millisecond {
		t.Fatalf("the router closed in %s, want about the grace of 900ms", took)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
