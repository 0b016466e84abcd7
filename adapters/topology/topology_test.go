package topology

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

// defaultFailure is the platform default of configs/base.yaml.
var defaultFailure = FailureConfig{
	ImmediateRetries:  ptr(2),
	ImmediateInterval: 100 * time.Millisecond,
	Delays:            []time.Duration{time.Second, 5 * time.Second, 25 * time.Second},
	DeadLetter:        DeadLetterConfig{Exchange: "moenda.dlx", Queue: "{queue}.dlq"},
}

// seed000 is the CAR topology from seed 000: one topic exchange, six
// subscribing queues, dead letters in car.dlx / car.dlq.{queue}.
func seed000() (Config, []Subscription) {
	cfg := Config{
		Exchanges: []ExchangeConfig{{Name: "car.events", Events: []string{"#"},
			Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "car.dlx", Queue: "car.dlq.{queue}"}}}},
		Failure: defaultFailure,
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
	if pol, _ := top.Policy("documentos.ocr"); pol.DeadLetterQueue != "car.dlq.documentos.ocr" {
		t.Errorf("dead-letter queue = %q", pol.DeadLetterQueue)
	}
	if got := top.QueuesFor("car.dlx", "documentos.ocr"); !slices.Equal(got, []string{"car.dlq.documentos.ocr"}) {
		t.Errorf("dead letters of documentos.ocr reach %v", got)
	}
}

// buildPrints builds cfg with subs, checks that the topology prints as
// want, and returns it.
func buildPrints(t *testing.T, cfg Config, subs []Subscription, want string) *Topology {
	t.Helper()
	top, err := Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := top.Print(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Fatalf("Print:\n%s\nwant:\n%s", b.String(), want)
	}
	return top
}

func TestBuildTarefasPrint(t *testing.T) {
	cfg := Config{
		Exchanges: []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"},
			Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "notificacoes.dlx"}}}},
		Failure:  defaultFailure,
		Unrouted: "{exchange}.unrouted",
	}
	top := buildPrints(t, cfg, []Subscription{{Queue: "notificacoes.tarefas-concluidas", Patterns: []string{"tarefa.concluida"}}}, `exchange eventos.dominio type=topic durable alternate-exchange=eventos.dominio.unrouted
exchange eventos.dominio.unrouted type=fanout durable
exchange notificacoes.dlx type=direct durable
queue eventos.dominio.unrouted durable
queue notificacoes.tarefas-concluidas durable x-dead-letter-exchange=notificacoes.dlx x-dead-letter-routing-key=notificacoes.tarefas-concluidas
queue notificacoes.tarefas-concluidas.dlq durable
queue notificacoes.tarefas-concluidas.retry.1s durable x-dead-letter-exchange= x-dead-letter-routing-key=notificacoes.tarefas-concluidas x-message-ttl=1000
queue notificacoes.tarefas-concluidas.retry.25s durable x-dead-letter-exchange= x-dead-letter-routing-key=notificacoes.tarefas-concluidas x-message-ttl=25000
queue notificacoes.tarefas-concluidas.retry.5s durable x-dead-letter-exchange= x-dead-letter-routing-key=notificacoes.tarefas-concluidas x-message-ttl=5000
binding eventos.dominio -> notificacoes.tarefas-concluidas key="tarefa.concluida"
binding eventos.dominio.unrouted -> eventos.dominio.unrouted key=""
binding notificacoes.dlx -> notificacoes.tarefas-concluidas.dlq key="notificacoes.tarefas-concluidas"
`)
	if got := top.QueuesFor("eventos.dominio.unrouted", "tarefa.criada"); !slices.Equal(got, []string{"eventos.dominio.unrouted"}) {
		t.Errorf("fanout routing = %v", got)
	}
}

func TestBuildErrors(t *testing.T) {
	cfg := Config{
		Exchanges: []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"}}, {Name: "", Events: nil}},
		Failure:   FailureConfig{Delays: []time.Duration{-time.Second}, DeadLetter: DeadLetterConfig{Queue: "{queue}.{queue}"}},
	}
	_, err := Build(cfg, nil)
	if err == nil {
		t.Fatal("Build accepted a bad config")
	}
	for _, want := range []string{"topology.exchanges[1].name is empty",
		"topology.failure.dead_letter.exchange is empty", "topology.failure.immediate_retries is not set",
		"topology.failure.delays[0] must be between", "may contain {queue} once"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	cfg = Config{
		Exchanges:     []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"}}},
		Failure:       defaultFailure,
		Subscriptions: []SubscriptionConfig{{Queue: "typo"}},
	}
	_, err = Build(cfg, []Subscription{{Queue: "q", Patterns: []string{"pedido.criado"}}})
	if err == nil || !strings.Contains(err.Error(), `queue "q" binds "pedido.criado", but no exchange`) {
		t.Fatalf("unroutable subscription: %v", err)
	}
	if !strings.Contains(err.Error(), `topology.subscriptions[0].queue: no enabled plugin consumes "typo"`) {
		t.Fatalf("override of an unknown queue: %v", err)
	}
	// An exchange listed for its failure settings alone, that nothing
	// publishes to, is not declared.
	cfg = Config{Exchanges: []ExchangeConfig{{Name: "vazio"}}, Failure: defaultFailure}
	if top, err := Build(cfg, nil); err != nil || len(top.Exchanges) != 0 {
		t.Fatalf("exchange without events: %v, declared %v", err, top)
	}
}

// The three dead-letter layouts of the seeds hold in one configuration:
// per queue under its own exchange (002), per queue with a template (000),
// and one central queue bound with # (004), each group with its schedule.
func TestFailureLayoutsOfEverySeedAtOnce(t *testing.T) {
	cfg := Config{
		Exchanges: []ExchangeConfig{
			{Name: "eventos.dominio", Events: []string{"tarefa.#"},
				Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "notificacoes.dlx"}}},
			{Name: "car.events", Events: []string{"processo.*", "documento.*"},
				Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "car.dlx", Queue: "car.dlq.{queue}"}}},
			{Name: "rental.exchange", Events: []string{"rental.*", "analysis.*"},
				Failure: FailureConfig{ImmediateRetries: ptr(0), Delays: []time.Duration{time.Second, 2 * time.Second},
					DeadLetter: DeadLetterConfig{Exchange: "rental.dlx", Queue: "rental.dlq"}}},
		},
		Failure: defaultFailure,
		Subscriptions: []SubscriptionConfig{{Queue: "documentos.ocr",
			Failure: FailureConfig{Delays: []time.Duration{200 * time.Millisecond}}}},
	}
	top, err := Build(cfg, []Subscription{
		{Queue: "notificacoes.tarefas-concluidas", Patterns: []string{"tarefa.concluida"}},
		{Queue: "processos.analista", Patterns: []string{"processo.*"}},
		{Queue: "documentos.ocr", Patterns: []string{"documento.*"}},
		{Queue: "notification.confirmed.queue", Patterns: []string{"rental.confirmed"}},
		{Queue: "notification.failed.queue", Patterns: []string{"rental.failed"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		queue    string
		dlx, dlq string
		delays   []time.Duration
		retries  int
	}{
		{"notificacoes.tarefas-concluidas", "notificacoes.dlx", "notificacoes.tarefas-concluidas.dlq", defaultFailure.Delays, 2},
		{"processos.analista", "car.dlx", "car.dlq.processos.analista", defaultFailure.Delays, 2},
		{"documentos.ocr", "car.dlx", "car.dlq.documentos.ocr", []time.Duration{200 * time.Millisecond}, 2},
		{"notification.confirmed.queue", "rental.dlx", "rental.dlq", []time.Duration{time.Second, 2 * time.Second}, 0},
		{"notification.failed.queue", "rental.dlx", "rental.dlq", []time.Duration{time.Second, 2 * time.Second}, 0},
	}
	for _, tt := range tests {
		pol, ok := top.Policy(tt.queue)
		if !ok || pol.DeadLetterExchange != tt.dlx || pol.DeadLetterQueue != tt.dlq || !slices.Equal(pol.Delays, tt.delays) || pol.ImmediateRetries != tt.retries {
			t.Errorf("%s: policy %+v", tt.queue, pol)
		}
		if got := top.QueuesFor(tt.dlx, tt.queue); !slices.Equal(got, []string{tt.dlq}) {
			t.Errorf("%s: dead letters reach %v, want %s", tt.queue, got, tt.dlq)
		}
		for _, d := range tt.delays {
			if !slices.ContainsFunc(top.Queues, func(q Queue) bool {
				return q.Name == RetryQueue(tt.queue, d) && q.Args[ArgMessageTTL] == d.Milliseconds() && q.Args[ArgDeadLetterRoutingKey] == tt.queue
			}) {
				t.Errorf("%s: no retry queue for %s", tt.queue, d)
			}
		}
	}
	kinds := map[string]string{}
	for _, x := range top.Exchanges {
		kinds[x.Name] = x.Kind
	}
	if kinds["notificacoes.dlx"] != Direct || kinds["car.dlx"] != Direct || kinds["rental.dlx"] != Topic {
		t.Errorf("dead-letter exchange kinds: %v", kinds)
	}
	if !slices.Contains(top.Bindings, Binding{Exchange: "rental.dlx", Queue: "rental.dlq", Key: "#"}) {
		t.Error("rental.dlq is not bound with #")
	}
}

func TestConflictingGroupsNeedAnOverride(t *testing.T) {
	cfg := Config{
		Exchanges: []ExchangeConfig{
			{Name: "a", Events: []string{"a.*"}, Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "a.dlx"}}},
			{Name: "b", Events: []string{"b.*"}, Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "b.dlx"}}},
		},
		Failure: defaultFailure,
	}
	subs := []Subscription{{Queue: "q", Patterns: []string{"#"}}}
	if _, err := Build(cfg, subs); err == nil || !strings.Contains(err.Error(), "give the queue its own in topology.subscriptions") {
		t.Fatalf("Build = %v", err)
	}
	cfg.Subscriptions = []SubscriptionConfig{{Queue: "q", Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "q.dlx"}}}}
	top, err := Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	if pol, _ := top.Policy("q"); pol.DeadLetterExchange != "q.dlx" {
		t.Fatalf("policy = %+v", pol)
	}
	// One exchange cannot be both a per-queue (direct) and a central (topic) dead-letter exchange.
	cfg.Subscriptions = []SubscriptionConfig{{Queue: "q", Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "x.dlx", Queue: "all.dlq"}}}}
	cfg.Exchanges[0].Failure.DeadLetter.Exchange = "x.dlx"
	subs = append(subs, Subscription{Queue: "p", Patterns: []string{"a.*"}})
	if _, err := Build(cfg, subs); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("Build = %v", err)
	}
}

func TestRetryQueueNames(t *testing.T) {
	for d, want := range map[time.Duration]string{
		200 * time.Millisecond: "q.retry.200ms", 1500 * time.Millisecond: "q.retry.1500ms",
		5 * time.Second: "q.retry.5s", 2 * time.Minute: "q.retry.2m", time.Hour: "q.retry.1h",
	} {
		if got := RetryQueue("q", d); got != want {
			t.Errorf("RetryQueue(q, %s) = %q, want %q", d, got, want)
		}
	}
}

// Queues for consumers outside moenda are declared and bound as listed,
// with nothing of moenda's failure handling, on an exchange that carries
// events.
func TestQueuesForOutsideConsumers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Exchanges = []ExchangeConfig{{Name: "car.events", Events: []string{"processo.*"}}}
	cfg.Queues = []QueueConfig{
		{Name: "adapter.whatsapp", Bindings: []BindingConfig{{Exchange: "car.events", Key: "canal.mensageria.*"}}},
		{Name: "adapter.telegram", Bindings: []BindingConfig{{Exchange: "car.events", Key: "canal.mensageria.*"}}},
	}
	top, err := Build(cfg, []Subscription{{Queue: "processos.analista", Patterns: []string{"processo.*"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"adapter.whatsapp", "adapter.telegram"} {
		if got := top.QueuesFor("car.events", "canal.mensageria.enviada"); !slices.Contains(got, q) {
			t.Errorf("canal.mensageria.enviada reaches %v, not %s", got, q)
		}
		i := slices.IndexFunc(top.Queues, func(x Queue) bool { return x.Name == q })
		if i < 0 || len(top.Queues[i].Args) != 0 {
			t.Errorf("queue %s declared as %+v, want a plain durable queue", q, top.Queues)
		}
		if _, ok := top.Policy(q); ok || slices.ContainsFunc(top.Queues, func(x Queue) bool { return strings.HasPrefix(x.Name, q+".") }) {
			t.Errorf("queue %s got moenda's failure handling", q)
		}
	}

	for _, tt := range []struct {
		queues []QueueConfig
		want   string
	}{
		{[]QueueConfig{{Name: "x", Bindings: []BindingConfig{{Exchange: "nowhere", Key: "a.*"}}}}, `exchange "nowhere" carries no event`},
		{[]QueueConfig{{Name: "processos.analista", Bindings: []BindingConfig{{Exchange: "car.events", Key: "#"}}}}, `queue "processos.analista" is also a subscription's`},
		{[]QueueConfig{{Name: "y"}}, "topology.queues[0].bindings is empty"},
		{[]QueueConfig{{Name: "z", Bindings: []BindingConfig{{Exchange: "car.events", Key: "a..b"}}}}, "topology.queues[0].bindings[0].key"},
	} {
		bad := cfg
		bad.Queues = tt.queues
		_, err = Build(bad, []Subscription{{Queue: "processos.analista", Patterns: []string{"processo.*"}}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v does not say %q", err, tt.want)
		}
	}
}

// A queue's envelope format comes from its override; moenda's otherwise.
func TestEnvelopePerQueue(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Exchanges = []ExchangeConfig{{Name: "pedidos", Events: []string{"pedido.*"}}}
	cfg.Subscriptions = []SubscriptionConfig{{Queue: "estoque.pedidos", Envelope: "tipo-versao"}}
	subs := []Subscription{{Queue: "estoque.pedidos", Patterns: []string{"pedido.criado"}}, {Queue: "analise.pedidos", Patterns: []string{"pedido.#"}}}
	top, err := Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	if top.Envelope("estoque.pedidos") != "tipo-versao" || top.Envelope("analise.pedidos") != "moenda" {
		t.Fatalf("envelopes %q and %q", top.Envelope("estoque.pedidos"), top.Envelope("analise.pedidos"))
	}
	cfg.Subscriptions[0].Envelope = "xml"
	if _, err := Build(cfg, subs); err == nil || !strings.Contains(err.Error(), `topology.subscriptions[0].envelope "xml" must be one of moenda, tipo-versao, flat`) {
		t.Fatalf("an unknown envelope: %v", err)
	}
}

// An exchange's envelope is what is published to it, and what the queues
// bound on it read unless they say otherwise.
func TestEnvelopePerExchange(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Exchanges = []ExchangeConfig{
		{Name: "rental.exchange", Events: []string{"rental.*", "analysis.*"}, Envelope: "flat"},
		{Name: "pedidos", Events: []string{"pedido.*"}},
	}
	subs := []Subscription{
		{Queue: "analysis.requested.queue", Patterns: []string{"rental.requested"}},
		{Queue: "analytics.metricas", Patterns: []string{"#"}},
		{Queue: "estoque.pedidos", Patterns: []string{"pedido.*"}},
	}
	top, err := Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{"analysis.requested.queue": "flat", "analytics.metricas": "flat", "estoque.pedidos": "moenda"} {
		if got := top.Envelope(q); got != want {
			t.Errorf("queue %s reads %q, want %q", q, got, want)
		}
	}
	if top.Published("rental.exchange") != "flat" || top.Published("pedidos") != "moenda" {
		t.Errorf("published: %q and %q", top.Published("rental.exchange"), top.Published("pedidos"))
	}
	cfg.Exchanges[1].Envelope = "tipo-versao"
	if _, err := Build(cfg, subs); err == nil || !strings.Contains(err.Error(), `topology.exchanges[1].envelope "tipo-versao" must be one of moenda, flat`) {
		t.Errorf("tipo-versao published: %v", err)
	}
}

// Two subscriptions never share a queue: each service has its own.
func TestTwoSubscriptionsCannotShareAQueue(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Exchanges = []ExchangeConfig{{Name: "pedidos", Events: []string{"pedido.*"}}}
	_, err := Build(cfg, []Subscription{{Queue: "estoque.pedidos", Patterns: []string{"pedido.criado"}}, {Queue: "estoque.pedidos", Patterns: []string{"pedido.pago"}}})
	if err == nil || !strings.Contains(err.Error(), `queue "estoque.pedidos" is declared by two subscriptions`) {
		t.Fatalf("two subscriptions on one queue: %v", err)
	}
}

// A quorum queue gets its type and at-least-once dead-lettering, and the
// consuming queue the delivery limit; its retry queues are quorum too and
// still dead-letter back through the default exchange, its dead-letter
// queue is quorum, and so is the exchange's unrouted queue.
func TestBuildQuorumPrint(t *testing.T) {
	cfg := Config{
		Exchanges: []ExchangeConfig{{Name: "eventos.dominio", Events: []string{"tarefa.#"},
			Failure: FailureConfig{DeadLetter: DeadLetterConfig{Exchange: "notificacoes.dlx"}}}},
		Failure:   FailureConfig{ImmediateRetries: ptr(2), ImmediateInterval: 100 * time.Millisecond, Delays: []time.Duration{time.Second}, DeadLetter: defaultFailure.DeadLetter},
		Unrouted:  "{exchange}.unrouted",
		QueueType: Quorum,
	}
	top := buildPrints(t, cfg, []Subscription{{Queue: "notificacoes.tarefas-concluidas", Patterns: []string{"tarefa.concluida"}}}, `exchange eventos.dominio type=topic durable alternate-exchange=eventos.dominio.unrouted
exchange eventos.dominio.unrouted type=fanout durable
exchange notificacoes.dlx type=direct durable
queue eventos.dominio.unrouted durable x-queue-type=quorum
queue notificacoes.tarefas-concluidas durable x-dead-letter-exchange=notificacoes.dlx x-dead-letter-routing-key=notificacoes.tarefas-concluidas x-dead-letter-strategy=at-least-once x-delivery-limit=100 x-overflow=reject-publish x-queue-type=quorum
queue notificacoes.tarefas-concluidas.dlq durable x-queue-type=quorum
queue notificacoes.tarefas-concluidas.retry.1s durable x-dead-letter-exchange= x-dead-letter-routing-key=notificacoes.tarefas-concluidas x-dead-letter-strategy=at-least-once x-message-ttl=1000 x-overflow=reject-publish x-queue-type=quorum
binding eventos.dominio -> notificacoes.tarefas-concluidas key="tarefa.concluida"
binding eventos.dominio.unrouted -> eventos.dominio.unrouted key=""
binding notificacoes.dlx -> notificacoes.tarefas-concluidas.dlq key="notificacoes.tarefas-concluidas"
`)
	for _, q := range top.Queues {
		if got := top.QueueType(q.Name); got != Quorum {
			t.Errorf("QueueType(%s) = %q", q.Name, got)
		}
	}
	if got := top.QueueType("elsewhere"); got != "" {
		t.Errorf("QueueType of a queue not declared = %q", got)
	}
}

// The queue type resolves like the failure settings: the subscription's
// own, else the exchange groups the queue is bound on, else the
// platform's; groups that disagree need the subscription to settle it.
func TestQueueTypeResolves(t *testing.T) {
	subs := []Subscription{
		{Queue: "on-a", Patterns: []string{"a.*"}},
		{Queue: "on-b", Patterns: []string{"b.*"}},
		{Queue: "on-both", Patterns: []string{"#"}},
	}
	tests := []struct {
		name             string
		platform, xa, xb string
		own              map[string]string
		want             map[string]string // by queue; the unrouted queues of a and b too
		err              string
	}{
		{name: "the default is classic", want: map[string]string{"on-a": Classic, "on-both": Classic, "a.unrouted": Classic}},
		{name: "the platform's", platform: Quorum, want: map[string]string{"on-a": Quorum, "on-b": Quorum, "on-both": Quorum, "a.unrouted": Quorum}},
		{name: "an exchange's over the platform's", platform: Quorum, xa: Classic,
			own:  map[string]string{"on-both": Quorum},
			want: map[string]string{"on-a": Classic, "a.unrouted": Classic, "on-b": Quorum, "b.unrouted": Quorum, "on-both": Quorum}},
		{name: "groups that disagree", platform: Quorum, xa: Classic,
			err: `queue "on-both" is bound on exchanges "a" (queue_type classic) and "b" (queue_type quorum); give the queue its own queue_type in topology.subscriptions`},
		{name: "the subscription settles it", xa: Quorum,
			own:  map[string]string{"on-both": Quorum, "on-b": Quorum},
			want: map[string]string{"on-a": Quorum, "on-b": Quorum, "on-both": Quorum, "a.unrouted": Quorum, "b.unrouted": Classic}},
		{name: "a subscription over its exchange's", xa: Quorum, xb: Quorum,
			own:  map[string]string{"on-a": Classic},
			want: map[string]string{"on-a": Classic, "on-b": Quorum, "on-both": Quorum, "a.unrouted": Quorum}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{
				Exchanges: []ExchangeConfig{{Name: "a", Events: []string{"a.*"}, QueueType: tt.xa}, {Name: "b", Events: []string{"b.*"}, QueueType: tt.xb}},
				Failure:   defaultFailure,
				Unrouted:  "{exchange}.unrouted",
				QueueType: tt.platform,
			}
			for q, typ := range tt.own {
				cfg.Subscriptions = append(cfg.Subscriptions, SubscriptionConfig{Queue: q, QueueType: typ})
			}
			top, err := Build(cfg, subs)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Build = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for q, want := range tt.want {
				if got := top.QueueType(q); got != want {
					t.Errorf("QueueType(%s) = %q, want %q", q, got, want)
				}
				if _, ok := top.Policy(q); !ok {
					continue
				}
				// Its retry and dead-letter queues have its type.
				for _, d := range defaultFailure.Delays {
					if got := top.QueueType(RetryQueue(q, d)); got != want {
						t.Errorf("QueueType(%s) = %q, want %q", RetryQueue(q, d), got, want)
					}
				}
				if got := top.QueueType(q + ".dlq"); got != want {
					t.Errorf("QueueType(%s.dlq) = %q, want %q", q, got, want)
				}
			}
		})
	}
}

func TestQueueTypeErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.QueueType = "mirrored"
	cfg.Exchanges = []ExchangeConfig{{Name: "a", Events: []string{"a.*"}, QueueType: "Quorum"}}
	cfg.Subscriptions = []SubscriptionConfig{{Queue: "q", QueueType: "stream"}}
	err := cfg.Validate()
	for _, want := range []string{
		`topology.queue_type "mirrored" must be one of classic, quorum`,
		`topology.exchanges[0].queue_type "Quorum" must be one of classic, quorum`,
		`topology.subscriptions[0].queue_type "stream" must be one of classic, quorum`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, does not say %q", err, want)
		}
	}
	if DefaultConfig().QueueType != Classic || DefaultConfig().Validate() != nil {
		t.Errorf("DefaultConfig's queue type is %q", DefaultConfig().QueueType)
	}

	// A central dead-letter queue has one type: the queues that share it
	// must agree.
	cfg = DefaultConfig()
	cfg.Failure.DeadLetter.Queue = "all.dlq"
	cfg.Exchanges = []ExchangeConfig{{Name: "a", Events: []string{"a.*"}}}
	cfg.Subscriptions = []SubscriptionConfig{{Queue: "q2", QueueType: Quorum}}
	subs := []Subscription{{Queue: "q1", Patterns: []string{"a.x"}}, {Queue: "q2", Patterns: []string{"a.y"}}}
	if _, err := Build(cfg, subs); err == nil || !strings.Contains(err.Error(), `queue "q2" is quorum, but its dead-letter queue "all.dlq" takes the dead letters of classic queues too`) {
		t.Fatalf("a central dead-letter queue of both types: %v", err)
	}
	cfg.Subscriptions = append(cfg.Subscriptions, SubscriptionConfig{Queue: "q1", QueueType: Quorum})
	top, err := Build(cfg, subs)
	if err != nil {
		t.Fatal(err)
	}
	if got := top.QueueType("all.dlq"); got != Quorum {
		t.Fatalf("the central dead-letter queue is %q", got)
	}
}
