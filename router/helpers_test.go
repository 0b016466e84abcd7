package router

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

var logger = testenv.Logger()

// copyOf is one copy a recordingSink took.
type copyOf struct {
	dead  bool
	queue string
	delay time.Duration
	msg   *message.Message
}

// recordingSink records the copies the chain makes, as Watermill's own
// middleware tests record what a publisher got; fail makes it refuse.
type recordingSink struct {
	mu     sync.Mutex
	copies []copyOf
	fail   error
}

func (s *recordingSink) Delay(_ context.Context, queue string, delay time.Duration, msg *message.Message) error {
	return s.add(copyOf{queue: queue, delay: delay, msg: msg})
}

func (s *recordingSink) DeadLetter(_ context.Context, queue string, msg *message.Message) error {
	return s.add(copyOf{dead: true, queue: queue, msg: msg})
}

func (s *recordingSink) add(c copyOf) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.copies = append(s.copies, c)
	return nil
}

func (s *recordingSink) all() []copyOf {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]copyOf(nil), s.copies...)
}

// newEvent returns a valid event a.b.v1 with correlation corr-1.
func newEvent(t *testing.T) event.Event {
	t.Helper()
	e, err := event.New("a.b.v1", "test", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	e.CorrelationID = "corr-1"
	return e
}

// delivered returns e as a message delivered from exchange x with key a.b.
func delivered(t *testing.T, e event.Event) *message.Message {
	t.Helper()
	msg, err := event.ToMessage(e)
	if err != nil {
		t.Fatal(err)
	}
	msg.Metadata.Set(event.MetaDeliveryExchange, "x")
	msg.Metadata.Set(event.MetaDeliveryRoutingKey, "a.b")
	return msg
}

// decoded is delivered with the event already in its context, as decode
// leaves it for the middleware inside.
func decoded(t *testing.T, e event.Event) *message.Message {
	msg := delivered(t, e)
	msg.SetContext(withEvent(context.Background(), e))
	return msg
}

// handlerFunc adapts a plain function to a Watermill handler.
func handlerFunc(fn func(msg *message.Message) error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, fn(msg) }
}
