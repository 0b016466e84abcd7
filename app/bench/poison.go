package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// errPoison is the failure of a poisoned event's handler, every time.
var errPoison = errors.New("bench: poisoned event")

// poisonEvery spreads the poisoned events evenly: one in this many.
const poisonEvery = 100

// poisonConsume measures what failing events cost the healthy ones. The
// router runs as in inboxConsume (whole chain, inbox, an effect row per
// event) with the configured failure schedule (topology.failure: immediate
// retries in the consumer, then delays through the broker's retry queues),
// twice over a backlog of fresh events: once all healthy, once with one
// event in a hundred, spread evenly, failing every time. The figure is the
// healthy events committed per second, from the start until the last
// healthy one, of the poisoned run against the clean one; the poisoned
// events are not waited for. What they leave in the retry queues and the
// dead-letter queue is purged after each run. Clean and poisoned runs
// alternate (see alternate); the rates are the medians of the rounds, and
// the ratio is the median of the rounds' ratios: a clean run and the
// poisoned run next to it share the machine's state, which drifts by more
// than the effect measured (see BENCHMARKS.md, "bench: the drift behind
// the poison row").
func poisonConsume(ctx context.Context, e *env, r *Result) error {
	if err := e.effectTable(ctx); err != nil {
		return err
	}
	n := e.sz.consumed
	rounds, err := alternate(e, "poison", e.sz.rounds,
		func() (flow, error) { return e.poisonRun(ctx, n, false) },
		func() (flow, error) { return e.poisonRun(ctx, n, true) })
	if err != nil {
		return err
	}
	pol, _ := e.top.Policy(e.sink)
	delays := make([]string, len(pol.Delays))
	for i, d := range pol.Delays {
		delays[i] = d.String()
	}
	r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: healthy events with 1 %% poisoned (%d immediate retries from %s, then delays %s), against none",
		pol.ImmediateRetries, pol.ImmediateInterval, strings.Join(delays, ", ")),
		Unit: "msg/s", Target: "ratio >= 0.95"}), 0.95, 0)
	return nil
}

// poisonRun publishes n fresh events, every poisonEvery-th poisoned when
// poison is set, times the router committing the healthy ones, then stops
// it and purges what the poisoned ones left behind.
func (e *env) poisonRun(ctx context.Context, n int, poison bool) (flow, error) {
	if err := e.purgeFailures(); err != nil {
		return flow{}, err
	}
	ids, err := e.publishEvents(ctx, n)
	if err != nil {
		return flow{}, err
	}
	var bad map[string]bool
	if poison {
		bad = make(map[string]bool, n/poisonEvery)
		for i := poisonEvery / 2; i < len(ids); i += poisonEvery {
			bad[ids[i]] = true
		}
	}
	f, err := inProcess(n-len(bad), func() (float64, error) { return e.routeEffects(ctx, n-len(bad), bad) })
	if err != nil {
		return flow{}, err
	}
	// The router has stopped, so nothing puts a copy in a retry queue any
	// more; one that leaves a retry queue meanwhile lands in the sink,
	// which is purged last.
	return f, e.purgeFailures()
}
