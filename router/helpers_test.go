package router

import (
	"context"
	"slices"
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

// fakeClock is a Clock the test moves. With auto set, each Sleep moves it
// by its wait and returns at once, for code that waits in one goroutine;
// otherwise a Sleep blocks until Advance moves the clock past its end, or
// its context ends.
type fakeClock struct {
	auto    bool
	mu      sync.Mutex
	now     time.Time
	slept   []time.Duration
	waiters []fakeWaiter
}

type fakeWaiter struct {
	until time.Time
	done  chan struct{}
}

func newFakeClock(auto bool) *fakeClock {
	return &fakeClock{auto: auto, now: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.slept = append(c.slept, d)
	if c.auto || d <= 0 {
		c.now = c.now.Add(max(d, 0))
		c.mu.Unlock()
		return ctx.Err()
	}
	w := fakeWaiter{until: c.now.Add(d), done: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		c.mu.Lock()
		c.waiters = slices.DeleteFunc(c.waiters, func(o fakeWaiter) bool { return o.done == w.done })
		c.mu.Unlock()
	}
	return ctx.Err()
}

// Advance moves the clock by d and wakes every Sleep that ends by then
// before it returns.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waiters = slices.DeleteFunc(c.waiters, func(w fakeWaiter) bool {
		if w.until.After(c.now) {
			return false
		}
		close(w.done)
		return true
	})
}

// waiting is how many Sleeps wait for the clock to move.
func (c *fakeClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// sleeps returns every wait asked of the clock, in order.
func (c *fakeClock) sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.slept)
}
