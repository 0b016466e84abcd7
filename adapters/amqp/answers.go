package amqp

import (
	"slices"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// answerLinger is how long answers gathers the answers given together
// before it sends them: long enough for a batch acked in one loop, short
// against the linger of any batch.
const answerLinger = 2 * time.Millisecond

// answers passes a channel's acks and nacks to the broker in few frames:
// the acks given within answerLinger of each other, or up to the last
// delivery in hand, go out as one ack of every tag up to the last one
// before the oldest delivery still unanswered (AMQP's multiple flag), and
// the rest one frame each, at once, so a slow or undecodable delivery
// holds back nothing but itself. A reader that acks a batch together (the
// failure ingest) then costs the broker one ack per batch instead of one
// per message.
type answers struct {
	ch amqp091.Acknowledger
	// mu guards open, given and timer; send serialises the frames, which
	// must reach the broker in the order they were decided.
	mu, send sync.Mutex
	// open holds the tags received and not yet answered to the broker, in
	// the order they arrived (ascending); given the answers waiting to be
	// sent, true for an ack.
	open  []uint64
	given map[uint64]bool
	timer *time.Timer
	// linger is answerLinger, but where a test sends with flush alone.
	linger time.Duration
}

func newAnswers(ch amqp091.Acknowledger) *answers {
	return &answers{ch: ch, given: map[uint64]bool{}, linger: answerLinger}
}

// received registers a delivery's tag: until it is answered, no ack of
// several tags covers it. Every delivery read from the channel is
// registered, handed out or not.
func (a *answers) received(tag uint64) {
	a.mu.Lock()
	a.open = append(a.open, tag)
	a.mu.Unlock()
}

// answer records tag's answer, to be sent within answerLinger, or at
// once when it answers the last delivery in hand: no answer is left to
// gather, and the broker sends no more until it has the acks (a reader
// whose prefetch is its batch would wait the linger out every batch).
func (a *answers) answer(tag uint64, ack bool) {
	a.mu.Lock()
	a.given[tag] = ack
	last := len(a.given) == len(a.open)
	if !last && a.timer == nil {
		a.timer = time.AfterFunc(a.linger, func() { _ = a.flush() })
	}
	a.mu.Unlock()
	if last {
		_ = a.flush()
	}
}

// flush sends the answers given so far: the nacks (each requeues its
// delivery), then one ack of the run of answered tags at the head of
// open, then the acks behind a delivery still unanswered. It returns the
// first error the channel gave; the broker requeues whatever a closed
// channel held.
func (a *answers) flush() error {
	a.send.Lock()
	defer a.send.Unlock()
	a.mu.Lock()
	given := a.given
	a.given = map[uint64]bool{}
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	open := a.open
	// Kept in order: answered tags leave, the rest stay.
	a.open = slices.DeleteFunc(slices.Clone(open), func(tag uint64) bool { _, ok := given[tag]; return ok })
	a.mu.Unlock()

	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, tag := range open {
		if ack, ok := given[tag]; ok && !ack {
			keep(a.ch.Nack(tag, false, true))
		}
	}
	head, upto := 0, uint64(0)
	for ; head < len(open); head++ {
		ack, ok := given[open[head]]
		if !ok {
			break
		}
		if ack {
			upto = open[head]
		}
	}
	if upto > 0 {
		keep(a.ch.Ack(upto, true))
	}
	for _, tag := range open[head:] {
		if ack, ok := given[tag]; ok && ack {
			keep(a.ch.Ack(tag, false))
		}
	}
	return first
}
