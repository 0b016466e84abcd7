package harness

import (
	"slices"
	"time"
)

// Latency is the time from an event's acknowledgement to its first
// effect, over the good events of a run.
type Latency struct {
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

// Recovery is how long the system took to be healthy again after a fault
// was healed: end-to-end lag under a bound again, and consumers back.
type Recovery struct {
	Fault  string    `json:"fault"`
	Healed time.Time `json:"healed"`
	// Took is from Healed until events acknowledged from then on were
	// applied within the lag bound, and stayed so for steadyFor (or until
	// the next fault); negative when that never happened.
	Took time.Duration `json:"took"`
}

// Recovered reports whether the system recovered within bound.
func (r Recovery) Recovered(bound time.Duration) bool { return r.Took >= 0 && r.Took <= bound }

// lagged is one applied good event: when it was acknowledged and when it
// was first applied.
type lagged struct{ acked, applied time.Time }

// FirstEffects is when each event was first applied.
func FirstEffects(effects []Effect) map[string]time.Time {
	first := map[string]time.Time{}
	for _, e := range effects {
		if t, ok := first[e.EventID]; !ok || e.AppliedAt.Before(t) {
			first[e.EventID] = e.AppliedAt
		}
	}
	return first
}

// appliedGood pairs each good event's acknowledgement with its first
// effect, in the order of acknowledgement.
func appliedGood(ops []Op, effects []Effect) []lagged {
	first := FirstEffects(effects)
	var out []lagged
	for _, op := range ops {
		if op.Outcome == OK && op.Kind == Good {
			if t, ok := first[op.EventID]; ok {
				out = append(out, lagged{op.At, t})
			}
		}
	}
	slices.SortFunc(out, func(a, b lagged) int { return a.acked.Compare(b.acked) })
	return out
}

// Latencies measures acknowledgement to effect over the good events.
func Latencies(ops []Op, effects []Effect) Latency {
	var ds []time.Duration
	for _, l := range appliedGood(ops, effects) {
		ds = append(ds, max(l.applied.Sub(l.acked), 0))
	}
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(int(q*float64(len(ds))), len(ds)-1)] }
	return Latency{P50: at(0.50), P99: at(0.99), Max: ds[len(ds)-1]}
}

// Recoveries measures, for each healed fault, the time until the lag of
// the events acknowledged after it fell under lagBound and stayed there
// for steadyFor, or until the next fault began if that came first: the
// first such event's effect, less the time the fault was healed. Events still waiting when the next fault
// began are that fault's to judge, once this one has recovered. A fault
// whose recovery the next one interrupted has not recovered by then: its
// window runs on past that fault (and the ones after, as long as none
// sees it recover), so its recovery is the first the system made after
// it, however many faults came between. back, when given, is when the
// consumers were seen again after each heal (by its Healed time), and a
// recovery is never shorter than that.
func Recoveries(ops []Op, effects []Effect, faults []Line, lagBound time.Duration, back func(healed time.Time) time.Time) []Recovery {
	applied := appliedGood(ops, effects)
	var starts []time.Time
	for _, f := range faults {
		if f.Phase == "start" {
			starts = append(starts, f.At)
		}
	}
	var out []Recovery
	for _, f := range faults {
		if f.Phase != "stop" {
			continue
		}
		healed := f.At
		r := Recovery{Fault: f.Fault, Healed: healed, Took: -1}
		// The windows after healed: up to each later fault's start in
		// turn, then unbounded.
		var ends []time.Time
		for _, s := range starts {
			if s.After(healed) {
				ends = append(ends, s)
			}
		}
		ends = append(ends, time.Time{})
		for _, until := range ends {
			if at, ok := recoveredAt(applied, healed, until, lagBound); ok {
				r.Took = max(at.Sub(healed), 0)
				break
			}
		}
		if r.Took >= 0 && back != nil {
			if b := back(healed); b.IsZero() {
				r.Took = -1
			} else {
				r.Took = max(r.Took, b.Sub(healed))
			}
		}
		out = append(out, r)
	}
	return out
}

// steadyFor is how long the events acknowledged after a heal must keep
// being applied within the lag bound for the system to count as
// recovered. Once it has held that long, a later excursion is the
// machine's (a loaded host slows every process now and then), not the
// fault's: measured to the end of the run, such an excursion many
// seconds after the heal was charged to the last fault of a case.
const steadyFor = 10 * time.Second

// recoveredAt finds, among the events acknowledged from healed on and
// applied before until (zero: whenever), the first fast one (applied
// within lagBound) from which every event acknowledged in the next
// steadyFor, or up to the window's end if that comes first, was fast too,
// and returns its effect's time; false when there is none.
func recoveredAt(applied []lagged, healed, until time.Time, lagBound time.Duration) (time.Time, bool) {
	var window []lagged
	for _, l := range applied {
		if !l.acked.Before(healed) && (until.IsZero() || l.applied.Before(until)) {
			window = append(window, l)
		}
	}
	fast := func(l lagged) bool { return l.applied.Sub(l.acked) < lagBound }
	for i := 0; i < len(window); {
		if !fast(window[i]) {
			i++
			continue
		}
		end := window[i].acked.Add(steadyFor)
		j := i
		for j < len(window) && window[j].acked.Before(end) && fast(window[j]) {
			j++
		}
		if j == len(window) || !window[j].acked.Before(end) {
			return window[i].applied, true
		}
		i = j + 1 // window[j] was slow: the run starts again after it
	}
	return time.Time{}, false
}
