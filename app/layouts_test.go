package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/notificacoes"
	"github.com/moenda/moenda/handlers/tarefas"
)

// seedLayouts declares the dead-letter layouts of seeds 002, 000 and 004
// in one configuration, each on its exchange group.
const seedLayouts = `log: {level: warn}
handlers: {enabled: [notificacoes, processos, notification]}
topology:
  subscriptions: []   # none of base.yaml's: its queues are not in this registry
  exchanges:
    - name: eventos.dominio
      events: ["tarefa.#"]
      failure:
        dead_letter: {exchange: notificacoes.dlx}
    - name: car.events
      events: ["processo.*", "documento.*"]
      failure:
        delays: [1s, 5s, 25s]
        dead_letter: {exchange: car.dlx, queue: "car.dlq.{queue}"}
    - name: rental.exchange
      events: ["rental.*", "analysis.*"]
      failure:
        immediate_retries: 0        # seed 004: 3 attempts, 1 s doubling, at most 10 s
        delays: [1s, 2s]
        dead_letter: {exchange: rental.dlx, queue: rental.dlq}
`

// seedPlugin is a plugin whose queues are named as a seed names them.
func seedPlugin(name string, subs ...handlers.Subscription) handlers.Definition {
	return handlers.Define(handlers.Spec{Name: name, Subscriptions: subs}, struct{}{}, func(struct{}, handlers.Deps) (handlers.Plugin, error) {
		hs := map[string]handlers.HandlerFunc{}
		for _, s := range subs {
			hs[s.Name] = func(context.Context, event.Event) error { return nil }
		}
		return handlers.Plugin{Handlers: hs}, nil
	})
}

func TestDeadLetterLayoutsOfEverySeedAtOnce(t *testing.T) {
	reg := registryOf(t, tarefas.Plugin(), notificacoes.Plugin(),
		seedPlugin("processos", handlers.Subscription{Name: "analista", Events: []string{"processo.*"}}),
		seedPlugin("notification",
			handlers.Subscription{Name: "confirmed.queue", Events: []string{"rental.confirmed"}},
			handlers.Subscription{Name: "failed.queue", Events: []string{"rental.failed"}}),
	)
	base, err := configs.FS.ReadFile("base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{"base.yaml": {Data: base}, "seeds.yaml": {Data: []byte(seedLayouts)}}
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	startWith(t, reg, files, "seeds", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL)

	got := declared(t, vhost.Name) // rabbitmqctl list_exchanges, list_queues name arguments, list_bindings
	want := []string{
		// seed 002: notificacoes.dlx, one {queue}.dlq per queue
		"exchange notificacoes.dlx type=direct durable",
		"queue notificacoes.tarefas-concluidas durable x-dead-letter-exchange=notificacoes.dlx x-dead-letter-routing-key=notificacoes.tarefas-concluidas",
		"queue notificacoes.tarefas-concluidas.dlq durable",
		`binding notificacoes.dlx -> notificacoes.tarefas-concluidas.dlq key="notificacoes.tarefas-concluidas"`,
		// seed 000: car.dlx, car.dlq.{queue}, after 1 s, 5 s and 25 s
		"exchange car.dlx type=direct durable",
		"queue processos.analista durable x-dead-letter-exchange=car.dlx x-dead-letter-routing-key=processos.analista",
		"queue car.dlq.processos.analista durable",
		`binding car.dlx -> car.dlq.processos.analista key="processos.analista"`,
		"queue processos.analista.retry.1s durable x-dead-letter-exchange= x-dead-letter-routing-key=processos.analista x-message-ttl=1000",
		"queue processos.analista.retry.5s durable x-dead-letter-exchange= x-dead-letter-routing-key=processos.analista x-message-ttl=5000",
		"queue processos.analista.retry.25s durable x-dead-letter-exchange= x-dead-letter-routing-key=processos.analista x-message-ttl=25000",
		// seed 004: rental.dlx bound with # to one central rental.dlq, after 1 s and 2 s
		"exchange rental.dlx type=topic durable",
		"queue notification.confirmed.queue durable x-dead-letter-exchange=rental.dlx x-dead-letter-routing-key=notification.confirmed.queue",
		"queue notification.failed.queue durable x-dead-letter-exchange=rental.dlx x-dead-letter-routing-key=notification.failed.queue",
		"queue rental.dlq durable",
		`binding rental.dlx -> rental.dlq key="#"`,
		"queue notification.failed.queue.retry.1s durable x-dead-letter-exchange= x-dead-letter-routing-key=notification.failed.queue x-message-ttl=1000",
		"queue notification.failed.queue.retry.2s durable x-dead-letter-exchange= x-dead-letter-routing-key=notification.failed.queue x-message-ttl=2000",
	}
	for _, line := range want {
		if !slices.Contains(got, line) {
			t.Errorf("RabbitMQ lacks: %s", line)
		}
	}
	for _, line := range got {
		if strings.Contains(line, "moenda.dlx") || strings.Contains(line, "notification.confirmed.queue.dlq") {
			t.Errorf("RabbitMQ holds a layout no seed asked for: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("RabbitMQ holds:\n%s", strings.Join(got, "\n"))
	}
}

// seedFailures is seedLayouts with seed 001's exchange on the default
// layout, the ledger on, and a foreign service's dead-letter queue named.
const seedFailures = seedLayouts + `    - name: pedidos
      events: ["pedido.*"]
failures: {enabled: true, linger: 20ms, queues: [spring.dlq]}
`

// Every dead letter reaches the ledger, once, whoever made it: each seed's
// poison message in its seed's layout, a foreign consumer's reject into a
// foreign DLQ the configuration names, and what the broker dead-letters
// itself (a quorum queue's delivery limit, a message's TTL). Every
// dead-letter queue is empty after.
func TestEverySeedsDeadLettersReachTheLedger(t *testing.T) {
	refuse := func(context.Context, event.Event) error {
		return event.Permanent(errors.New("poison: cannot be handled"))
	}
	reg := registryOf(t,
		handlers.Define(handlers.Spec{Name: "seeds", Subscriptions: []handlers.Subscription{
			{Name: "tarefas", Queue: "notificacoes.tarefas-concluidas", Events: []string{"tarefa.concluida"}},
			{Name: "analista", Queue: "processos.analista", Events: []string{"processo.*"}},
			{Name: "falhas", Queue: "notification.failed.queue", Events: []string{"rental.failed"}},
			{Name: "estoque", Queue: "estoque.pedidos", Events: []string{"pedido.criado"}},
		}}, struct{}{}, func(struct{}, handlers.Deps) (handlers.Plugin, error) {
			return handlers.Plugin{Handlers: map[string]handlers.HandlerFunc{"tarefas": refuse, "analista": refuse, "falhas": refuse, "estoque": refuse}}, nil
		}))
	base, err := configs.FS.ReadFile("base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := strings.Replace(seedFailures, "enabled: [notificacoes, processos, notification]", "enabled: [seeds]", 1)
	files := fstest.MapFS{"base.yaml": {Data: base}, "seeds.yaml": {Data: []byte(config)}}
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)

	// A foreign service's queues, dead-lettering as the broker does: into
	// the foreign spring.dlq, and into seed 004's central rental.dlq.
	ch := testenv.Channel(t, vhost.URL)
	for _, q := range []struct {
		name string
		args amqp091.Table
	}{
		{"spring.dlq", nil},
		{"credit.requests", amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "spring.dlq"}},
		{"credit.quorum", amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": "rental.dlx"}},
		{"credit.expiring", amqp091.Table{"x-message-ttl": 1, "x-dead-letter-exchange": "rental.dlx"}},
	} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatalf("declare %s: %v", q.name, err)
		}
	}
	p := startWith(t, reg, files, "seeds", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL)

	for _, name := range []string{"tarefa.concluida.v1", "processo.submetido.v1", "rental.failed.v1", "pedido.criado.v1"} {
		if code, body := call(t, "POST", p.base+"/v1/events", fmt.Sprintf(`{"event_name":%q,"payload":{"poison":true}}`, name)); code != http.StatusAccepted {
			t.Fatalf("POST /v1/events %s = %d %v", name, code, body)
		}
	}
	foreign := func(queue, id string) {
		if err := ch.Publish("", queue, false, false, amqp091.Publishing{MessageId: id, Body: []byte(`{"pedido":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	foreign("credit.requests", "foreign-rejected")
	foreign("credit.quorum", "foreign-delivery-limit")
	foreign("credit.expiring", "foreign-expired")

	want := map[string]string{ // failed queue: reason, by dead-letter queue
		"notificacoes.tarefas-concluidas.dlq notificacoes.tarefas-concluidas": event.ReasonPermanent,
		"car.dlq.processos.analista processos.analista":                       event.ReasonPermanent,
		"rental.dlq notification.failed.queue":                                event.ReasonPermanent,
		"estoque.pedidos.dlq estoque.pedidos":                                 event.ReasonPermanent,
		"spring.dlq credit.requests":                                          "rejected",
		"rental.dlq credit.quorum":                                            "delivery_limit",
		"rental.dlq credit.expiring":                                          "expired",
	}
	// The foreign consumers: one rejects, one gives its message back until
	// the quorum queue's delivery limit dead-letters it. They go on until
	// every dead letter is in the ledger: the queues' counts, read on a
	// channel of their own, may be zero before the publishes above
	// (unconfirmed) land, and a consumer stopped then leaves its message
	// in its queue for good.
	testenv.Eventually(t, 60*time.Second, "the foreign consumers' dead letters in the ledger", func() bool {
		for _, q := range []struct {
			queue   string
			requeue bool
		}{{"credit.requests", false}, {"credit.quorum", true}} {
			if d, ok, err := ch.Get(q.queue, false); err != nil {
				t.Fatal(err)
			} else if ok {
				if err := d.Nack(false, q.requeue); err != nil {
					t.Fatal(err)
				}
			}
		}
		_, body := call(t, "GET", p.base+"/v1/admin/failures", "")
		held, _ := body["failures"].([]any)
		return len(held) >= len(want)
	})
	got := ledgerHolds(t, p, len(want), "")
	for _, f := range got {
		key := fmt.Sprint(f["queue"], " ", f["failed_queue"])
		reason, ok := want[key]
		if !ok || f["reason"] != reason {
			t.Errorf("failure in %s (from %s) with reason %v, want one of %v", f["queue"], f["failed_queue"], f["reason"], want)
			continue
		}
		delete(want, key)
		code, whole := call(t, "GET", fmt.Sprintf("%s/v1/admin/failures/%v", p.base, f["id"]), "")
		headers, _ := whole["headers"].(map[string]any)
		if code != http.StatusOK || whole["body"] == "" || len(headers) == 0 {
			t.Errorf("failure %v: %d %v, want its body and headers", f["id"], code, whole)
		}
		if reason == event.ReasonPermanent && (headers[event.HeaderReason] != reason || headers[event.HeaderHandler] == nil || f["handler"] == "") {
			t.Errorf("a seed's dead letter without moenda's story: %v", whole)
		}
		if reason != event.ReasonPermanent && !strings.HasPrefix(fmt.Sprint(f["error"]), "dead-lettered by the broker: "+reason) {
			t.Errorf("a foreign dead letter's error is %q", f["error"])
		}
	}
	if len(want) > 0 {
		t.Errorf("the ledger lacks %v", want)
	}
	// messages counts the unacknowledged too: each dead letter is
	// acknowledged once recorded.
	testenv.Eventually(t, 30*time.Second, "every dead-letter queue empty", func() bool {
		out := testenv.Rabbitmqctl(t, "list_queues", "-q", "--no-table-headers", "-p", vhost.Name, "name", "messages")
		empty := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && (strings.HasSuffix(f[0], ".dlq") || strings.HasPrefix(f[0], "car.dlq.")) && f[1] == "0" {
				empty++
			}
		}
		return empty == 5 // notificacoes', car's, rental's, estoque's and spring.dlq
	})
}
