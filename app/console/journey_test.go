package console

import (
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/redrive"
)

// A journey's timeline runs from the commit through the relay groups,
// the failure and its re-drive, to each queue's handling, in time order,
// each line marked by how it went.
func TestJourneyTimeline(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	handled := at.Add(40 * time.Second)
	j := journey{EventID: "e1", EventName: "tarefa.concluida.v1",
		Outbox: &outbox.Passage{CommittedAt: at, Groups: []outbox.Relayed{{Group: "moenda-relay", Passed: true}, {Group: "moenda-relay-kafka", Parked: "no route"}}},
		Failures: []failures.Failure{{ID: 7, FailedQueue: "notificacoes.tarefas-concluidas", Queue: "notificacoes.tarefas-concluidas.dlq", Reason: "transient",
			Error: "smtp down", Attempts: 4, Status: failures.Resolved, FirstFailureAt: at.Add(time.Second), LastFailureAt: at.Add(31 * time.Second)}},
		Redrives: []redrive.EventItem{{RedriveID: 3, Item: redrive.Item{Queue: "notificacoes.tarefas-concluidas", State: redrive.Handled, SentAt: at.Add(35 * time.Second)}}},
	}
	j.Queues = []queueVisit{{Queue: "notificacoes.tarefas-concluidas", Handled: true, HandledAt: &handled}}
	var lines []string
	for _, m := range j.timeline() {
		lines = append(lines, m.Kind+" "+m.Where+": "+m.What)
	}
	want := []string{
		"ok outbox: committed",
		"ok relay moenda-relay: relayed",
		"fail relay moenda-relay-kafka: parked: no route",
		"fail notificacoes.tarefas-concluidas: failed (transient): smtp down",
		"fail notificacoes.tarefas-concluidas.dlq: dead-lettered after 4 attempt(s); now resolved",
		"ok notificacoes.tarefas-concluidas: re-drive 3: handled",
		"ok notificacoes.tarefas-concluidas: handled",
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("the timeline:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
