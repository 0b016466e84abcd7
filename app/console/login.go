package console

import (
	"errors"
	"net/http"
	"strings"
)

// loginPage asks for a token, with auth on; with auth off there is
// nothing to ask, and it goes to the pages. A visitor gets a session with
// no token first: the login form's CSRF token is derived from it.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if !c.auth {
		redirect(w, r, "overview")
		return
	}
	ss, ok := c.sessions.read(r)
	if !ok {
		ss = c.sessions.fresh("")
		http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), ss))
	}
	c.renderLogin(w, r, http.StatusOK, ss, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, ss session, problem string) {
	r = r.WithContext(withRequest(r.Context(), request{session: ss}))
	c.render(w, r, status, "login", "Log in", map[string]any{"Problem": problem})
}

// login checks the token the operator typed with the API itself (GET
// /v1/admin/me with it as a bearer token, so a wrong one is refused and
// audited as any other), and starts a session with a new id: whatever id
// the browser had before the login is worth nothing after it.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !c.auth {
		redirect(w, r, "overview")
		return
	}
	ss, ok := c.sessions.read(r)
	if !ok || !c.sessions.checkCSRF(r, ss) {
		ss = c.sessions.fresh("")
		http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), ss))
		c.renderLogin(w, r, http.StatusForbidden, ss, "The form had expired. Type the token again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		c.renderLogin(w, r, http.StatusBadRequest, ss, "Type a token: the one your administrator gave you, with the viewer or admin role.")
		return
	}
	var m me
	status, err := c.send(r.Context(), http.MethodGet, "/v1/admin/me", nil, http.Header{"Authorization": {"Bearer " + token}}, &m)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			c.fail(w, r, status, err)
			return
		}
		msg := "That token is not one of this moenda's tokens."
		if status == http.StatusForbidden {
			msg = "That token may not use the console: it needs the viewer or admin role."
		}
		c.renderLogin(w, r, status, ss, msg)
		return
	}
	http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), c.sessions.fresh(TokenHash(token))))
	redirect(w, r, "overview")
}

// logout drops the session cookie. The session is stateless: a copy of
// the cookie taken before stays valid until it expires
// (console.session_ttl), or until its token leaves auth.tokens.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, c.sessions.cookie(r, c.prefix(r), session{}))
	if !c.auth {
		redirect(w, r, "overview")
		return
	}
	redirect(w, r, "login")
}
