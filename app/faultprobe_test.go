package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/outbox"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/app/faults"
	"github.com/moenda/moenda/app/faults/probe"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// The fault suite's consumer, run by the platform: good events published
// through POST /v1/events are applied once each, with a row and the
// counter; poison events go through the retry schedule to the dead-letter
// queue; the checker finds the run clean.
func TestFaultProbeUnderThePlatform(t *testing.T) {
	reg, err := handlers.NewRegistry(append(shipped(), probe.Plugin())...)
	if err != nil {
		t.Fatal(err)
	}
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	p := startWith(t, reg, configs.FS, "test", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL, "MOENDA_HANDLERS__ENABLED=faultprobe")
	dead := testenv.Consume(t, vhost.URL, "faultprobe.efeitos.dlq")

	// No aggregate: a RabbitMQ queue's messages are handled prefetch at a
	// time, in no promised order (amqp.prefetch).
	var history []faults.Op
	for seq := range 20 {
		kind, body := faults.Good, probe.Payload{Writer: 1, Seq: seq}
		if seq%10 == 9 {
			kind, body.Poison = faults.Poison, true
		}
		id := faults.EventID("probe-test", 1, seq)
		op := faults.Op{Outcome: faults.Invoked, Writer: 1, Seq: seq, EventID: id, Kind: kind, Aggregate: body.Aggregate, At: time.Now()}
		history = append(history, op)
		code, answer := call(t, "POST", p.base+"/v1/events",
			fmt.Sprintf(`{"event_id":%q,"event_name":%q,"source":"faults","payload":{"writer":1,"seq":%d,"aggregate":%q,"poison":%t}}`,
				id, probe.Event, seq, body.Aggregate, body.Poison))
		op.Outcome = faults.OK
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %v", code, answer)
		}
		history = append(history, op)
	}
	testenv.Eventually(t, 20*time.Second, "the dead letters", func() bool { return len(dead()) == 2 })

	seen := observeProbe(t, db.Pool, dead())
	seen.Drained = true
	if r := faults.Check(history, seen); !r.Valid || r.Confirmed != 20 {
		t.Fatalf("%+v", r)
	}
}

// observeProbe reads what the probe applied and the dead letters drained.
func observeProbe(t *testing.T, pool *pgxpool.Pool, dead []amqp091.Delivery) faults.Observed {
	t.Helper()
	ctx := context.Background()
	seen := faults.Observed{Business: map[string]bool{}}
	rows, err := pool.Query(ctx, `SELECT uuid FROM watermill_outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		seen.Business[id] = true
	}
	rows, err = pool.Query(ctx, `SELECT event_id, applied_at FROM faultprobe_efeitos`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var e faults.Effect
		if err := rows.Scan(&e.EventID, &e.AppliedAt); err != nil {
			t.Fatal(err)
		}
		seen.Effects = append(seen.Effects, e)
	}
	if err := pool.QueryRow(ctx, `SELECT n FROM faultprobe_contador`).Scan(&seen.Counter); err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		h := func(k string) string { v, _ := d.Headers[k].(string); return v }
		seen.DeadLetters = append(seen.DeadLetters, faults.DeadLetter{EventID: d.MessageId, Reason: h(event.HeaderReason), Attempts: h(event.HeaderAttempts)})
	}
	return seen
}

// A connection storm (T03's, short): while writers publish through the
// API, RabbitMQ drops every connection of the vhost and PostgreSQL ends
// every session of the database, three times. Once healed and drained,
// the checker finds nothing lost, no ghost, no duplicate effect, and the
// poison events exactly in the dead-letter queue.
func TestFaultsConnectionStorm(t *testing.T) {
	reg, err := handlers.NewRegistry(append(shipped(), probe.Plugin())...)
	if err != nil {
		t.Fatal(err)
	}
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	p := startWith(t, reg, configs.FS, "test", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL, "MOENDA_HANDLERS__ENABLED=faultprobe")
	path := filepath.Join(t.TempDir(), "history.jsonl")
	history, err := faults.CreateHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	w := faults.Workload{Base: p.base, RunID: t.Name(), Writers: 4, Interval: 5 * time.Millisecond, PoisonEvery: 25, Attempts: 5,
		EventName: probe.Event, History: history, Client: &http.Client{Timeout: 5 * time.Second},
		Payload: func(writer, seq int, poison bool) any { return probe.Payload{Writer: writer, Seq: seq, Poison: poison} }}
	ctx, stop := context.WithCancel(context.Background())
	type result struct {
		counts map[faults.Outcome]int
		err    error
	}
	done := make(chan result, 1)
	go func() { c, err := w.Run(ctx); done <- result{c, err} }()

	admin := testenv.SharePostgres(t)
	for range 3 {
		time.Sleep(time.Second)
		at := time.Now()
		_ = history.Add(faults.Line{Fault: "close every connection", Phase: "start", Op: faults.Op{At: at}})
		testenv.Rabbitmqctl(t, "close_all_connections", "--vhost", vhost.Name, "faults: storm")
		terminateSessions(t, admin, db.Pool.Config().ConnConfig.Database)
		_ = history.Add(faults.Line{Fault: "close every connection", Phase: "stop", Op: faults.Op{At: time.Now()}})
	}
	time.Sleep(time.Second)
	stop()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if err := history.Close(); err != nil {
		t.Fatal(err)
	}

	// Drained: the relay has published every row, and the probe's queue
	// and its retry queues hold nothing, through two readings in a row.
	quiet := 0
	testenv.Eventually(t, 60*time.Second, "the run to drain", func() bool {
		caught, err := outbox.CaughtUp(context.Background(), db.Pool, "moenda-relay")
		out := testenv.Rabbitmqctl(t, "list_queues", "-p", vhost.Name, "--no-table-headers", "name", "messages")
		empty := true
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && !strings.HasSuffix(f[0], ".dlq") && f[1] != "0" {
				empty = false
			}
		}
		if err == nil && caught && empty {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 2
	})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, storms, err := faults.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	seen := observeProbe(t, db.Pool, drainQueue(t, vhost.URL, "faultprobe.efeitos.dlq"))
	seen.Drained = true
	r := faults.Check(ops, seen)
	t.Logf("%d storms; %d ok, %d failed, %d indeterminate; %d confirmed (%d recovered), %d effects, %d dead letters (%d repeated)",
		len(storms)/2, res.counts[faults.OK], res.counts[faults.Failed], res.counts[faults.Indeterminate], r.Confirmed, r.Recovered,
		len(seen.Effects), len(seen.DeadLetters), r.DLQDuplicates)
	if !r.Valid {
		t.Fatalf("%+v", r)
	}
}

// terminateSessions ends every session of database on the server of
// admin, but its own.
func terminateSessions(t *testing.T, admin, database string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, database); err != nil {
		t.Fatal(err)
	}
}

// drainQueue reads queue to its end on a connection of its own, as the
// checker's reader does once the faults are healed, and acks what it read.
func drainQueue(t *testing.T, url, queue string) []amqp091.Delivery {
	t.Helper()
	ch := testenv.Channel(t, url)
	var got []amqp091.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
}
