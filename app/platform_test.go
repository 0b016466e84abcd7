package app

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
)

// running is a platform serving on a free port for one test.
type running struct {
	*Platform
	base string
	logs *testenv.Buffer
	// stop stops the platform before the test ends; it runs once.
	stop func()
}

// start loads env's configuration with environ on top, serves on a free
// port, and stops when the test ends.
func start(t *testing.T, env string, environ ...string) running {
	t.Helper()
	return startWith(t, registry(t), configs.FS, env, environ...)
}

// startWith is start with the plugins of reg and the configuration files
// of files.
func startWith(t *testing.T, reg *handlers.Registry, files fs.FS, env string, environ ...string) running {
	t.Helper()
	cfg, err := Load(Source{Env: env, Files: files, Environ: append(environ, "MOENDA_HTTP__ADDR=127.0.0.1:0")}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return startResolved(t, cfg)
}

// startResolved serves cfg until the test ends.
func startResolved(t *testing.T, cfg *Resolved, opts ...Option) running {
	t.Helper()
	logs := &testenv.Buffer{}
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(logs, testenv.LogWriter()), &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	p, err := New(ctx, cfg, logger, opts...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	<-p.Running()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("platform: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return running{Platform: p, base: "http://" + p.Addr(), logs: logs, stop: stop}
}

// startAMQP starts the platform in the test environment on a fresh
// database and vhost.
func startAMQP(t *testing.T, environ ...string) (running, testenv.VHost) {
	t.Helper()
	return startAMQPWith(t, registry(t), environ...)
}

// startAMQPWith is startAMQP with the plugins of reg.
func startAMQPWith(t *testing.T, reg *handlers.Registry, environ ...string) (running, testenv.VHost) {
	t.Helper()
	db := testenv.EmptyPostgres(t) // serve applies the migrations itself
	vhost := testenv.RabbitMQ(t)
	return startWith(t, reg, configs.FS, "test", append(environ, "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL)...), vhost
}

// TestServeProcess is not a test: it is the serve process other tests
// start (startServe) and stop or kill. It serves the test environment
// with the shipped plugins, or the probe environment with the probe
// plugin when SERVE_PROBE is set, in the role SERVE_ROLE (all unless
// set), until SIGTERM; once its handlers consume, it writes its base URL
// to the file SERVE_READY.
func TestServeProcess(t *testing.T) {
	ready := testenv.ProcessEnv(t, "SERVE_READY", "run by the tests that start serve processes")
	var opts []Option
	if r := os.Getenv("SERVE_ROLE"); r != "" {
		role, err := ParseServeRole(r)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, WithRole(role))
	}
	src, reg := Source{Env: "test", Files: configs.FS}, registry(t)
	if os.Getenv("SERVE_PROBE") != "" {
		src, reg = Source{Env: "probe", Files: probeFiles(t)}, probeRegistry(t, &probeRuns{})
	}
	src.Environ = append(os.Environ(), "MOENDA_HTTP__ADDR=127.0.0.1:0")
	cfg, err := Load(src, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	p, err := New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-p.Running()
		tmp := ready + ".tmp"
		if os.WriteFile(tmp, []byte("http://"+p.Addr()), 0o600) == nil {
			_ = os.Rename(tmp, ready) // the starting test reads it whole
		}
	}()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// serveProcess is a serve process (TestServeProcess) started by
// startServe.
type serveProcess struct {
	cmd  *exec.Cmd
	base string
	logs *testenv.Buffer
	done chan struct{}
}

// startServe starts a serve process with environ on top of the test's,
// and waits until it serves; it is killed when the test ends.
func startServe(t *testing.T, environ ...string) *serveProcess {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "base")
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), environ...), "SERVE_READY="+ready)
	sp := &serveProcess{cmd: cmd, logs: &testenv.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(sp.logs, testenv.LogWriter()), io.MultiWriter(sp.logs, testenv.LogWriter())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(sp.done) }()
	t.Cleanup(func() { _ = sp.kill() })
	testenv.Eventually(t, 60*time.Second, "the serve process serving", func() bool {
		select {
		case <-sp.done:
			t.Fatalf("the serve process exited while starting:\n%s", sp.logs.String())
		default:
		}
		base, err := os.ReadFile(ready)
		sp.base = string(base)
		return err == nil
	})
	return sp
}

// kill ends the process with SIGKILL and returns once it is gone.
func (sp *serveProcess) kill() error {
	err := sp.cmd.Process.Kill()
	<-sp.done
	return err
}

// get answers a GET to the process: the status and the body.
func (sp *serveProcess) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(sp.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// call sends a JSON request and returns the status and decoded body.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %s", method, url, raw)
		}
	}
	return resp.StatusCode, out
}
