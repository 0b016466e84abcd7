package testenv

import (
	"os"
	"os/exec"
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

// StartProcess starts this test binary again to run test alone, with env
// added to its environment and its output going to LogWriter; the process
// is killed when the test ends, if it has not ended before.
func StartProcess(t testing.TB, test string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = LogWriter(), LogWriter()
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", test, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}
