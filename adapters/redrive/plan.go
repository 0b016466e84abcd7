package redrive

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/moenda/moenda/adapters/failures"
)

// Options are a re-drive's settings.
type Options struct {
	// To is where the failures go: "" for the queue each failed in,
	// "queue:NAME", or ToOriginalExchange.
	To string
	// Rate is failures sent per second; 0 is as fast as the broker
	// takes them.
	Rate float64
	// Canary is how many go first, alone: the rest wait until each of
	// them is handled, and none go if one fails again.
	Canary int
	// Max bounds how many are sent; 0 is no bound.
	Max int
	// MaxRedrives refuses a failure re-driven that many times already
	// (failures.max_redrives): it fails for a reason a re-drive does not
	// fix.
	MaxRedrives int
}

// Plan is what a re-drive of a selection would do, before anything is
// sent: how many failures go, by group and by queue, and how many are
// skipped, by reason.
type Plan struct {
	Selected int            `json:"selected"`
	Send     int            `json:"send"`
	ByGroup  map[string]int `json:"by_group"`
	ByQueue  map[string]int `json:"by_queue"`
	Skipped  map[string]int `json:"skipped"`
	items    []Item
}

// ToOriginalExchange sends each failure to the exchange it was first
// published to, with its routing key: every queue bound there gets it
// again, and those that had handled it already take it once, through
// their inbox. Its item is settled by the queue that failed it.
const ToOriginalExchange = "original-exchange"

// Reasons a plan skips a failure.
const (
	skipResolved  = "already resolved"
	skipRedriving = "already in a running re-drive"
	skipArchived  = "archived"
	skipEdited    = "edited: its edit is re-driven instead"
	skipMax       = "beyond the re-drive's --max"
	skipNoOrigin  = "its original exchange is not known (a foreign dead letter): send it to a queue"
)

// MakePlan plans a re-drive of the failures ids with o: the selection,
// frozen.
func MakePlan(ctx context.Context, l failures.Ledger, ids []int64, o Options) (Plan, error) {
	target, err := o.target()
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Selected: len(ids), ByGroup: map[string]int{}, ByQueue: map[string]int{}, Skipped: map[string]int{}}
	var skipped []Item
	ids = slices.Sorted(slices.Values(ids))
	for chunk := range slices.Chunk(ids, failures.MaxPage) {
		fs, err := l.List(ctx, failures.Filter{IDs: chunk, AnyStatus: true}, failures.Page{Limit: failures.MaxPage})
		if err != nil {
			return Plan{}, err
		}
		slices.Reverse(fs) // oldest first: the order they are sent in
		for _, f := range fs {
			it := Item{FailureID: f.ID, Queue: target(f), EventID: f.EventID, State: Pending}
			switch {
			case f.Status == failures.Resolved:
				it.Reason = skipResolved
			case f.Status == failures.Redriving:
				it.Reason = skipRedriving
			case f.Status == failures.Archived:
				it.Reason = skipArchived
			case f.Status == failures.Edited:
				it.Reason = skipEdited
			case o.To == ToOriginalExchange && (f.OriginalExchange == "" || f.OriginalRoutingKey == ""):
				it.Reason = skipNoOrigin
			case o.MaxRedrives > 0 && f.Redrives >= o.MaxRedrives:
				it.Reason = fmt.Sprintf("re-driven %d times already (failures.max_redrives is %d)", f.Redrives, o.MaxRedrives)
			case o.Max > 0 && p.Send >= o.Max:
				it.Reason = skipMax
			}
			if it.Reason != "" {
				it.State = Skipped
				p.Skipped[it.Reason]++
				skipped = append(skipped, it)
			} else {
				p.Send++
				p.ByGroup[f.Fingerprint]++
				p.ByQueue[it.Queue]++
				p.items = append(p.items, it)
			}
		}
	}
	// Those sent first, oldest first, so a canary is the first items.
	p.items = append(p.items, skipped...)
	for i := range p.items {
		p.items[i].Seq = i
	}
	return p, nil
}

// target says where a failure goes.
func (o Options) target() (func(failures.Failure) string, error) {
	switch name, ok := strings.CutPrefix(o.To, "queue:"); {
	case o.To == "" || o.To == ToOriginalExchange:
		return func(f failures.Failure) string { return f.FailedQueue }, nil
	case ok && name != "":
		return func(failures.Failure) string { return name }, nil
	default:
		return nil, fmt.Errorf("%w: --to must be queue:NAME or %s, or absent for the queue each failure failed in; got %q", ErrInvalid, ToOriginalExchange, o.To)
	}
}
