package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// fill writes n events into the outbox, in transactions of up to 500.
func (e *env) fill(ctx context.Context, n int) error {
	const perTx, writers = 500, 4
	jobs := make(chan int)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				err := e.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
					events := make([]event.Event, k)
					for i := range events {
						events[i] = benchEvent()
					}
					return tx.Publish(ctx, events...)
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for left := n; left > 0; left -= perTx {
		select {
		case jobs <- min(left, perTx):
		case err := <-errs:
			close(jobs)
			wg.Wait()
			return err
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// relayDrain fills the outbox with a backlog, then starts `moenda serve` as
// a process and times its relay moving the backlog to the sink queue, with
// each reader (the logical one streams the backlog from its slot, which
// exists before the rows are written), in rounds paired with the raw
// publisher's ceiling; the serve process's peak RSS is read at the end.
// The large backlog, in rounds paired with the drain of the usual one,
// checks that a batch costs the same however much waits behind it.
func relayDrain(ctx context.Context, e *env, r *Result) error {
	var peak float64
	job, err := e.publishJob(ctx, e.sz.backlog)
	if err != nil {
		return err
	}
	for _, reader := range e.readers() {
		rounds, err := alternate(e, "relay drain, "+reader+" reader", e.sz.rounds, func() (flow, error) {
			if err := e.purge(); err != nil {
				return flow{}, err
			}
			return e.publishCeiling(ctx, job)
		}, func() (flow, error) {
			f, rss, err := e.drain(ctx, reader, e.sz.backlog)
			peak = max(peak, rss)
			return f, err
		})
		if err != nil {
			return err
		}
		r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: relay drain of %d rows with confirms, %s reader, against the raw publisher in the same rounds", e.sz.backlog, reader),
			Unit: "rows/s", Target: "ratio >= 0.85"}), 0.85, 0)
	}
	if e.reader == outbox.ReaderLogical {
		// At its first start, a logical relay reads from the table what
		// committed before its slot existed.
		rounds, err := alternate(e, "relay drain at the logical reader's first start", e.sz.rounds, func() (flow, error) {
			if err := e.purge(); err != nil {
				return flow{}, err
			}
			return e.publishCeiling(ctx, job)
		}, func() (flow, error) {
			return e.firstStart(ctx, e.sz.backlog)
		})
		if err != nil {
			return err
		}
		r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: relay drain of %d rows read from the table at the logical reader's first start, against the raw publisher in the same rounds", e.sz.backlog),
			Unit: "rows/s", Target: "ratio >= 0.85"}), 0.85, 0)
	}
	if e.sz.bigBacklog > 0 {
		rounds, err := alternate(e, "relay drain of the large backlog", e.sz.rounds, func() (flow, error) {
			f, _, err := e.drain(ctx, e.reader, e.sz.backlog)
			return f, err
		}, func() (flow, error) {
			f, rss, err := e.drain(ctx, e.reader, e.sz.bigBacklog)
			peak = max(peak, rss)
			return f, err
		})
		if err != nil {
			return err
		}
		r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: relay drain of %d rows, %s reader, against the %d-row drain in the same rounds", e.sz.bigBacklog, e.reader, e.sz.backlog),
			Unit: "rows/s", Target: "ratio >= 0.90"}), 0.90, 0)
	}
	r.add(Row{Name: "moenda: serve peak RSS while draining", Value: peak, Unit: "MiB", Target: "<= 150 MiB"}, 0, 150)
	return drainWhilePruning(ctx, e, r)
}

// drainWhilePruning sets serve's drain while its retention deletes old
// published rows beside it against the same drain with nothing to delete,
// alternating three rounds. The old rows sit behind every position and
// past outbox.retention, as a week of published events would; they are
// written here in bulk, which a logical relay would stream as new events,
// so this step polls. The backlog
// is twice the drain's, so that pruning, which starts a second in
// (outbox.retention_interval), runs through most of it.
func drainWhilePruning(ctx context.Context, e *env, r *Result) error {
	backlog, old := 2*e.sz.backlog, 4*e.sz.backlog
	var pruned int64
	plain := func() (flow, error) {
		f, _, err := e.drain(ctx, outbox.ReaderPoll, backlog)
		return f, err
	}
	pruning := func() (flow, error) {
		if _, err := e.pool.Exec(ctx, `INSERT INTO watermill_outbox (uuid, payload, metadata, transaction_id, created_at)
			SELECT gen_random_uuid()::text, convert_to(repeat('x', 1000), 'UTF8'), '{"event_name":"bench.evento.v1"}', '1'::xid8, now()::timestamp - interval '10 days'
			FROM generate_series(1, $1)`, old); err != nil {
			return flow{}, fmt.Errorf("old rows: %w", err)
		}
		if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE watermill_outbox`); err != nil {
			return flow{}, err
		}
		f, _, err := e.drain(ctx, outbox.ReaderPoll, backlog, "MOENDA_OUTBOX__RETENTION_INTERVAL=1s")
		var left int64
		if err == nil {
			err = e.pool.QueryRow(ctx, `SELECT count(*) FROM watermill_outbox WHERE transaction_id = '1'::xid8`).Scan(&left)
		}
		pruned += int64(old) - left
		if err == nil {
			_, err = e.pool.Exec(ctx, `DELETE FROM watermill_outbox WHERE transaction_id = '1'::xid8`)
		}
		return f, err
	}
	rounds, err := alternate(e, "drain while pruning", e.sz.rounds, plain, pruning)
	if err != nil {
		return err
	}
	r.add(rounds.row(Row{Name: fmt.Sprintf("moenda: relay drain of %d rows while retention deletes older rows (%d in all), against without", backlog, pruned),
		Unit: "rows/s", Target: "ratio >= 0.95"}), 0.95, 0)
	return nil
}

// relayCatchUp moves what earlier steps left in the outbox with reader,
// untimed, so a drain starts from an empty outbox; a logical relay leaves
// its slot, from which the next one streams.
func (e *env) relayCatchUp(ctx context.Context, reader string) error {
	relay, stop, err := e.runRelay(ctx, reader)
	if err != nil {
		return err
	}
	err = e.waitCaughtUp(ctx, relay, reader)
	stop()
	if err != nil {
		return fmt.Errorf("relay what earlier steps left: %w", err)
	}
	return e.purge()
}

// firstStart times serve's logical relay at its first start, over a
// backlog of n rows committed before its slot exists, which it reads from
// the table. The slot an earlier round made would stream them instead:
// it is dropped first, and the backlog left by a polling relay.
func (e *env) firstStart(ctx context.Context, n int) (flow, error) {
	if _, err := outbox.RetireSlot(ctx, e.pool, e.set.Outbox.ConsumerGroup, 30*time.Second); err != nil {
		return flow{}, err
	}
	f, _, err := e.drain(ctx, outbox.ReaderPoll, n, "MOENDA_OUTBOX__READER="+outbox.ReaderLogical)
	return f, err
}

// freshRelay runs a relay with reader over an outbox that earlier steps
// left empty, so what it measures is its own work.
func (e *env) freshRelay(ctx context.Context, reader string) (relay *outbox.Relay, stop func(), err error) {
	if err := e.relayCatchUp(ctx, reader); err != nil {
		return nil, nil, err
	}
	return e.runRelay(ctx, reader)
}

// waitCaughtUp waits until relay, reading with reader, has published
// everything committed so far. A logical relay must also lead, and have
// had PostgreSQL decode everything written so far, the other tables' WAL
// included: a relay that starts from its slot decodes again the WAL after
// the slot's restart point, which is what a measure after it would time.
func (e *env) waitCaughtUp(ctx context.Context, relay *outbox.Relay, reader string) error {
	var wal string
	if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&wal); err != nil {
		return err
	}
	return await.Until(ctx, 5*time.Minute, "the relay to catch up", func() (bool, error) {
		done, err := outbox.CaughtUp(ctx, e.pool, e.set.Outbox.ConsumerGroup)
		if !done || err != nil || reader != outbox.ReaderLogical {
			return done, err
		}
		err = e.pool.QueryRow(ctx, `SELECT COALESCE(bool_and(r.confirmed_flush_lsn >= $2::pg_lsn), false) FROM moenda_outbox_slots s
			JOIN pg_replication_slots r USING (slot_name) WHERE s.consumer_group = $1`, e.set.Outbox.ConsumerGroup, wal).Scan(&done)
		return done && relay.Active(), err
	})
}

// drain times serve's relay over a backlog of n rows, left by a relay
// reading with reader (environ may have serve read otherwise), and returns
// its flow and the process's peak RSS in MiB.
func (e *env) drain(ctx context.Context, reader string, n int, environ ...string) (flow, float64, error) {
	if err := e.relayCatchUp(ctx, reader); err != nil {
		return flow{}, 0, err
	}
	if err := e.fill(ctx, n); err != nil {
		return flow{}, 0, fmt.Errorf("fill the outbox: %w", err)
	}
	// The consumer is attached before the relay starts, as in the publish
	// ceiling: no message waits in the queue for it.
	wait, stopConsumer, err := e.arrivals(ctx)
	if err != nil {
		return flow{}, 0, err
	}
	defer stopConsumer()
	pid, _, stop, err := e.startServe(ctx, append([]string{"MOENDA_OUTBOX__READER=" + reader}, environ...)...)
	if err != nil {
		return flow{}, 0, err
	}
	defer stop()
	got, err := wait(n, process{procMoenda, pid})
	if err != nil {
		return flow{}, 0, err
	}
	rss, err := peakRSS(pid)
	if err != nil {
		return flow{}, 0, err
	}
	return got, rss, e.purge()
}

// arrivals attaches a consumer to the sink queue, one that keeps up as a
// real one would (auto-ack, on the bench's connection), and returns wait,
// which returns once n messages arrived with their flow, and stop, which
// ends the consumer. wait samples the CPU of measured (none without a
// pid), of this process and of the servers at the first arrival and at
// the last. Consuming keeps the
// queue short, so the figure is the publisher's, not that of a broker
// paging a long queue to disk. The consumer is attached when arrivals
// returns: start the publisher after it.
func (e *env) arrivals(ctx context.Context) (wait func(n int, measured process) (flow, error), stop func(), err error) {
	return e.arrivalsSeen(ctx, nil)
}

// arrivalsSeen is arrivals, telling seen, when set, of each delivery.
func (e *env) arrivalsSeen(ctx context.Context, seen func(amqp091.Delivery)) (wait func(n int, measured process) (flow, error), stop func(), err error) {
	ch, err := e.channel()
	if err != nil {
		return nil, nil, err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, e.sink, "", true, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, nil, err
	}
	wait = func(n int, measured process) (flow, error) {
		var first time.Time
		var before cpuSample
		for got := 0; got < n; got++ {
			select {
			case d, ok := <-deliveries:
				if !ok {
					return flow{}, fmt.Errorf("consumer closed after %d of %d messages", got, n)
				}
				if got == 0 {
					first = time.Now()
					sample, err := sampleCPU(measured)
					if err != nil {
						return flow{}, err
					}
					before = sample
				}
				if seen != nil {
					seen(d)
				}
			case <-time.After(time.Minute):
				return flow{}, fmt.Errorf("%d of %d messages arrived: %w", got, n, await.ErrTimeout)
			}
		}
		took := time.Since(first)
		after, err := sampleCPU(measured)
		if err != nil {
			return flow{}, err
		}
		return flow{rate: float64(n-1) / took.Seconds(), cpu: after.since(before), n: n - 1, own: measured.role}, nil
	}
	return wait, func() { _ = ch.Close() }, nil
}

// startServe runs `moenda serve` on the bench database and exchange, with
// no plugin, so its relay is all it does, and environ on top of the
// bench's settings; addr is where it serves HTTP. stop ends it and waits.
func (e *env) startServe(ctx context.Context, environ ...string) (pid int, addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "moenda-bench-")
	if err != nil {
		return 0, "", nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	base, err := configs.FS.ReadFile("base.yaml")
	if err != nil {
		return 0, "", nil, err
	}
	overlay := fmt.Sprintf(`log: {level: warn}
handlers: {enabled: []}
topology:
  exchanges: [{name: %q, events: ["bench.#"], failure: {dead_letter: {exchange: %q}}}]
  unrouted: ""
`, e.exchange, e.exchange+".dlx")
	if err := os.WriteFile(filepath.Join(dir, "base.yaml"), base, 0o600); err != nil {
		return 0, "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(overlay), 0o600); err != nil {
		return 0, "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, "", nil, err
	}
	addr = l.Addr().String()
	_ = l.Close()
	cmd := exec.CommandContext(ctx, e.opts.ServeBin, "--config-dir", dir, "--env", "bench", "serve")
	cmd.Env = append(append(os.Environ(), "MOENDA_POSTGRES__URL="+e.dbURL, "MOENDA_AMQP__URL="+e.opts.AMQPURL, "MOENDA_AMQP__URLS=", "MOENDA_HTTP__ADDR="+addr), environ...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, "", nil, fmt.Errorf("start %s serve: %w", e.opts.ServeBin, err)
	}
	return cmd.Process.Pid, addr, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}, nil
}

// peakRSS reads a process's high-water resident set size, in MiB.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("peak RSS: no VmHWM in /proc/%d/status", pid)
}
