package memory

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// routerOn runs a Watermill router with handle consuming queue from b, as
// serve does, and returns it running.
func routerOn(t *testing.T, b *Broker, queue string, closeTimeout time.Duration, handle message.NoPublishHandlerFunc) (*message.Router, <-chan error) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: closeTimeout}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	r.AddConsumerHandler("test", queue, b.Subscriber, handle)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-r.Running()
	return r, done
}

// TestRouterCloseLetsTheHandlerInFlightFinish: a handler waits 500 ms on
// its message's context; the router closes 100 ms into it. The context is
// not cancelled and the handler finishes.
func TestRouterCloseLetsTheHandlerInFlightFinish(t *testing.T) {
	b := NewBroker(nil, 5*time.Second, watermill.NopLogger{})
	defer b.Close()
	started, finished := make(chan struct{}, 1), make(chan error, 1)
	r, done := routerOn(t, b, "q", 5*time.Second, func(msg *message.Message) error {
		started <- struct{}{}
		select {
		case <-msg.Context().Done():
			finished <- msg.Context().Err()
			return msg.Context().Err()
		case <-time.After(500 * time.Millisecond):
			finished <- nil
			return nil
		}
	})
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
	r, done := routerOn(t, b, "q", time.Second, func(msg *message.Message) error {
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
