package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "moenda_console"

// csrfField is the form field, and csrfHeader the header htmx sends,
// that carry a session's CSRF token.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// session is what the signed cookie holds. It is stateless: the server
// keeps nothing, so a session lives until it expires or its cookie is
// dropped (logout), and a token taken out of auth.tokens ends every
// session made with it at the next request, when the API no longer
// knows its hash.
type session struct {
	// ID is random, made afresh at each login; the CSRF token is derived
	// from it.
	ID string
	// Token is the SHA-256, in hex, of the token the operator logged in
	// with: the API checks it as it checks a bearer token's, on every
	// request. Empty before a login, and with auth off.
	Token   string
	Expires time.Time
}

// sessions signs and reads session cookies with key (HMAC-SHA256).
type sessions struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

// newKey is a random signing key, for a process given none.
func newKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("console: make a session key: %w", err)
	}
	return k, nil
}

// fresh is a new session for the token of hash tokenHash ("" for none).
func (s sessions) fresh(tokenHash string) session {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand's Read never fails (Go 1.24+)
	return session{ID: hex.EncodeToString(b), Token: tokenHash, Expires: s.now().Add(s.ttl)}
}

// encode is the cookie value of ss: its fields, then their MAC.
func (s sessions) encode(ss session) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(ss.ID + "|" + ss.Token + "|" + strconv.FormatInt(ss.Expires.Unix(), 10)))
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac("session|"+payload))
}

// decode reads a cookie value: false when it is malformed, its MAC is
// wrong, or it has expired.
func (s sessions) decode(v string) (session, bool) {
	payload, sig, ok := strings.Cut(v, ".")
	if !ok {
		return session{}, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac("session|"+payload)) {
		return session{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return session{}, false
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 3 {
		return session{}, false
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !s.now().Before(time.Unix(exp, 0)) {
		return session{}, false
	}
	return session{ID: parts[0], Token: parts[1], Expires: time.Unix(exp, 0)}, true
}

// csrf is the CSRF token of ss: a MAC of its id, so it needs no storage
// and changes with each login.
func (s sessions) csrf(ss session) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf|" + ss.ID))
}

// checkCSRF reports whether r carries ss's CSRF token, in its form or in
// the header htmx sends.
func (s sessions) checkCSRF(r *http.Request, ss session) bool {
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	want := s.csrf(ss)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (s sessions) mac(msg string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// read is r's session, if its cookie holds a valid one.
func (s sessions) read(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	return s.decode(c.Value)
}

// cookie is the session cookie of ss for r: HttpOnly, SameSite=Strict,
// Secure unless r reached a loopback address over plain HTTP, with the
// path of the console behind prefix. A zero ss clears the cookie.
func (s sessions) cookie(r *http.Request, prefix string, ss session) *http.Cookie {
	c := &http.Cookie{Name: cookieName, Path: prefix + "/console", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)}
	if ss.ID == "" {
		c.MaxAge = -1
		return c
	}
	c.Value = s.encode(ss)
	c.Expires = ss.Expires
	c.MaxAge = int(ss.Expires.Sub(s.now()).Seconds())
	return c
}

// secure reports whether the session cookie must be Secure for r: always
// but on a loopback host reached over plain HTTP (a developer's machine,
// where browsers keep Secure cookies anyway only for localhost).
func secure(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip == nil || !ip.IsLoopback()
}

// TokenHash is the SHA-256 of a bearer token, in hex, as auth.tokens
// hold it.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
