package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/moenda/moenda/adapters/outbox"
)

// idleRelay counts the statements an idle relay sends, with each reader:
// the polling one looks once per poll interval, the logical one waits on
// its stream and sends none.
func idleRelay(ctx context.Context, e *env, r *Result) error {
	for _, reader := range e.readers() {
		rate, err := e.idleQueries(ctx, reader)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("moenda: idle relay queries, %s reader", reader)
		if reader == outbox.ReaderLogical {
			none := rate == 0
			r.add(Row{Name: name, Value: rate, Unit: "queries/s", Target: "= 0", Met: &none}, 0, 0)
			continue
		}
		r.add(Row{Name: name, Value: rate, Unit: "queries/s", Target: "<= 2/s"}, 0, 2)
	}
	return nil
}

// idleQueries runs a relay with reader over a caught-up outbox and
// returns the statements it sends per second once settled.
func (e *env) idleQueries(ctx context.Context, reader string) (float64, error) {
	relay, stop, err := e.freshRelay(ctx, reader)
	if err != nil {
		return 0, err
	}
	defer stop()
	time.Sleep(2 * time.Second) // let it settle
	q0 := relay.Queries()
	time.Sleep(e.sz.idleFor)
	return float64(relay.Queries()-q0) / e.sz.idleFor.Seconds(), nil
}

// readers are the readers the run compares: both where the server
// streams, the polling one alone otherwise.
func (e *env) readers() []string {
	if e.reader == outbox.ReaderLogical {
		return []string{outbox.ReaderLogical, outbox.ReaderPoll}
	}
	return []string{outbox.ReaderPoll}
}
