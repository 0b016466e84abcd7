package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Router runs a Watermill router with handle consuming queue from sub, as
// serve does, with closeTimeout, and returns it once it runs, with the
// channel its Run's result arrives on.
func Router(t testing.TB, sub message.Subscriber, queue string, closeTimeout time.Duration, handle message.NoPublishHandlerFunc) (*message.Router, <-chan error) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: closeTimeout}, watermill.NewSlogLogger(Logger()))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	r.AddConsumerHandler("test", queue, sub, handle)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case <-time.After(10 * time.Second):
		t.Fatal("testenv: the router did not start")
	}
	return r, done
}

// WaitingHandler returns a handler that says on started when it holds a
// message, then waits d on the message's context and says on finished how
// that went: nil, or the context's error, which it also returns.
func WaitingHandler(d time.Duration) (handle message.NoPublishHandlerFunc, started <-chan struct{}, finished <-chan error) {
	start, finish := make(chan struct{}, 1), make(chan error, 1)
	handle = func(msg *message.Message) error {
		start <- struct{}{}
		select {
		case <-msg.Context().Done():
			finish <- msg.Context().Err()
			return msg.Context().Err()
		case <-time.After(d):
			finish <- nil
			return nil
		}
	}
	return handle, start, finish
}
