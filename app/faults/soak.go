package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

// soakOverlay makes retention run every few seconds, so that a soak of
// minutes sees many cycles.
const soakOverlay = `inbox: {retention: 2m, prune_interval: 10s}
outbox: {retention: 20s, retention_interval: 10s}
`

// directTransactor is a unit of work on the case's database that
// publishes the probe's events through the outbox, as a use case would.
func (r *run) directTransactor() (*postgres.Transactor, error) {
	cfg := topology.DefaultConfig()
	cfg.Exchanges = []topology.ExchangeConfig{{Name: faultprobe.Exchange, Events: []string{faultprobe.Name + ".#"}}}
	top, err := topology.Build(cfg, nil)
	if err != nil {
		return nil, err
	}
	return postgres.NewTransactor(r.Pool, outbox.New(top.Routable, watermill.NewSlogLogger(slog.New(slog.DiscardHandler)))), nil
}

// sizes is a reading of the tables retention keeps small.
type sizes struct {
	at             time.Time
	outbox, inbox  int64 // bytes, indexes included
	outboxDeadRows int64
}

func (r *run) readSizes(ctx context.Context) (sizes, error) {
	s := sizes{at: time.Now()}
	err := r.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('watermill_outbox'), pg_total_relation_size('moenda_inbox'),
		COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'watermill_outbox'), 0)`).Scan(&s.outbox, &s.inbox, &s.outboxDeadRows)
	return s, err
}

func bloatSoak(ctx context.Context, r *run) error {
	// At a steady 2,000 events/s, for minutes: a burst would leave no
	// steady state to compare with.
	total, rate := r.scale(300_000, 50_000), 2000
	r.injected("%d events at %d/s from 4 writers, 50 to a transaction, with outbox retention 20 s every 10 s and inbox retention 2 min every 10 s; the tables' sizes read every 10 s", total, rate)
	if err := r.Start(ctx, 1); err != nil {
		return err
	}
	tx, err := r.directTransactor()
	if err != nil {
		return err
	}
	var readings []sizes
	var mu sync.Mutex
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for r.wait(sctx, 10*time.Second) == nil {
			if s, err := r.readSizes(sctx); err == nil {
				mu.Lock()
				readings = append(readings, s)
				mu.Unlock()
			}
		}
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(next.Add(50)) - 50
				if first >= total || ctx.Err() != nil {
					return
				}
				// The batch starting at first is due at first/rate.
				if err := r.wait(ctx, time.Until(start.Add(time.Duration(first)*time.Second/time.Duration(rate)))); err != nil {
					return
				}
				if err := r.directBatch(ctx, tx, w, first, min(50, total-first)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		stopSampling()
		return err
	}
	r.note("%d events written in %s", total, time.Since(start).Round(time.Second))
	// Sample on while the consumer catches up, then three retention
	// cycles more.
	for ctx.Err() == nil {
		if r.Busy(ctx) == "" {
			break
		}
		_ = r.wait(ctx, 5*time.Second)
	}
	_ = r.wait(ctx, 40*time.Second)
	stopSampling()
	<-sampled
	r.judgeSizes(readings)
	var vacuums int64
	var on bool
	err = r.Pool.QueryRow(ctx, `SELECT current_setting('autovacuum')::bool,
		COALESCE((SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'watermill_outbox'), 0)`).Scan(&on, &vacuums)
	if err == nil && !on {
		r.cannotCheck("autovacuum", "the server runs with autovacuum = off (a server setting; the sizes above are what the relay's retention keeps)")
		return nil
	}
	r.judge("autovacuum", err == nil && vacuums > 0, "autovacuum completed %d times on the outbox during the soak (%v)", vacuums, err)
	return nil
}

// directBatch commits n events in one transaction, and records them.
func (r *run) directBatch(ctx context.Context, tx *postgres.Transactor, writer, first, n int) error {
	var ops []harness.Op
	var events []event.Event
	for seq := first; seq < first+n; seq++ {
		id := harness.EventID(r.DBName, writer, seq)
		op := harness.Op{Outcome: harness.Invoked, Writer: writer, Seq: seq, EventID: id, Kind: harness.Good, At: time.Now()}
		if err := r.History.Add(harness.Line{Op: op}); err != nil {
			return err
		}
		payload, _ := json.Marshal(faultprobe.Payload{Writer: writer, Seq: seq})
		ops = append(ops, op)
		events = append(events, event.Event{ID: id, Name: faultprobe.Event, OccurredAt: time.Now().UTC(), Source: "faults", Payload: payload})
	}
	if err := tx.InTx(ctx, func(ctx context.Context, x handlers.Tx) error { return x.Publish(ctx, events...) }); err != nil {
		// A lost answer to the commit leaves no business row to look
		// for: the soak stops rather than guess.
		return fmt.Errorf("soak writer %d: %w", writer, err)
	}
	for _, op := range ops {
		op.Outcome, op.At = harness.OK, time.Now()
		if err := r.History.Add(harness.Line{Op: op}); err != nil {
			return err
		}
	}
	return nil
}

// judgeSizes checks that the outbox plateaus: after three retention
// cycles, it stays under twice its median size.
func (r *run) judgeSizes(readings []sizes) {
	if len(readings) < 8 {
		r.judge("plateau", false, "only %d size readings; the soak was too short to judge", len(readings))
		return
	}
	settled := readings[3:] // past three retention cycles of 10 s
	var outboxes []int64
	for _, s := range settled {
		outboxes = append(outboxes, s.outbox)
	}
	sorted := slices.Clone(outboxes)
	slices.Sort(sorted)
	median, peak := sorted[len(sorted)/2], sorted[len(sorted)-1]
	last := readings[len(readings)-1]
	r.note("outbox table %s median, %s at most, %s at the end (dead rows %d); inbox %s at the end; %d readings",
		mib(median), mib(peak), mib(last.outbox), last.outboxDeadRows, mib(last.inbox), len(readings))
	r.result.addExtra("outbox_mib_median", float64(median)/(1<<20))
	r.result.addExtra("outbox_mib_peak", float64(peak)/(1<<20))
	r.judge("plateau", peak <= 2*median, "the outbox %s at most, %s median after three retention cycles", mib(peak), mib(median))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
