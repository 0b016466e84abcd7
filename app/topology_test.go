package app

import (
	"context"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/moenda/moenda/adapters/amqp"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
)

// argRE reads one argument as rabbitmqctl prints it: {"name","text"} or {"name",123}.
var argRE = regexp.MustCompile(`\{"([^"]+)",(?:"([^"]*)"|([^}]*))\}`)

// declared reads what RabbitMQ holds in vhost, in topology print's format.
func declared(t *testing.T, vhost string) []string {
	t.Helper()
	args := func(raw string) string {
		var kv []string
		for _, m := range argRE.FindAllStringSubmatch(raw, -1) {
			v := m[2] + m[3]
			if v == "[]" { // an empty binary, printed as an Erlang list
				v = ""
			}
			kv = append(kv, " "+m[1]+"="+v)
		}
		sort.Strings(kv)
		return strings.Join(kv, "")
	}
	rows := func(cmd ...string) [][]string {
		out := testenv.Rabbitmqctl(t, append(cmd, "-p", vhost, "--no-table-headers")...)
		var rs [][]string
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if line != "" {
				rs = append(rs, strings.Split(line, "\t"))
			}
		}
		return rs
	}
	var lines []string
	for _, r := range rows("list_exchanges", "name", "type", "durable", "arguments") {
		if r[0] == "" || strings.HasPrefix(r[0], "amq.") {
			continue // the broker's own exchanges
		}
		if r[2] != "true" {
			t.Errorf("exchange %s is not durable", r[0])
		}
		lines = append(lines, "exchange "+r[0]+" type="+r[1]+" durable"+args(r[3]))
	}
	for _, r := range rows("list_queues", "name", "durable", "exclusive", "arguments") {
		// A quorum queue is never exclusive: rabbitmqctl leaves the column empty.
		if r[1] != "true" || (r[2] != "false" && r[2] != "") {
			t.Errorf("queue %s: durable=%s exclusive=%s", r[0], r[1], r[2])
		}
		lines = append(lines, "queue "+r[0]+" durable"+args(r[3]))
	}
	for _, r := range rows("list_bindings", "source_name", "destination_name", "routing_key") {
		if r[0] == "" {
			continue // the default exchange's implicit bindings
		}
		lines = append(lines, "binding "+r[0]+" -> "+r[1]+` key="`+r[2]+`"`)
	}
	sort.Strings(lines)
	return lines
}

func TestDeclaredTopologyMatchesTopologyPrint(t *testing.T) {
	p, vhost := startAMQP(t)
	code, printed, stderr := run(t, []string{"MOENDA_AMQP__URL=" + vhost.URL}, "--env", "test", "topology", "print")
	if code != 0 {
		t.Fatalf("topology print: %s", stderr)
	}
	want := strings.Split(strings.TrimRight(printed, "\n"), "\n")
	sort.Strings(want)
	got := declared(t, vhost.Name)
	if !slices.Equal(got, want) {
		t.Fatalf("RabbitMQ holds:\n%s\n\ntopology print says:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Declaring again at the next start changes nothing.
	if err := amqp.Declare(context.Background(), []string{vhost.URL}, p.top); err != nil {
		t.Fatalf("second declaration: %v", err)
	}
}

func TestConflictingQueueIsAClearError(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	ch := testenv.Channel(t, vhost.URL)
	// Someone declared the queue by hand, without its dead-letter exchange.
	if _, err := ch.QueueDeclare("notificacoes.tarefas-concluidas", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	reg := registry(t)
	cfg, err := Load(Source{Env: "test", Files: configs.FS, Environ: []string{"MOENDA_AMQP__URL=" + vhost.URL}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	top, err := cfg.BuildTopology()
	if err != nil {
		t.Fatal(err)
	}
	err = amqp.Declare(context.Background(), []string{vhost.URL}, top)
	if err == nil {
		t.Fatal("a conflicting queue was accepted")
	}
	for _, want := range []string{`queue "notificacoes.tarefas-concluidas" already exists with other arguments`, "x-dead-letter-exchange"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}
