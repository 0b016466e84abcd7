package memory

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/transport"
)

// subscriber consumes the broker's queues and lets the messages in hand
// finish when a subscription ends, as the AMQP and Kafka subscribers do.
// GoChannel ends a message's context with its subscription's context, and
// Watermill's router cancels that (and closes its subscriber) before it
// waits for its handlers: here each subscription reads GoChannel with a
// context that outlives the router's by the grace period, and Close leaves
// the GoChannel itself to the broker's Close.
type subscriber struct {
	b     *Broker
	grace time.Duration

	closing chan struct{}
	once    sync.Once
	subs    sync.WaitGroup
}

// Subscribe hands out queue's messages until ctx ends or the subscriber
// closes; then the returned channel closes at once, and the messages in
// hand keep their contexts until they are answered or the grace period
// ends.
func (s *subscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	hand, endHand := context.WithCancel(context.WithoutCancel(ctx))
	in, err := s.b.ch.Subscribe(hand, queue)
	if err != nil {
		endHand()
		return nil, err
	}
	out := make(chan *message.Message)
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		defer endHand()
		var inHand transport.InHand
		for {
			msg, ok := transport.Next(ctx, s.closing, in)
			if !ok || !inHand.Pass(ctx, s.closing, out, msg) {
				break
			}
		}
		close(out)
		grace := time.NewTimer(s.grace)
		defer grace.Stop()
		select {
		case <-inHand.Answered():
		case <-grace.C:
		}
	}()
	return out, nil
}

// Close ends every subscription and waits for the messages in hand to be
// answered, for the grace period at most.
func (s *subscriber) Close() error {
	s.once.Do(func() { close(s.closing) })
	s.subs.Wait()
	return nil
}
