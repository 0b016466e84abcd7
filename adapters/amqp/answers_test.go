package amqp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/testenv"
)

// frames records the answers a channel was asked to send, in order.
type frames struct {
	mu   sync.Mutex
	sent []string
}

func (f *frames) add(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, s)
	return nil
}

func (f *frames) Ack(tag uint64, multiple bool) error {
	return f.add(fmt.Sprintf("ack %d multiple=%v", tag, multiple))
}

func (f *frames) Nack(tag uint64, multiple, requeue bool) error {
	return f.add(fmt.Sprintf("nack %d multiple=%v requeue=%v", tag, multiple, requeue))
}

func (f *frames) Reject(tag uint64, requeue bool) error {
	return f.add(fmt.Sprintf("reject %d requeue=%v", tag, requeue))
}

func (f *frames) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

// TestAnswersGathersABatchIntoOneAck: the acks of a batch given together
// go out as one ack of several tags; a nack goes out alone, before it; a
// delivery not answered yet holds back only itself, and the acks behind
// it go out one by one at once.
func TestAnswersGathersABatchIntoOneAck(t *testing.T) {
	cases := []struct {
		name     string
		received int
		acks     []uint64
		nacks    []uint64
		want     []string
	}{
		{"a batch acked in order", 100, seq(1, 100), nil, []string{"ack 100 multiple=true"}},
		{"a batch acked backwards", 5, []uint64{5, 4, 3, 2, 1}, nil, []string{"ack 5 multiple=true"}},
		{"a nack in the batch", 5, []uint64{1, 2, 4, 5}, []uint64{3},
			[]string{"nack 3 multiple=false requeue=true", "ack 5 multiple=true"}},
		{"a delivery unanswered", 5, []uint64{1, 2, 4, 5}, nil,
			[]string{"ack 2 multiple=true", "ack 4 multiple=false", "ack 5 multiple=false"}},
		{"the first unanswered", 3, []uint64{2, 3}, nil,
			[]string{"ack 2 multiple=false", "ack 3 multiple=false"}},
		{"nacks only", 2, nil, []uint64{1, 2},
			[]string{"nack 1 multiple=false requeue=true", "nack 2 multiple=false requeue=true"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f frames
			a := newAnswers(&f)
			// Sent by the last answer or by the flush below, never by the
			// linger: a loop slower than it (a loaded machine) must not
			// split the batch.
			a.linger = time.Hour
			for tag := range uint64(c.received) {
				a.received(tag + 1)
			}
			for _, tag := range c.acks {
				a.answer(tag, true)
			}
			for _, tag := range c.nacks {
				a.answer(tag, false)
			}
			if err := a.flush(); err != nil {
				t.Fatal(err)
			}
			if got := f.list(); !slices.Equal(got, c.want) {
				t.Errorf("frames sent:\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestAnswersGoOutAtOnceWhenNoDeliveryIsLeftInHand: once every delivery in
// hand is answered, the answers go out without waiting out the linger,
// as the broker sends no more until it has them.
func TestAnswersGoOutAtOnceWhenNoDeliveryIsLeftInHand(t *testing.T) {
	var f frames
	a := newAnswers(&f)
	a.linger = time.Hour
	for tag := range uint64(3) {
		a.received(tag + 1)
	}
	a.answer(1, true)
	a.answer(3, true)
	if got := f.list(); len(got) != 0 {
		t.Fatalf("frames sent with a delivery still in hand: %q", got)
	}
	a.answer(2, true)
	if got, want := f.list(), []string{"ack 3 multiple=true"}; !slices.Equal(got, want) {
		t.Fatalf("frames sent once every delivery was answered:\n%q\nwant\n%q", got, want)
	}
}

// TestAnswersSendsOnItsOwn: answers reach the channel within the linger
// without a flush; the acks behind a delivery not answered yet go out one
// by one, and once it is answered it goes out with the next ones.
func TestAnswersSendsOnItsOwn(t *testing.T) {
	var f frames
	a := newAnswers(&f)
	for tag := range uint64(3) {
		a.received(tag + 1)
	}
	a.answer(2, true)
	a.answer(3, true)
	waitFrames(t, &f, []string{"ack 2 multiple=false", "ack 3 multiple=false"})
	a.received(4)
	a.answer(1, true)
	a.answer(4, true)
	waitFrames(t, &f, []string{"ack 2 multiple=false", "ack 3 multiple=false", "ack 4 multiple=true"})
}

func waitFrames(t *testing.T, f *frames, want []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(f.list(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("frames sent:\n%q\nwant\n%q", f.list(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func seq(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// TestSubscriberWithBatchAnswers: on a real broker, a batch acked
// together around a nack and a delivery still in hand leaves the queue,
// the nacked one comes again, and the ack given just before Close still
// reaches the broker.
func TestSubscriberWithBatchAnswers(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	q := declareTestQueue(t, vhost.URL)
	sub, err := NewSubscriber([]string{vhost.URL}, 20, 5*time.Second, testenv.Logger(), BatchAnswers())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	out := subscribed(context.Background(), t, sub, q)
	publishMessages(t, vhost.URL, q, 20)

	msgs := make([]*message.Message, 20)
	for i := range msgs {
		msgs[i] = nextMessage(t, out)
	}
	held, nacked := msgs[7], msgs[3]
	for _, m := range msgs {
		switch m {
		case nacked:
			m.Nack()
		case held:
		default:
			m.Ack()
		}
	}
	if again := nextMessage(t, out); again.UUID != nacked.UUID {
		t.Fatalf("%s came after the batch, want the nacked %s again", again.UUID, nacked.UUID)
	} else {
		again.Ack()
	}
	held.Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := testenv.ReadyMessages(t, vhost.URL, q); n != 0 {
		t.Fatalf("%d messages back in the queue after every one was acked and the subscriber closed, want 0", n)
	}
}
