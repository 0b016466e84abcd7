package bench

import (
	"context"
	"time"
)

// idleRelay counts the statements an idle relay sends.
func idleRelay(ctx context.Context, e *env, r *Result) error {
	relay, closeRelay, err := e.newRelay()
	if err != nil {
		return err
	}
	defer closeRelay()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(time.Second) // let it settle
	q0 := relay.Queries()
	time.Sleep(e.sz.idleFor)
	rate := float64(relay.Queries()-q0) / e.sz.idleFor.Seconds()
	r.add(Row{Name: "moenda: idle relay queries", Value: rate, Unit: "queries/s", Target: "<= 2/s"}, 0, 2)
	return nil
}
