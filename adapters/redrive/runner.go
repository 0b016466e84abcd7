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

// WallClock is the machine's time, the clock of a runner in serve.
type WallClock struct{}

func (WallClock) Now() time.Time                         { return time.Now() }
func (WallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Sink sends a failure back: to one queue, or to an exchange
// (transport.Sink's Redeliver and Republish).
type Sink interface {
	Redeliver(ctx context.Context, queue string, msg *message.Message) error
	Republish(ctx context.Context, exchange, key string, msg *message.Message) error
}

// Runner sends re-drives' items and settles them.
type Runner struct {
	Store  Store
	Ledger failures.Ledger
	Sink   Sink
	// Handled returns those of eventIDs whose events queue's inbox has
	// claimed: the items sent there were handled.
	Handled func(ctx context.Context, queue string, eventIDs []string) (map[string]bool, error)
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
// ctx ends; run again, it resumes where it stopped. One runner at a time
// may run a re-drive: the items it finds sending were left by a runner
// that stopped.
func (r *Runner) Run(ctx context.Context, id int64) error {
	if err := r.sendAgain(ctx, id); err != nil {
		return err
	}
	pace := &pacer{clock: r.Clock}
	for ctx.Err() == nil {
		rd, err := r.Store.Get(ctx, id)
		if err != nil {
			return err
		}
		if err := r.settle(ctx, rd); err != nil {
			return err
		}
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
			select {
			case <-ctx.Done():
			case <-r.Clock.After(r.Poll):
			}
			pace.restart() // the wait is not a lag to catch up
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
		batch = min(max(1, int(rd.Rate)), failures.MaxPage)
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

// send sends items (at most failures.MaxPage) at the re-drive's rate.
// Their failures are marked re-driving and the items sending, all at
// once; then each goes, and is marked sent once the broker has it. An
// item whose failure is no longer unresolved is skipped. It stops early
// when ctx ends, and the items it did not reach wait for their turn.
func (r *Runner) send(ctx context.Context, rd Redrive, items []Item, pace *pacer) error {
	ids := failureIDs(items)
	if _, err := r.Ledger.Redrive(ctx, ids, rd.ID); err != nil {
		return err
	}
	byID, err := r.failures(ctx, ids)
	if err != nil {
		return err
	}
	// Not marked now, nor by this re-drive before its runner stopped
	// between this mark and the items': someone else has it.
	send, skip := split(items, func(it Item) bool {
		f, ok := byID[it.FailureID]
		return ok && f.Status == failures.Redriving && f.RedriveID == rd.ID
	})
	if err := r.Store.Mark(ctx, rd.ID, seqs(skip), Skipped, "no longer unresolved when its turn came", time.Time{}); err != nil {
		return err
	}
	if err := r.Store.Mark(ctx, rd.ID, seqs(send), Sending, "", time.Time{}); err != nil {
		return err
	}
	for i, it := range send {
		if !pace.wait(ctx, rd.Rate) {
			return r.putBack(ctx, rd, send[i:])
		}
		f := byID[it.FailureID]
		if err := r.deliver(ctx, rd, it, f); err != nil {
			if ctx.Err() != nil {
				// Stopped mid-send: it stays sending, and the next run
				// sends it again; the rest wait for their turn.
				return r.putBack(ctx, rd, send[i+1:])
			}
			// Not sent: these items wait for their turn again, their
			// failures are unresolved again, and the re-drive pauses
			// until the broker is back and someone resumes it.
			reason := fmt.Sprintf("failure %d could not be sent to %s: %v", f.ID, it.Queue, err)
			return r.unsent(ctx, rd, send[i:], reason)
		}
		// The broker has it: marked sent even when ctx has just ended,
		// so that only a copy in flight may ever go twice.
		if err := r.Store.Mark(context.WithoutCancel(ctx), rd.ID, []int{it.Seq}, Sent, "", r.Clock.Now()); err != nil {
			return err
		}
	}
	return nil
}

// putBack returns items marked for rd and never sent to their turn, and
// their failures to unresolved.
func (r *Runner) putBack(ctx context.Context, rd Redrive, items []Item) error {
	if len(items) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	if err := r.Store.Mark(ctx, rd.ID, seqs(items), Pending, "", time.Time{}); err != nil {
		return err
	}
	return r.Ledger.Release(ctx, failureIDs(items), rd.ID)
}

// deliver sends item it of rd, a copy of f, where rd sends.
func (r *Runner) deliver(ctx context.Context, rd Redrive, it Item, f failures.Failure) error {
	if rd.To == ToOriginalExchange {
		return r.Sink.Republish(ctx, f.OriginalExchange, f.OriginalRoutingKey, Copy(f, rd.ID))
	}
	return r.Sink.Redeliver(ctx, it.Queue, Copy(f, rd.ID))
}

// failures returns the ledger's failures ids, by id.
func (r *Runner) failures(ctx context.Context, ids []int64) (map[int64]failures.Failure, error) {
	fs, err := r.Ledger.List(ctx, failures.Filter{IDs: ids, AnyStatus: true}, failures.Page{Limit: len(ids)})
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]failures.Failure, len(fs))
	for _, f := range fs {
		byID[f.ID] = f
	}
	return byID, nil
}

// pacer spaces a run's sends at a re-drive's rate on a schedule, so that
// the work of each send, and the settling between batches, do not slow
// the rate. Having fallen behind by more than a second, or after the run
// waited, it starts the schedule again rather than burst.
type pacer struct {
	clock Clock
	next  time.Time
}

// wait waits for the next send's turn at rate (none when 0), and says
// false when ctx ended first.
func (p *pacer) wait(ctx context.Context, rate float64) bool {
	if rate <= 0 {
		return ctx.Err() == nil
	}
	now := p.clock.Now()
	if p.next.IsZero() || now.Sub(p.next) > time.Second {
		p.next = now
	}
	if d := p.next.Sub(now); d > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-p.clock.After(d):
		}
	}
	p.next = p.next.Add(time.Duration(float64(time.Second) / rate))
	return ctx.Err() == nil
}

// restart starts the schedule again at the next send.
func (p *pacer) restart() { p.next = time.Time{} }

// split is items in two: those keep says yes to, and the others.
func split(items []Item, keep func(Item) bool) (yes, no []Item) {
	for _, it := range items {
		if keep(it) {
			yes = append(yes, it)
		} else {
			no = append(no, it)
		}
	}
	return yes, no
}

// seqs are the items' sequence numbers.
func seqs(items []Item) []int {
	out := make([]int, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

// sendAgain puts the items of re-drive id left sending back in their
// turn: their runner stopped between the mark and the broker's answer,
// so whether they reached their queue is not known. Sent again, one that
// had arrived is handled once, by its queue's inbox. In a cancelled
// re-drive nothing goes again: they count as sent, and settle as the
// others do (handled, failed again, or unsettled after SettleTimeout),
// and the failures of its pending items, should a stop have left them
// marked, are unresolved again, so that none stays re-driving.
func (r *Runner) sendAgain(ctx context.Context, id int64) error {
	rd, err := r.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	to, at := Pending, time.Time{}
	if rd.State == Cancelled {
		to, at = Sent, r.Clock.Now()
		for from := 0; ; {
			pending, err := r.Store.Items(ctx, id, Pending, from, failures.MaxPage)
			if err != nil {
				return err
			}
			if len(pending) == 0 {
				break
			}
			from = pending[len(pending)-1].Seq + 1
			if err := r.Ledger.Release(ctx, failureIDs(pending), id); err != nil {
				return err
			}
		}
	}
	for {
		left, err := r.Store.Items(ctx, id, Sending, 0, failures.MaxPage)
		if err != nil || len(left) == 0 {
			return err
		}
		r.Logger.WarnContext(ctx, "re-drive: items a stopped runner may not have sent", "redrive_id", id, "items", len(left), "now", to)
		if err := r.Store.Mark(ctx, id, seqs(left), to, "", at); err != nil {
			return err
		}
	}
}

// unsent takes back the items that could not be sent, and pauses the
// re-drive with reason.
func (r *Runner) unsent(ctx context.Context, rd Redrive, items []Item, reason string) error {
	if err := r.putBack(ctx, rd, items); err != nil {
		return err
	}
	_, err := r.Store.Move(context.WithoutCancel(ctx), rd.ID, []State{Canary, Running}, Paused, reason)
	r.Logger.WarnContext(ctx, "re-drive paused: "+reason, "redrive_id", rd.ID)
	return err
}

// settle settles the sent items: handled once their queue's inbox has
// claimed the event (the failure is resolved), failed again once the
// ledger has it unresolved again, unsettled after SettleTimeout.
func (r *Runner) settle(ctx context.Context, rd Redrive) error {
	for from := 0; ; {
		sent, err := r.Store.Items(ctx, rd.ID, Sent, from, failures.MaxPage)
		if err != nil || len(sent) == 0 {
			return err
		}
		from = sent[len(sent)-1].Seq + 1
		if err := r.settleSome(ctx, rd.ID, sent); err != nil {
			return err
		}
	}
}

// settleSome settles the sent items of re-drive id, a few queries for
// them all.
func (r *Runner) settleSome(ctx context.Context, id int64, sent []Item) error {
	byQueue := map[string][]string{}
	for _, it := range sent {
		byQueue[it.Queue] = append(byQueue[it.Queue], it.EventID)
	}
	handled := map[string]map[string]bool{}
	for q, events := range byQueue {
		got, err := r.Handled(ctx, q, events)
		if err != nil {
			return err
		}
		handled[q] = got
	}
	done, open := split(sent, func(it Item) bool { return handled[it.Queue][it.EventID] })
	if len(done) > 0 {
		if _, err := r.Ledger.Mark(ctx, failureIDs(done), failures.Redriving, failures.Resolved); err != nil {
			return err
		}
		if err := r.Store.Mark(ctx, id, seqs(done), Handled, "", time.Time{}); err != nil {
			return err
		}
	}
	if len(open) == 0 {
		return nil
	}
	// Which failed again, by id alone: the items that wait read no
	// bodies, however often they are asked about.
	again, err := r.Ledger.Select(ctx, failures.Filter{IDs: failureIDs(open), Status: failures.Unresolved})
	if err != nil {
		return err
	}
	var late []Item
	for _, it := range open {
		switch {
		case slices.Contains(again, it.FailureID):
			// Rare, and each with its own reason.
			f, err := r.Ledger.Get(ctx, it.FailureID)
			if err != nil {
				return err
			}
			if err := r.Store.Mark(ctx, id, []int{it.Seq}, FailedAgain, f.Error, time.Time{}); err != nil {
				return err
			}
		case r.Clock.Now().Sub(it.SentAt) > r.SettleTimeout:
			late = append(late, it)
		}
	}
	if len(late) == 0 {
		return nil
	}
	if _, err := r.Ledger.Mark(ctx, failureIDs(late), failures.Redriving, failures.Unresolved); err != nil {
		return err
	}
	return r.Store.Mark(ctx, id, seqs(late), Unsettled, fmt.Sprintf("neither handled nor failed again %s after it was sent", r.SettleTimeout), time.Time{})
}

// failureIDs are the items' failures.
func failureIDs(items []Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.FailureID
	}
	return out
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
