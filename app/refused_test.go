package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// conclusion is a tarefa.concluida.v1 event titled titulo, of aggregate
// (of none when empty).
func conclusion(t *testing.T, titulo, aggregate string) event.Event {
	t.Helper()
	e, err := event.New("tarefa.concluida.v1", "test", map[string]any{"tarefa_id": 1, "usuario_id": 7, "titulo": titulo})
	if err != nil {
		t.Fatal(err)
	}
	e.AggregateID = aggregate
	return e
}

// commitWithTen commits first, then ten conclusions of aggregate, in one
// transaction through p's outbox as a use case would, and returns the ten.
func commitWithTen(t *testing.T, p running, first event.Event, aggregate string) []event.Event {
	t.Helper()
	events := []event.Event{first}
	for range 10 {
		events = append(events, conclusion(t, "t", aggregate))
	}
	if err := p.tx.InTx(context.Background(), func(ctx context.Context, tx handlers.Tx) error {
		return tx.Publish(ctx, events...)
	}); err != nil {
		t.Fatal(err)
	}
	return events[1:]
}

// requireRefusedParked fails unless the one parked row is event id's,
// refused by the broker for good: as `moenda outbox parked` lists it (with
// listed) and as p logged it (with why).
func requireRefusedParked(t *testing.T, p running, environ []string, id, why string, listed ...string) {
	t.Helper()
	code, stdout, stderr := run(t, environ, "--env", "test", "outbox", "parked")
	if code != 0 || !contains(stdout, append([]string{id, outbox.ReasonRefused, "1 row parked"}, listed...)...) {
		t.Fatalf("outbox parked = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if !contains(p.logs.String(), "outbox row parked: the broker refused it for good", "event_id="+id, why) {
		t.Fatalf("no log line about the parked row:\n%s", p.logs.String())
	}
}

// An event the Kafka broker refuses for good (over the topic's record
// limit) is parked, and the ten committed after it in the same
// transaction reach Kafka once each: the relay neither stalls on it nor
// sends the others again.
func TestKafkaRelayParksARecordTheBrokerRefuses(t *testing.T) {
	k := testenv.Kafka(t)
	k.LimitedTopic(t, "eventos.dominio", k.Config.Partitions, "65536")
	_, _, environ := kafkaEnv(t, k, "MOENDA_ANALYTICS__KAFKA__ENABLED=true")
	p := start(t, "test", environ...)

	big := conclusion(t, strings.Repeat("<", 100_000), "")
	commitWithTen(t, p, big, "")
	testenv.Eventually(t, 30*time.Second, "the projection to count the ten", func() bool { return counted(t, p.base) == 10 })
	testenv.Eventually(t, 30*time.Second, "the Kafka relay to catch up", func() bool {
		done, err := outbox.CaughtUp(context.Background(), p.pool, "moenda-relay-kafka")
		return err == nil && done
	})
	if n := k.Records(t, "eventos.dominio"); n != 10 {
		t.Fatalf("eventos.dominio holds %d records, want the ten, each once", n)
	}
	requireRefusedParked(t, p, environ, big.ID, "too large", "moenda-relay-kafka")
}

// An event larger than the outbox takes fails its request with 413,
// saying the limit and the setting, and writes nothing: the relay never
// sees it.
func TestAnEventOverTheOutboxBoundIsRefused(t *testing.T) {
	p, _ := startAMQP(t, "MOENDA_OUTBOX__MAX_EVENT_BYTES=4096")
	post := func(titulo string) (int, map[string]any) {
		return call(t, "POST", p.base+"/v1/events",
			fmt.Sprintf(`{"event_name":"tarefa.concluida.v1","source":"test","payload":{"tarefa_id":1,"usuario_id":1,"titulo":%q}}`, titulo))
	}
	code, body := post(strings.Repeat("<", 5000))
	if msg, _ := body["error"].(string); code != http.StatusRequestEntityTooLarge || !contains(msg, "over the limit of 4096 bytes", "outbox.max_event_bytes") {
		t.Fatalf("POST an event of 5000 bytes = %d %v, want 413 naming the limit and outbox.max_event_bytes", code, body)
	}
	var rows int
	if err := p.pool.QueryRow(context.Background(), `SELECT count(*) FROM watermill_outbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("the outbox holds %d rows after a refused event", rows)
	}
	// Markup is not escaped, so it counts once: 3000 of < fit.
	if code, body := post(strings.Repeat("<", 3000)); code != http.StatusAccepted {
		t.Fatalf("POST an event under the bound = %d %v", code, body)
	}
}

// A record whose failure copy would be larger than a Kafka record may be
// goes to the dead-letter topic with its body cut and the moenda-truncated
// header, whether it was to wait in a retry topic or to be dead-lettered
// at once, and the records behind it in its partition are handled.
func TestKafkaFailureCopyOverTheRecordLimitIsCutAndDeadLettered(t *testing.T) {
	kp := startKafkaProbe(t, "MOENDA_KAFKA__MAX_RECORD_BYTES=65536")
	// Near the limit: the failure headers take it over. One fails for
	// ever, so its copy is to wait in a retry topic; the other is
	// permanent (fail is not a number), so it is dead-lettered at once.
	pad := strings.Repeat("x", 64<<10)
	retried, permanent := uuid.NewString(), uuid.NewString()
	body := func(id, fail string) []byte {
		b, err := json.Marshal(event.Event{ID: id, Name: "probe.work.hit.v1", OccurredAt: time.Now().UTC(), CorrelationID: "corr-" + id[:8],
			Payload: json.RawMessage(fmt.Sprintf(`{"fail":%s,"pad":%q}`, fail, pad))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Each body is built once: occurred_at is written without trailing
	// zeros, so a second build may differ in length.
	retriedBody, permanentBody := body(retried, "-1"), body(permanent, `"x"`)
	sizes := map[string]int{retried: len(retriedBody), permanent: len(permanentBody)}
	kp.sendAhead(t, "the large ones", kp.record(retried, retriedBody), kp.record(permanent, permanentBody))
	testenv.Eventually(t, 30*time.Second, "the two dead letters", func() bool { return len(kp.dead()) == 2 })
	reasons := map[string]string{retried: event.ReasonTooLarge, permanent: event.ReasonPermanent}
	for _, d := range kp.dead() {
		id := header(d, event.HeaderEventID)
		if header(d, event.HeaderReason) != reasons[id] || header(d, event.HeaderTruncated) != strconv.Itoa(sizes[id]) ||
			len(d.Value) >= sizes[id] || len(d.Value) < sizes[id]-8<<10 {
			t.Errorf("dead letter of %s: reason %q, %s %q, body of %d bytes; want reason %q, %s %d and a body cut short of %d",
				id, header(d, event.HeaderReason), event.HeaderTruncated, header(d, event.HeaderTruncated), len(d.Value), reasons[id], event.HeaderTruncated, sizes[id], sizes[id])
		}
	}
	time.Sleep(time.Second)
	if n := len(kp.dead()); n != 2 {
		t.Fatalf("%d dead letters, want 2", n)
	}
}

// An event whose headers do not fit in one AMQP frame (a use case's
// aggregate id of 200 KB; the broker would close the connection on it) is
// parked without being sent, and the ten committed after it in the same
// transaction reach RabbitMQ once each: the relay neither stalls on it
// nor sends the others again.
func TestRabbitRelayParksAnEventAMQPCannotCarry(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	vhost := testenv.RabbitMQ(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL}
	p := start(t, "test", environ...)
	got := concludedSpy(t, vhost.URL, "probe.once")

	big := conclusion(t, "t", strings.Repeat("a", 200_000))
	ten := commitWithTen(t, p, big, "1")
	testenv.Eventually(t, 30*time.Second, "the relay to catch up", func() bool {
		done, err := outbox.CaughtUp(context.Background(), p.pool, "moenda-relay")
		return err == nil && done
	})
	time.Sleep(time.Second) // a second copy would arrive by now
	ds := got()
	seen := map[string]int{}
	for _, d := range ds {
		seen[d.MessageId]++
	}
	for _, e := range ten {
		if seen[e.ID] != 1 {
			t.Fatalf("event %s delivered %d times, want once (%d deliveries in all)", e.ID, seen[e.ID], len(ds))
		}
	}
	if len(ds) != 10 {
		t.Fatalf("%d deliveries, want the ten", len(ds))
	}
	requireRefusedParked(t, p, environ, big.ID, "frame_max")
}
