package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// startRole starts a serve process of role with environ on top of the
// test's, and waits until it serves; it is stopped when the test ends.
func startRole(t *testing.T, role ServeRole, environ ...string) *serveProcess {
	t.Helper()
	return startServe(t, append(environ, "SERVE_ROLE="+string(role))...)
}

// The Tarefas walk-through with its API, its handlers and its relay in
// three processes: the request commits in the api process, the relay
// process moves the event, and the worker process notifies. A logical
// relay streams the api's commits; a polling one is woken by the api's
// notifications, long before its idle poll (a minute here) comes round.
func TestTarefasAcrossThreeProcesses(t *testing.T) {
	for _, reader := range []string{"logical", "poll"} {
		t.Run(reader, func(t *testing.T) {
			tarefasAcrossThreeProcesses(t, "MOENDA_OUTBOX__READER="+reader, "MOENDA_OUTBOX__POLL_INTERVAL=1m")
		})
	}
}

func tarefasAcrossThreeProcesses(t *testing.T, environ ...string) {
	db := testenv.EmptyPostgres(t) // each process applies the migrations, under a lock
	vhost := testenv.RabbitMQ(t)
	env := append([]string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL}, environ...)
	api := startRole(t, ServeAPI, env...)
	worker := startRole(t, ServeWorker, env...)
	relay := startRole(t, ServeRelay, env...)
	time.Sleep(time.Second) // the relay has found the outbox empty, and waits

	title := tarefasFlow(t, api.base)
	want := "Tarefa '" + title + "' foi concluída pelo usuário 1"
	testenv.Eventually(t, 20*time.Second, "the worker's notification", func() bool { return strings.Contains(worker.logs.String(), want) })
	for name, rp := range map[string]*serveProcess{"api": api, "relay": relay} {
		if strings.Contains(rp.logs.String(), "foi concluída") {
			t.Errorf("the %s process ran a handler:\n%s", name, rp.logs.String())
		}
	}
	if !strings.Contains(relay.logs.String(), "outbox relay active") {
		t.Errorf("the relay process never relayed:\n%s", relay.logs.String())
	}
	if strings.Contains(api.logs.String()+worker.logs.String(), "outbox relay active") {
		t.Error("a process without the relay role relayed")
	}

	// Each role answers the health checks; only the api serves the API.
	for name, rp := range map[string]*serveProcess{"api": api, "worker": worker, "relay": relay} {
		if code, body := rp.get(t, "/readyz"); code != http.StatusOK {
			t.Errorf("%s: GET /readyz = %d %s", name, code, body)
		}
	}
	if _, body := api.get(t, "/readyz"); strings.Contains(body, `"broker"`) {
		t.Errorf("the api process checks a broker it does not use: %s", body)
	}
	if code, _ := worker.get(t, "/v1/catalog"); code != http.StatusNotFound {
		t.Errorf("worker: GET /v1/catalog = %d, want 404", code)
	}
	if code, _ := api.get(t, "/v1/catalog"); code != http.StatusOK {
		t.Errorf("api: GET /v1/catalog = %d, want 200", code)
	}
	// Republishing parked rows takes the relays' publishers.
	if code, body := call(t, "POST", api.base+"/v1/admin/outbox/republish", ""); code != http.StatusConflict || !strings.Contains(fmt.Sprint(body["error"]), "moenda outbox republish") {
		t.Errorf("api: POST /v1/admin/outbox/republish = %d %v, want 409 naming the command", code, body)
	}
	if code, body := call(t, "POST", relay.base+"/v1/admin/outbox/republish", ""); code != http.StatusOK {
		t.Errorf("relay: POST /v1/admin/outbox/republish = %d %v, want 200", code, body)
	}

	// SIGTERM: each exits cleanly, and says so.
	for name, rp := range map[string]*serveProcess{"api": api, "worker": worker, "relay": relay} {
		if err := rp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-rp.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the %s process did not exit within 30 s of SIGTERM", name)
		}
		if rp.cmd.ProcessState.ExitCode() != 0 || !strings.Contains(rp.logs.String(), "moenda stopped") {
			t.Errorf("the %s process exited with %d:\n%s", name, rp.cmd.ProcessState.ExitCode(), rp.logs.String())
		}
	}
}

func TestServeRoleIsCheckedBeforeConnecting(t *testing.T) {
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"serve", "--role", "boss"}, nil, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), `serve --role "boss": choose one of all, api, worker, relay`) {
		t.Fatalf("serve --role boss: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := Main(context.Background(), []string{"--env", "memory", "serve", "--role", "worker"}, nil, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "broker.kind memory keeps events inside one process") {
		t.Fatalf("memory serve --role worker: exit %d, %q", code, stderr.String())
	}
}
