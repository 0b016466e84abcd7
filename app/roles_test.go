package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
)

// TestServeRoleProcess is not a test: it is one serve process of the role
// tests, running the role ROLE_TEST_ROLE in the test environment until
// SIGTERM. Once it serves, it writes its HTTP address to the file
// ROLE_TEST_READY.
func TestServeRoleProcess(t *testing.T) {
	ready := testenv.ProcessEnv(t, "ROLE_TEST_READY", "run by the role tests")
	role, err := ParseServeRole(os.Getenv("ROLE_TEST_ROLE"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Source{Env: "test", Files: configs.FS, Environ: os.Environ()}, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	p, err := New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), WithRole(role))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-p.Running()
		tmp := ready + ".tmp"
		if os.WriteFile(tmp, []byte(p.Addr()), 0o600) == nil {
			_ = os.Rename(tmp, ready)
		}
	}()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// roleProcess is a serve process of one role, started by startRole.
type roleProcess struct {
	cmd  *exec.Cmd
	base string
	logs *testenv.Buffer
	done chan struct{}
}

// startRole starts a serve process of role with environ on top of the
// test's, and waits until it serves; it is stopped when the test ends.
func startRole(t *testing.T, role ServeRole, environ ...string) *roleProcess {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeRoleProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), environ...), "MOENDA_HTTP__ADDR=127.0.0.1:0", "ROLE_TEST_ROLE="+string(role), "ROLE_TEST_READY="+ready)
	rp := &roleProcess{cmd: cmd, logs: &testenv.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(rp.logs, testenv.LogWriter()), io.MultiWriter(rp.logs, testenv.LogWriter())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(rp.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-rp.done })
	testenv.Eventually(t, 60*time.Second, string(role)+" serving", func() bool {
		select {
		case <-rp.done:
			t.Fatalf("the %s process exited while starting:\n%s", role, rp.logs.String())
		default:
		}
		addr, err := os.ReadFile(ready)
		rp.base = "http://" + string(addr)
		return err == nil
	})
	return rp
}

// get answers a GET to the process: the status and the body.
func (rp *roleProcess) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(rp.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
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
	for name, rp := range map[string]*roleProcess{"api": api, "relay": relay} {
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
	for name, rp := range map[string]*roleProcess{"api": api, "worker": worker, "relay": relay} {
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
	for name, rp := range map[string]*roleProcess{"api": api, "worker": worker, "relay": relay} {
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
