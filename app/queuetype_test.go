package app

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
)

// forEachQueueType runs test once with every queue type, each in a
// subtest named after it, on a probe stack set to declare its queues of
// that type.
func forEachQueueType(t *testing.T, test func(t *testing.T, s *probeStack, typ string)) {
	for _, typ := range topology.QueueTypes {
		t.Run(typ, func(t *testing.T) {
			s := newProbeStack(t)
			s.extra = append(s.extra, "MOENDA_TOPOLOGY__QUEUE_TYPE="+typ)
			test(t, s, typ)
		})
	}
}

// requireQueueTypes fails unless every queue in vhost is of type typ, as
// RabbitMQ holds it: a run meant for quorum queues that declared classic
// ones must not pass.
func requireQueueTypes(t *testing.T, vhost, typ string) {
	t.Helper()
	out := testenv.Rabbitmqctl(t, "list_queues", "-p", vhost, "name", "type", "--no-table-headers")
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, got, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		n++
		if got != typ {
			t.Errorf("queue %s is %s, want %s", name, got, typ)
		}
	}
	if n == 0 {
		t.Fatalf("no queue in vhost %s", vhost)
	}
}

// With topology.queue_type quorum, every queue of the shipped test
// configuration is declared quorum, as topology print says, and the
// platform consumes them.
func TestQuorumTopologyMatchesTopologyPrint(t *testing.T) {
	setting := "MOENDA_TOPOLOGY__QUEUE_TYPE=quorum"
	p, vhost := startAMQP(t, setting)
	code, printed, stderr := run(t, []string{"MOENDA_AMQP__URL=" + vhost.URL, setting}, "--env", "test", "topology", "print")
	if code != 0 {
		t.Fatalf("topology print: %s", stderr)
	}
	want := strings.Split(strings.TrimRight(printed, "\n"), "\n")
	sort.Strings(want)
	if got := declared(t, vhost.Name); !slices.Equal(got, want) {
		t.Fatalf("RabbitMQ holds:\n%s\n\ntopology print says:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	requireQueueTypes(t, vhost.Name, topology.Quorum)
	for _, q := range p.top.Queues {
		if p.top.QueueType(q.Name) != topology.Quorum {
			t.Errorf("the platform's topology has %s %s", p.top.QueueType(q.Name), q.Name)
		}
	}
	tarefasFlow(t, p.base)
	want1 := "Tarefa 'Escrever relatório' foi concluída pelo usuário 1"
	testenv.Eventually(t, 10*time.Second, "the notification through a quorum queue", func() bool { return strings.Contains(p.logs.String(), want1) })
}

// The memory broker emulates the topology whatever the queues' type: the
// Tarefas walk-through runs with quorum queues configured.
func TestQuorumSettingInMemory(t *testing.T) {
	p := start(t, "memory", "MOENDA_TOPOLOGY__QUEUE_TYPE=quorum")
	if got := p.top.QueueType("notificacoes.tarefas-concluidas"); got != topology.Quorum {
		t.Fatalf("the queue's type is %q", got)
	}
	tarefasFlow(t, p.base)
	want := "Tarefa 'Escrever relatório' foi concluída pelo usuário 1"
	testenv.Eventually(t, 5*time.Second, "the notification", func() bool { return strings.Contains(p.logs.String(), want) })
}
