package app

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func registry(t *testing.T) *handlers.Registry {
	t.Helper()
	reg, err := Plugins()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// registryOf is a registry of defs, failing the test where they clash.
func registryOf(t *testing.T, defs ...handlers.Definition) *handlers.Registry {
	t.Helper()
	reg, err := handlers.NewRegistry(defs...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// goldenPlugins are the plugins the goldens were written with: the seeds'.
// The goldens pin the platform's configuration and these plugins'
// sections; a plugin added to the binary runs by default, and its section
// would otherwise change every golden (its own tests pin it).
var goldenPlugins = []string{"tarefas", "notificacoes", "analytics", "car", "pedidos", "estoque", "analise", "locacoes", "credito", "emails"}

// TestResolvedConfigGolden pins the resolved configuration of every
// shipped environment; run with -update after changing configs/.
func TestResolvedConfigGolden(t *testing.T) {
	var defs []handlers.Definition
	for _, name := range goldenPlugins {
		d, ok := registry(t).Lookup(name)
		if !ok {
			t.Fatalf("no plugin %q", name)
		}
		defs = append(defs, d)
	}
	reg := registryOf(t, defs...)
	for _, env := range environments(configs.FS) {
		t.Run(env, func(t *testing.T) {
			cfg, err := Load(Source{Env: env, Files: configs.FS}, reg)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := cfg.Print(&b); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", env+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./app -run Golden -update)", err)
			}
			if b.String() != string(want) {
				t.Fatalf("resolved config of %s changed (run with -update if intended):\n%s", env, b.String())
			}
		})
	}
	if got := environments(configs.FS); strings.Join(got, ",") != "compose,local,memory,test" {
		t.Fatalf("shipped environments = %v", got)
	}
}

// load loads src, from the shipped files unless it names others, with
// the shipped plugins, and fails the test on an error.
func load(t *testing.T, src Source) *Resolved {
	t.Helper()
	if src.Files == nil {
		src.Files = configs.FS
	}
	cfg, err := Load(src, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLoadLayersAndEnvironment(t *testing.T) {
	cfg := load(t, Source{Env: "memory", Environ: []string{
		"MOENDA_ENV=ignored-here",
		"MOENDA_HTTP__ADDR=127.0.0.1:9090",
		"MOENDA_TOPOLOGY__FAILURE__IMMEDIATE_RETRIES=7",
		"MOENDA_HANDLERS__ENABLED=tarefas",
		"MOENDA_HANDLERS__NOTIFICACOES__CHANNEL=#geral",
		"OTHER_VAR=1",
	}})
	if cfg.Broker.Kind != BrokerMemory {
		t.Errorf("the memory overlay did not apply: broker.kind = %q", cfg.Broker.Kind)
	}
	if cfg.HTTP.Addr != "127.0.0.1:9090" || *cfg.Topology.Failure.ImmediateRetries != 7 {
		t.Errorf("variables did not override: %+v %+v", cfg.HTTP, cfg.Topology.Failure)
	}
	if len(cfg.plugins) != 1 || cfg.plugins[0].def.Name != "tarefas" {
		t.Errorf("handlers.enabled from a variable: %v", cfg.Handlers.Enabled)
	}
	if cfg.HTTP.MaxBodyBytes != 1<<20 {
		t.Errorf("base default lost: max_body_bytes = %d", cfg.HTTP.MaxBodyBytes)
	}
}

func TestPrintHidesSecrets(t *testing.T) {
	cfg := load(t, Source{Env: "local", Environ: []string{
		"MOENDA_POSTGRES__URL=postgres://moenda:pg-secret@db:5432/moenda",
		"MOENDA_AMQP__URL=amqp://moenda:mq-secret@mq:5672/",
		"MOENDA_AMQP__URLS=amqp://moenda:mq1-secret@mq1:5672/,amqp://moenda:mq2-secret@mq2:5672/",
		"MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URL=https://hooks.slack.com/services/T0/B0/hook-secret",
		"MOENDA_HANDLERS__LOCACOES__JWT_SECRET=jwt-secret-of-at-least-thirty-two-bytes",
		"MOENDA_HANDLERS__EMAILS__SMTP__USERNAME=moenda",
		"MOENDA_HANDLERS__EMAILS__SMTP__PASSWORD=smtp-secret",
	}})
	var b strings.Builder
	if err := cfg.Print(&b); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"pg-secret", "mq-secret", "mq1-secret", "mq2-secret", "hook-secret", "jwt-secret", "smtp-secret"} {
		if strings.Contains(b.String(), secret) {
			t.Errorf("config print shows %s:\n%s", secret, b.String())
		}
	}
	if !strings.Contains(b.String(), "handlers.notificacoes.webhook.url = https://hooks.slack.com/xxxxx") {
		t.Errorf("webhook url not shown redacted:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "amqp.urls = [amqp://moenda:xxxxx@mq1:5672/ amqp://moenda:xxxxx@mq2:5672/]") {
		t.Errorf("amqp.urls not shown redacted:\n%s", b.String())
	}
}

// A secret written the way a URL cannot hold it (an unescaped #, / or %,
// a keyword DSN) reaches neither an error of Load nor config print.
func TestSecretsThatDoNotParseStayHidden(t *testing.T) {
	secrets := map[string]string{
		"MOENDA_POSTGRES__URL": "postgres://moenda:pg#se/cret%@db:5432/moenda",
		"MOENDA_AMQP__URL":     "amqp://moenda:mq%se#cret@mq:5672/",
		"MOENDA_AMQP__URLS":    "amqp://moenda:mq1%se/cret@mq1:5672/",
	}
	hidden := []string{"pg#se/cret%", "mq%se#cret", "mq1%se/cret", "hook%secret", "se/cret", "se#cret", "dsn-secret"}
	check := func(what, text string) {
		t.Helper()
		for _, secret := range hidden {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %s:\n%s", what, secret, text)
			}
		}
	}
	for key, value := range secrets {
		_, err := Load(Source{Env: "local", Files: configs.FS, Environ: []string{key + "=" + value}}, registry(t))
		if err == nil {
			t.Errorf("%s=%s loaded", key, value)
			continue
		}
		check("the error of "+key, err.Error())
	}
	cfg := load(t, Source{Env: "local", Environ: []string{"MOENDA_POSTGRES__URL=host=db user=moenda password=dsn-secret dbname=moenda",
		"MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URL=https://hooks.slack.com/services/T0/B0/hook%secret"}})
	var b strings.Builder
	if err := cfg.Print(&b); err != nil {
		t.Fatal(err)
	}
	check("config print", b.String())
	_, err := postgres.Connect(context.Background(), postgres.Config{URL: "postgres://moenda:pg#se/cret%@db:5432/moenda", MaxConns: 1})
	if err == nil {
		t.Fatal("an unparsable postgres.url connected")
	}
	check("postgres.Connect's error", err.Error())
}

// amqp.urls comes from YAML as a list or from MOENDA_AMQP__URLS separated
// by commas, and replaces amqp.url when set.
func TestAMQPNodes(t *testing.T) {
	const a, b = "amqp://moenda:s@mq1:5672/", "amqp://moenda:s@mq2:5672/"
	tests := []struct {
		name    string
		overlay string
		environ []string
		want    []string
	}{
		{"amqp.url alone", "", []string{"MOENDA_AMQP__URL=" + a}, []string{a}},
		{"from the environment", "", []string{"MOENDA_AMQP__URL=amqp://other:5672/", "MOENDA_AMQP__URLS=" + a + "," + b}, []string{a, b}},
		{"from YAML", "amqp:\n  urls: [" + b + ", " + a + "]\n", nil, []string{b, a}},
		{"the environment over YAML", "amqp:\n  urls: [" + b + ", " + a + "]\n", []string{"MOENDA_AMQP__URLS=" + a}, []string{a}},
		{"empty variable", "", []string{"MOENDA_AMQP__URL=" + a, "MOENDA_AMQP__URLS="}, []string{a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := configs.FS.ReadFile("base.yaml")
			files := fstest.MapFS{"base.yaml": {Data: base}, "overlay.yaml": {Data: []byte(tt.overlay)}}
			cfg := load(t, Source{Env: "overlay", Files: files, Environ: tt.environ})
			if got := cfg.AMQP.Nodes(); !slices.Equal(got, tt.want) {
				t.Fatalf("amqp nodes = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		overlay string
		want    []string
	}{
		{"unknown top-level key", []string{"MOENDA_HTPP__ADDR=x"}, "", []string{"unknown key htpp"}},
		{"unknown nested key", nil, "http:\n  adr: x\n", []string{"unknown key http.adr"}},
		{"unknown key in a list item", nil, "topology:\n  exchanges:\n    - name: x\n      events: [a]\n      durable: true\n", []string{"unknown key topology.exchanges[0].durable"}},
		{"unknown key in a plugin section", []string{"MOENDA_HANDLERS__NOTIFICACOES__WEBHOOK__URLL=x"}, "", []string{"unknown key handlers.notificacoes.webhook.urll"}},
		{"section of no plugin", []string{"MOENDA_HANDLERS__NOPE__X=1"}, "", []string{`unknown key handlers.nope: no plugin is named "nope" (known: tarefas, notificacoes, `}},
		{"bad broker kind", []string{"MOENDA_BROKER__KIND=rabbit"}, "", []string{`broker.kind "rabbit" must be one of amqp, kafka, memory`}},
		{"unknown plugin enabled", []string{"MOENDA_HANDLERS__ENABLED=tarefas,nope"}, "", []string{`handlers.enabled: unknown plugin "nope" (known: tarefas, notificacoes, `}},
		{"webhook without url", []string{"MOENDA_HANDLERS__NOTIFICACOES__NOTIFIER=webhook"}, "", []string{`handlers.notificacoes.webhook.url "" must be an http(s) URL`}},
		{"a duration that is not one", []string{"MOENDA_OUTBOX__POLL_INTERVAL=soon"}, "", []string{"outbox.poll_interval"}},
		{"analytics on Kafka without an outbox", []string{"MOENDA_BROKER__KIND=memory", "MOENDA_ANALYTICS__KAFKA__ENABLED=true"}, "", []string{"analytics.kafka.enabled: the Kafka relay reads the PostgreSQL outbox"}},
		{"one relay position for two relays", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true", "MOENDA_ANALYTICS__KAFKA__RELAY_GROUP=moenda-relay"}, "", []string{`analytics.kafka.relay_group "moenda-relay" must differ from outbox.consumer_group`}},
		{"two relay groups alike but for punctuation", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true", "MOENDA_ANALYTICS__KAFKA__RELAY_GROUP=Moenda.Relay"}, "",
			[]string{`analytics.kafka.relay_group "Moenda.Relay" and outbox.consumer_group "moenda-relay" differ only in case or punctuation`}},
		{"kafka settings checked when Kafka is used", []string{"MOENDA_BROKER__KIND=kafka", "MOENDA_KAFKA__BROKERS=nohost", "MOENDA_KAFKA__PARTITIONS=0"}, "", []string{
			`kafka.brokers[0] "nohost" must be host:port`, "kafka.partitions must be at least 1",
		}},
		{"an event bound over what a Kafka record holds", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true", "MOENDA_OUTBOX__MAX_EVENT_BYTES=2097152", "MOENDA_KAFKA__MAX_RECORD_BYTES=1000"}, "", []string{
			"outbox.max_event_bytes 2097152 is more than a Kafka record of kafka.max_record_bytes 1000 holds", "kafka.max_record_bytes must be at least 16384",
		}},
		{"editing failures with no ledger to send the edits", []string{"MOENDA_FAILURES__ALLOW_EDIT=true"}, "", []string{"failures.allow_edit needs failures.enabled"}},
		{"a negative event bound", []string{"MOENDA_OUTBOX__MAX_EVENT_BYTES=-1"}, "", []string{"outbox.max_event_bytes must not be negative"}},
		{"bad nodes in amqp.urls", []string{"MOENDA_AMQP__URLS=amqp://moenda:s3cret@mq1:5672/,http://moenda:s3cret@mq2/,amqp://moenda:s3cret@mq1:5672/"}, "", []string{
			`amqp.urls[1] "http://moenda:xxxxx@mq2/" must look like amqp://user:password@host:5672/vhost`,
			`amqp.urls[2] "amqp://moenda:xxxxx@mq1:5672/" repeats amqp.urls[0]`,
		}},
		{"server timeouts that let slow clients stay", nil, "http: {read_timeout: 0s, idle_timeout: -1s}\n", []string{
			"http.read_timeout must be positive, got 0s", "http.idle_timeout must be positive, got -1s",
			"http.read_header_timeout (10s) must not exceed http.read_timeout (0s)",
		}},
		{"a write timeout shorter than the body's read", nil, "http: {read_timeout: 1m, write_timeout: 30s}\n", []string{
			"http.write_timeout (30s) must be at least http.read_timeout (1m0s)",
		}},
		{"every problem at once", []string{"MOENDA_HTTP__ADDR=nope", "MOENDA_AMQP__PREFETCH=0", "MOENDA_POSTGRES__URL=mysql://x"}, "", []string{
			`http.addr "nope" must be host:port`, "amqp.prefetch must be at least 1", "postgres.url",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := fstest.MapFS{"overlay.yaml": {Data: []byte(tt.overlay)}}
			base, _ := configs.FS.ReadFile("base.yaml")
			files["base.yaml"] = &fstest.MapFile{Data: base}
			_, err := Load(Source{Env: "overlay", Files: files, Environ: tt.environ}, registry(t))
			if err == nil {
				t.Fatal("Load accepted a bad configuration")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

// --config files come after the environment's overlay and before the
// variables; a missing one is an error naming it.
func TestExtraConfigFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "extra.yaml")
	if err := os.WriteFile(path, []byte("log: {level: error}\nhttp: {addr: '127.0.0.1:9999'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, Source{Env: "local", Extra: []string{path}, Environ: []string{"MOENDA_HTTP__ADDR=127.0.0.1:7777"}})
	if cfg.Log.Level != "error" || cfg.HTTP.Addr != "127.0.0.1:7777" {
		t.Fatalf("log.level %q (want the file's error over local's debug), http.addr %q (want the variable's)", cfg.Log.Level, cfg.HTTP.Addr)
	}
	_, err := Load(Source{Env: "local", Files: configs.FS, Extra: []string{filepath.Join(dir, "missing.yaml")}}, registry(t))
	if err == nil || !strings.Contains(err.Error(), "config: --config: open ") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("a missing --config file: %v", err)
	}
}

// The envelope formats' former names, after the seeds, are still
// accepted, and resolve to the formats' names.
func TestEnvelopeFormerNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "extra.yaml")
	yaml := "topology:\n  subscriptions:\n    - {queue: estoque.pedidos, envelope: seed001}\n    - {queue: analise.pedidos, envelope: seed004}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, Source{Env: "test", Extra: []string{path}})
	var got []string
	for _, s := range cfg.Topology.Subscriptions {
		got = append(got, string(s.Envelope))
	}
	if !slices.Equal(got, []string{event.EnvelopeTipoVersao, event.EnvelopeFlat}) {
		t.Fatalf("envelopes %v, want [tipo-versao flat]", got)
	}
	var b strings.Builder
	if err := cfg.Print(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "seed00") {
		t.Errorf("config print shows a former name:\n%s", b.String())
	}
}

// A list in a plugin's section replaces the default's: decoding never
// writes into the default's array, which every later NewConfig copies.
func TestAListSettingLeavesThePluginDefaultsAlone(t *testing.T) {
	type listConfig struct {
		Names []string `koanf:"names"`
	}
	def := handlers.Define(handlers.Spec{Name: "lista"}, listConfig{Names: []string{"a", "b", "c"}},
		func(listConfig, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
	reg := registryOf(t, def)
	files := fstest.MapFS{"base.yaml": {Data: []byte("handlers: {enabled: [lista]}\n")}, "x.yaml": {Data: []byte("handlers: {lista: {names: [z]}}\n")}}
	cfg, err := Load(Source{Env: "x", Files: files}, reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.plugins[0].cfg.(*listConfig).Names; len(got) != 1 || got[0] != "z" {
		t.Fatalf("decoded names = %v, want [z]", got)
	}
	if got := def.NewConfig().(*listConfig).Names; len(got) != 3 || got[0] != "a" {
		t.Fatalf("defaults after a decode = %v, want [a b c]", got)
	}
}

// A plugin that keeps its state in PostgreSQL only is refused where there
// is none when handlers.enabled names it, with the reason and the fix; by
// default the registry leaves it out there.
func TestMemoryRefusesPluginsThatNeedPostgres(t *testing.T) {
	_, err := Load(Source{Env: "memory", Files: configs.FS, Environ: []string{"MOENDA_HANDLERS__ENABLED=tarefas,locacoes"}}, registry(t))
	if err == nil || !strings.Contains(err.Error(), "plugin locacoes keeps its state in PostgreSQL, which broker.kind memory does not have; leave it out of handlers.enabled") {
		t.Fatalf("locacoes in memory: %v", err)
	}
	cfg, err := Load(Source{Env: "memory", Files: configs.FS}, registry(t))
	if err != nil {
		t.Fatalf("the memory environment: %v", err)
	}
	if !slices.Equal(cfg.leftOut, []string{"locacoes", "credito"}) {
		t.Errorf("left out in memory: %v, want [locacoes credito]", cfg.leftOut)
	}
}

// Unset, handlers.enabled is every registered plugin but the opt-in ones
// (and, without PostgreSQL, those that need it); set, it is what it names.
func TestEnabledDefaultsToEveryPlugin(t *testing.T) {
	plain := handlers.Define(handlers.Spec{Name: "plain"}, struct{}{}, func(struct{}, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
	stateful := handlers.Define(handlers.Spec{Name: "stateful", NeedsPostgres: true}, struct{}{}, func(struct{}, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
	optIn := handlers.Define(handlers.Spec{Name: "probe", OptIn: true}, struct{}{}, func(struct{}, handlers.Deps) (handlers.Plugin, error) { return handlers.Plugin{}, nil })
	reg := registryOf(t, plain, stateful, optIn)
	for _, tt := range []struct {
		name    string
		environ []string
		want    []string
		leftOut []string
	}{
		{"default", nil, []string{"plain", "stateful"}, nil},
		{"default without PostgreSQL", []string{"MOENDA_BROKER__KIND=memory"}, []string{"plain"}, []string{"stateful"}},
		{"named", []string{"MOENDA_HANDLERS__ENABLED=probe,plain"}, []string{"probe", "plain"}, nil},
		{"none", []string{"MOENDA_HANDLERS__ENABLED="}, []string{}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(Source{Env: "x", Files: fstest.MapFS{"base.yaml": {}, "x.yaml": {}}, Environ: tt.environ}, reg)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range cfg.plugins {
				got = append(got, p.def.Name)
			}
			if !slices.Equal(got, tt.want) || !slices.Equal(cfg.Handlers.Enabled, tt.want) || !slices.Equal(cfg.leftOut, tt.leftOut) {
				t.Errorf("running %v (handlers.enabled %v), left out %v; want %v, left out %v", got, cfg.Handlers.Enabled, cfg.leftOut, tt.want, tt.leftOut)
			}
		})
	}
}

// The outbox takes no event a configured broker would refuse: its bound
// is the least of theirs unless outbox.max_event_bytes sets it.
func TestMaxEventBytesFollowsTheBrokers(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    int
	}{
		{"RabbitMQ alone", nil, 16 << 20},
		{"Kafka analytics beside RabbitMQ", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true"}, 1<<20 - 1<<10},
		{"Kafka as the broker, its records raised", []string{"MOENDA_BROKER__KIND=kafka", "MOENDA_KAFKA__MAX_RECORD_BYTES=4194304"}, 4<<20 - 1<<10},
		{"RabbitMQ with Kafka records over its own limit", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true", "MOENDA_KAFKA__MAX_RECORD_BYTES=67108864"}, 16 << 20},
		{"set", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true", "MOENDA_OUTBOX__MAX_EVENT_BYTES=65536"}, 65536},
		{"memory", []string{"MOENDA_BROKER__KIND=memory", "MOENDA_HANDLERS__ENABLED=tarefas"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := load(t, Source{Env: "test", Environ: tt.environ})
			if got := cfg.maxEventBytes(); got != tt.want {
				t.Fatalf("maxEventBytes = %d, want %d", got, tt.want)
			}
		})
	}
}
