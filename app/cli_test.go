package app

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/app/faults"
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
		{"unknown flag", nil, []string{"serve", "--fast"}, 2, "moenda: unknown flag: --fast"},
		{"unknown subcommand", nil, []string{"outbox", "purge"}, 2, `moenda: unknown command "purge" for "moenda outbox"`},
		{"group without its command", nil, []string{"migrate"}, 2, "moenda: moenda migrate needs a command: up"},
		{"argument to a command that takes none", nil, []string{"health", "now"}, 2, `moenda: unknown command "now" for "moenda health"`},
		{"faults against another machine", []string{"MOENDA_POSTGRES__URL=postgres://postgres@db.example.com:5432/moenda"}, []string{"faults", "--only", "T03"}, 1,
			"moenda: faults: refuses to run against anything but this machine: postgres.url and amqp.url must name 127.0.0.1"},
		{"faults with an unknown case", nil, []string{"faults", "--only", "T99"}, 1, `moenda: faults: no case "T99"; the cases are T01 to T36, W01 to W02`},
		{"faults with an unknown flag", nil, []string{"faults", "--fast"}, 2, "moenda: unknown flag: --fast"},
		{"replay without a plugin", nil, []string{"replay", "--from", "earliest"}, 2, "moenda: replay takes one PLUGIN, got 0 arguments"},
		{"replay without --from", nil, []string{"replay", "analytics"}, 2, `moenda: required flag(s) "from" not set`},
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
			if tt.code == 2 && !strings.HasSuffix(stderr, " --help\"\n") {
				t.Errorf("a usage error does not end pointing at the command's help:\n%s", stderr)
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
		{"default is local", nil, []string{"config", "print"}, "log.level = debug"},
		{"MOENDA_ENV", []string{"MOENDA_ENV=memory"}, []string{"config", "print"}, "broker.kind = memory"},
		{"--env wins over MOENDA_ENV", []string{"MOENDA_ENV=memory"}, []string{"--env", "compose", "config", "print"}, "postgres.url = postgres://moenda@postgres:5432/moenda"},
		{"--env after the command", nil, []string{"config", "print", "--env=memory"}, "broker.kind = memory"},
		{"--env between the words of the command", nil, []string{"config", "--env", "memory", "print"}, "broker.kind = memory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tt.environ, tt.args...)
			if code != 0 || !strings.Contains(stdout, tt.want) {
				t.Fatalf("exit %d, stdout lacks %q:\n%s%s", code, tt.want, stdout, stderr)
			}
		})
	}
}

// faults --list names the cases a run would run, one a line, and runs
// none: CI runs the quick set's cases side by side from it.
func TestFaultsListRunsNothing(t *testing.T) {
	away := []string{"MOENDA_POSTGRES__URL=postgres://nobody@127.0.0.1:1/x", "MOENDA_AMQP__URL=amqp://nobody@127.0.0.1:1/"}
	code, stdout, stderr := run(t, away, "faults", "--quick", "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	quick, err := faults.Selected(true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		id, title, _ := strings.Cut(line, "\t")
		if title == "" {
			t.Errorf("line %q has no title", line)
		}
		ids = append(ids, id)
	}
	if len(quick) == 0 || strings.Join(ids, " ") != strings.Join(quick, " ") {
		t.Fatalf("faults --quick --list names %v; the quick set is %v", ids, quick)
	}
	if _, stdout, _ := run(t, away, "faults", "--list", "--only", "t31"); !strings.HasPrefix(stdout, "T31\tquorum-queue leader node killed") {
		t.Fatalf("faults --list --only t31 = %q", stdout)
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
	// environment runs.
	files, err := filepath.Glob("../migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	cfg := load(t, Source{Env: "test", Environ: environ})
	for _, set := range cfg.migrations() {
		plugin, err := fs.Glob(set.Files, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, plugin...)
	}
	if code, stdout, stderr := run(t, environ, "--env", "test", "migrate", "up"); code != 0 || !strings.Contains(stdout, fmt.Sprintf("%d applied", len(files))) {
		t.Fatalf("first migrate up: exit %d, want %d applied\n%s%s", code, len(files), stdout, stderr)
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

// TestKeptSectionsStayTheSame: BENCHMARKS.md rewritten by each full run
// keeps its hand-written sections as they were, blank lines included.
func TestKeptSectionsStayTheSame(t *testing.T) {
	doc := "# Benchmarks\n\n## Results\n\nold rows\n\n" + scaleHeading + "\n\nscale\n\n\n\n## Design measurements\n\nby hand\n"
	once := "# Benchmarks\n\n## Results\n\nnew rows\n" + keptSections(doc)
	want := "# Benchmarks\n\n## Results\n\nnew rows\n\n" + scaleHeading + "\n\nscale\n\n## Design measurements\n\nby hand\n"
	if once != want {
		t.Fatalf("rewritten once:\n%q\nwant\n%q", once, want)
	}
	if twice := "# Benchmarks\n\n## Results\n\nnew rows\n" + keptSections(once); twice != once {
		t.Fatalf("rewritten twice:\n%q\nonce:\n%q", twice, once)
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

// A bad setting, to show that help and completion never load the
// configuration.
var badConfig = []string{"MOENDA_HTTP__ADR=x"}

func TestConfigFlagsGoAnywhereAndRepeat(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.yaml"), filepath.Join(dir, "second.yaml")
	if err := os.WriteFile(first, []byte("log: {level: warn}\nhttp: {addr: 127.0.0.1:9001}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(second, []byte("http: {addr: 127.0.0.1:9002}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, nil, "config", "--config", first, "print", "--env", "memory", "--config="+second)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"broker.kind = memory", "log.level = warn", "http.addr = 127.0.0.1:9002"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config print lacks %q:\n%s", want, stdout)
		}
	}
}

// commandTree walks the commands cobra knows, cobra's own help aside.
func commandTree() []*cobra.Command {
	var out []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		out = append(out, c)
		for _, sub := range c.Commands() {
			if sub.Name() != "help" {
				walk(sub)
			}
		}
	}
	walk((&cli{}).commands())
	return out
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commandTree() {
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(strings.Join(append([]string{"moenda"}, path...), " "), func(t *testing.T) {
			code, stdout, stderr := run(t, badConfig, append(path, "--help")...)
			if code != 0 || stderr != "" {
				t.Fatalf("--help: exit %d\n%s", code, stderr)
			}
			about := c.Long
			if about == "" {
				about = c.Short
			}
			for _, want := range []string{"Usage:\n  " + c.UseLine(), about, "--env ENV"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("--help lacks %q:\n%s", want, stdout)
				}
			}
			if c.Short == "" {
				t.Error("no short description")
			}
		})
	}
}

// The README's "## Commands" block lists what a user can run: every
// command cobra runs (groups only hold them), and nothing else.
func TestReadmeListsTheCommands(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := sectionOf(string(readme), "## Commands")
	if section == "" {
		t.Fatal(`README.md has no "## Commands" section`)
	}
	_, block, _ := strings.Cut(section, "```\n")
	block, _, _ = strings.Cut(block, "```")
	listed := map[string]bool{}
	// A command's line starts with two spaces, then its words, then its
	// arguments (upper case) or flags, then two spaces and what it does.
	word := regexp.MustCompile(`^[a-z][a-z-]*$`)
	for _, line := range strings.Split(block, "\n") {
		usage, ok := strings.CutPrefix(line, "  ")
		if !ok || strings.HasPrefix(usage, " ") {
			continue
		}
		usage, _, _ = strings.Cut(usage, "  ")
		var words []string
		for _, w := range strings.Fields(usage) {
			if !word.MatchString(w) {
				break
			}
			words = append(words, w)
		}
		if len(words) > 0 {
			listed[strings.Join(words, " ")] = true
		}
	}
	known := map[string]bool{}
	for _, c := range commandTree() {
		if c.HasParent() && c.Annotations[groupAnnotation] == "" {
			known[strings.TrimPrefix(c.CommandPath(), "moenda ")] = true
		}
	}
	for name := range known {
		if !listed[name] {
			t.Errorf("README's Commands block does not list %q", name)
		}
	}
	for name := range listed {
		if !known[name] {
			t.Errorf("README's Commands block lists %q, which is no command", name)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "# bash completion V2 for moenda",
		"zsh":  "#compdef moenda",
		"fish": "complete -c moenda",
	} {
		t.Run(shell, func(t *testing.T) {
			code, stdout, stderr := run(t, badConfig, "completion", shell)
			if code != 0 || !strings.Contains(stdout, want) || len(stdout) < 1000 {
				t.Fatalf("completion %s: exit %d, %d bytes, want %q in it\n%s", shell, code, len(stdout), want, stderr)
			}
		})
	}
	if code, _, stderr := run(t, nil, "completion", "tcsh"); code != 2 || !strings.HasPrefix(stderr, `moenda: invalid argument "tcsh" for "moenda completion"`) {
		t.Errorf("completion tcsh: exit %d\n%s", code, stderr)
	}
}
