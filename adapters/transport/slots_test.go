package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// wantFree fails the test unless s has want free slots; msg formats
// their count.
func wantFree(t *testing.T, s *Slots, want int, msg string) {
	t.Helper()
	s.mu.Lock()
	got := s.free
	s.mu.Unlock()
	if got != want {
		t.Fatalf(msg, got)
	}
}

func TestSlotsBoundTheMessagesInHand(t *testing.T) {
	slots := NewSlots(2)
	a, _ := slots.Take(context.Background())
	b, _ := slots.Take(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok := slots.Take(ctx); ok {
		t.Fatal("a third slot was taken out of two")
	}
	a.Release()
	a.Release() // once only
	wantFree(t, slots, 1, "%d slots free after one release given twice, want 1")
	b.Release()
	wantFree(t, slots, 2, "%d slots free, want 2")
}

func TestStandAsideLendsTheSlotWhileItWaits(t *testing.T) {
	slots := NewSlots(1)
	mine, _ := slots.Take(context.Background())
	ctx := WithSlot(context.Background(), mine)
	next := make(chan *Slot, 1)
	done := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		done <- StandAside(ctx, func() error {
			// The only slot is free while the message waits.
			s, ok := slots.Take(context.Background())
			if !ok {
				return errors.New("no slot")
			}
			next <- s
			<-release
			return nil
		})
	}()
	other := <-next
	close(release)
	select {
	case err := <-done:
		t.Fatalf("StandAside returned %v while the next delivery held the only slot", err)
	case <-time.After(50 * time.Millisecond):
	}
	other.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantFree(t, slots, 0, "%d slots free with the message back in its own, want 0")
	mine.Release()
	wantFree(t, slots, 1, "%d slots free once the message was answered, want 1")
}

func TestStandAsideEndsWithTheMessagesContext(t *testing.T) {
	slots := NewSlots(1)
	mine, _ := slots.Take(context.Background())
	ctx, cancel := context.WithCancel(WithSlot(context.Background(), mine))
	var other *Slot
	err := StandAside(ctx, func() error {
		other, _ = slots.Take(context.Background())
		cancel() // the subscription ends while the slot is lent
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StandAside = %v, want the context's end", err)
	}
	mine.Release() // the answer of a message that did not get back in
	other.Release()
	wantFree(t, slots, 1, "%d slots free, want 1: a slot was given back twice or kept")
}

func TestStandAsideWithoutASlotJustWaits(t *testing.T) {
	want := errors.New("wait failed")
	if err := StandAside(context.Background(), func() error { return want }); !errors.Is(err, want) {
		t.Fatalf("StandAside = %v, want the wait's error", err)
	}
}

func TestAMessageComingBackGoesBeforeNewDeliveries(t *testing.T) {
	slots := NewSlots(1)
	first, _ := slots.Take(context.Background())
	ctx := WithSlot(context.Background(), first)
	var second *Slot
	newer := make(chan *Slot, 1)
	back := make(chan error, 1)
	go func() {
		back <- StandAside(ctx, func() error {
			second, _ = slots.Take(context.Background())
			// A new delivery queues for the slot the second holds, then
			// the first comes back behind it.
			go func() {
				s, _ := slots.Take(context.Background())
				newer <- s
			}()
			for deadline := time.Now().Add(5 * time.Second); waiting(slots, &slots.next) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					return errors.New("the new delivery did not queue")
				}
			}
			return nil
		})
	}()
	waitFor(t, func() bool { return waiting(slots, &slots.back) == 1 })
	second.Release()
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	select {
	case <-newer:
		t.Fatal("a new delivery took the slot before the message coming back")
	case <-time.After(50 * time.Millisecond):
	}
	first.Release()
	(<-newer).Release()
	wantFree(t, slots, 1, "%d slots free, want 1")
}

// waiting counts the waiters in q, one of s's queues.
func waiting(s *Slots, q *[]chan struct{}) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(*q)
}

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
