package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
)

// One relay process streams the group; a second joins it, with
// outbox.reader auto as the first, but as a role that may not replicate,
// so it would poll. It stands by instead, /readyz says why, and each of
// 1,000 events is published once.
func TestOneRelayPerGroupWhateverEachProcessDecided(t *testing.T) {
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	ctx := context.Background()
	env := []string{"MOENDA_AMQP__URL=" + vhost.URL, "MOENDA_OUTBOX__READER=auto"}
	startRole(t, ServeRelay, append(env, "MOENDA_POSTGRES__URL="+db.URL)...)
	testenv.Eventually(t, 60*time.Second, "the first relay streaming", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND active`).Scan(&n)
		return err == nil && n == 1
	})

	_, asRole := db.NoReplicationRole(t)
	joined := startRole(t, ServeRelay, append(env, "MOENDA_POSTGRES__URL="+asRole.URL)...)

	got := concludedSpy(t, vhost.URL, "probe.once")
	time.Sleep(time.Second) // the joined relay has decided, and stands by or relays
	want := map[string]bool{}
	for range 100 {
		names := make([]string, 10)
		for i := range names {
			names[i] = "tarefa.concluida.v1"
		}
		for _, e := range writeUnchecked(t, db.Pool, names...) {
			want[e.ID] = true
		}
	}
	once := func(ds []amqp091.Delivery) (found int) {
		seen := map[string]bool{}
		for _, d := range ds {
			if want[d.MessageId] && !seen[d.MessageId] {
				seen[d.MessageId] = true
				found++
			}
		}
		return found
	}
	testenv.Eventually(t, 60*time.Second, "every event", func() bool { return once(got()) == len(want) })
	time.Sleep(time.Second) // a second copy would arrive by now
	if n := len(got()); n != len(want) {
		t.Fatalf("%d deliveries of %d events: both relays published", n, len(want))
	}

	code, raw := joined.get(t, "/readyz")
	var body struct {
		Status string `json:"status"`
		Relays []struct {
			Group  string `json:"consumer_group"`
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"outbox_relays"`
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil {
		t.Fatalf("/readyz: %v: %s", err, raw)
	}
	if code != 200 || body.Status != "degraded" || len(body.Relays) != 1 || body.Relays[0].State != "standing_by" ||
		!strings.Contains(body.Relays[0].Reason, "may not replicate") {
		t.Fatalf("the joined process's /readyz = %d %s; want it degraded, its relay standing by with the reason", code, raw)
	}
	if logs := joined.logs.String(); !strings.Contains(logs, "standing by: the group reads logical") {
		t.Fatalf("the joined process does not say why it stands by:\n%s", logs)
	}
}
