package router

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Handle runs msg through the route's chain, as a router does with a
// delivery, for a reader that consumes without a router (a replay). An
// error means the message is not done with: the router would send it back
// to its queue.
func Handle(rt Route, deps Deps, msg *message.Message) error {
	stats := deps.Stats.Queue(rt.Queue)
	h := message.HandlerFunc(func(msg *message.Message) ([]*message.Message, error) {
		return nil, run(rt.Handle, stats)(msg)
	})
	mw := chain(rt, deps, stats, deps.Logger.With("queue", rt.Queue, "handler", rt.Handler))
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	_, err := h(msg)
	return err
}

// HandleBatch runs batch, the bulk form of the route's handler, over msgs
// in one unit of work of tx, for a replay, which reads many events at
// once. The events are decoded and filtered as Decode does. When the
// batch fails as a whole (an envelope that does not decode, a version not
// handled, the handler's error), each message goes through the route's
// chain on its own instead, so that it fails as it would when serving:
// retried, or dead-lettered with its reason.
func HandleBatch(ctx context.Context, rt Route, deps Deps, tx handlers.Transactor, batch handlers.BatchHandlerFunc, msgs []*message.Message) error {
	err := handleBatch(ctx, rt, deps, tx, batch, msgs)
	if err == nil {
		return nil
	}
	deps.Logger.InfoContext(ctx, "batch failed: its events are handled one by one", "queue", rt.Queue, "events", len(msgs), "error", err)
	for _, msg := range msgs {
		if err := Handle(rt, deps, msg); err != nil {
			return err
		}
	}
	return nil
}

func handleBatch(ctx context.Context, rt Route, deps Deps, tx handlers.Transactor, batch handlers.BatchHandlerFunc, msgs []*message.Message) error {
	versions := versionsOf(rt.Handles)
	stats := deps.Stats.Queue(rt.Queue)
	events := make([]event.Event, 0, len(msgs))
	ignored := 0
	for _, msg := range msgs {
		e, err := event.DecodeAs(rt.Envelope, msg.Payload, msg.Metadata)
		if err != nil {
			return err
		}
		switch handled, err := accepts(versions, e); {
		case err != nil:
			return err
		case handled:
			events = append(events, e)
		default:
			ignored++
		}
	}
	if len(events) > 0 {
		if err := tx.InTx(ctx, func(ctx context.Context, _ handlers.Tx) error { return batch(ctx, events) }); err != nil {
			return fmt.Errorf("batch of %d events from %s: %w", len(events), events[0].ID, err)
		}
	}
	stats.Handled.Add(int64(len(events)))
	stats.Ignored.Add(int64(ignored))
	if ignored > 0 {
		deps.Logger.DebugContext(ctx, "event types not handled here: ignored", slog.String("queue", rt.Queue), slog.Int("events", ignored))
	}
	return nil
}
