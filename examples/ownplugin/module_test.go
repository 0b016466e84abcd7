package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
)

// example are this folder's files that make the module, as the README
// shows them.
var example = []string{"main.go", "migrations/00001_notes.sql"}

// The README's "Your own plugins" shows this example as it is.
func TestReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Your own plugins\n")
	if !ok {
		t.Fatal(`README.md has no "## Your own plugins" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, name := range example {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(section, string(text)) {
			t.Errorf("README's Your own plugins does not show examples/ownplugin/%s as it is", name)
		}
	}
}

// A team's module outside moenda's tree, with moenda replaced by this
// checkout, builds its own binary with its own plugin, and that binary
// serves it in memory and on PostgreSQL and RabbitMQ.
func TestAModuleOfItsOwn(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command on PATH to build a module of its own")
	}
	began := time.Now()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range example {
		copyFile(t, name, filepath.Join(dir, name))
	}
	copyFile(t, filepath.Join(root, "go.sum"), filepath.Join(dir, "go.sum"))
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(goMod)
	write(t, filepath.Join(dir, "go.mod"), "module example.com/notes\n\n"+string(goLine)+"\n\n"+
		"require github.com/moenda/moenda v0.0.0\n\nreplace github.com/moenda/moenda => "+root+"\n")
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		// Built as .ci/test builds moenda before the tests, so that
		// moenda's packages, a dependency here, are not compiled again:
		// without -trimpath a package is known by its directory, the
		// same in both builds, where -trimpath would name it by its
		// module's version, which differs.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	goCmd("mod", "tidy")
	goCmd("build", "-o", "notes", ".")
	t.Logf("module made and built in %s", time.Since(began).Round(time.Millisecond))

	bin := filepath.Join(dir, "notes")
	t.Run("memory", func(t *testing.T) {
		checkNotes(t, serve(t, bin, "memory"))
	})
	t.Run("postgres and rabbitmq", func(t *testing.T) {
		db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
		// The polling reader, as in the test environment: creating a
		// replication slot waits for every write transaction open on the
		// server, which other tests hold for seconds on purpose.
		checkNotes(t, serve(t, bin, "local", "MOENDA_POSTGRES__URL="+db.URL, "MOENDA_AMQP__URL="+vhost.URL, "MOENDA_OUTBOX__READER=poll"))
	})
}

// checkNotes posts a note and waits for its handler to see it.
func checkNotes(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Post(base+"/notes", "application/json", strings.NewReader(`{"id": "n1", "text": "water the plants"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /notes = %s", resp.Status)
	}
	testenv.Eventually(t, 10*time.Second, "the note seen by its handler", func() bool {
		resp, err := http.Get(base + "/notes/n1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var n note
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&n) == nil && n.Seen && n.Text == "water the plants"
	})
}

// serve runs `bin serve` in env and returns its base URL once it serves;
// the process is stopped when the test ends.
func serve(t *testing.T, bin, env string, environ ...string) string {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--env", env)
	cmd.Env = append(append(os.Environ(), environ...), "MOENDA_HTTP__ADDR=127.0.0.1:0", "MOENDA_LOG__LEVEL=info")
	logs := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("serve --env %s:\n%s", env, logs.String())
		}
	})
	serving := regexp.MustCompile(`msg="moenda serving".* addr=(\S+)`)
	var base string
	testenv.Eventually(t, 30*time.Second, "serve --env "+env+" serving", func() bool {
		select {
		case <-done:
			t.Fatalf("serve --env %s exited:\n%s", env, logs.String())
		default:
		}
		if m := serving.FindStringSubmatch(logs.String()); m != nil {
			base = "http://" + m[1]
		}
		return base != ""
	})
	return base
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	write(t, to, string(data))
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
