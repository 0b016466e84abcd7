package topology

import (
	"slices"
	"strings"
	"testing"
)

// seed000 is the CAR topology from seed 000: one topic exchange, six
// subscribing queues, dead letters in car.dlx / car.dlq.{queue}.
func seed000() (Config, []Subscription) {
	cfg := Config{
		Exchanges:  []ExchangeConfig{{Name: "car.events", Events: []string{"#"}}},
		DeadLetter: DeadLetterConfig{Exchange: "car.dlx", Queue: "car.dlq.{queue}"},
	}
	subs := []Subscription{
		{Queue: "processos.analista", Patterns: []string{"processo.*"}},
		{Queue: "processos.notificacao", Patterns: []string{"processo.*"}},
		{Queue: "documentos.ocr", Patterns: []string{"documento.*"}},
		{Queue: "canal.web.mensagens", Patterns: []string{"canal.web.*"}},
		{Queue: "integracao.sicar", Patterns: []string{"*.regular"}},
		{Queue: "analytics.metricas", Patterns: []string{"#"}},
	}
	return cfg, subs
}

func TestBuildSeed000(t *testing.T) {
	cfg, subs := seed000()
	top, err := Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key  string
		want []string
	}{
		{"processo.submetido", []string{"analytics.metricas", "processos.analista", "processos.notificacao"}},
		{"processo.regular", []string{"analytics.metricas", "integracao.sicar", "processos.analista", "processos.notificacao"}},
		{"documento.enviado", []string{"analytics.metricas", "documentos.ocr"}},
		{"canal.web.mensagem", []string{"analytics.metricas", "canal.web.mensagens"}},
	}
	for _, tt := range tests {
		x, err := top.ExchangeFor(tt.key)
		if err != nil || x != "car.events" {
			t.Fatalf("ExchangeFor(%q) = %q, %v", tt.key, x, err)
		}
		got := top.QueuesFor(x, tt.key)
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("QueuesFor(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
	if got := top.DeadLetterQueue("documentos.ocr"); got != "car.dlq.documentos.ocr" {
		t.Errorf("DeadLetterQueue = %q", got)
	}
	if got := top.QueuesFor("car.dlx", "documentos.ocr"); !slices.Equal(got, []string{"car.dlq.documentos.ocr"}) {
		t.Errorf("dead letters of documentos.ocr reach %v", got)
	}
}

func TestBuildTarefasPrint(t *testing.T) {
	cfg := Config{
		Exchanges:  []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"}}},
		DeadLetter: DeadLetterConfig{Exchange: "notificacoes.dlx", Queue: "{queue}.dlq"},
		Unrouted:   "{exchange}.unrouted",
	}
	top, err := Build(cfg, []Subscription{{Queue: "notificacoes.tarefas-concluidas", Patterns: []string{"tarefa.concluida"}}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := top.Print(&b); err != nil {
		t.Fatal(err)
	}
	want := `exchange eventos.dominio type=topic durable alternate-exchange=eventos.dominio.unrouted
exchange eventos.dominio.unrouted type=fanout durable
exchange notificacoes.dlx type=direct durable
queue eventos.dominio.unrouted durable
queue notificacoes.tarefas-concluidas durable x-dead-letter-exchange=notificacoes.dlx x-dead-letter-routing-key=notificacoes.tarefas-concluidas
queue notificacoes.tarefas-concluidas.dlq durable
binding eventos.dominio -> notificacoes.tarefas-concluidas key="tarefa.concluida"
binding eventos.dominio.unrouted -> eventos.dominio.unrouted key=""
binding notificacoes.dlx -> notificacoes.tarefas-concluidas.dlq key="notificacoes.tarefas-concluidas"
`
	if b.String() != want {
		t.Fatalf("Print:\n%s\nwant:\n%s", b.String(), want)
	}
	if got := top.QueuesFor("eventos.dominio.unrouted", "tarefa.criada"); !slices.Equal(got, []string{"eventos.dominio.unrouted"}) {
		t.Errorf("fanout routing = %v", got)
	}
}

func TestBuildErrors(t *testing.T) {
	cfg := Config{
		Exchanges:  []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"}}, {Name: "", Events: nil}},
		DeadLetter: DeadLetterConfig{Exchange: "", Queue: "dlq"},
	}
	_, err := Build(cfg, nil)
	if err == nil {
		t.Fatal("Build accepted a bad config")
	}
	for _, want := range []string{"topology.exchanges[1].name is empty", "topology.exchanges[1].events", "topology.dead_letter.exchange is empty", "must contain {queue}"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	cfg = Config{
		Exchanges:  []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"}}},
		DeadLetter: DeadLetterConfig{Exchange: "dlx", Queue: "{queue}.dlq"},
	}
	_, err = Build(cfg, []Subscription{{Queue: "q", Patterns: []string{"pedido.criado"}}})
	if err == nil || !strings.Contains(err.Error(), `queue "q" binds "pedido.criado", but no exchange`) {
		t.Fatalf("unroutable subscription: %v", err)
	}
}
