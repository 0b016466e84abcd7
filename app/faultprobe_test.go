package app

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/app/harness"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/faultprobe"
)

// The fault suite's consumer, run by the platform: good events published
// through POST /v1/events are applied once each, with a row and the
// counter; poison events go through the retry schedule to the dead-letter
// queue; the checker finds the run clean.
func TestFaultProbeUnderThePlatform(t *testing.T) {
	p, vhost := startAMQPWith(t, registryOf(t, append(Shipped(), faultprobe.Plugin())...), "MOENDA_HANDLERS__ENABLED=faultprobe")
	dead := testenv.Consume(t, vhost.URL, faultprobe.Queue+".dlq")

	// No aggregate: a RabbitMQ queue's messages are handled prefetch at a
	// time, in no promised order (amqp.prefetch).
	var history []harness.Op
	for seq := range 20 {
		kind, body := harness.Good, faultprobe.Payload{Writer: 1, Seq: seq}
		if seq%10 == 9 {
			kind, body.Poison = harness.Poison, true
		}
		id := harness.EventID("probe-test", 1, seq)
		op := harness.Op{Outcome: harness.Invoked, Writer: 1, Seq: seq, EventID: id, Kind: kind, Aggregate: body.Aggregate, At: time.Now()}
		history = append(history, op)
		code, answer := call(t, "POST", p.base+"/v1/events",
			fmt.Sprintf(`{"event_id":%q,"event_name":%q,"source":"faults","payload":{"writer":1,"seq":%d,"aggregate":%q,"poison":%t}}`,
				id, faultprobe.Event, seq, body.Aggregate, body.Poison))
		op.Outcome = harness.OK
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %v", code, answer)
		}
		history = append(history, op)
	}
	testenv.Eventually(t, 20*time.Second, "the dead letters", func() bool { return len(dead()) == 2 })

	seen := observeProbe(t, p.pool, dead())
	seen.Drained = true
	if r := harness.Check(history, seen); !r.Valid || r.Confirmed != 20 {
		t.Fatalf("%+v", r)
	}
}

// observeProbe reads what the probe applied and the dead letters drained.
func observeProbe(t *testing.T, pool *pgxpool.Pool, dead []amqp091.Delivery) harness.Observed {
	t.Helper()
	ctx := context.Background()
	seen := harness.Observed{Business: map[string]bool{}}
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
	rows, err = pool.Query(ctx, `SELECT event_id, applied_at FROM faultprobe_effects`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var e harness.Effect
		if err := rows.Scan(&e.EventID, &e.AppliedAt); err != nil {
			t.Fatal(err)
		}
		seen.Effects = append(seen.Effects, e)
	}
	if err := pool.QueryRow(ctx, `SELECT sum(n)::bigint FROM faultprobe_counter`).Scan(&seen.Counter); err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		h := func(k string) string { v, _ := d.Headers[k].(string); return v }
		seen.DeadLetters = append(seen.DeadLetters, harness.DeadLetter{EventID: d.MessageId, Reason: h(event.HeaderReason), Attempts: h(event.HeaderAttempts)})
	}
	return seen
}
