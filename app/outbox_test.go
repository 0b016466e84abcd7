package app

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// writeUnchecked commits events into the outbox of pool as a writer under
// another configuration would: whatever their routing key.
func writeUnchecked(t *testing.T, pool *pgxpool.Pool, names ...string) []event.Event {
	t.Helper()
	ctx := context.Background()
	ob := outbox.New(func(string) error { return nil }, watermill.NopLogger{})
	var events []event.Event
	for _, name := range names {
		e, err := event.New(name, "test", map[string]any{"tarefa_id": 1, "usuario_id": 1, "titulo": "x"})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ob.Publish(ctx, tx, events...) }); err != nil {
		t.Fatal(err)
	}
	return events
}

// concludedSpy declares queue on the vhost at url, bound to what
// eventos.dominio carries as tarefa.concluida, and returns what it has
// received so far each time it is called: a reader beside the platform's.
func concludedSpy(t *testing.T, url, queue string) func() []amqp091.Delivery {
	t.Helper()
	ch := testenv.Channel(t, url)
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "tarefa.concluida", "eventos.dominio", false, nil); err != nil {
		t.Fatal(err)
	}
	return testenv.Consume(t, url, queue)
}

// The admin endpoints list what the relay parked and republish it once
// the configuration routes it.
func TestAdminOutboxParkedAndRepublish(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	vhost := testenv.RabbitMQ(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL}

	// Without the tarefas plugin, no exchange carries tarefa.concluida.
	before := start(t, "test", append(environ, "MOENDA_HANDLERS__ENABLED=pedidos")...)
	lost := writeUnchecked(t, before.pool, "tarefa.concluida.v1")[0]
	before.out.Committed()
	var body map[string]any
	testenv.Eventually(t, 10*time.Second, "the row parked", func() bool {
		var code int
		code, body = call(t, "GET", before.base+"/v1/admin/outbox/parked", "")
		return code == http.StatusOK && body["count"] == float64(1)
	})
	parked, _ := body["parked"].([]any)
	row, _ := parked[0].(map[string]any)
	for field, want := range map[string]any{"event_id": lost.ID, "event_name": "tarefa.concluida.v1", "routing_key": "tarefa.concluida",
		"consumer_group": "moenda-relay", "reason": outbox.ReasonUnroutable} {
		if row[field] != want {
			t.Errorf("parked %s = %v, want %v", field, row[field], want)
		}
	}
	code, body := call(t, "POST", before.base+"/v1/admin/outbox/republish", "")
	if still, _ := body["still_unroutable"].([]any); code != http.StatusOK || body["republished"] != float64(0) || body["still_parked"] != float64(1) || len(still) != 1 {
		t.Fatalf("republish where nothing routes it = %d %v", code, body)
	}
	if code, body := call(t, "GET", before.base+"/v1/admin/outbox/parked?limit=none", ""); code != http.StatusBadRequest || body["error"] == nil {
		t.Fatalf("a bad limit = %d %v", code, body)
	}
	before.stop()

	// The configuration routes it again.
	after := start(t, "test", environ...)
	got := concludedSpy(t, vhost.URL, "probe.republished")
	code, body = call(t, "POST", after.base+"/v1/admin/outbox/republish", "")
	if still, ok := body["still_unroutable"].([]any); code != http.StatusOK || body["republished"] != float64(1) || !ok || len(still) != 0 {
		t.Fatalf("republish = %d %v, want 1 republished and none left", code, body)
	}
	testenv.Eventually(t, 10*time.Second, "the republished event", func() bool { return len(got()) == 1 })
	if d := got()[0]; d.MessageId != lost.ID || d.RoutingKey != "tarefa.concluida" {
		t.Fatalf("received %s with key %q, want %s", d.MessageId, d.RoutingKey, lost.ID)
	}
	if code, body := call(t, "GET", after.base+"/v1/admin/outbox/parked", ""); code != http.StatusOK || body["count"] != float64(0) || body["parked"] == nil {
		t.Fatalf("parked after republishing = %d %v", code, body)
	}
}

// The memory broker has no outbox: the endpoints answer that nothing is
// parked.
func TestAdminOutboxInMemory(t *testing.T) {
	p := start(t, "memory")
	if code, body := call(t, "GET", p.base+"/v1/admin/outbox/parked", ""); code != http.StatusOK || body["count"] != float64(0) {
		t.Fatalf("parked = %d %v", code, body)
	}
	if code, body := call(t, "POST", p.base+"/v1/admin/outbox/republish", ""); code != http.StatusOK || body["republished"] != float64(0) {
		t.Fatalf("republish = %d %v", code, body)
	}
}

// serve deletes published rows past outbox.retention every
// outbox.retention_interval, and logs what it deleted.
func TestServePrunesPublishedOutboxRows(t *testing.T) {
	p, _ := startAMQP(t, "MOENDA_OUTBOX__RETENTION=1ms", "MOENDA_OUTBOX__RETENTION_INTERVAL=1s")
	ids := map[string]bool{}
	for range 3 {
		e := writeUnchecked(t, p.pool, "tarefa.concluida.v1")[0]
		ids[e.ID] = true
	}
	p.out.Committed()
	testenv.Eventually(t, 15*time.Second, "the published rows pruned", func() bool {
		var n int
		if err := p.pool.QueryRow(context.Background(), `SELECT count(*) FROM watermill_outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	// The line follows the DELETE's commit, and the three rows may go in
	// more than one round: wait for lines that add up to three.
	testenv.Eventually(t, 5*time.Second, "log lines of the three rows pruned", func() bool { return prunedInLogs(p.logs.String()) == 3 })
}

// prunedInLogs adds up the deleted counts of the prune log lines in logs.
func prunedInLogs(logs string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "outbox: pruned published rows") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "deleted="); ok {
				d, _ := strconv.Atoi(v)
				n += d
			}
		}
	}
	return n
}

// `outbox parked` lists the parked rows; `outbox republish` sends those
// the configuration routes and lists the others.
func TestOutboxCommands(t *testing.T) {
	db := testenv.Postgres(t)
	vhost := testenv.RabbitMQ(t)
	ctx := context.Background()
	events := writeUnchecked(t, db.Pool, "tarefa.concluida.v1", "fantasma.criado.v1")
	// As a relay whose configuration routed neither would have parked them.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
		SELECT transaction_id, "offset", 'moenda-relay', uuid, metadata->>'event_name', split_part(metadata->>'event_name', '.v', 1), 'unroutable', 'no exchange'
		FROM watermill_outbox`); err != nil {
		t.Fatal(err)
	}
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL}

	code, stdout, stderr := run(t, environ, "--env", "test", "outbox", "parked")
	if code != 0 {
		t.Fatalf("outbox parked: exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "EVENT ID") || lines[3] != "2 rows parked" {
		t.Fatalf("outbox parked printed:\n%s", stdout)
	}
	for _, e := range events {
		if !strings.Contains(stdout, e.ID) || !strings.Contains(stdout, e.Name) {
			t.Errorf("outbox parked lacks %s %s:\n%s", e.ID, e.Name, stdout)
		}
	}
	if !strings.Contains(lines[1], "moenda-relay") || !strings.Contains(lines[1], "unroutable") {
		t.Errorf("a line lacks the group or the reason: %q", lines[1])
	}

	code, stdout, stderr = run(t, environ, "--env", "test", "outbox", "republish")
	if code != 0 {
		t.Fatalf("outbox republish: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"1 row republished", "1 row still parked", events[1].ID, `no exchange carries events with routing key "fantasma.criado"`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("outbox republish lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, events[0].ID) {
		t.Errorf("the republished event is listed as still parked:\n%s", stdout)
	}
	// The command declared the topology, so the event waits in its queue.
	got := testenv.Consume(t, vhost.URL, "notificacoes.tarefas-concluidas")
	testenv.Eventually(t, 10*time.Second, "the republished event", func() bool { return len(got()) == 1 })
	if d := got()[0]; d.MessageId != events[0].ID {
		t.Fatalf("received %s, want %s", d.MessageId, events[0].ID)
	}

	if _, stdout, _ := run(t, environ, "--env", "test", "outbox", "parked"); !strings.HasSuffix(stdout, "1 row parked\n") || !strings.Contains(stdout, events[1].ID) {
		t.Fatalf("outbox parked after republishing:\n%s", stdout)
	}
	code, _, stderr = run(t, nil, "--env", "memory", "outbox", "parked")
	if code != 1 || !strings.Contains(stderr, "there is no outbox") {
		t.Fatalf("outbox parked in memory: exit %d %s", code, stderr)
	}
}
