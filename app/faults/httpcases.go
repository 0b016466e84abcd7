package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

// Tokens of the node that T28 runs with auth enabled.
const (
	publisherToken = "faults-publisher-token"
	adminToken     = "faults-admin-token"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// authOverlay enables auth with one publisher and one admin token.
var authOverlay = fmt.Sprintf("auth: {enabled: true, tokens: [\"publisher:%s\", \"admin:%s\"]}\n", sha(publisherToken), sha(adminToken))

// answer is one HTTP exchange of a case.
type answer struct {
	code   int
	body   string
	header http.Header
}

// call sends one request to nd, with the Authorization header auth when
// not empty.
func call(nd *harness.Node, method, path, auth, body string) (answer, error) {
	req, err := http.NewRequest(method, "http://"+nd.Addr+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return answer{resp.StatusCode, string(b), resp.Header}, nil
}

// state is what a request must not change: rows of the platform's tables
// and messages of the vhost's queues.
func (r *run) state(ctx context.Context) (string, error) {
	var rows string
	err := r.Pool.QueryRow(ctx, `SELECT format('outbox %s, inbox %s, parked %s, tables %s',
		(SELECT count(*) FROM watermill_outbox), (SELECT count(*) FROM moenda_inbox), (SELECT count(*) FROM moenda_outbox_parked),
		(SELECT count(*) FROM pg_tables WHERE schemaname = 'public'))`).Scan(&rows)
	if err != nil {
		return "", err
	}
	queues, err := r.Rabbitmqctl(ctx, "list_queues", "-p", r.VHost, "--no-table-headers", "name", "messages")
	return rows + "; " + strings.Join(strings.Fields(queues), " "), err
}

func unauthorised(ctx context.Context, r *run) error {
	r.injected("auth enabled; the admin and publish routes called with no token, an empty one, another scheme, an unknown token, a token with a suffix, and the other role's token")
	if err := r.Start(ctx, 1); err != nil {
		return err
	}
	nd := r.Nodes[0]
	for i := range 5 {
		op := harness.Op{Outcome: harness.Invoked, Writer: 28, Seq: i, EventID: harness.EventID(r.DBName, 28, i), Kind: harness.Good, At: time.Now()}
		if err := r.History.Add(harness.Line{Op: op}); err != nil {
			return err
		}
		body := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"payload":{"writer":28,"seq":%d}}`, op.EventID, faultprobe.Event, i)
		if a, err := call(nd, http.MethodPost, "/v1/events", "Bearer "+publisherToken, body); err != nil || a.code != http.StatusAccepted {
			return fmt.Errorf("publish with the publisher token: %d %s %v", a.code, a.body, err)
		}
		op.Outcome, op.At = harness.OK, time.Now()
		if err := r.History.Add(harness.Line{Op: op}); err != nil {
			return err
		}
	}
	if err := r.wait(ctx, 2*time.Second); err != nil {
		return err
	}
	before, err := r.state(ctx)
	if err != nil {
		return err
	}
	routes := []struct{ method, path, role, body string }{
		{http.MethodGet, "/v1/admin/outbox/parked", "admin", ""},
		{http.MethodPost, "/v1/admin/outbox/republish", "admin", ""},
		{http.MethodPost, "/v1/events", "publisher", `{"event_name":"` + faultprobe.Event + `","payload":{"writer":28}}`},
	}
	wrong := map[string]string{"admin": publisherToken, "publisher": adminToken}
	calls := 0
	for _, rt := range routes {
		for _, c := range []struct {
			name, auth string
			code       int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"an empty token", "Bearer ", http.StatusUnauthorized},
			{"another scheme", "Basic " + publisherToken, http.StatusUnauthorized},
			{"an unknown token", "Bearer guess", http.StatusUnauthorized},
			{"a token with a suffix", "Bearer " + adminToken + "x", http.StatusUnauthorized},
			{"the other role's token", "Bearer " + wrong[rt.role], http.StatusForbidden},
		} {
			a, err := call(nd, rt.method, rt.path, c.auth, rt.body)
			calls++
			if err != nil {
				r.judge("refused", false, "%s %s with %s: %v", rt.method, rt.path, c.name, err)
				continue
			}
			var msg struct {
				Error string `json:"error"`
			}
			if a.code != c.code || json.Unmarshal([]byte(a.body), &msg) != nil || msg.Error == "" ||
				c.code == http.StatusUnauthorized && a.header.Get("WWW-Authenticate") == "" || a.header.Get("X-Correlation-ID") == "" {
				r.judge("refused", false, "%s %s with %s: %d %.80q; want %d with {\"error\": ...}, WWW-Authenticate on 401, and a correlation id", rt.method, rt.path, c.name, a.code, a.body, c.code)
			}
		}
	}
	after, err := r.state(ctx)
	if err != nil {
		return err
	}
	r.judge("refused", true, "%d calls with a bad or missing token", calls)
	r.judge("state", after == before, "before %s; after %s", before, after)
	r.note("%d refused calls, state unchanged: %s", calls, after)
	r.judge("audit", r.logged("refused", `"correlation_id"`), "a node logged the refusals with their correlation id: %v", r.logged("refused", `"correlation_id"`))
	return nil
}

func hostileParameters(ctx context.Context, r *run) error {
	r.injected("tarefas enabled beside the probe; SQL and hostile values in its path, query and JSON parameters, the admin limit, event names outside the routing-key alphabet, duplicate and case-variant JSON keys; then a bounded sqlmap")
	if err := r.Start(ctx, 1); err != nil {
		return err
	}
	nd := r.Nodes[0]
	if a, err := call(nd, http.MethodPost, "/tarefas", "", `{"usuario_id":1,"titulo":"' OR 1=1--"}`); err != nil || a.code != http.StatusCreated {
		return fmt.Errorf("create a task: %d %s %v", a.code, a.body, err)
	}
	before, err := r.state(ctx)
	if err != nil {
		return err
	}
	hostile := []string{"' OR 1=1--", "1;DROP TABLE tarefas", "$$", "1’ OR ‘1’=‘1", "-1", "1e309", "id;", "0x1", "１"}
	type req struct{ method, path, body string }
	var reqs []req
	for _, h := range hostile {
		q := url.QueryEscape(h)
		reqs = append(reqs,
			req{http.MethodGet, "/tarefas?usuario_id=" + q, ""},
			req{http.MethodGet, "/tarefas?usuario_id=1&antes_de=" + q, ""},
			req{http.MethodGet, "/tarefas?usuario_id=1&limite=" + q, ""},
			req{http.MethodGet, "/tarefas/" + url.PathEscape(h) + "?usuario_id=1", ""},
			req{http.MethodPatch, "/tarefas/" + url.PathEscape(h) + "/concluir", `{"usuario_id":1}`},
			req{http.MethodGet, "/v1/admin/outbox/parked?limit=" + q, ""},
			req{http.MethodPost, "/v1/events", fmt.Sprintf(`{"event_name":%q,"payload":{}}`, faultprobe.Name+"."+h+".v1")},
		)
	}
	reqs = append(reqs,
		req{http.MethodPost, "/tarefas", `{"usuario_id":1,"usuario_id":2,"titulo":"x"}`},
		req{http.MethodPost, "/tarefas", `{"USUARIO_ID":1,"titulo":"x"}`},
		req{http.MethodGet, "/tarefas?usuario_id=1&order=id;", ""},
	)
	bad := 0
	for _, q := range reqs {
		a, err := call(nd, q.method, q.path, "", q.body)
		if err != nil {
			r.judge("answers", false, "%s %s: %v", q.method, q.path, err)
			continue
		}
		leaked := strings.Contains(a.body, "SQLSTATE") || strings.Contains(strings.ToLower(a.body), "syntax error")
		if a.code != http.StatusBadRequest && a.code != http.StatusNotFound || leaked {
			if bad < 8 {
				r.judge("answers", false, "%s %s %s: %d %.120q; 400 (or 404) with a message and no SQL expected", q.method, q.path, q.body, a.code, a.body)
			}
			bad++
		}
	}
	after, err := r.state(ctx)
	if err != nil {
		return err
	}
	r.judge("answers", bad == 0, "%d hostile requests, %d answered otherwise than 400/404 or with SQL text", len(reqs), bad)
	r.judge("state", after == before, "before %s; after %s", before, after)
	sqlmap, err := exec.LookPath("sqlmap")
	if err != nil {
		r.judge("sqlmap", false, "sqlmap is not installed here (bash .ci/services --faults installs it)")
		return nil
	}
	for _, target := range []string{"/tarefas?usuario_id=1&antes_de=9&limite=5", "/tarefas/1?usuario_id=1"} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(cctx, sqlmap, "-u", "http://"+nd.Addr+target, "--batch", "--level", "1", "--risk", "1",
			"--time-sec", "1", "--timeout", "5", "--retries", "0", "--flush-session", "--disable-coloring").CombinedOutput()
		cancel()
		text := string(out)
		switch {
		case strings.Contains(text, "appears to be injectable") || strings.Contains(text, "is vulnerable"):
			r.judge("sqlmap", false, "sqlmap found an injection at %s: %s", target, lastLines(out, 10))
		case err != nil && !strings.Contains(text, "do not appear to be injectable"):
			r.judge("sqlmap", false, "sqlmap at %s: %v: %s", target, err, lastLines(out, 5))
		default:
			r.judge("sqlmap", true, "sqlmap at %s: nothing injectable", target)
		}
	}
	return nil
}
