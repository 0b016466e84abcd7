// Package console is moenda's operations console: server-rendered pages
// (html/template) over the failure workbench's API, with its assets and a
// vendored htmx embedded, so `go build` gives the whole console and no
// Node toolchain is needed.
//
// The console can do nothing the API does not allow, because it does
// everything through the API: each page reads, and each action posts, by
// calling the platform's /v1/admin handler in-process, with the token the
// operator logged in with (its hash, vouched for in the request's
// context; see Deps.Vouch). The API's role checks, validation and audit
// run as they do for curl. This is simpler and safer than having the
// browser call /v1/admin with the session cookie: the API stays
// bearer-only, so it needs no CSRF defence of its own and answers JSON
// alone, while the console turns answers into pages and keeps the
// browser's concerns (session, CSRF, security headers) in one room.
package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

//go:embed assets templates
var files embed.FS

// Deps is what the console needs from the platform.
type Deps struct {
	Config Config
	// API is the platform's /v1/admin handler, routing requests whose
	// path starts with /v1/admin as the server does.
	API http.Handler
	// Vouch marks ctx as a request made with the token whose SHA-256 is
	// tokenHash (hex), as an Authorization header would: the API checks
	// it against auth.tokens, with the roles and audit it applies to a
	// bearer token. Only code in this process can set it.
	Vouch func(ctx context.Context, tokenHash string) context.Context
	// Auth is auth.enabled: the console asks for a token to log in.
	Auth bool
	// Map is the topology as the Topology page draws it.
	Map    Map
	Logger *slog.Logger
	// Now is the clock (time.Now unless set), a test seam.
	Now func() time.Time
}

// Console serves /console.
type Console struct {
	cfg      Config
	auth     bool
	api      http.Handler
	vouch    func(context.Context, string) context.Context
	topology Map
	sessions sessions
	pages    map[string]*template.Template
	logger   *slog.Logger
	now      func() time.Time
}

// New builds the console from d. With no console.session_secret it
// signs sessions with a key of its own, made now.
func New(d Deps) (*Console, error) {
	now := d.Now
	if now == nil {
		now = time.Now
	}
	key := []byte(d.Config.SessionSecret)
	if len(key) == 0 {
		var err error
		if key, err = newKey(); err != nil {
			return nil, err
		}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Console{cfg: d.Config, auth: d.Auth, api: d.API, vouch: d.Vouch, topology: d.Map, logger: d.Logger, now: now,
		sessions: sessions{key: key, ttl: d.Config.SessionTTL, now: now}, pages: pages}, nil
}

// Handler serves the console's routes, to be mounted at /console.
func (c *Console) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(headers)
	assets, _ := fs.Sub(files, "assets")
	r.Get("/assets/{file}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, assets, chi.URLParam(r, "file"))
	})
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			redirect(w, r, "overview")
			return
		}
		redirect(w, r, "console/") // /console: pages live under /console/
	})
	r.Get("/login", c.loginPage)
	r.Post("/login", c.login)
	r.Group(func(r chi.Router) {
		r.Use(c.signedIn)
		r.Post("/logout", c.logout)
		r.Get("/overview", c.overviewPage)
		r.Get("/failures", c.failuresPage)
		r.Get("/failures/{id}", c.failurePage)
		r.Post("/failures/act", c.failuresAct)
		r.Get("/redrives", c.redrivesPage)
		r.Get("/redrives/plan", c.planPage)
		r.Post("/redrives/plan", c.planPage) // the rows ticked on the Failures page
		r.Post("/redrives", c.startRedrive)
		r.Get("/redrives/{id}", c.redrivePage)
		r.Get("/redrives/{id}/progress", c.redriveProgress)
		r.Post("/redrives/{id}/{verb}", c.moveRedrive)
		r.Get("/journey", c.journeyPage)
		r.Get("/audit", c.auditPage)
		r.Get("/topology", c.topologyPage)
	})
	return r
}

// csp allows the console's own scripts, styles and images alone: no
// inline script or style, no eval, no frames, forms posting to itself.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// headers sets the security headers on every answer of the console.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// redirect answers 303 to to, relative to r's path, so that it holds
// behind a proxy's prefix.
func redirect(w http.ResponseWriter, r *http.Request, to string) {
	w.Header().Set("Location", to)
	w.WriteHeader(http.StatusSeeOther)
}

// root is the relative path from r's page to the console's root
// (/console/): "./" on /console/failures, "../" on /console/failures/7.
// Every link and asset is written from it, so pages work behind any
// prefix without knowing it.
func root(r *http.Request) string {
	rest := strings.TrimPrefix(r.URL.Path, "/console/")
	if rest == r.URL.Path {
		return "console/"
	}
	if n := strings.Count(rest, "/"); n > 0 {
		return strings.Repeat("../", n)
	}
	return "./"
}

// prefix is where a proxy serves moenda: console.path_prefix, else the
// proxy's X-Forwarded-Prefix when it is a plain path.
func (c *Console) prefix(r *http.Request) string {
	if c.cfg.PathPrefix != "" {
		return c.cfg.PathPrefix
	}
	if p := strings.TrimSuffix(r.Header.Get("X-Forwarded-Prefix"), "/"); validPrefix(p) {
		return p
	}
	return ""
}

// me is the caller as GET /v1/admin/me answers.
type me struct {
	Name    string   `json:"name"`
	Role    string   `json:"role"`
	Auth    bool     `json:"auth"`
	Actions []string `json:"actions"`
}

// can says whether the caller may take action (as /v1/admin/me names
// it).
func (m me) can(action string) bool { return slices.Contains(m.Actions, action) }

// request is what a signed-in request carries for its page.
type request struct {
	session session
	me      me
}

type requestKey struct{}

func withRequest(ctx context.Context, rq request) context.Context {
	return context.WithValue(ctx, requestKey{}, rq)
}

func requestOf(r *http.Request) request {
	v, _ := r.Context().Value(requestKey{}).(request)
	return v
}

// signedIn lets a request through with its session and the caller the
// API sees, and checks the CSRF token of a state-changing one. Without a
// session: with auth on, it goes to the login page; with auth off, every
// visitor is the API's anonymous admin, and gets a session at once (its
// CSRF token needs one).
func (c *Console) signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ss, ok := c.sessions.read(r)
		if !ok {
			ss = c.sessions.fresh("")
		}
		var m me
		status := http.StatusUnauthorized
		var err error
		if ss.Token != "" || !c.auth {
			status, err = c.call(r.Context(), ss, http.MethodGet, "/v1/admin/me", nil, &m)
		}
		switch {
		case status == http.StatusUnauthorized:
			// No login yet, or its token is no longer one of auth.tokens.
			if ok && ss.Token != "" {
				http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), session{}))
			}
			if r.Method != http.MethodGet {
				c.fail(w, r, http.StatusUnauthorized, errors.New("your session has ended: log in again"))
				return
			}
			redirect(w, r, root(r)+"login")
			return
		case err != nil:
			c.fail(w, r, status, err)
			return
		}
		if !ok {
			http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), ss))
		}
		if !isRead(r.Method) {
			if err := r.ParseForm(); err != nil {
				c.fail(w, r, http.StatusBadRequest, fmt.Errorf("the form could not be read: %w", err))
				return
			}
		}
		if !isRead(r.Method) && (!ok || !c.sessions.checkCSRF(r, ss)) {
			c.fail(w, r, http.StatusForbidden, errors.New("this form is stale or was not sent by the console (its CSRF token is missing or wrong): reload the page and try again"))
			return
		}
		next.ServeHTTP(w, r.WithContext(withRequest(r.Context(), request{session: ss, me: m})))
	})
}

func isRead(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// apiError is an answer of the API other than 2xx: its status and its
// words.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// call sends a request to the API in-process as the session's caller,
// decodes a 2xx answer's JSON into out, and returns the status. An
// answer of 4xx or 5xx comes back as an *apiError with the API's own
// message.
func (c *Console) call(ctx context.Context, ss session, method, path string, query url.Values, out any) (int, error) {
	if ss.Token != "" {
		ctx = c.vouch(ctx, ss.Token)
	}
	return c.send(ctx, method, path, query, nil, out)
}

// send runs one request through the API handler. The request starts a
// routing of its own: the console's chi context is dropped, or the API's
// router would take the console's route for its own.
func (c *Console) send(ctx context.Context, method, path string, query url.Values, header http.Header, out any) (int, error) {
	ctx = context.WithValue(ctx, chi.RouteCtxKey, (*chi.Context)(nil))
	u := path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return 0, fmt.Errorf("console: %s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.api.ServeHTTP(rec, req)
	if rec.status >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(rec.body.Bytes(), &e) != nil || e.Error == "" {
			e.Error = http.StatusText(rec.status)
		}
		return rec.status, &apiError{status: rec.status, msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return rec.status, fmt.Errorf("console: read the answer of %s %s: %w", method, path, err)
		}
	}
	return rec.status, nil
}

// recorder keeps an in-process answer of the API.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

var _ http.ResponseWriter = (*recorder)(nil)

// fail shows an error page: the API's status and words for an
// *apiError, status and err's words otherwise, and a 500 without
// internals for anything else.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	var ae *apiError
	msg := err.Error()
	switch {
	case errors.As(err, &ae):
		status, msg = ae.status, ae.msg
	case status < 400:
		c.logger.ErrorContext(r.Context(), "console: a page failed", "path", r.URL.Path, "error", err)
		status, msg = http.StatusInternalServerError, "internal error; see the server log"
	}
	if status == http.StatusUnauthorized && r.Method == http.MethodGet {
		http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), session{}))
	}
	c.render(w, r, status, "error", "Error", map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": msg})
}

// view is what every page's template gets: its data, and the frame's.
type view struct {
	Title    string
	Page     string
	Root     string
	CSRF     string
	Me       me
	Data     any
	Refresh  bool
	SignedIn bool
}

// Can says whether the caller may take action: the page shows the others
// as not allowed.
func (v view) Can(action string) bool { return v.Me.can(action) }

// render writes page's template with data, in the console's frame.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	t, ok := c.pages[page]
	if !ok {
		http.Error(w, "no page "+page, http.StatusInternalServerError)
		return
	}
	rq := requestOf(r)
	v := view{Title: title, Page: page, Root: root(r), Me: rq.me, Data: data, SignedIn: rq.me.Name != ""}
	if rq.session.ID != "" {
		v.CSRF = c.sessions.csrf(rq.session)
	}
	var b bytes.Buffer
	name := "frame"
	if r.Header.Get("HX-Request") == "true" && t.Lookup("partial") != nil {
		name = "partial"
	}
	if err := t.ExecuteTemplate(&b, name, v); err != nil {
		c.logger.ErrorContext(r.Context(), "console: render a page", "page", page, "error", err)
		http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
