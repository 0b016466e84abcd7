package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// Roles a platform token may carry.
const (
	// RolePublisher may publish: POST /v1/events and the write routes of
	// plugins that leave authentication to the platform.
	RolePublisher = "publisher"
	// RoleViewer may read the administration endpoints (GET /v1/admin/*):
	// the failure ledger, plans, the audit; it changes nothing.
	RoleViewer = "viewer"
	// RoleAdmin may use every administration endpoint, /v1/admin/*: what
	// a viewer reads, and the actions.
	RoleAdmin = "admin"
)

var roles = []string{RolePublisher, RoleViewer, RoleAdmin}

// AuthConfig sets the platform's bearer tokens. They guard writes and
// administration; reads (/healthz, /readyz, /v1/catalog) stay open. A
// plugin that authenticates its own users (locacoes) is not guarded by
// them.
type AuthConfig struct {
	// Enabled asks for a token on the guarded routes.
	Enabled bool `koanf:"enabled"`
	// Tokens are "role:sha256" or "role:name:sha256", the SHA-256 of the
	// token in hex, so the configuration never holds a token itself; list
	// a hash twice to give it both roles. The name says who holds it in
	// the audit; without one, a token is named after its role and the
	// start of its hash. From the environment:
	// MOENDA_AUTH__TOKENS=publisher:<hex>,admin:ana:<hex>.
	Tokens []string `koanf:"tokens"`
	// AllowPublicWithoutAuth lets the server listen beyond this machine
	// with Enabled off. Without it, that configuration is refused: anyone
	// who reaches the port could publish.
	AllowPublicWithoutAuth bool `koanf:"allow_public_without_auth"`
}

// validate reports every problem; addr is http.addr.
func (a AuthConfig) validate(addr string) error {
	var errs []error
	for i, t := range a.Tokens {
		role, name, hash, ok := parseToken(t)
		if !ok || !slices.Contains(roles, role) {
			errs = append(errs, fmt.Errorf("auth.tokens[%d] must be ROLE:SHA256 or ROLE:NAME:SHA256 with ROLE one of %s", i, strings.Join(roles, ", ")))
			continue
		}
		if !validID(name) {
			errs = append(errs, fmt.Errorf("auth.tokens[%d]: the name must be 1 to 128 characters of A-Z a-z 0-9 . _ -", i))
		}
		if b, err := hex.DecodeString(hash); err != nil || len(b) != sha256.Size {
			// The value is not quoted: it may be the token itself.
			errs = append(errs, fmt.Errorf("auth.tokens[%d]: the value after %s: is not a SHA-256 in hex (64 hex digits, not %d characters); the token itself never goes in the configuration, its hash does: printf %%s \"$TOKEN\" | sha256sum", i, role, len(hash)))
		}
	}
	if !a.Enabled && !a.AllowPublicWithoutAuth && !loopback(addr) {
		errs = append(errs, fmt.Errorf("http.addr %s listens beyond this machine while auth.enabled is false, so anyone who reaches the port could publish events: set auth.enabled with auth.tokens, listen on 127.0.0.1, or set auth.allow_public_without_auth", addr))
	}
	return errors.Join(errs...)
}

// loopback reports whether addr (host:port) listens on this machine only.
func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseToken reads an auth.tokens entry: role:sha256 or role:name:sha256.
// A token with no name is named after its role and the start of its hash.
func parseToken(s string) (role, name, hash string, ok bool) {
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		role, hash = parts[0], parts[1]
		name = role + "-" + hash[:min(8, len(hash))]
	case 3:
		role, name, hash = parts[0], parts[1], parts[2]
	default:
		return "", "", "", false
	}
	return role, name, hash, true
}

// tokens checks bearer tokens against the configured hashes.
type tokens struct {
	// refused, when set, is told of each refused request to the
	// administration (for the audit), with the caller when the token is
	// known.
	refused func(r *http.Request, caller Caller, code int, reason string)
	enabled bool
	hashes  [][sha256.Size]byte
	callers []Caller // callers[i] is who holds hashes[i], and what it may do
	logger  *slog.Logger
}

// Caller is who made a request, as its token says: its name and role.
// With auth off every caller is an admin named "anonymous".
type Caller struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

// anonymous is the caller of every request while auth.enabled is off;
// nobody, of a request whose token is missing or unknown.
var (
	anonymous = Caller{Name: "anonymous", Role: RoleAdmin}
	nobody    = Caller{Name: "unknown", Role: "none"}
)

// may says whether the role allows what role needs: an admin may do what
// a viewer may.
func may(has, needs string) bool { return has == needs || has == RoleAdmin && needs == RoleViewer }

func newTokens(a AuthConfig, logger *slog.Logger) tokens {
	t := tokens{enabled: a.Enabled, logger: logger}
	for _, s := range a.Tokens {
		role, name, hash, _ := parseToken(s) // validated by Load
		var h [sha256.Size]byte
		_, _ = hex.Decode(h[:], []byte(hash))
		t.hashes, t.callers = append(t.hashes, h), append(t.callers, Caller{Name: name, Role: role})
	}
	return t
}

// callerKey is the request context's key of its Caller.
type callerKey struct{}

// CallerOf is who made the request whose context ctx is, as the tokens
// guarding its route found (anonymous with auth off); nobody on a route
// they do not guard.
func CallerOf(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return nobody
}

// administer guards /v1/admin: reads need a viewer token (or an admin's),
// actions an admin token.
func (t tokens) administer(next http.Handler) http.Handler {
	read, act := t.require(RoleViewer, false)(next), t.require(RoleAdmin, false)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isRead(r.Method) {
			read.ServeHTTP(w, r)
		} else {
			act.ServeHTTP(w, r)
		}
	})
}

// require answers 401 to a request without a valid token and 403 to one
// whose token lacks role; writes only, when writesOnly is set.
func (t tokens) require(role string, writesOnly bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !t.enabled {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, anonymous)))
				return
			}
			if writesOnly && isRead(r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			sum, vouched := r.Context().Value(sessionKey{}).([sha256.Size]byte)
			if !vouched {
				raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				if !ok || raw == "" {
					w.Header().Set("WWW-Authenticate", `Bearer realm="moenda"`)
					t.refuse(w, r, nobody, http.StatusUnauthorized, "a token is required: send Authorization: Bearer <token> with a "+role+" token")
					return
				}
				sum = sha256.Sum256([]byte(raw))
			}
			caller, known, allowed := t.check(sum, role)
			switch {
			case !known:
				w.Header().Set("WWW-Authenticate", `Bearer realm="moenda", error="invalid_token"`)
				t.refuse(w, r, nobody, http.StatusUnauthorized, "the token is not one of auth.tokens")
			case !allowed:
				t.refuse(w, r, caller, http.StatusForbidden, "the token of "+caller.Name+" lacks the "+role+" role")
			default:
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
			}
		})
	}
}

// refuse answers code with msg, and leaves a trace of the refusal for
// audit: who asked for what, under which correlation id. The token itself
// is never logged.
func (t tokens) refuse(w http.ResponseWriter, r *http.Request, caller Caller, code int, msg string) {
	t.logger.WarnContext(r.Context(), "request refused", "status", code, "reason", msg, "method", r.Method, "path", r.URL.Path,
		"remote_addr", r.RemoteAddr, "correlation_id", event.CorrelationID(r.Context()))
	if t.refused != nil && strings.HasPrefix(r.URL.Path, "/v1/admin/") {
		t.refused(r, caller, code, msg)
	}
	httpjson.Error(w, code, msg)
}

// check compares a token's hash, sum, with every configured one in constant
// time, so the answer's timing says nothing of how close a guess came. It
// returns the caller the token names, with the role that allows role
// when one of its entries does.
func (t tokens) check(sum [sha256.Size]byte, role string) (caller Caller, known, allowed bool) {
	for i, h := range t.hashes {
		if subtle.ConstantTimeCompare(sum[:], h[:]) == 1 {
			if !allowed {
				caller = t.callers[i]
			}
			known = true
			allowed = allowed || may(t.callers[i].Role, role)
		}
	}
	return caller, known, allowed
}

// sessionKey is the request context's key of the SHA-256 of the token a
// console session was opened with: the console's in-process requests to
// /v1/admin carry it instead of an Authorization header, and are checked
// as a bearer token with that hash would be. Nothing outside this process
// can set it.
type sessionKey struct{}

// withSession marks ctx as a request made with the token whose SHA-256
// is tokenHash, in hex; a value that is not one is dropped, and the
// request then has no token at all.
func withSession(ctx context.Context, tokenHash string) context.Context {
	var sum [sha256.Size]byte
	if b, err := hex.DecodeString(tokenHash); err != nil || len(b) != sha256.Size {
		return ctx
	}
	_, _ = hex.Decode(sum[:], []byte(tokenHash))
	return context.WithValue(ctx, sessionKey{}, sum)
}

func isRead(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}
