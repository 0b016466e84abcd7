package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/moenda/moenda/adapters/testenv"
)

// chromium starts a headless Chromium for t, in a fresh profile, and
// returns its context. Without Chromium it skips t, saying how to get
// it, except in CI (CI=true), where it fails: there .ci/services
// installs it.
func chromium(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/services installs it (apt-get install chromium)")
		}
		t.Skip("the console's browser tests need Debian's chromium: bash .ci/services, or apt-get install chromium")
	}
	actx, stop := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900))
	t.Cleanup(stop)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // the first run starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab is a browser tab on a moenda at base.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	// shots is where screenshots go: docs/console with -update, a
	// temporary directory otherwise.
	shots string
}

func newTab(t *testing.T, ctx context.Context, base string) *tab {
	shots := t.TempDir()
	if *update {
		shots = filepath.Join("..", "docs", "console")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &tab{t: t, ctx: ctx, base: strings.TrimSpace(base), shots: shots}
}

// do runs steps, each within 60 s, and fails the test on an error.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page (promises awaited).
func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// until waits until the JavaScript expression cond holds in the page; an
// evaluation that fails (the page in the middle of loading) counts as
// not yet.
func (b *tab) until(what, cond string, d time.Duration) {
	b.t.Helper()
	testenv.Eventually(b.t, d, what, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		return err == nil && ok
	})
}

// open goes to the console's page path and waits for its main part.
func (b *tab) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+"/console/"+path), chromedp.WaitVisible(chromedp.CSS("main h1")))
}

// text is the text of the page.
func (b *tab) text() string {
	b.t.Helper()
	return eval[string](b, `document.body.innerText`)
}

// wants fails the test unless the page's main part shows each of want.
func (b *tab) wants(page string, want ...string) {
	b.t.Helper()
	text := b.text()
	for _, w := range want {
		if !strings.Contains(text, w) {
			b.t.Errorf("the %s page does not show %q:\n%s", page, w, text)
		}
	}
}

// usable checks what a person needs of the page: htmx loaded (the
// Content-Security-Policy let the console's own script run), every
// control labelled, and the skip link reaching the main part with the
// keyboard.
func (b *tab) usable(page string) {
	b.t.Helper()
	if !eval[bool](b, `typeof htmx === "object"`) {
		b.t.Errorf("the %s page did not load htmx", page)
	}
	unlabelled := eval[[]string](b, `[...document.querySelectorAll("input:not([type=hidden]), select, textarea, button")]
		.filter(e => e.tagName === "BUTTON" ? !(e.textContent.trim() || e.getAttribute("aria-label")) : !((e.labels && e.labels.length) || e.getAttribute("aria-label")))
		.map(e => e.outerHTML)`)
	if len(unlabelled) > 0 {
		b.t.Errorf("the %s page has controls without a label: %v", page, unlabelled)
	}
	b.do("focus the page", chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.focus()`))
	b.do("tab to the skip link", chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter))
	if id := eval[string](b, `location.hash + " " + (document.activeElement ? document.activeElement.id : "")`); !strings.Contains(id, "#main") {
		b.t.Errorf("the %s page's skip link does not lead to the main part with the keyboard: %q", page, id)
	}
}

// shot saves a screenshot of the whole page as name.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// login types token into the login form with the keyboard alone, and
// waits for the overview.
func (b *tab) login(token string) {
	b.t.Helper()
	b.do("open the console", chromedp.Navigate(b.base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("log in with the keyboard", chromedp.KeyEvent(token), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS("#figures")))
}

// The console as a person uses it, in Chromium, against serve processes
// on PostgreSQL and RabbitMQ: a viewer sees every page and may do
// nothing; an admin sees the 20 failures counted on the overview, and re-drives a group of 20 failures, from its plan to
// done; the journey, the audit and the topology tell the rest. Each
// page is saved as a screenshot (into docs/console with -update).
func TestConsoleInChromium(t *testing.T) {
	ctx := chromium(t)
	const publisher, viewer, admin = "pub-br0ws3r", "view-br0ws3r", "adm-br0ws3r"
	s := newProbeStack(t)
	env := append(append(s.environ(), "SERVE_PROBE=1", "MOENDA_AUTH__ENABLED=true",
		"MOENDA_AUTH__TOKENS=publisher:"+hashOf(publisher)+",viewer:vera:"+hashOf(viewer)+",admin:ana:"+hashOf(admin)), ledgerOn...)
	sp := startServe(t, env...)
	base := strings.TrimSpace(sp.base)
	// 20 events of one cause: each fails its 4 attempts, and the fifth,
	// a re-drive's, is handled.
	var ids []string
	for range 20 {
		resp, raw := send(t, "POST", base+"/v1/events", `{"event_name":"probe.slow.hit.v1","payload":{"fail":4}}`, bearer(publisher))
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", resp.StatusCode, raw)
		}
		ids = append(ids, body["event_id"].(string))
	}
	var group string
	testenv.Eventually(t, 60*time.Second, "the 20 failures in the ledger", func() bool {
		_, body := ask(t, "GET", base+"/v1/admin/failures/groups", admin)
		gs, _ := body["groups"].([]any)
		if len(gs) != 1 {
			return false
		}
		g := gs[0].(map[string]any)
		group = g["key"].(string)
		return g["count"] == 20.0
	})

	b := newTab(t, ctx, base)
	b.login(viewer)
	b.wants("overview", "You are signed in as a viewer", "Unresolved failures: 20")
	b.usable("overview")
	b.open("failures")
	b.wants("failures", "You are signed in as a viewer", "20 failures", "Re-drive not allowed")
	b.usable("failures")
	if n := eval[int](b, `document.querySelectorAll("main button:disabled").length`); n < 4 {
		t.Errorf("a viewer's failures page has %d disabled buttons, want the actions' (at least 4)", n)
	}
	// A forged POST, with the page's own CSRF token: the API refuses it.
	if status := eval[int](b, `fetch("failures/act", {method: "POST", body: new URLSearchParams({csrf: document.querySelector("input[name=csrf]").value, do: "archive-all", group: "`+group+`"})}).then(r => r.status)`); status != http.StatusForbidden {
		t.Errorf("a viewer's forged archive = %d, want 403", status)
	}
	for _, page := range []string{"redrives/plan?group=" + group, "redrives", "journey?event_id=" + ids[0], "audit", "topology"} {
		b.open(page)
		b.usable(page)
	}
	// The API is bearer-only: the session cookie opens nothing there.
	if status := eval[int](b, `fetch("../v1/admin/failures").then(r => r.status)`); status != http.StatusUnauthorized {
		t.Errorf("GET /v1/admin/failures from the console's page = %d, want 401: the session cookie opened the API", status)
	}
	b.do("log out", chromedp.Click(chromedp.CSS("header form button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.shot("login")

	b.login(admin)
	b.wants("overview", "ana", "Unresolved failures: 20", "probe.slow\t20")
	b.shot("overview")
	b.open("failures")
	b.wants("failures", "ana", "20 failures")
	b.shot("failures")
	b.do("tick a row and plan its re-drive", chromedp.Click(chromedp.CSS("#list-title ~ form tbody input[type=checkbox]")),
		chromedp.Click(chromedp.CSS(`button[value="plan-selected"]`)))
	b.until("the plan of the ticked row", `(document.querySelector("#plan-title") || {textContent: ""}).textContent.includes("1 of 1 selected")`, 30*time.Second)
	b.open("failures")
	b.do("open the group's plan", chromedp.Click(chromedp.CSS("a.button")), chromedp.WaitVisible(chromedp.CSS("#plan-title")))
	b.do("set a canary of 2 at 10/s", chromedp.SetValue(chromedp.CSS("#canary"), "2"), chromedp.SetValue(chromedp.CSS("#rate"), "10"),
		chromedp.Click(chromedp.CSS("form.settings button")))
	b.until("the plan with a canary of 2 at 10/s", `location.search.includes("canary=2") && document.readyState === "complete" && document.querySelector("#plan-title") !== null`, 30*time.Second)
	_, plan := ask(t, "GET", base+"/v1/admin/redrives/plan?group="+group+"&canary=2&rate=10", admin)
	b.wants("plan", fmt.Sprintf("%v of %v selected failures would be sent", plan["send"], plan["selected"]), "a canary of 2 first, at 10 per second", "probe.slow\t20")
	b.usable("plan")
	b.shot("plan")
	b.do("start", chromedp.Click(chromedp.CSS("form.confirm button")), chromedp.WaitVisible(chromedp.CSS("#progress")))
	b.usable("re-drive")
	// The progress part refreshes itself (htmx) until the re-drive is
	// done. (chromedp.Poll cannot wait here: it compiles its predicate
	// with new Function, which the console's policy forbids, as it should.)
	b.until("the re-drive's page showing done without a reload", `document.querySelector("#progress .state-done") !== null`, 120*time.Second)
	b.wants("re-drive", "Handled\t20")
	b.shot("redrive")
	b.open("redrives")
	b.wants("re-drives", "done")
	b.shot("redrives")

	b.open("journey?event_id=" + ids[0])
	b.wants("journey", "probe.slow: handled", "re-drive")
	b.shot("journey")
	b.open("failures?status=resolved")
	b.do("open a failure", chromedp.Click(chromedp.CSS("#list-title ~ form tbody td:nth-child(2) a")), chromedp.WaitVisible(chromedp.CSS("#attempts-title")))
	b.wants("failure", "Attempts", "Headers", "\"fail\": 4")
	b.usable("failure")
	b.shot("failure")
	b.open("audit")
	b.wants("audit", "ana", "redrive.start", "vera", "refused")
	b.shot("audit")

	// The topology of the shipped plugins, with every queue of seed 000.
	shipped := startServe(t, "MOENDA_POSTGRES__URL="+testenv.EmptyPostgres(t).URL, "MOENDA_AMQP__URL="+testenv.RabbitMQ(t).URL)
	resp, raw := send(t, "GET", strings.TrimSpace(shipped.base)+"/v1/catalog", "", nil)
	var cat Catalog
	if err := json.Unmarshal(raw, &cat); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/catalog = %d %s", resp.StatusCode, raw)
	}
	var want []string
	for _, s := range cat.Subscriptions {
		if strings.HasPrefix(s.DeadLetterQueue, "car.dlq.") { // seed 000's layout
			want = append(append(want, s.Queue, s.DeadLetterQueue), retryQueues(s)...)
		}
	}
	if len(want) == 0 {
		t.Fatal("the catalog holds no queue of seed 000")
	}
	top := newTab(t, ctx, shipped.base)
	top.open("topology")
	texts := eval[[]string](top, `[...document.querySelectorAll("main svg text")].map(e => e.textContent)`)
	for _, q := range want {
		found := false
		for _, s := range texts {
			found = found || s == q
		}
		if !found {
			t.Errorf("the topology diagram lacks %s (it holds %v)", q, texts)
		}
	}
	top.usable("topology")
	top.shot("topology")
}
