// Package replay rebuilds what a replayable plugin derived from events by
// reading them again from Kafka. `moenda replay` and the benchmark run it.
package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"golang.org/x/sync/errgroup"

	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/router"
)

// Batch is how many records of a partition a batch handler takes at once.
const Batch = 1000

// Store is the unit of work and the inbox the handlers run with.
type Store interface {
	handlers.Transactor
	router.Inbox
	// ForgetConsumer deletes every inbox claim of consumer.
	ForgetConsumer(ctx context.Context, consumer string) error
}

// Deps are what a replay works with.
type Deps struct {
	Kafka    kafka.Config
	Topology *topology.Topology
	Store    Store
	// Sink takes the failure copies of events whose handler fails.
	Sink   router.Sink
	Logger *slog.Logger
}

// Replay is one rebuild under way.
type Replay struct {
	reps  []*kafka.Replay
	reads []func(context.Context) error
}

// Start has the plugin forget what it derived from events that occurred
// at or after from (the zero time: all of them), then points a consumer
// group of each of its queues (<queue>.replay) at those events, and
// returns the replay that reads them, up to the end the log has now, with
// Read. Live readers may carry on meanwhile: a replayable plugin's writes
// are idempotent, so the two meet.
func Start(ctx context.Context, deps Deps, def handlers.Definition, built handlers.Plugin, from time.Time) (*Replay, error) {
	if !def.Replayable || built.Rewind == nil {
		return nil, fmt.Errorf("replay: plugin %s is not replayable", def.Name)
	}
	if err := built.Rewind(ctx, from); err != nil {
		return nil, fmt.Errorf("replay %s: rewind: %w", def.Name, err)
	}
	rdeps := router.Deps{Sink: deps.Sink, Inbox: deps.Store, Stats: router.NewStats(true), Logger: deps.Logger}
	r := &Replay{}
	for _, s := range def.Subscriptions {
		q := def.Queue(s)
		group := q + ".replay"
		// The group's inbox claims are those of an earlier replay.
		if err := deps.Store.ForgetConsumer(ctx, group); err != nil {
			return nil, err
		}
		rep, err := kafka.Rewind(deps.Kafka, deps.Topology, q, group, from)
		if err != nil {
			return nil, err
		}
		pol, _ := deps.Topology.Policy(q)
		rt := router.Route{Queue: q, Consumer: group, Handler: def.Name + "/" + s.Name, Envelope: deps.Topology.Envelope(q), Handles: s.Handles, Policy: pol, Handle: built.Handlers[s.Name], Prepare: built.Prepares[s.Name]}
		handle := func(_ context.Context, msgs []*message.Message) error {
			for _, msg := range msgs {
				if err := router.Handle(rt, rdeps, msg); err != nil {
					return fmt.Errorf("event %s: %w", msg.UUID, err)
				}
			}
			return nil
		}
		if batch := built.Batches[s.Name]; batch != nil {
			handle = func(ctx context.Context, msgs []*message.Message) error {
				return router.HandleBatch(ctx, rt, rdeps, deps.Store, batch, msgs)
			}
		}
		r.reps = append(r.reps, rep)
		r.reads = append(r.reads, func(ctx context.Context) error { return rep.Read(ctx, Batch, handle) })
	}
	return r, nil
}

// Read reads every queue of the replay to its end. A subscription with a
// batch handler takes up to Batch events of a partition per unit of work;
// the others, and a batch that fails, go event by event through the chain
// the router runs when serving. An event whose handler fails follows its
// queue's failure path; an error (the database away) stops the replay,
// which can then be run again.
func (r *Replay) Read(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, read := range r.reads {
		g.Go(func() error { return read(ctx) })
	}
	if err := g.Wait(); err != nil {
		return errors.Join(err, errors.New("run the replay again"))
	}
	return nil
}

// Progress returns how many events were read and how many there are.
func (r *Replay) Progress() (read, total int64) {
	for _, rep := range r.reps {
		n, t := rep.Progress()
		read, total = read+n, total+t
	}
	return read, total
}
