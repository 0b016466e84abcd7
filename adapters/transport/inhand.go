package transport

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// InHand counts the messages a subscription handed out and not yet
// answered, so that its end can wait for their handlers instead of
// ending their contexts under them. The zero value is ready to use.
type InHand struct{ wg sync.WaitGroup }

// Next takes the next message of in; it reports false when in closes,
// ctx ends or stop closes first.
func Next(ctx context.Context, stop <-chan struct{}, in <-chan *message.Message) (*message.Message, bool) {
	select {
	case msg, ok := <-in:
		return msg, ok
	case <-ctx.Done():
		return nil, false
	case <-stop:
		return nil, false
	}
}

// Pass sends msg to out and counts it in hand until it is acked, nacked
// or its context ends; it reports false when ctx ends or stop closes
// before out takes it.
func (h *InHand) Pass(ctx context.Context, stop <-chan struct{}, out chan<- *message.Message, msg *message.Message) bool {
	// Read before the router's decorators set the context anew.
	mctx := msg.Context()
	select {
	case out <- msg:
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		select {
		case <-msg.Acked():
		case <-msg.Nacked():
		case <-mctx.Done():
		}
	}()
	return true
}

// Answered is closed once every message passed so far is answered.
func (h *InHand) Answered() <-chan struct{} {
	answered := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(answered)
	}()
	return answered
}
