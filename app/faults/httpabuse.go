package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

// slowConns is how many connections slowhttptest opens, 100 a second.
const slowConns = 500

// slowClients runs slowhttptest against a node in its two modes (slow
// headers, slow body), with a prober asking /readyz every 100 ms
// meanwhile, then streams oversized bodies and abuses X-Correlation-ID.
// Each mode runs past http.read_timeout (30 s by default) and the 5 s
// its connections take to open, so that the server is seen closing
// every slow connection before the tool gives up.
func slowClients(ctx context.Context, r *run) error {
	secs := r.scale(60, 45)
	r.injected("slowhttptest -H then -B, 500 connections at 100/s for %d s each, beside writers; 10 MB and 100 MB bodies, one chunked; X-Correlation-ID of 64 KB and with markup", secs)
	tool, err := exec.LookPath("slowhttptest")
	if err != nil {
		r.judge(clauseSlow, false, "slowhttptest is not installed here (bash .ci/services --faults installs it)")
		return nil
	}
	if err := r.Start(ctx, 1); err != nil {
		return err
	}
	nd := r.Nodes[0]
	r.write(ctx, harness.Workload{Writers: 2, Interval: 20 * time.Millisecond})
	fds := func() int { e, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", nd.PID())); return len(e) }
	before := fds()

	pctx, stopProbe := context.WithCancel(ctx)
	var mu sync.Mutex
	var probes []time.Duration
	failed := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		client := http.Client{Timeout: 5 * time.Second}
		for pctx.Err() == nil {
			at := time.Now()
			resp, err := client.Get("http://" + nd.Addr + "/readyz")
			mu.Lock()
			if err != nil {
				failed++
			} else {
				_ = resp.Body.Close()
				probes = append(probes, time.Since(at))
			}
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	most := before
	for _, mode := range []string{"-H", "-B"} {
		// Past the recovery bound between the modes, so each recovery
		// can be seen.
		if err := r.tail(ctx); err != nil {
			stopProbe()
			<-done
			return err
		}
		args := []string{mode, "-c", fmt.Sprint(slowConns), "-r", "100", "-i", "10", "-l", fmt.Sprint(secs), "-u", "http://" + nd.Addr + "/v1/events", "-p", "3"}
		if mode == "-B" {
			args = append(args, "-t", "POST", "-s", "8192", "-f", "application/json")
		}
		err := r.inject(ctx, "slowhttptest "+mode, 0, func(ctx context.Context) error {
			cmd := exec.CommandContext(ctx, tool, args...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("slowhttptest %s: %w: %s", mode, err, lastLines(out, 5))
			}
			r.note("slowhttptest %s: %s", mode, strings.Join(strings.Fields(lastLines(out, 8)), " "))
			ok, detail := slowClosed(mode, out)
			r.judge(clauseSlow, ok, "%s", detail)
			return nil
		}, nil)
		if err != nil {
			stopProbe()
			<-done
			return err
		}
		most = max(most, fds())
	}
	stopProbe()
	<-done
	slices.Sort(probes)
	if len(probes) > 0 {
		p99 := probes[min(len(probes)*99/100, len(probes)-1)]
		r.judge("probe", p99 <= 500*time.Millisecond && failed == 0, "/readyz during the slow clients: %d answers, p99 %s, %d without an answer",
			len(probes), p99.Round(time.Millisecond), failed)
	} else {
		r.judge("probe", false, "/readyz never answered during the slow clients (%d failures)", failed)
	}
	after := fds()
	r.judge("fds", most <= before+slowConns+fdSlack && after <= before+fdSlack, "open files %d before, %d at most (%d connections), %d after",
		before, most, slowConns, after)
	r.oversizedBodies(nd)
	r.correlationAbuse(nd)
	return r.tail(ctx)
}

// oversizedBodies posts 10 MB with its length and 100 MB chunked: both get
// 413 within a second, before the body is read.
func (r *run) oversizedBodies(nd *harness.Node) {
	for _, b := range []struct {
		name    string
		size    int64
		chunked bool
	}{{"10 MB with Content-Length", 10 << 20, false}, {"100 MB chunked", 100 << 20, true}} {
		body := io.LimitReader(zeros{}, b.size)
		req, _ := http.NewRequest(http.MethodPost, "http://"+nd.Addr+"/v1/events", body)
		req.Header.Set("Content-Type", "application/json")
		if !b.chunked {
			req.ContentLength = b.size
		}
		at := time.Now()
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		took := time.Since(at)
		switch {
		case err != nil:
			// The server may close the connection while the client
			// still writes the body; the answer then never arrives.
			r.judge("413", took <= time.Second, "%s: the server closed the connection after %s (%v); within 1 s expected", b.name, took.Round(time.Millisecond), err)
		default:
			_ = resp.Body.Close()
			r.judge("413", resp.StatusCode == http.StatusRequestEntityTooLarge && took <= time.Second, "%s: %d in %s; 413 within 1 s expected",
				b.name, resp.StatusCode, took.Round(time.Millisecond))
		}
	}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// correlationAbuse sends X-Correlation-ID values moenda must not keep: the
// answer carries a new UUID instead.
func (r *run) correlationAbuse(nd *harness.Node) {
	for i, value := range []string{strings.Repeat("a", 64<<10), `<script>alert(1)</script>`, "a b\tc"} {
		name := []string{"64 KB", "with markup", "with spaces"}[i]
		op := harness.Op{Outcome: harness.Invoked, Writer: 30, Seq: i, EventID: harness.EventID(r.DBName, 30, i), Kind: harness.Good, At: time.Now()}
		_ = r.History.Add(harness.Line{Op: op})
		body := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"payload":{"writer":30,"seq":%d}}`, op.EventID, faultprobe.Event, i)
		req, _ := http.NewRequest(http.MethodPost, "http://"+nd.Addr+"/v1/events", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Correlation-ID", value)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			r.judge("correlation", false, "X-Correlation-ID %s: %v", name, err)
			continue
		}
		_ = resp.Body.Close()
		op.Outcome, op.At = harness.Failed, time.Now()
		if resp.StatusCode < 300 {
			op.Outcome = harness.OK
		}
		_ = r.History.Add(harness.Line{Op: op})
		got := resp.Header.Get("X-Correlation-ID")
		_, perr := uuid.Parse(got)
		r.judge("correlation", resp.StatusCode < 500 && got != value && perr == nil, "X-Correlation-ID %s: %d, answered with %.40q; a new UUID expected", name, resp.StatusCode, got)
	}
}

var (
	slowStatus   = regexp.MustCompile(`pending:\s*(\d+)\s+connected:\s*(\d+)\s+error:\s*(\d+)\s+closed:\s*(\d+)`)
	slowExit     = regexp.MustCompile(`Exit status:\s*([^\n]*)`)
	slowAllGone  = "No open connections left"
	slowTimedOut = "Hit test time limit"
)

// slowClosed judges one slowhttptest run from its output: the server must
// have closed every slow connection before the test's time limit. The
// tool ends early, saying "No open connections left", when it has; when
// it runs out of time instead, or its last reading still shows
// connections open, they were held, not closed.
func slowClosed(mode string, out []byte) (bool, string) {
	text := ansi.ReplaceAllString(string(out), "")
	status := slowStatus.FindAllStringSubmatch(text, -1)
	exit := slowExit.FindStringSubmatch(text)
	if len(status) == 0 || exit == nil {
		return false, fmt.Sprintf("slowhttptest %s: no final status in its output: %s", mode, lastLines(out, 3))
	}
	last := status[len(status)-1]
	connected, closed, errs := last[2], last[4], last[3]
	verdict := strings.TrimSpace(exit[1])
	detail := fmt.Sprintf("slowhttptest %s: %s connected, %s closed, %s errors at the end; %s", mode, connected, closed, errs, verdict)
	if !strings.Contains(verdict, slowAllGone) || strings.Contains(verdict, slowTimedOut) || connected != "0" && closed == "0" {
		return false, detail + ": the server held slow connections open instead of closing them (http.read_header_timeout, http.read_timeout)"
	}
	return true, detail
}

// lastLines is the last n lines of a tool's output, without its colours.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(ansi.ReplaceAllString(string(b), "")), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
