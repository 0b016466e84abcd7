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

	"github.com/moenda/moenda/adapters/failures"
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
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "failures" {
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
	for _, path := range []string{"/console/failures", "/console/failures?by=queue&range=24h&text=lacks", "/console/failures/" + strconv.FormatInt(fs[0].ID, 10),
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
