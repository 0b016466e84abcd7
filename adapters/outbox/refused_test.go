package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// partlyRefusing publishes through the broker every message but those of
// the events in refuse, which it refuses for good, and those in once,
// which fail the first time they come; it says which in an
// outbox.BatchError, as the Kafka producer does.
type partlyRefusing struct {
	outbox.Destination
	refuse map[string]bool

	mu    sync.Mutex
	once  map[string]bool
	tries map[string]int // publish attempts, by event id
}

func (d *partlyRefusing) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	failed := map[int]error{}
	var sendKeys []string
	var send []*message.Message
	d.mu.Lock()
	for i, msg := range msgs {
		d.tries[msg.UUID]++
		switch {
		case d.refuse[msg.UUID]:
			failed[i] = fmt.Errorf("%w: the record is too large", outbox.ErrRefused)
		case d.once[msg.UUID]:
			delete(d.once, msg.UUID)
			failed[i] = errors.New("not enough replicas")
		default:
			sendKeys, send = append(sendKeys, keys[i]), append(send, msg)
		}
	}
	d.mu.Unlock()
	if len(send) > 0 {
		if err := d.Destination.PublishBatch(ctx, sendKeys, send); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return &outbox.BatchError{Failed: failed}
	}
	return nil
}

// A row the broker refuses for good is parked, with why, and the relay
// moves on; a row that failed for another reason is published again, and
// the rows of its batch the broker took are not. Republish sends a
// parked row the broker takes now, and leaves the one it still refuses.
func TestARefusedRowIsParkedAndTheRestGoOnce(t *testing.T) {
	eachReader(t, func(t *testing.T, cfg outbox.Config) {
		s := newStack(t)
		got, want := s.auditedBulk(t, 100, 20)
		ids := slices.Sorted(maps.Keys(want))
		dest := &partlyRefusing{Destination: s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top),
			refuse: map[string]bool{ids[0]: true, ids[50]: true}, once: map[string]bool{ids[1]: true, ids[70]: true}, tries: map[string]int{}}
		delete(want, ids[0])
		delete(want, ids[50])
		s.run(t, "relay", s.newRelay(t, dest, s.top.Routable, cfg, testenv.Logger()))

		testenv.Eventually(t, 30*time.Second, "every event but the refused", func() bool { n, _ := distinct(got(), want); return n == len(want) })
		testenv.Eventually(t, 10*time.Second, "the refused rows parked", func() bool {
			parked, n, err := outbox.ListParked(context.Background(), s.db.Pool, 0)
			return err == nil && n == 2 && parked[0].Reason == outbox.ReasonRefused && parked[1].Reason == outbox.ReasonRefused &&
				(parked[0].EventID == ids[0] || parked[0].EventID == ids[50]) && parked[0].EventID != parked[1].EventID &&
				parked[0].Detail == "refused by the broker for good: the record is too large"
		})
		time.Sleep(200 * time.Millisecond)
		if n, total := distinct(got(), want); n != len(want) || total != len(want) {
			t.Fatalf("%d deliveries of %d events, want each of the %d once", total, n, len(want))
		}
		dest.mu.Lock()
		for id, tries := range dest.tries {
			if wantTries := map[bool]int{true: 2, false: 1}[id == ids[1] || id == ids[70]]; tries != wantTries {
				t.Errorf("event %s was given to the broker %d times, want %d", id, tries, wantTries)
			}
		}
		// The broker now takes one of them: republish sends it, and
		// leaves the other parked, saying why.
		delete(dest.refuse, ids[50])
		dest.mu.Unlock()
		res, err := outbox.Republish(context.Background(), s.db.Pool, map[string]outbox.Destination{cfg.ConsumerGroup: dest}, s.top.Routable)
		if err != nil || res.Republished != 1 || res.StillParked != 1 || res.StillUnroutable[0].EventID != ids[0] ||
			res.StillUnroutable[0].Detail != "refused by the broker for good: the record is too large" {
			t.Fatalf("republish = %+v, %v; want %s republished and %s left, refused", res, err, ids[50], ids[0])
		}
		testenv.Eventually(t, 10*time.Second, "the republished event", func() bool { n, _ := distinct(got(), map[string]bool{ids[50]: true}); return n == 1 })
	})
}
