package app

import (
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// The Tarefas flow over RabbitMQ with the relay streaming the outbox: the
// notification arrives, /readyz lists the slot, `moenda outbox slots`
// lists it, and refuses to drop it while the relay streams.
func TestTarefasOverTheLogicalReaderAlone(t *testing.T) {
	testenv.PostgresAlone(t)
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	environ := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL, "MOENDA_OUTBOX__READER=logical"}
	p := start(t, "test", environ...)
	tarefasFlow(t, p.base)
	want := "Tarefa 'Escrever relatório' foi concluída pelo usuário 1"
	testenv.Eventually(t, 10*time.Second, "the notification", func() bool { return strings.Contains(p.logs.String(), want) })

	code, body := call(t, "GET", p.base+"/readyz", "")
	slots, _ := body["outbox_slots"].([]any)
	if code != 200 || len(slots) != 1 {
		t.Fatalf("GET /readyz = %d %v, want one slot", code, body)
	}
	slot := slots[0].(map[string]any)
	if slot["consumer_group"] != "moenda-relay" || slot["active"] != true || slot["wal_status"] != "reserved" {
		t.Fatalf("the slot in /readyz: %v", slot)
	}
	name := slot["name"].(string)

	code, out, errOut := run(t, environ, "--env", "test", "outbox", "slots")
	if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, "moenda-relay") {
		t.Fatalf("outbox slots = %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = run(t, environ, "--env", "test", "outbox", "slots", "--drop", name)
	if code != 1 || !strings.Contains(errOut, "in use by a running relay") {
		t.Fatalf("outbox slots --drop of the streamed slot = %d %s", code, errOut)
	}
	code, _, errOut = run(t, environ, "--env", "test", "outbox", "slots", "--drop", "moenda_no_such_slot")
	if code != 1 || !strings.Contains(errOut, "there is no slot moenda_no_such_slot") {
		t.Fatalf("outbox slots --drop of no slot = %d %s", code, errOut)
	}

	p.stop()
	testenv.Eventually(t, 10*time.Second, "the slot dropped once the relay stopped", func() bool {
		code, out, _ := run(t, environ, "--env", "test", "outbox", "slots", "--drop", name)
		return code == 0 && strings.Contains(out, "dropped "+name)
	})
	code, out, _ = run(t, environ, "--env", "test", "outbox", "slots")
	if code != 0 || !strings.Contains(out, "no replication slots") {
		t.Fatalf("outbox slots after the drop = %d %s", code, out)
	}
}

func TestOutboxSlotsUsage(t *testing.T) {
	for _, args := range [][]string{{"--drop"}, {"--drop", ""}} {
		code, _, errOut := run(t, nil, append([]string{"outbox", "slots"}, args...)...)
		if code != 2 || !strings.Contains(errOut, "--drop") || !strings.HasSuffix(errOut, "moenda: see \"moenda outbox slots --help\"\n") {
			t.Fatalf("outbox slots %q = %d %s", args, code, errOut)
		}
	}
}
