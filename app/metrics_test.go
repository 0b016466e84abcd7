package app

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// scrape returns the /metrics page of p.
func scrape(t *testing.T, p running) string {
	t.Helper()
	resp, err := http.Get(p.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, raw)
	}
	return string(raw)
}

// shows waits until every line is on p's /metrics page.
func shows(t *testing.T, p running, lines ...string) {
	t.Helper()
	var page string
	ok := func() bool {
		page = scrape(t, p)
		for _, l := range lines {
			if !strings.Contains(page, l+"\n") {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, 15*time.Second, "the metrics", ok)
}

// After the Tarefas walk-through: one notification handled, the relay
// caught up, the requests counted by route, and the runtime's metrics.
func TestMetricsAfterTheTarefasWalkThrough(t *testing.T) {
	p, _ := startAMQP(t, "MOENDA_METRICS__POLL_INTERVAL=1s")
	if code, body := call(t, "POST", p.base+"/tarefas", `{"usuario_id":1,"titulo":"Escrever relatório"}`); code != 201 {
		t.Fatalf("POST /tarefas = %d %v", code, body)
	}
	if code, body := call(t, "PATCH", p.base+"/tarefas/1/concluir", `{"usuario_id":1}`); code != 200 {
		t.Fatalf("PATCH = %d %v", code, body)
	}
	shows(t, p,
		`moenda_messages_handled_total{handler="notificacoes/tarefas-concluidas",queue="notificacoes.tarefas-concluidas"} 1`,
		`moenda_handler_duration_seconds_count{handler="notificacoes/tarefas-concluidas",queue="notificacoes.tarefas-concluidas"} 1`,
		`moenda_relay_rows_published_total{consumer_group="moenda-relay"} 1`,
		`moenda_relay_batches_total{consumer_group="moenda-relay"} 1`,
		`moenda_relay_publish_duration_seconds_count{consumer_group="moenda-relay"} 1`,
		`moenda_relay_lag_rows{consumer_group="moenda-relay"} 0`,
		`moenda_relay_lag_seconds{consumer_group="moenda-relay"} 0`,
		`moenda_http_requests_total{code="201",method="POST",route="/tarefas"} 1`,
		`moenda_http_requests_total{code="200",method="PATCH",route="/tarefas/{id}/concluir"} 1`,
		`moenda_dead_letter_messages{queue="notificacoes.tarefas-concluidas.dlq"} 0`,
		`moenda_unrouted_messages{exchange="eventos.dominio"} 0`,
		`moenda_outbox_parked_rows{consumer_group="moenda-relay"} 0`,
		`moenda_relay_leader{consumer_group="moenda-relay"} 1`,
	)
	page := scrape(t, p)
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "moenda_http_request_duration_seconds_bucket"} {
		if !strings.Contains(page, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// A row no exchange carries is parked, and counted for its group.
func TestMetricsCountParkedRows(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	vhost := testenv.RabbitMQ(t)
	// Without the tarefas plugin, no exchange carries tarefa.concluida.
	p := start(t, "test", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL, "MOENDA_HANDLERS__ENABLED=pedidos", "MOENDA_METRICS__POLL_INTERVAL=1s")
	writeUnchecked(t, p.pool, "tarefa.concluida.v1", "tarefa.concluida.v1")
	p.out.Committed()
	shows(t, p, `moenda_outbox_parked_rows{consumer_group="moenda-relay"} 2`)
}

// A handler that always fails: its runs, retries and dead letter are
// counted, and the dead-letter queue's depth is read.
func TestMetricsOfAFailingHandler(t *testing.T) {
	s := newProbeStack(t)
	s.extra = append(s.extra, "MOENDA_METRICS__POLL_INTERVAL=1s")
	p := s.start(t)
	publish(t, p, "probe.work.hit.v1", probeOrder{Fail: -1})
	const labels = `handler="probe/work",queue="probe.work"`
	// Three deliveries (the first and two delays), each run three times
	// (two immediate retries), then the dead-letter queue.
	shows(t, p,
		`moenda_messages_failed_total{`+labels+`} 9`,
		`moenda_messages_retried_total{`+labels+`,tier="immediate"} 6`,
		`moenda_messages_retried_total{`+labels+`,tier="delayed"} 2`,
		`moenda_messages_dead_lettered_total{`+labels+`,reason="retries_exhausted"} 1`,
		`moenda_messages_handled_total{`+labels+`} 0`,
		`moenda_dead_letter_messages{queue="probe.work.dlq"} 1`,
	)
}

// With metrics off there is no /metrics.
// Methods a client makes up are counted as one: they make no series of
// their own.
func TestMadeUpMethodsMakeNoSeries(t *testing.T) {
	p, _ := startAMQP(t)
	for i := range 20 {
		send(t, fmt.Sprintf("BREW%d", i), p.base+"/tarefas", "", nil)
	}
	shows(t, p, `moenda_http_requests_total{code="405",method="other",route="unmatched"} 20`)
	if page := scrape(t, p); strings.Contains(page, `method="BREW`) {
		t.Fatal("a made-up method is a metric label")
	}
}

func TestMetricsOff(t *testing.T) {
	p, _ := startAMQP(t, "MOENDA_METRICS__ENABLED=false")
	if resp, _ := send(t, "GET", p.base+"/metrics", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /metrics with metrics off = %d", resp.StatusCode)
	}
}
