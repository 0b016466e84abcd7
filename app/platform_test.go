package app

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

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
	db := testenv.EmptyPostgres(t) // serve applies the migrations itself
	vhost := testenv.RabbitMQ(t)
	return start(t, "test", append(environ, "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL)...), vhost
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
