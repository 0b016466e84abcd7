package app

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/audit"
	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
)

// browser is a client of the console that keeps its session cookie by
// hand (a cookie jar would drop a Secure one over plain HTTP) and never
// follows redirects, so that each answer can be checked.
type browser struct {
	t      *testing.T
	base   string
	cookie string
	header http.Header
}

func newBrowser(t *testing.T, base string) *browser {
	return &browser{t: t, base: base, header: http.Header{}}
}

// do sends a request and keeps the session cookie it sets.
func (b *browser) do(method, path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	for k, v := range b.header {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "moenda_console", Value: b.cookie})
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		if c.Name == "moenda_console" {
			b.cookie = c.Value
			if c.MaxAge < 0 {
				b.cookie = ""
			}
		}
	}
	return resp, string(raw)
}

// get fetches a page and fails the test unless it answers want.
func (b *browser) get(path string, want int) string {
	b.t.Helper()
	resp, body := b.do("GET", path, nil)
	if resp.StatusCode != want {
		b.t.Fatalf("GET %s = %d, want %d:\n%s", path, resp.StatusCode, want, body)
	}
	return body
}

var csrfInForm = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the forms of page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfInForm.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// login logs b in with token through the login form.
func (b *browser) login(token string) {
	b.t.Helper()
	page := b.get("/console/login", http.StatusOK)
	resp, body := b.do("POST", "/console/login", url.Values{"csrf": {csrf(b.t, page)}, "token": {token}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "overview" {
		b.t.Fatalf("login = %d to %q:\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
}

// inline finds what a strict Content-Security-Policy would block in a
// page: inline scripts, style elements or attributes, event handlers.
var inline = regexp.MustCompile(`<script>|<script [^>]*>[^<]|<style|\sstyle=|\son[a-z]+=|javascript:`)

// Every page of the console answers with the security headers and holds
// nothing inline; every link and asset is relative.
func TestConsolePagesAreStrict(t *testing.T) {
	p := start(t, "memory", "MOENDA_FAILURES__ENABLED=true")
	poison(t, p, 2, "")
	ledgerHolds(t, p, 2, "")
	b := newBrowser(t, p.base)
	fs, err := p.workbench.ledger.List(context.Background(), failures.Filter{}, failures.Page{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page := b.get("/console/overview", http.StatusOK); !strings.Contains(page, `id="unresolved-total">2<`) {
		t.Errorf("the overview does not count the 2 unresolved failures:\n%s", page)
	}
	for _, path := range []string{"/console/overview", "/console/failures", "/console/failures?by=queue&range=24h&text=lacks", "/console/failures?by=event_type", "/console/failures?by=reason&status=archived", "/console/failures/" + strconv.FormatInt(fs[0].ID, 10),
		"/console/redrives", "/console/redrives/plan?group=" + fs[0].Fingerprint, "/console/journey", "/console/journey?event_id=" + fs[0].EventID,
		"/console/audit", "/console/audit?outcome=done", "/console/topology"} {
		resp, body := b.do("GET", path, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d:\n%s", path, resp.StatusCode, body)
			continue
		}
		for h, want := range map[string]string{"Content-Security-Policy": "script-src 'self'; style-src 'self'", "X-Frame-Options": "DENY",
			"Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"} {
			if got := resp.Header.Get(h); !strings.Contains(got, want) {
				t.Errorf("GET %s: %s = %q, want %q in it", path, h, got, want)
			}
		}
		if m := inline.FindString(body); m != "" {
			t.Errorf("GET %s holds %q, which the policy blocks", path, m)
		}
		if m := regexp.MustCompile(`(href|src|action)="/`).FindString(body); m != "" {
			t.Errorf("GET %s holds an absolute address (%s...), which breaks behind a proxy's prefix", path, m)
		}
		if q := strings.Index(path, "by="); q > 0 && !strings.Contains(body, "<option selected>"+strings.SplitN(path[q+3:], "&", 2)[0]+"</option>") {
			t.Errorf("GET %s does not group as asked", path)
		}
		if !strings.Contains(body, `<main id="main"`) {
			t.Errorf("GET %s is not a console page:\n%s", path, body)
		}
	}
	for path, want := range map[string]string{"/console/assets/htmx.min.js": "htmx", "/console/assets/console.css": "--accent"} {
		if body := b.get(path, http.StatusOK); !strings.Contains(body, want) {
			t.Errorf("GET %s lacks %q", path, want)
		}
	}
	if resp, _ := b.do("GET", "/console", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "console/" {
		t.Errorf("GET /console = %d to %q, want 303 to console/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// With auth on, the console asks for a token once: a page without a
// session goes to the login form; a wrong token is refused (and audited
// by the API); the right one gives a session cookie that is HttpOnly,
// SameSite=Strict, Secure outside loopback, and signed; logout drops it.
func TestConsoleLogsInOnceWithAToken(t *testing.T) {
	const admin = "adm-c0n5013"
	p := start(t, "memory", "MOENDA_AUTH__ENABLED=true", "MOENDA_AUTH__TOKENS=admin:ana:"+hashOf(admin))
	b := newBrowser(t, p.base)
	if resp, _ := b.do("GET", "/console/failures", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./login" {
		t.Fatalf("a page without a session = %d to %q, want 303 to ./login", resp.StatusCode, resp.Header.Get("Location"))
	}
	page := b.get("/console/login", http.StatusOK)
	if !strings.Contains(page, `<label for="token">Token</label>`) {
		t.Fatalf("no labelled token field on the login page:\n%s", page)
	}
	csrf(t, page) // the form carries one
	if resp, _ := b.do("POST", "/console/login", url.Values{"token": {admin}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a login without the form's CSRF token = %d, want 403", resp.StatusCode)
	}
	page = b.get("/console/login", http.StatusOK) // the refused form gave a new session, and a new token
	token := csrf(t, page)
	if resp, body := b.do("POST", "/console/login", url.Values{"csrf": {token}, "token": {"guess"}}); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not one of this moenda") {
		t.Errorf("a login with a wrong token = %d:\n%s", resp.StatusCode, body)
	}
	entries, err := p.workbench.audit.List(context.Background(), audit.Filter{Outcome: audit.Refused}, 0, 10)
	if err != nil || len(entries) != 1 || entries[0].Action != "GET /v1/admin/me" {
		t.Errorf("the wrong token's refusal in the audit: %+v, %v", entries, err)
	}

	// The session cookie, as a browser on this machine and one elsewhere
	// would get it.
	pre := b.cookie
	for host, secure := range map[string]bool{"": false, "moenda.example.com": true} {
		b.cookie = pre
		req, _ := http.NewRequest("POST", p.base+"/console/login", strings.NewReader(url.Values{"csrf": {token}, "token": {admin}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "moenda_console", Value: pre})
		if host != "" {
			req.Host = host
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var c *http.Cookie
		for _, k := range resp.Cookies() {
			if k.Name == "moenda_console" {
				c = k
			}
		}
		switch {
		case resp.StatusCode != http.StatusSeeOther || c == nil:
			t.Fatalf("login at %q = %d, cookie %v", host, resp.StatusCode, c)
		case !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure != secure || c.Path != "/console" || c.MaxAge <= 0 || c.MaxAge > 8*3600:
			t.Errorf("login at %q: cookie %s, want HttpOnly, SameSite=Strict, Secure %v, Path=/console, 8h at most", host, c.String(), secure)
		case c.Value == pre:
			t.Errorf("login at %q kept the session id of before the login", host)
		case strings.Contains(c.Value, admin) || strings.Contains(c.Value, hashOf(admin)):
			t.Errorf("the cookie holds the token or its hash in clear: %s", c.Value)
		}
		b.cookie = c.Value
	}
	if page := b.get("/console/failures", http.StatusOK); !strings.Contains(page, "ana") || !strings.Contains(page, "Log out") {
		t.Errorf("a signed-in page does not name ana or offer to log out:\n%s", page)
	}
	// A cookie changed by one byte is nobody's.
	good := b.cookie
	b.cookie = good[:len(good)-2] + map[bool]string{true: "A", false: "B"}[good[len(good)-2] != 'A'] + good[len(good)-1:]
	if resp, _ := b.do("GET", "/console/failures", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a forged cookie = %d, want 303 to the login", resp.StatusCode)
	}
	b.cookie = good
	page = b.get("/console/failures", http.StatusOK)
	if resp, _ := b.do("POST", "/console/logout", url.Values{"csrf": {csrf(t, page)}}); resp.StatusCode != http.StatusSeeOther || b.cookie != "" {
		t.Errorf("logout = %d, cookie left %q", resp.StatusCode, b.cookie)
	}
	if resp, _ := b.do("GET", "/console/failures", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a page after logout = %d, want 303 to the login", resp.StatusCode)
	}
}

// Every state-changing request carries the session's CSRF token: without
// it, or with another session's, nothing changes.
func TestConsoleRefusesAFormWithoutItsCSRFToken(t *testing.T) {
	p := start(t, "memory", "MOENDA_FAILURES__ENABLED=true")
	poison(t, p, 1, "")
	id := strconv.FormatInt(ledgerID(t, p), 10)
	b, other := newBrowser(t, p.base), newBrowser(t, p.base)
	page := b.get("/console/failures", http.StatusOK)
	otherToken := csrf(t, other.get("/console/failures", http.StatusOK))
	for name, form := range map[string]url.Values{
		"no token":              {"do": {"archive-selected"}, "ids": {id}},
		"a wrong token":         {"do": {"archive-selected"}, "ids": {id}, "csrf": {"x" + csrf(t, page)}},
		"another session's one": {"do": {"archive-selected"}, "ids": {id}, "csrf": {otherToken}},
	} {
		if resp, body := b.do("POST", "/console/failures/act", form); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("%s: %d:\n%s", name, resp.StatusCode, body)
		}
	}
	if resp, _ := newBrowser(t, p.base).do("POST", "/console/redrives", url.Values{"group": {"0123456789abcdef"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a re-drive posted with no session = %d, want 403", resp.StatusCode)
	}
	if f := ledgerFailure(t, p); f.Status != failures.Unresolved {
		t.Fatalf("a refused form changed the failure: %s", f.Status)
	}
	if resp, body := b.do("POST", "/console/failures/act", url.Values{"do": {"archive-selected"}, "ids": {id}, "csrf": {csrf(t, page)}}); resp.StatusCode != http.StatusOK || !strings.Contains(body, "1 changed") {
		t.Fatalf("archive with the token = %d:\n%s", resp.StatusCode, body)
	}
	if f := ledgerFailure(t, p); f.Status != failures.Archived {
		t.Fatalf("the failure is %s after its archive", f.Status)
	}
}

// ledgerFailure is the newest failure of p's ledger, whatever its status.
func ledgerFailure(t *testing.T, p running) failures.Failure {
	t.Helper()
	fs, err := p.workbench.ledger.List(context.Background(), failures.Filter{AnyStatus: true}, failures.Page{Limit: 1})
	if err != nil || len(fs) == 0 {
		t.Fatalf("the ledger: %v, %v", fs, err)
	}
	return fs[0]
}

func ledgerID(t *testing.T, p running) int64 {
	t.Helper()
	ledgerHolds(t, p, 1, "")
	return ledgerFailure(t, p).ID
}

// A viewer sees every page, with the actions shown as not allowed, and
// the server refuses them anyway: a forged form, with a valid CSRF
// token, is answered 403 by the API and audited with the viewer's name.
// With console.show_bodies off, a viewer does not see bodies.
func TestConsoleShowsAViewerEverythingAndLetsItDoNothing(t *testing.T) {
	const viewer, admin = "view-c0n5013", "adm-c0n5013"
	p := start(t, "memory", "MOENDA_FAILURES__ENABLED=true", "MOENDA_AUTH__ENABLED=true", "MOENDA_CONSOLE__SHOW_BODIES=false",
		"MOENDA_AUTH__TOKENS=viewer:vera:"+hashOf(viewer)+",admin:ana:"+hashOf(admin), "MOENDA_HTTP__ADDR=127.0.0.1:0")
	// Failures straight into the ledger: publishing needs a publisher token.
	if _, err := p.workbench.ledger.Record(context.Background(), []failures.Failure{
		{Queue: "notificacoes.tarefas-concluidas.dlq", EventID: "00000000-0000-4000-8000-000000000001", FailedQueue: "notificacoes.tarefas-concluidas",
			Handler: "notificacoes/tarefas-concluidas", EventName: "tarefa.concluida.v1", Reason: "permanent", Error: "lacks usuario_id",
			Fingerprint: failures.Fingerprint("notificacoes/tarefas-concluidas", "permanent", "lacks usuario_id"), Attempts: 1, Occurrences: 1,
			Status: failures.Unresolved, Headers: map[string]string{"moenda-reason": "permanent"}, Body: []byte(`{"cpf":"52998224725"}`),
			FirstFailureAt: time.Now(), LastFailureAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	f := ledgerFailure(t, p)
	id := strconv.FormatInt(f.ID, 10)
	v := newBrowser(t, p.base)
	v.login(viewer)
	pages := map[string]string{}
	for _, path := range []string{"/console/overview", "/console/failures", "/console/failures/" + id, "/console/redrives/plan?group=" + f.Fingerprint, "/console/redrives",
		"/console/journey?event_id=" + f.EventID, "/console/audit", "/console/topology"} {
		pages[path] = v.get(path, http.StatusOK)
	}
	if page := pages["/console/failures"]; !strings.Contains(page, `value="archive-selected" disabled aria-disabled="true"`) ||
		!strings.Contains(page, "Re-drive not allowed") || !strings.Contains(page, "as a viewer") {
		t.Errorf("the failures page offers a viewer its actions:\n%s", page)
	}
	if page := pages["/console/redrives/plan?group="+f.Fingerprint]; !regexp.MustCompile(`<button type="submit" disabled aria-disabled="true" title="Needs the admin role">Start`).MatchString(page) {
		t.Errorf("the plan page lets a viewer start:\n%s", page)
	}
	if page := pages["/console/failures/"+id]; strings.Contains(page, "52998224725") || !strings.Contains(page, "console.show_bodies") {
		t.Errorf("a viewer sees the body with console.show_bodies off:\n%s", page)
	}
	token := csrf(t, pages["/console/failures"])
	for name, form := range map[string]struct {
		path string
		form url.Values
	}{
		"archive":  {"/console/failures/act", url.Values{"do": {"archive-selected"}, "ids": {id}, "csrf": {token}}},
		"re-drive": {"/console/redrives", url.Values{"ids": {id}, "csrf": {token}}},
		"cancel":   {"/console/redrives/1/cancel", url.Values{"csrf": {token}}},
	} {
		if resp, body := v.do("POST", form.path, form.form); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "lacks the admin role") {
			t.Errorf("a viewer's forged %s = %d:\n%s", name, resp.StatusCode, body)
		}
	}
	if f := ledgerFailure(t, p); f.Status != failures.Unresolved {
		t.Errorf("a viewer's forged form changed the failure: %s", f.Status)
	}
	refused, err := p.workbench.audit.List(context.Background(), audit.Filter{Actor: "vera", Outcome: audit.Refused}, 0, 10)
	if err != nil || len(refused) != 3 {
		t.Errorf("the audit holds %d refusals of vera, want 3: %+v %v", len(refused), refused, err)
	}
	a := newBrowser(t, p.base)
	a.login(admin)
	if page := a.get("/console/failures/"+id, http.StatusOK); !strings.Contains(page, "52998224725") {
		t.Errorf("an admin does not see the body:\n%s", page)
	}
}

// Behind a reverse proxy at /moenda/, links, assets and redirects are
// relative, and the session cookie's path is the proxy's: from
// X-Forwarded-Prefix, or console.path_prefix.
func TestConsoleWorksBehindAPathPrefix(t *testing.T) {
	const admin = "adm-pr3f1x"
	for name, env := range map[string][]string{
		"forwarded":  nil,
		"configured": {"MOENDA_CONSOLE__PATH_PREFIX=/moenda"},
	} {
		t.Run(name, func(t *testing.T) {
			p := start(t, "memory", append(env, "MOENDA_AUTH__ENABLED=true", "MOENDA_AUTH__TOKENS=admin:"+hashOf(admin))...)
			// The proxy strips /moenda and says so.
			b := newBrowser(t, p.base)
			if name == "forwarded" {
				b.header.Set("X-Forwarded-Prefix", "/moenda")
			}
			resp, _ := b.do("GET", "/console/redrives", nil)
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "./login" {
				t.Fatalf("a page without a session = %d to %q, want a relative 303", resp.StatusCode, loc)
			}
			page := b.get("/console/login", http.StatusOK)
			resp, _ = b.do("POST", "/console/login", url.Values{"csrf": {csrf(t, page)}, "token": {admin}})
			var c *http.Cookie
			for _, k := range resp.Cookies() {
				if k.Name == "moenda_console" {
					c = k
				}
			}
			if c == nil || c.Path != "/moenda/console" {
				t.Fatalf("the session cookie behind /moenda: %v", c)
			}
			b.get("/console/redrives/7/progress", http.StatusNotFound)
			page = b.get("/console/failures", http.StatusOK)
			for _, want := range []string{`href="./assets/console.css"`, `src="./assets/htmx.min.js"`, `href="./audit"`, `action="./failures/act"`} {
				if !strings.Contains(page, want) {
					t.Errorf("the page lacks %s", want)
				}
			}
		})
	}
	// A forwarded prefix that is not a plain path is ignored.
	p := start(t, "memory")
	b := newBrowser(t, p.base)
	b.header.Set("X-Forwarded-Prefix", "//evil.example/x")
	resp, _ := b.do("GET", "/console/failures", nil)
	for _, c := range resp.Cookies() {
		if c.Path != "/console" {
			t.Errorf("a bad X-Forwarded-Prefix set the cookie's path to %q", c.Path)
		}
	}
}

// From a group to a re-drive and back: the failures page groups the
// poisoned events, the plan counts them as the API does, the start goes
// to the re-drive's page, whose progress part refreshes itself while it
// runs and whose buttons control it; the journey, the audit and the
// topology tell the rest.
func TestConsoleRedrivesAGroupFromPlanToProgress(t *testing.T) {
	p := start(t, "memory", "MOENDA_FAILURES__ENABLED=true")
	poison(t, p, 5, "")
	fs := ledgerHolds(t, p, 5, "")
	group, eventID := fs[0]["fingerprint"].(string), fs[0]["event_id"].(string)
	b := newBrowser(t, p.base)
	page := b.get("/console/failures", http.StatusOK)
	if !regexp.MustCompile(`(?s)href="\./failures\?group=` + group + `">payload of tarefa.concluida.v&lt;n&gt; lacks usuario_id or titulo</a>.*?<td class="num">5</td>`).MatchString(page) {
		t.Fatalf("the failures page does not show the group of 5:\n%s", page)
	}
	if page := b.get("/console/failures?group="+group+"&by=queue", http.StatusOK); !strings.Contains(page, "group: "+group) || !strings.Contains(page, `aria-label="Remove the filter group `+group+`"`) {
		t.Errorf("the group's filter is not shown as a chip:\n%s", page)
	}
	if page := b.get("/console/failures?range=24h", http.StatusOK); !strings.Contains(page, `href="./failures?by=cause&amp;queue=notificacoes.tarefas-concluidas&amp;range=24h"`) {
		t.Errorf("a failure's queue does not add its filter to the page's:\n%s", page)
	}
	// Ticked rows: their plan alone.
	one := url.Values{"csrf": {csrf(t, page)}, "do": {"plan-selected"}, "ids": {strconv.Itoa(int(fs[0]["id"].(float64))), strconv.Itoa(int(fs[1]["id"].(float64)))}, "queue": {"ignored.when.rows.are.ticked"}}
	if resp, body := b.do("POST", "/console/redrives/plan", one); resp.StatusCode != http.StatusOK || !strings.Contains(body, "2 of 2 selected failures would be sent") {
		t.Errorf("the plan of two ticked rows = %d:\n%s", resp.StatusCode, body)
	}
	code, apiPlan := call(t, "GET", p.base+"/v1/admin/redrives/plan?group="+group+"&canary=2&rate=10", "")
	plan := b.get("/console/redrives/plan?group="+group+"&canary=2&rate=10", http.StatusOK)
	if code != http.StatusOK || apiPlan["send"] != 5.0 || !strings.Contains(plan, "5 of 5 selected failures would be sent") ||
		!strings.Contains(plan, "a canary of 2 first, at 10 per second") || !strings.Contains(plan, `<td>notificacoes.tarefas-concluidas</td><td class="num">5</td>`) {
		t.Fatalf("the plan (the API's: %v):\n%s", apiPlan, plan)
	}
	resp, body := b.do("POST", "/console/redrives", url.Values{"csrf": {csrf(t, plan)}, "group": {group}, "canary": {"2"}, "rate": {"10"}, "max": {"0"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./redrives/1" {
		t.Fatalf("start = %d to %q:\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	page = b.get("/console/redrives/1", http.StatusOK)
	if !strings.Contains(page, `hx-get="../redrives/1/progress" hx-trigger="every 2s"`) || !strings.Contains(page, "Planned</th><td class=\"num\">5</td>") {
		t.Fatalf("the re-drive's page does not follow its progress:\n%s", page)
	}
	// The cause is not fixed: the canaries fail again, and the re-drive
	// pauses itself.
	var part string
	testenv.Eventually(t, 30*time.Second, "the re-drive paused by its canary", func() bool {
		part = b.get("/console/redrives/1/progress", http.StatusOK)
		return strings.Contains(part, `class="state state-paused"`)
	})
	if strings.Contains(part, "<html") || !strings.Contains(part, `<section id="progress"`) || !strings.Contains(part, ">Resume</button>") ||
		!strings.Contains(part, `action="../redrives/1/resume"`) {
		t.Errorf("the progress part:\n%s", part)
	}
	resp, body = b.do("POST", "/console/redrives/1/cancel", url.Values{"csrf": {csrf(t, part)}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "../../redrives/1" {
		t.Fatalf("cancel = %d to %q:\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if page := b.get("/console/redrives/1", http.StatusOK); !strings.Contains(page, `class="state state-cancelled"`) || strings.Contains(page, "hx-trigger") {
		t.Errorf("the cancelled re-drive's page:\n%s", page)
	}
	if page := b.get("/console/redrives", http.StatusOK); !strings.Contains(page, `<a href="./redrives/1">1</a>`) {
		t.Errorf("the re-drives' list:\n%s", page)
	}
	if page := b.get("/console/journey?event_id="+eventID, http.StatusOK); !strings.Contains(page, "failed (permanent)") || !strings.Contains(page, "notificacoes.tarefas-concluidas</strong>: not handled") {
		t.Errorf("the journey:\n%s", page)
	}
	if page := b.get("/console/audit?action=redrive.start", http.StatusOK); !strings.Contains(page, `<td><a href="./audit?actor=anonymous">anonymous</a></td>`) || !strings.Contains(page, "group="+group) {
		t.Errorf("the audit:\n%s", page)
	}
	topo := b.get("/console/topology", http.StatusOK)
	svg := topo[strings.Index(topo, "<svg"):strings.Index(topo, "</svg>")]
	cat := p.cfg.catalog(p.top)
	for _, s := range cat.Subscriptions {
		for _, name := range append([]string{s.Queue, s.DeadLetterQueue}, retryQueues(s)...) {
			if name != "" && !strings.Contains(svg, ">"+name+"</text>") {
				t.Errorf("the diagram lacks %s", name)
			}
		}
	}
	if !strings.Contains(topo, `href="./../v1/asyncapi.json"`) {
		t.Errorf("no link to the AsyncAPI document")
	}
}

// retryQueues are the retry queues of s.
func retryQueues(s CatalogSubscription) []string {
	var out []string
	for _, d := range s.RetryDelays {
		dd, _ := time.ParseDuration(d)
		out = append(out, topology.RetryQueue(s.Queue, dd))
	}
	return out
}

// The console is where the administration is: on api and relay
// processes, not on workers.
func TestConsoleIsServedWhereTheAdministrationIs(t *testing.T) {
	db, vhost := testenv.EmptyPostgres(t), testenv.RabbitMQ(t)
	env := []string{"MOENDA_POSTGRES__URL=" + db.URL, "MOENDA_AMQP__URL=" + vhost.URL}
	for role, want := range map[ServeRole]int{ServeAPI: http.StatusOK, ServeRelay: http.StatusOK, ServeWorker: http.StatusNotFound} {
		sp := startRole(t, role, env...)
		if code, body := sp.get(t, "/console/failures"); code != want {
			t.Errorf("GET /console/failures on a %s process = %d, want %d:\n%s", role, code, want, body)
		}
	}
}
