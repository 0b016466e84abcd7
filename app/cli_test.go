package app

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moenda/moenda/adapters/testenv"
)

// run runs the command line as a user would and returns its exit code,
// stdout and stderr.
func run(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := Main(context.Background(), args, environ, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestMainFailsWithOneClearLine(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		args    []string
		code    int
		want    string
	}{
		{"unknown config key", []string{"MOENDA_HTTP__ADR=x"}, []string{"serve"}, 1, "moenda: config: unknown key http.adr; check its spelling"},
		{"bad broker kind", []string{"MOENDA_BROKER__KIND=rabbit"}, []string{"serve"}, 1, `moenda: broker.kind "rabbit" must be one of amqp, kafka, memory`},
		{"unreachable PostgreSQL", []string{"MOENDA_POSTGRES__URL=postgres://postgres@127.0.0.1:1/moenda?connect_timeout=2"}, []string{"--env", "test", "serve"}, 1, "moenda: postgres: cannot reach 127.0.0.1:1/moenda (check postgres.url or MOENDA_POSTGRES__URL, and that PostgreSQL is running)"},
		{"unknown environment", nil, []string{"--env", "prod", "serve"}, 1, `moenda: config: no environment "prod"`},
		{"unknown command", nil, []string{"deploy"}, 2, `moenda: unknown command "deploy"`},
		{"no command", nil, nil, 2, "moenda: no command given"},
		{"flag after the command", nil, []string{"serve", "--env", "memory"}, 2, "moenda: flags go before the command: moenda --env ENV serve"},
		{"faults against another machine", []string{"MOENDA_POSTGRES__URL=postgres://postgres@db.example.com:5432/moenda"}, []string{"faults", "--only", "T03"}, 1,
			"moenda: faults: refuses to run against anything but this machine: postgres.url and amqp.url must name 127.0.0.1"},
		{"faults with an unknown case", nil, []string{"faults", "--only", "T31"}, 1, `moenda: faults: no case "T31"; the cases are T01 to T30`},
		{"faults with an unknown flag", nil, []string{"faults", "--fast"}, 2, "moenda: usage: moenda faults [--quick]"},
		{"replay without a plugin", nil, []string{"replay"}, 2, "moenda: usage: moenda replay PLUGIN --from earliest|TIME"},
		{"replay from no time", nil, []string{"replay", "analytics", "--from", "yesterday"}, 1, `moenda: replay: --from must be earliest or an RFC 3339 time like 2026-11-30T00:00:00Z, got "yesterday"`},
		{"replay without Kafka", nil, []string{"replay", "analytics", "--from", "earliest"}, 1, "moenda: replay reads the event log in Kafka, which this environment does not use: set analytics.kafka.enabled: true"},
		{"replay of a plugin that is not replayable", []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true"}, []string{"replay", "tarefas", "--from", "earliest"}, 1, `moenda: replay: "tarefas" is not an enabled replayable plugin (these are: analytics)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, tt.environ, tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			first, _, _ := strings.Cut(stderr, "\n")
			if !strings.HasPrefix(first, tt.want) {
				t.Errorf("first line %q, want it to start with %q", first, tt.want)
			}
			if tt.code == 1 && strings.Count(stderr, "\n") != 1 {
				t.Errorf("want exactly one line, got:\n%s", stderr)
			}
		})
	}
}

func TestMainEnvironmentChoice(t *testing.T) {
	for _, tt := range []struct {
		name    string
		environ []string
		args    []string
		want    string
	}{
		{"default is local", nil, nil, "log.level = debug"},
		{"MOENDA_ENV", []string{"MOENDA_ENV=memory"}, nil, "broker.kind = memory"},
		{"--env wins over MOENDA_ENV", []string{"MOENDA_ENV=memory"}, []string{"--env", "compose"}, "postgres.url = postgres://moenda@postgres:5432/moenda"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tt.environ, append(tt.args, "config", "print")...)
			if code != 0 || !strings.Contains(stdout, tt.want) {
				t.Fatalf("exit %d, stdout lacks %q:\n%s%s", code, tt.want, stdout, stderr)
			}
		})
	}
}

func TestTopologyPrintNeedsNoService(t *testing.T) {
	code, stdout, stderr := run(t, []string{"MOENDA_POSTGRES__URL=postgres://nobody@127.0.0.1:1/x", "MOENDA_AMQP__URL=amqp://nobody@127.0.0.1:1/"}, "topology", "print")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"exchange eventos.dominio type=topic durable",
		"queue notificacoes.tarefas-concluidas durable x-dead-letter-exchange=notificacoes.dlx",
		"queue notificacoes.tarefas-concluidas.dlq durable",
		`binding eventos.dominio -> notificacoes.tarefas-concluidas key="tarefa.concluida"`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("topology print lacks %q:\n%s", want, stdout)
		}
	}
	// analytics.metricas is RabbitMQ's unless it reads Kafka.
	if !strings.Contains(stdout, "queue analytics.metricas durable") {
		t.Errorf("topology print lacks analytics.metricas:\n%s", stdout)
	}
	_, stdout, _ = run(t, []string{"MOENDA_ANALYTICS__KAFKA__ENABLED=true"}, "topology", "print")
	if strings.Contains(stdout, "analytics.metricas") || !strings.Contains(stdout, "queue notificacoes.tarefas-concluidas durable") {
		t.Errorf("with analytics on Kafka, topology print still declares analytics.metricas on RabbitMQ, or lost the rest:\n%s", stdout)
	}
}

func TestMigrateUpTwiceIsANoOp(t *testing.T) {
	environ := []string{"MOENDA_POSTGRES__URL=" + testenv.EmptyPostgres(t).URL}
	// The platform's migrations, and those of the plugins the test
	// environment enables (tarefas).
	platform, err := filepath.Glob("../migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	plugins, err := filepath.Glob("../handlers/*/migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	files := append(platform, plugins...)
	if code, stdout, stderr := run(t, environ, "--env", "test", "migrate", "up"); code != 0 || !strings.Contains(stdout, fmt.Sprintf("%d applied", len(files))) {
		t.Fatalf("first migrate up: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, environ, "--env", "test", "migrate", "up"); code != 0 || !strings.Contains(stdout, "0 applied") {
		t.Fatalf("second migrate up: exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestMigrateUpCreatesAMissingDatabase(t *testing.T) {
	_, name, dbURL := testenv.MissingDatabase(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + dbURL, "MOENDA_LOG__LEVEL=info"}
	code, stdout, stderr := run(t, environ, "--env", "test", "migrate", "up")
	if code != 0 || !strings.Contains(stdout, "applied, schema up to date") {
		t.Fatalf("migrate up on a missing database: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "created the database") || !strings.Contains(stderr, name) {
		t.Errorf("no log line saying the database was created:\n%s", stderr)
	}
}

func TestReplaceSectionKeepsTheRest(t *testing.T) {
	doc := "# Benchmarks\n\n## Results\n\nrows\n"
	once := replaceSection(doc, scaleHeading, "## Scale-out\n\nfirst\n")
	if once != doc+"\n## Scale-out\n\nfirst\n" {
		t.Fatalf("appended:\n%q", once)
	}
	withNext := once + "\n## Later\n\nkept\n"
	twice := replaceSection(withNext, scaleHeading, "## Scale-out\n\nsecond\n")
	if twice != doc+"\n## Scale-out\n\nsecond\n\n## Later\n\nkept\n" {
		t.Fatalf("replaced:\n%q", twice)
	}
	if got := sectionOf(twice, scaleHeading); got != "## Scale-out\n\nsecond\n\n" {
		t.Fatalf("sectionOf = %q", got)
	}
	if got := sectionOf(doc, scaleHeading); got != "" {
		t.Fatalf("sectionOf a document without it = %q", got)
	}
}
