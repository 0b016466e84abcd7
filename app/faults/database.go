package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

func postgresRestart(ctx context.Context, r *run) error {
	modes := []string{"fast", "immediate"}
	r.injected("writers at ~300 events/s, every command retried with its event_id; pg_ctlcluster restart -m fast, then -m immediate")
	var mu sync.Mutex
	codes := map[int]int{}
	counting := func(w *harness.Workload) { w.OnStatus = func(code int) { mu.Lock(); codes[code]++; mu.Unlock() } }
	if err := r.steady(ctx, 2, counting); err != nil {
		return err
	}
	for _, mode := range modes {
		restart := func(ctx context.Context) error { return restartPostgres(ctx, mode) }
		if err := r.strike(ctx, 1, 8*time.Second, "postgres restart -m "+mode, 0, restart, nil); err != nil {
			return err
		}
	}
	if err := r.tail(ctx); err != nil {
		return err
	}
	r.after = append(r.after, func([]harness.Op, harness.Observed) {
		mu.Lock()
		defer mu.Unlock()
		r.note("API answers during the run: %v (0: no answer)", codes)
		other := 0
		for code, n := range codes {
			if code >= 500 && code != 503 {
				r.judge("503", false, "the API answered %d %d times during the outage; 503 expected", code, n)
				other += n
			}
		}
		r.judge("503", codes[503] > 0 && other == 0, "%d answers 503 during the outages, %d other 5xx", codes[503], other)
	})
	return nil
}

func sessionsKilled(ctx context.Context, r *run) error {
	times := r.scale(20, 6)
	r.injected("writers at ~300 events/s, handlers holding their transaction 5 ms; %d× every 3 s: pg_terminate_backend of every session of the database", times)
	terminate := func(ctx context.Context) error { _, err := r.Terminate(ctx); return err }
	return r.underLoad(ctx, 2, func(ctx context.Context) error {
		return r.strike(ctx, times, 3*time.Second, "sessions terminated", 0, terminate, nil)
	}, holding(5))
}

// holding makes the probe hold its unit of work open ms after the effect,
// so that a fault can land between the effect and the commit.
func holding(ms int) func(*harness.Workload) {
	return func(w *harness.Workload) {
		w.Payload = func(writer, seq int, kind harness.Kind) any {
			return faultprobe.Payload{Writer: writer, Seq: seq, Poison: kind == harness.Poison, HoldMillis: ms}
		}
	}
}

// errRollback makes a direct writer's transaction roll back on purpose.
var errRollback = errors.New("rolled back on purpose")

func commitOrder(ctx context.Context, r *run) error {
	writers := 8
	r.injected("%d writers in PostgreSQL: each transaction publishes, sleeps random()*0.5 s, then commits, or rolls back one time in ten; the polling reader", writers)
	if err := r.Start(ctx, 1); err != nil {
		return err
	}
	tx, err := r.directTransactor()
	if err != nil {
		return err
	}
	dur := time.Duration(r.scale(40, 15)) * time.Second
	wctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		rng := rand.New(rand.NewPCG(r.rng.Uint64(), uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; wctx.Err() == nil; seq++ {
				if err := r.directWrite(ctx, tx, w, seq, rng.IntN(10) == 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	r.after = append(r.after, func(ops []harness.Op, _ harness.Observed) {
		rep := r.result.Report
		rolledBack := 0
		for _, op := range ops {
			if op.Outcome == harness.Failed {
				rolledBack++
			}
		}
		r.judge("exact", len(rep.Lost) == 0 && len(rep.Unexpected) == 0, "%d committed, lost %d, ghosts %d", rep.Confirmed, len(rep.Lost), len(rep.Unexpected))
		// Without a roll-back the clause was not put to the test.
		r.judge(clauseRolledBack, rolledBack > 0, "%d transactions rolled back", rolledBack)
	})
	return <-errs
}

// directWrite commits, or rolls back, one event in a transaction that
// sleeps before its end, and records it.
func (r *run) directWrite(ctx context.Context, tx *postgres.Transactor, writer, seq int, rollback bool) error {
	id := harness.EventID(r.DBName, writer, seq)
	op := harness.Op{Outcome: harness.Invoked, Writer: writer, Seq: seq, EventID: id, Kind: harness.Good, At: time.Now()}
	if err := r.History.Add(harness.Line{Op: op}); err != nil {
		return err
	}
	payload, _ := json.Marshal(faultprobe.Payload{Writer: writer, Seq: seq})
	err := tx.InTx(ctx, func(ctx context.Context, x handlers.Tx) error {
		if _, err := x.Remember(ctx, handlers.Receipt{Consumer: harness.DirectWriter, Key: id, Answer: []byte(`{}`)}); err != nil {
			return err
		}
		if err := x.Publish(ctx, event.Event{ID: id, Name: faultprobe.Event, OccurredAt: time.Now().UTC(), Source: "faults", Payload: payload}); err != nil {
			return err
		}
		if _, err := x.Postgres().Exec(ctx, `SELECT pg_sleep(random() * 0.5)`); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	switch {
	case err == nil:
		op.Outcome = harness.OK
	case errors.Is(err, errRollback):
		op.Outcome = harness.Failed
	default:
		// The commit's answer may have been cut; the checker looks for
		// the business row. Any other error ends the writer.
		op.Outcome = harness.Indeterminate
		if !errors.Is(err, handlers.ErrUnavailable) {
			_ = r.History.Add(harness.Line{Op: op})
			return fmt.Errorf("direct writer %d: %w", writer, err)
		}
	}
	op.At = time.Now()
	return r.History.Add(harness.Line{Op: op})
}

func idleInTransaction(ctx context.Context, r *run) error {
	timeout := r.scale(30, 10)
	r.injected("writers at ~300 events/s; a session BEGINs, INSERTs and stays idle, until idle_in_transaction_session_timeout (%d s) ends it; the polling reader", timeout)
	if err := r.steady(ctx, 1); err != nil {
		return err
	}
	if _, err := r.Pool.Exec(ctx, `CREATE TABLE faults_scratch (x int)`); err != nil {
		return err
	}
	if err := r.wait(ctx, r.jitter(5*time.Second)); err != nil {
		return err
	}
	var pid int
	began := time.Now()
	err := r.inject(ctx, "idle in transaction", 0, func(ctx context.Context) error {
		conn, err := r.Pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, fmt.Sprintf(`SET idle_in_transaction_session_timeout = '%ds'`, timeout)); err != nil {
			return err
		}
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		for _, q := range []string{`BEGIN`, `INSERT INTO faults_scratch VALUES (1)`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return err
			}
		}
		// Idle until the server ends the session.
		deadline := time.Now().Add(time.Duration(timeout)*time.Second + time.Minute)
		for time.Now().Before(deadline) {
			var alive bool
			if err := r.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
				return err
			}
			if !alive {
				conn.Conn().PgConn().Close(ctx)
				return nil
			}
			if err := r.wait(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
		return fmt.Errorf("the idle session %d was not ended by idle_in_transaction_session_timeout", pid)
	}, nil)
	r.judge("ended", err == nil, "the idle session %d ended by the server: %v", pid, err == nil)
	if err != nil {
		return err
	}
	if err := r.tail(ctx); err != nil {
		return err
	}
	r.after = append(r.after, func([]harness.Op, harness.Observed) {
		at, ok := r.loggedAt("blocking_pid", strconv.Itoa(pid))
		took := at.Sub(began)
		r.judge("alert", ok && !at.IsZero() && took <= 60*time.Second, "a node's log named the idle session (blocking_pid %d): %v, %s after it began", pid, ok, took.Round(time.Second))
	})
	return nil
}

// logged reports whether a node's log has a line holding every one of
// words.
func (r *run) logged(words ...string) bool {
	_, ok := r.loggedAt(words...)
	return ok
}

// loggedAt finds the earliest line of the nodes' logs holding every one
// of words, and returns its time (zero when it has none it can read).
func (r *run) loggedAt(words ...string) (time.Time, bool) {
	var first time.Time
	found := false
	for _, nd := range r.Nodes {
		b, err := os.ReadFile(nd.Log)
		if err != nil {
			continue
		}
	lines:
		for _, line := range strings.Split(string(b), "\n") {
			for _, w := range words {
				if !strings.Contains(line, w) {
					continue lines
				}
			}
			var entry struct {
				Time time.Time `json:"time"`
			}
			_ = json.Unmarshal([]byte(line), &entry)
			if !found || first.IsZero() || !entry.Time.IsZero() && entry.Time.Before(first) {
				first = entry.Time
			}
			found = true
			break
		}
	}
	return first, found
}
