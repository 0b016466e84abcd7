package app

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers/event"
)

// startCAR runs the shipped configuration, with the seed's adapter queues
// added by the shipped file, on a fresh database and vhost.
func startCAR(t *testing.T) (running, testenv.VHost) {
	t.Helper()
	reg := registry(t)
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	cfg, err := Load(Source{Env: "test", Files: configs.FS, Extra: []string{"../configs/adapters/car-mensageria.yaml"},
		Environ: []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL, "MOENDA_HTTP__ADDR=127.0.0.1:0"}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return startResolved(t, cfg), vhost
}

// carBindings are the bindings of car.events, sorted: seed 000's, and the
// adapters' queues that the shipped file adds.
var carBindings = []string{
	`binding car.events -> adapter.telegram key="canal.mensageria.*"`,
	`binding car.events -> adapter.whatsapp key="canal.mensageria.*"`,
	`binding car.events -> analytics.metricas key="#"`,
	`binding car.events -> canal.web.mensagens key="canal.web.*"`,
	`binding car.events -> documentos.ocr key="documento.*"`,
	`binding car.events -> integracao.sicar key="*.regular"`,
	`binding car.events -> processos.analista key="processo.*"`,
	`binding car.events -> processos.notificacao key="processo.*"`,
}

// Seed 000's topology, exactly: the exchange, the six queues and their
// bindings, car.dlx with car.dlq.{queue} per queue, and the adapters'
// queues that the shipped file adds with no code.
func TestCARTopologyIsTheSeeds(t *testing.T) {
	_, vhost := startCAR(t)
	got := declared(t, vhost.Name)
	want := append([]string{
		"exchange car.events type=topic durable alternate-exchange=car.events.unrouted",
		"exchange car.dlx type=direct durable",
		"queue adapter.whatsapp durable",
		"queue adapter.telegram durable",
	}, carBindings...)
	for _, q := range []string{"processos.analista", "processos.notificacao", "documentos.ocr", "canal.web.mensagens", "integracao.sicar", "analytics.metricas"} {
		want = append(want,
			fmt.Sprintf("queue %s durable x-dead-letter-exchange=car.dlx x-dead-letter-routing-key=%s", q, q),
			fmt.Sprintf("queue car.dlq.%s durable", q),
			fmt.Sprintf(`binding car.dlx -> car.dlq.%s key="%s"`, q, q))
	}
	for _, line := range want {
		if !slices.Contains(got, line) {
			t.Errorf("RabbitMQ lacks: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("RabbitMQ holds:\n%s", strings.Join(got, "\n"))
	}
}

// A submitted processo reaches exactly processos.analista,
// processos.notificacao and analytics.metricas, whose effects show; a
// *.regular event reaches integracao.sicar.
func TestCARRoutesAsTheSeedBinds(t *testing.T) {
	p, _ := startCAR(t)
	reach := map[string][]string{
		"processo.submetido":       {"analytics.metricas", "processos.analista", "processos.notificacao"},
		"processo.regular":         {"analytics.metricas", "integracao.sicar", "processos.analista", "processos.notificacao"},
		"documento.anexado":        {"analytics.metricas", "documentos.ocr"},
		"canal.web.mensagem":       {"analytics.metricas", "canal.web.mensagens"},
		"canal.mensageria.enviada": {"adapter.telegram", "adapter.whatsapp", "analytics.metricas"},
	}
	for key, want := range reach {
		got := p.top.QueuesFor("car.events", key)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s reaches %v, want exactly %v", key, got, want)
		}
	}

	code, proc := call(t, "POST", p.base+"/processos", `{"requerente_id": "req-7", "municipio_ibge": "2111300"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /processos = %d %v", code, proc)
	}
	url := p.base + "/processos/" + proc["id"].(string)
	ficha := func() map[string]any {
		code, f := call(t, "GET", url, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d %v", url, code, f)
		}
		return f
	}
	testenv.Eventually(t, 20*time.Second, "an analyst and a notification", func() bool {
		f := ficha()
		return f["analista"] != nil && len(f["notificacoes"].([]any)) == 1 && f["sicar"] == nil
	})
	if code, body := call(t, "POST", url+"/regularizar", ""); code != http.StatusOK {
		t.Fatalf("POST regularizar = %d %v", code, body)
	}
	// processos.notificacao and integracao.sicar handle the event each
	// on its own: either may be first.
	testenv.Eventually(t, 20*time.Second, "the SICAR request and a second notification", func() bool {
		f := ficha()
		return f["sicar"] != nil && len(f["notificacoes"].([]any)) >= 2
	})
	if n := len(ficha()["notificacoes"].([]any)); n != 2 {
		t.Fatalf("%d notifications after submission and regularisation, want 2", n)
	}
}

// An OCR consumer that keeps failing ends in car.dlq.documentos.ocr after
// its retries, with the failure headers; the other consumers go on.
func TestCARFailingOCRIsDeadLettered(t *testing.T) {
	p, vhost := startCAR(t)
	if _, err := p.pool.Exec(t.Context(), `ALTER TABLE car_ocr RENAME TO car_ocr_away`); err != nil {
		t.Fatal(err) // every OCR attempt now fails
	}
	dead := testenv.Consume(t, vhost.URL, "car.dlq.documentos.ocr")
	code, proc := call(t, "POST", p.base+"/processos", `{"requerente_id": "req-8", "municipio_ibge": "2111300"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /processos = %d %v", code, proc)
	}
	code, doc := call(t, "POST", p.base+"/processos/"+proc["id"].(string)+"/documentos", `{"nome": "planta.pdf"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST documentos = %d %v", code, doc)
	}
	testenv.Eventually(t, 20*time.Second, "the dead letter", func() bool { return len(dead()) == 1 })
	h := dead()[0].Headers
	for k, want := range map[string]string{
		event.HeaderReason: event.ReasonRetriesExhausted, event.HeaderQueue: "documentos.ocr", event.HeaderHandler: "car/ocr",
		event.HeaderAttempts: "3", event.HeaderOriginalExchange: "car.events", event.HeaderOriginalRoutingKey: "documento.anexado",
	} {
		if got, _ := h[k].(string); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if got, _ := h[event.HeaderError].(string); !strings.Contains(got, "car_ocr") {
		t.Errorf("header %s = %q, want the database's complaint about car_ocr", event.HeaderError, got)
	}
}

// The bindings of the seeds' exchanges are exactly the seeds' (analytics
// reads everything on both), and seed 001's queues are durable with their
// dead letters.
func TestSeedExchangesBindExactlyTheSeedsQueues(t *testing.T) {
	_, vhost := startCAR(t)
	got := declared(t, vhost.Name)
	want := map[string][]string{
		"car.events": carBindings,
		"pedidos": {
			`binding pedidos -> analise.pedidos key="pedido.#"`,
			`binding pedidos -> analytics.metricas key="#"`,
			`binding pedidos -> estoque.pedidos key="pedido.cancelado"`,
			`binding pedidos -> estoque.pedidos key="pedido.criado"`,
		},
	}
	for exchange, lines := range want {
		var bound []string
		for _, line := range got {
			if strings.HasPrefix(line, "binding "+exchange+" -> ") {
				bound = append(bound, line)
			}
		}
		slices.Sort(bound)
		if !slices.Equal(bound, lines) {
			t.Errorf("bindings of %s:\n%s\nwant exactly:\n%s", exchange, strings.Join(bound, "\n"), strings.Join(lines, "\n"))
		}
	}
	for _, q := range []string{"estoque.pedidos", "analise.pedidos"} {
		for _, line := range []string{
			fmt.Sprintf("queue %s durable x-dead-letter-exchange=moenda.dlx x-dead-letter-routing-key=%s", q, q),
			fmt.Sprintf("queue %s.dlq durable", q),
		} {
			if !slices.Contains(got, line) {
				t.Errorf("RabbitMQ lacks: %s", line)
			}
		}
	}
}
