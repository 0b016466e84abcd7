package redrive

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Headers a re-driven copy carries: which re-drive sent it, and how many
// times its event has been re-driven, so a loop shows.
const (
	HeaderRedriveID    = "moenda-redrive-id"
	HeaderRedriveCount = "moenda-redrive-count"
)

// ErrInvalid wraps a re-drive asked for with bad settings.
var ErrInvalid = handlers.NewError(handlers.ErrInvalid, "invalid re-drive")

// Clock is the time a runner goes by; tests give one they drive.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Sink sends a failure back to one queue (transport.Sink's Redeliver).
type Sink interface {
	Redeliver(ctx context.Context, queue string, msg *message.Message) error
}

// Runner sends re-drives' items and settles them.
type Runner struct {
	Store  Store
	Ledger failures.Ledger
	Sink   Sink
	// Handled says whether queue's inbox has claimed the event: the item
	// sent there was handled.
	Handled func(ctx context.Context, queue, eventID string) (bool, error)
	Clock   Clock
	// Poll is how often sent items are settled while a re-drive waits
	// for them; SettleTimeout how long an item may stay sent before it is
	// called unsettled.
	Poll, SettleTimeout time.Duration
	Logger              *slog.Logger
}

// Start creates a re-drive of plan, by actor, and returns its id; Run
// sends it. It starts with its canary when o has one.
func Start(ctx context.Context, s Store, plan Plan, o Options, actor string, selection map[string]string) (int64, error) {
	if o.Rate < 0 || o.Canary < 0 || o.Max < 0 {
		return 0, fmt.Errorf("%w: rate, canary and max must not be negative", ErrInvalid)
	}
	state := Running
	if o.Canary > 0 {
		state = Canary
	}
	return s.Create(ctx, Redrive{Actor: actor, Selection: selection, To: o.To, Rate: o.Rate, Canary: o.Canary, State: state}, plan.items)
}

// Run drives the re-drive id until it is done, paused or cancelled, or
// ctx ends; run again, it resumes where it stopped.
func (r *Runner) Run(ctx context.Context, id int64) error {
	pace := &pacer{clock: r.Clock}
	for ctx.Err() == nil {
		rd, err := r.Store.Get(ctx, id)
		if err != nil {
			return err
		}
		if err := r.settle(ctx, rd); err != nil {
			return err
		}
		pace.setRate(rd.Rate)
		var wait bool
		switch rd.State {
		case Canary:
			wait, err = r.canary(ctx, rd, pace)
		case Running:
			wait, err = r.running(ctx, rd, pace)
		case Cancelled:
			if rd.Counters.Sent == 0 {
				return nil
			}
			wait = true // what was sent settles
		default:
			return nil
		}
		if err != nil {
			return err
		}
		if wait {
			// What follows a wait for settling starts a schedule of its
			// own: the wait is not made up by a burst.
			pace.restart()
			select {
			case <-ctx.Done():
			case <-r.Clock.After(r.Poll):
			}
		}
	}
	return nil
}

// canary sends the canary items (the first Canary: a plan puts the
// items it sends before those it skips), then, once each is settled, lets
// the rest go, or pauses the re-drive naming the first that failed again.
func (r *Runner) canary(ctx context.Context, rd Redrive, pace *pacer) (wait bool, err error) {
	first, err := r.Store.Items(ctx, rd.ID, Pending, 0, rd.Canary)
	if err != nil {
		return false, err
	}
	first = slices.DeleteFunc(first, func(it Item) bool { return it.Seq >= rd.Canary })
	if len(first) > 0 {
		return false, r.send(ctx, rd, first, pace)
	}
	if rd.Counters.Sent > 0 {
		return true, nil // the canaries are out: wait for them
	}
	failed, err := r.Store.Items(ctx, rd.ID, FailedAgain, 0, 1)
	if err != nil {
		return false, err
	}
	if len(failed) > 0 {
		reason := fmt.Sprintf("a canary failed again: failure %d on %s: %s", failed[0].FailureID, failed[0].Queue, failed[0].Reason)
		_, err := r.Store.Move(ctx, rd.ID, []State{Canary}, Paused, reason)
		r.Logger.WarnContext(ctx, "re-drive paused: "+reason, "redrive_id", rd.ID)
		return false, err
	}
	_, err = r.Store.Move(ctx, rd.ID, []State{Canary}, Running, "")
	return false, err
}

// running sends the pending items at the re-drive's rate, a second's
// worth at a time, and ends the re-drive once every item is settled.
func (r *Runner) running(ctx context.Context, rd Redrive, pace *pacer) (wait bool, err error) {
	// A second's worth at a time (100 without a rate), so that a pause or
	// a cancel is seen within about a second.
	batch := 100
	if rd.Rate > 0 {
		batch = max(1, int(rd.Rate))
	}
	pending, err := r.Store.Items(ctx, rd.ID, Pending, 0, batch)
	if err != nil {
		return false, err
	}
	if len(pending) == 0 {
		if rd.Counters.Sent > 0 {
			return true, nil
		}
		_, err := r.Store.Move(ctx, rd.ID, []State{Running}, Done, "")
		return false, err
	}
	return false, r.send(ctx, rd, pending, pace)
}

// send sends items at the re-drive's rate, as pace schedules them: each
// failure is marked re-driving in the ledger and its item sent, then it
// goes; one no longer unresolved is skipped. It stops early when ctx ends.
func (r *Runner) send(ctx context.Context, rd Redrive, items []Item, pace *pacer) error {
	for chunk := range slices.Chunk(items, failures.MaxPage) {
		if more, err := r.sendChunk(ctx, rd, chunk, pace); !more || err != nil {
			return err
		}
	}
	return nil
}

// sendChunk sends up to failures.MaxPage items. Their failures are read
// at once beforehand: a read an item would cost about a third of what
// sending it does. One that the mark does not take is read again. more
// is false once nothing more may be sent: ctx ended, or the re-drive
// paused.
func (r *Runner) sendChunk(ctx context.Context, rd Redrive, items []Item, pace *pacer) (more bool, err error) {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.FailureID
	}
	read, err := r.Ledger.List(ctx, failures.Filter{IDs: ids, AnyStatus: true}, failures.Page{Limit: len(ids)})
	if err != nil {
		return false, err
	}
	byID := make(map[int64]failures.Failure, len(read))
	for _, f := range read {
		byID[f.ID] = f
	}
	for _, it := range items {
		// The wait comes before the marks: an item marked sent is sent
		// at once, not left behind by a stop during the wait.
		if pace.wait(ctx); ctx.Err() != nil {
			return false, nil
		}
		n, err := r.Ledger.Redrive(ctx, []int64{it.FailureID}, rd.ID)
		if err != nil {
			return false, err
		}
		f, ok := byID[it.FailureID]
		if n == 1 && ok {
			// As the mark left it: an unresolved failure's body and
			// headers do not change.
			f.Status, f.RedriveID, f.Redrives = failures.Redriving, rd.ID, f.Redrives+1
		} else if f, err = r.Ledger.Get(ctx, it.FailureID); err != nil {
			return false, err
		}
		// Not marked now, and not by this re-drive before its process
		// stopped, between this mark and the item's: someone else has it.
		if n == 0 && (f.Status != failures.Redriving || f.RedriveID != rd.ID) {
			if err := r.Store.Mark(ctx, rd.ID, []int{it.Seq}, Skipped, "no longer unresolved when its turn came", time.Time{}); err != nil {
				return false, err
			}
			continue
		}
		if err := r.Store.Mark(ctx, rd.ID, []int{it.Seq}, Sent, "", r.Clock.Now()); err != nil {
			return false, err
		}
		if err := r.Sink.Redeliver(ctx, it.Queue, Copy(f, rd.ID)); err != nil {
			// Not sent: the item waits for its turn again, the failure
			// is unresolved again, and the re-drive pauses until the
			// broker is back and someone resumes it.
			reason := fmt.Sprintf("failure %d could not be sent to %s: %v", f.ID, it.Queue, err)
			return false, r.unsent(ctx, rd, it, reason)
		}
	}
	return true, nil
}

// pacer schedules a re-drive's items at its rate: the k-th item of a
// stretch is due at the stretch's start + k/rate, by the runner's clock.
// Waiting until each is due, rather than 1/rate after the last, keeps the
// work done for each item (its marks in the ledger and the store, the
// broker's confirm) out of the rate. Behind the schedule by more than a
// batch (a second's worth), it forgets the rest: a slow moment is made up
// by a burst of one batch at most.
type pacer struct {
	clock Clock
	every time.Duration // 0: no rate, no wait
	batch int
	next  time.Time // zero: the stretch has not begun
}

// setRate sets the items per second; 0 is no bound.
func (p *pacer) setRate(rate float64) {
	p.every, p.batch = 0, 0
	if rate > 0 {
		p.every = time.Duration(float64(time.Second) / rate)
		p.batch = max(1, int(rate))
	}
}

// restart begins a new stretch at the next item.
func (p *pacer) restart() { p.next = time.Time{} }

// wait returns once the next item is due, or ctx has ended.
func (p *pacer) wait(ctx context.Context) {
	if p.every == 0 {
		return
	}
	now := p.clock.Now()
	if p.next.IsZero() {
		p.next = now
	}
	if earliest := now.Add(-time.Duration(p.batch) * p.every); p.next.Before(earliest) {
		p.next = earliest
	}
	if d := p.next.Sub(now); d > 0 {
		select {
		case <-ctx.Done():
		case <-p.clock.After(d):
		}
	}
	p.next = p.next.Add(p.every)
}

// unsent takes back the item it that could not be sent, and pauses the
// re-drive with reason.
func (r *Runner) unsent(ctx context.Context, rd Redrive, it Item, reason string) error {
	ctx = context.WithoutCancel(ctx)
	if err := r.Store.Mark(ctx, rd.ID, []int{it.Seq}, Pending, "", time.Time{}); err != nil {
		return err
	}
	if _, err := r.Ledger.Mark(ctx, []int64{it.FailureID}, failures.Redriving, failures.Unresolved); err != nil {
		return err
	}
	_, err := r.Store.Move(ctx, rd.ID, []State{Canary, Running}, Paused, reason)
	r.Logger.WarnContext(ctx, "re-drive paused: "+reason, "redrive_id", rd.ID)
	return err
}

// settle settles the sent items: handled once their queue's inbox has
// claimed the event (the failure is resolved), failed again once the
// ledger has it unresolved again, unsettled after SettleTimeout. The
// marks are made a page of items at a time: one mark an item would cost
// as much as sending it again.
func (r *Runner) settle(ctx context.Context, rd Redrive) error {
	for from := 0; ; {
		sent, err := r.Store.Items(ctx, rd.ID, Sent, from, 500)
		if err != nil || len(sent) == 0 {
			return err
		}
		var handled, unsettled settled
		for _, it := range sent {
			from = it.Seq + 1
			state, reason, err := r.outcome(ctx, it)
			if err != nil {
				return err
			}
			switch state {
			case Handled:
				handled.add(it)
			case Unsettled:
				unsettled.add(it)
			case FailedAgain: // a reason of its own each
				if err := r.Store.Mark(ctx, rd.ID, []int{it.Seq}, state, reason, time.Time{}); err != nil {
					return err
				}
			}
		}
		// The ledger first: an item still sent after a stop in between
		// is settled again, and marking its failure again changes
		// nothing.
		if err := handled.mark(ctx, r, rd.ID, failures.Resolved, Handled, ""); err != nil {
			return err
		}
		reason := fmt.Sprintf("neither handled nor failed again %s after it was sent", r.SettleTimeout)
		if err := unsettled.mark(ctx, r, rd.ID, failures.Unresolved, Unsettled, reason); err != nil {
			return err
		}
	}
}

// settled are items that reached one outcome.
type settled struct {
	seqs []int
	ids  []int64
}

func (s *settled) add(it Item) {
	s.seqs, s.ids = append(s.seqs, it.Seq), append(s.ids, it.FailureID)
}

// mark moves the failures of s from re-driving to status in the
// ledger, then their items to state with reason.
func (s *settled) mark(ctx context.Context, r *Runner, id int64, status failures.Status, state ItemState, reason string) error {
	if len(s.seqs) == 0 {
		return nil
	}
	if _, err := r.Ledger.Mark(ctx, s.ids, failures.Redriving, status); err != nil {
		return err
	}
	return r.Store.Mark(ctx, id, s.seqs, state, reason, time.Time{})
}

// outcome is what became of the sent item it: still Sent while neither
// is known.
func (r *Runner) outcome(ctx context.Context, it Item) (ItemState, string, error) {
	handled, err := r.Handled(ctx, it.Queue, it.EventID)
	if err != nil {
		return Sent, "", err
	}
	if handled {
		return Handled, "", nil
	}
	f, err := r.Ledger.Get(ctx, it.FailureID)
	if err != nil {
		return Sent, "", err
	}
	switch {
	case f.Status == failures.Unresolved:
		return FailedAgain, f.Error, nil
	case r.Clock.Now().Sub(it.SentAt) > r.SettleTimeout:
		return Unsettled, "", nil
	}
	return Sent, "", nil
}

// Copy is the message a re-drive sends for f: its body and headers as
// they were published, without the failure's story (the consumer's
// schedule starts again), with the re-drive's id and count. f is read
// once marked for the re-drive: its Redrives counts this one.
func Copy(f failures.Failure, redrive int64) *message.Message {
	msg := message.NewMessage(f.EventID, f.Body)
	for k, v := range f.Headers {
		if !story(k) {
			msg.Metadata.Set(k, v)
		}
	}
	msg.Metadata.Set(HeaderRedriveID, strconv.FormatInt(redrive, 10))
	msg.Metadata.Set(HeaderRedriveCount, strconv.Itoa(f.Redrives))
	return msg
}

// story says whether header k tells of a failure rather than of the
// event: the copy leaves those behind.
func story(k string) bool {
	switch k {
	case event.HeaderAttempts, event.HeaderReason, event.HeaderError, event.HeaderQueue, event.HeaderHandler,
		event.HeaderFirstFailureAt, event.HeaderLastFailureAt, event.HeaderTruncated, HeaderRedriveID, HeaderRedriveCount:
		return true
	}
	return strings.HasPrefix(k, "x-")
}
