package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/faultprobe"
)

// DrainBound bounds the wait for a system to go quiet after its writers
// stop: the probe's last retry comes 31 s after its first attempt.
const DrainBound = 2 * time.Minute

// DirectWriter is the inbox consumer under which writers that bypass the
// API record their business rows.
const DirectWriter = "moenda faults: direct writer"

// Counters of deliveries the harness adds up over every node's process
// before it ends (Counted): those the inbox skipped as duplicates, and
// events of a type no handler of the queue handles.
const (
	Deduplicated = "moenda_messages_deduplicated_total"
	Ignored      = "moenda_messages_ignored_total"
)

// count adds nd's Deduplicated and Ignored counters to the system's, as
// its process is about to end and take them with it.
func (s *System) count(nd *Node) {
	m, err := nd.Metrics()
	if err != nil {
		return
	}
	s.countedMu.Lock()
	defer s.countedMu.Unlock()
	if s.counted == nil {
		s.counted = map[string]float64{}
	}
	for _, name := range []string{Deduplicated, Ignored} {
		s.counted[name] += m[name]
	}
}

// Counted is the sum of a counter (Deduplicated, Ignored) over the nodes'
// processes that ended through Kill, Stop or Observe.
func (s *System) Counted(name string) int {
	s.countedMu.Lock()
	defer s.countedMu.Unlock()
	return int(s.counted[name])
}

// Writers are writers running in the background until Stop.
type Writers struct {
	cancel context.CancelFunc
	done   chan writeResult
}

type writeResult struct {
	counts map[Outcome]int
	err    error
}

// Write starts w's writers against the nodes' API, publishing the
// probe's event, until Stop. Unset, w's payload is the probe's (poison
// and transient as its kind says), and a command is tried 30 times, 5 s
// each. w.RunID names a phase of the run apart from the others.
func (s *System) Write(ctx context.Context, w Workload) *Writers {
	w.RunID = s.DBName + w.RunID
	w.Bases = s.Bases()
	w.EventName = faultprobe.Event
	w.History = s.History
	if w.Attempts == 0 {
		w.Attempts = 30
	}
	if w.Client == nil {
		w.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if w.Payload == nil {
		w.Payload = func(writer, seq int, kind Kind) any {
			pl := faultprobe.Payload{Writer: writer, Seq: seq, Poison: kind == Poison}
			if kind == Transient {
				pl.FailFirst = 2
			}
			return pl
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	ws := &Writers{cancel: cancel, done: make(chan writeResult, 1)}
	go func() {
		counts, err := w.Run(wctx)
		ws.done <- writeResult{counts, err}
	}()
	return ws
}

// Stop stops the writers and waits for their last commands; it returns
// how many operations each outcome had.
func (ws *Writers) Stop() (map[Outcome]int, error) {
	ws.cancel()
	res := <-ws.done
	return res.counts, res.err
}

// Observation is how the observation itself went.
type Observation struct {
	// DrainTook is how long the system took to go quiet, and SlowestExit
	// the longest a node took to exit on SIGTERM.
	DrainTook, SlowestExit time.Duration
	// Problems are what went wrong without ending the observation: the
	// system not drained, a node slow to exit.
	Problems []string
}

// Observe waits until the system is quiet, drains the probe's
// dead-letter and unrouted queues, stops every node, and reads what the
// probe applied. With the failure ledger (System.Ledger), the
// dead letters are the ledger's too. beforeStop, when set, runs while the
// nodes still run.
func (s *System) Observe(ctx context.Context, drainBound time.Duration, beforeStop func()) (Observed, Observation, error) {
	seen := Observed{Business: map[string]bool{}}
	var obs Observation
	start := time.Now()
	err := s.drain(ctx, drainBound)
	seen.Drained = err == nil
	if err != nil {
		obs.Problems = append(obs.Problems, err.Error())
	}
	obs.DrainTook = time.Since(start)
	dead, unrouted, err := s.drainDeadLetters()
	if err != nil {
		return seen, obs, err
	}
	seen.DeadLetters = dead
	seen.QueueDeadLetters = len(dead)
	seen.Unrouted = unrouted
	if s.Ledger {
		if seen.Ledger, err = s.readLedger(ctx); err != nil {
			return seen, obs, fmt.Errorf("read the failure ledger: %w", err)
		}
		seen.DeadLetters = append(seen.DeadLetters, LedgerDeadLetters(seen.Ledger)...)
	}
	if beforeStop != nil {
		beforeStop()
	}
	for _, nd := range s.Nodes {
		if nd.Running() {
			if took, err := s.Stop(nd, time.Minute); err != nil {
				obs.Problems = append(obs.Problems, err.Error())
			} else {
				obs.SlowestExit = max(obs.SlowestExit, took)
			}
		}
	}
	seen.Deduplicated = s.Counted(Deduplicated)
	rows, err := s.Pool.Query(ctx, `SELECT event_id FROM moenda_inbox WHERE consumer = ANY($1)`, businessConsumers)
	if err != nil {
		return seen, obs, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return seen, obs, err
		}
		seen.Business[id] = true
	}
	if err := rows.Err(); err != nil {
		return seen, obs, err
	}
	rows, err = s.Pool.Query(ctx, `SELECT event_id, applied_at FROM faultprobe_effects`)
	if err != nil {
		return seen, obs, err
	}
	for rows.Next() {
		var e Effect
		if err := rows.Scan(&e.EventID, &e.AppliedAt); err != nil {
			return seen, obs, err
		}
		seen.Effects = append(seen.Effects, e)
	}
	if err := rows.Err(); err != nil {
		return seen, obs, err
	}
	return seen, obs, s.Pool.QueryRow(ctx, `SELECT sum(n)::bigint FROM faultprobe_counter`).Scan(&seen.Counter)
}

// BodyKey names a message that carries no id by its body, as the checker
// keys its dead letter.
func BodyKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "body:" + hex.EncodeToString(sum[:8])
}

// businessConsumers are the inbox consumers whose claims are the
// business rows of the workload's commands: the API's remembered answers,
// and the direct writers' own.
var businessConsumers = []string{"POST /v1/events", DirectWriter}

// drain waits until the relay has published every row and every queue
// but the dead-letter and unrouted ones is empty, through readings a
// second apart, within bound. When it does not, the error says what was still
// busy.
func (s *System) drain(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	// A quorum queue's counts come from its leader, which publishes them
	// every 5 s (quorum_tick_interval), and a new leader only at its first
	// tick: on a cluster, quiet must last longer than that.
	need := 2
	if s.Rabbit != nil {
		need = 8
	}
	quiet := 0
	busy := ""
	for time.Now().Before(deadline) {
		busy = s.Busy(ctx)
		if busy == "" {
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= need {
			return nil
		}
		if !await.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("not drained within %s: %s", bound, busy)
}

// Busy says what still works: the relay behind the outbox, or a queue but
// the dead-letter and unrouted ones holding messages, ready,
// unacknowledged or being dead-lettered; "" when nothing. With the failure ledger, the
// dead-letter queue is busy too until its ingest has emptied it.
func (s *System) Busy(ctx context.Context) string {
	caught, err := outbox.CaughtUp(ctx, s.Pool, "moenda-relay")
	switch {
	case err != nil:
		return "the relay's position: " + err.Error()
	case !caught:
		var detail string
		_ = s.Pool.QueryRow(ctx, `SELECT format('position %s/%s; %s rows after it, from transaction %s; slot sample %s at %s, backfill %s; confirmed %s, current %s',
			p.last_processed_transaction_id, p.offset_acked,
			(SELECT count(*) FROM watermill_outbox o WHERE (o.transaction_id, o."offset") > (p.last_processed_transaction_id, p.offset_acked)),
			(SELECT min(o.transaction_id::text) FROM watermill_outbox o WHERE (o.transaction_id, o."offset") > (p.last_processed_transaction_id, p.offset_acked)),
			s.sample_xmin, s.sample_lsn, s.backfill,
			(SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = s.slot_name), pg_current_wal_lsn())
			FROM watermill_offsets_outbox p LEFT JOIN moenda_outbox_slots s USING (consumer_group) WHERE p.consumer_group = 'moenda-relay'`).Scan(&detail)
		return "the relay has rows to publish: " + detail
	}
	// A quorum queue counts among its messages those it has dead-lettered
	// and keeps until the target queue confirms them (at-least-once),
	// which are neither ready nor unacknowledged.
	out, err := s.Rabbitmqctl(ctx, "list_queues", "-p", s.VHost, "--no-table-headers", "name", "messages", "messages_ready", "messages_unacknowledged", "consumers")
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		kept := f[0] == ProbeQueues.Unrouted || f[0] == ProbeQueues.DLQ && !s.Ledger
		if len(f) == 5 && !kept && f[1] != "0" {
			return fmt.Sprintf("queue %s holds %s messages: %s ready, %s unacknowledged (with %s consumers), the rest dead-lettered and not yet confirmed by their target",
				f[0], f[1], f[2], f[3], f[4])
		}
	}
	return ""
}

// drainDeadLetters reads the probe's dead-letter and unrouted queues to
// their end, as the checker's own consumer.
func (s *System) drainDeadLetters() (dead []DeadLetter, unrouted []string, err error) {
	conn, err := s.DialAMQP()
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, err
	}
	for _, q := range []string{ProbeQueues.DLQ, ProbeQueues.Unrouted} {
		for {
			d, ok, err := ch.Get(q, false)
			if err != nil {
				var aerr *amqp091.Error
				if errors.As(err, &aerr) && aerr.Code == amqp091.NotFound {
					if ch, err = conn.Channel(); err != nil {
						return nil, nil, err
					}
					break
				}
				return nil, nil, err
			}
			if !ok {
				break
			}
			if err := d.Ack(false); err != nil {
				return nil, nil, err
			}
			if q == ProbeQueues.Unrouted {
				unrouted = append(unrouted, d.MessageId)
				continue
			}
			dead = append(dead, deadLetterOf(d))
		}
	}
	return dead, unrouted, nil
}

// deadLetterOf reads a dead letter's headers.
func deadLetterOf(d amqp091.Delivery) DeadLetter {
	h := func(k string) string {
		switch v := d.Headers[k].(type) {
		case string:
			return v
		case nil:
			return ""
		default:
			return fmt.Sprint(v)
		}
	}
	id := h(event.HeaderEventID)
	fromHeader := id != ""
	if id == "" {
		id = d.MessageId
	}
	if id == "" {
		id = BodyKey(d.Body)
	}
	return DeadLetter{EventID: id, Reason: h(event.HeaderReason), Attempts: h(event.HeaderAttempts), CorrelationID: h(event.HeaderCorrelationID),
		Queue: h(event.HeaderQueue), RoutingKey: h(event.HeaderOriginalRoutingKey), FirstFailure: h(event.HeaderFirstFailureAt), LastFailure: h(event.HeaderLastFailureAt),
		HeaderEventID: fromHeader}
}
