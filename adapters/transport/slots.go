package transport

import (
	"context"
	"slices"
	"sync"
)

// Slots bound how many of a subscription's messages are handled at once.
// A message that waits in its consumer before its next attempt (the
// router's immediate retries) stands aside meanwhile (StandAside): it
// lends its slot to the next delivery and takes one back before it runs
// again, ahead of new deliveries, which would otherwise keep it out for
// as long as a backlog lasts. A subscriber whose broker window holds room
// beyond its slots so keeps its healthy messages' concurrency while a few
// failing ones wait out their retries, where a slot held through each
// wait would take from it (BENCHMARKS.md, "Router: a message waiting for
// its retry stands aside").
type Slots struct {
	mu   sync.Mutex
	free int
	// back and next are the waiters, first come first served: messages
	// coming back, then new deliveries. A waiter's channel is closed when
	// it is given a slot.
	back, next []chan struct{}
}

// NewSlots returns n free slots.
func NewSlots(n int) *Slots { return &Slots{free: n} }

// Take waits for a free slot and holds it for one new delivery; it
// reports false if ctx ends first.
func (s *Slots) Take(ctx context.Context) (*Slot, bool) {
	if !s.wait(ctx, &s.next) {
		return nil, false
	}
	return &Slot{slots: s, state: held}, true
}

// wait takes a free slot, or queues in q for one until ctx ends. A
// message coming back takes a free slot before any new delivery.
func (s *Slots) wait(ctx context.Context, q *[]chan struct{}) bool {
	s.mu.Lock()
	if s.free > 0 && (q == &s.back || len(s.back) == 0) {
		s.free--
		s.mu.Unlock()
		return true
	}
	given := make(chan struct{})
	*q = append(*q, given)
	s.mu.Unlock()
	select {
	case <-given:
		return true
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(*q, given); i >= 0 {
		*q = slices.Delete(*q, i, i+1)
	} else { // given a slot as ctx ended: pass it on
		s.give()
	}
	return false
}

// give hands a slot to the first waiter, or frees it; s.mu is held.
func (s *Slots) give() {
	for _, q := range []*[]chan struct{}{&s.back, &s.next} {
		if len(*q) > 0 {
			close((*q)[0])
			*q = (*q)[1:]
			return
		}
	}
	s.free++
}

// Slot is one message's place among its subscription's slots.
type Slot struct {
	slots *Slots
	state slotState // guarded by slots.mu
}

type slotState int

const (
	held slotState = iota
	aside
	released
)

// Release gives the slot back for good, once the message is answered; a
// message standing aside has given it back already.
func (s *Slot) Release() { s.leave(released) }

func (s *Slot) standAside() { s.leave(aside) }

// leave gives the slot back if the message holds it, and moves it to
// state, unless it is released already.
func (s *Slot) leave(state slotState) {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	if s.state == held {
		s.slots.give()
	}
	if s.state != released {
		s.state = state
	}
}

// back takes a slot again for a message that stood aside, waiting for one
// to be free, until ctx ends.
func (s *Slot) back(ctx context.Context) error {
	if !s.slots.wait(ctx, &s.slots.back) {
		return ctx.Err()
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	if s.state != aside { // released meanwhile: the subscription ended
		s.slots.give()
		return context.Canceled
	}
	s.state = held
	return nil
}

type slotKey struct{}

// WithSlot returns ctx, a message's context, carrying its slot.
func WithSlot(ctx context.Context, s *Slot) context.Context {
	return context.WithValue(ctx, slotKey{}, s)
}

// StandAside runs wait, the pause before a message's next attempt (ctx
// is the message's context), with the message's slot lent to the next
// delivery, and takes a slot back before it returns. It returns wait's
// error, or ctx's if ctx ends while no slot is free. A message whose
// subscriber gives it no slot (WithSlot) just waits.
func StandAside(ctx context.Context, wait func() error) error {
	s, ok := ctx.Value(slotKey{}).(*Slot)
	if !ok {
		return wait()
	}
	s.standAside()
	err := wait()
	if berr := s.back(ctx); err == nil {
		err = berr
	}
	return err
}
