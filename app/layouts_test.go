package app

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

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
