package testenv

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// ProcessEnv is for a test that is not a test but the body of a process
// other tests start (StartProcess) with env set: it returns env's value,
// and skips the test, saying what starts it (by), when it runs on its own.
func ProcessEnv(t testing.TB, env, by string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Skip(by)
	}
	return v
}

// processLogTail is how much of a started process's log a failed test
// prints: its last lines are the ones that say what it was doing.
const processLogTail = 64 << 10

// StartProcess starts this test binary again to run test alone, with env
// added to its environment; the process is killed when the test ends, if
// it has not ended before. The process logs at debug level: its output
// goes to LogWriter, and its last 64 KiB are printed if the test fails,
// since a process killed or stuck in CI leaves no other trace.
func StartProcess(t testing.TB, test string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), env...), "TEST_LOG=1")
	out := &tail{max: processLogTail}
	w := io.MultiWriter(LogWriter(), out)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", test, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("testenv: the last of %s's log (pid %d):\n%s", test, cmd.Process.Pid, out.String())
		}
	})
	return cmd
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
