package app

import (
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
	// RoleAdmin may use the administration endpoints, /v1/admin/*.
	RoleAdmin = "admin"
)

var roles = []string{RolePublisher, RoleAdmin}

// AuthConfig sets the platform's bearer tokens. They guard writes and
// administration; reads (/healthz, /readyz, /v1/catalog) stay open. A
// plugin that authenticates its own users (locacoes) is not guarded by
// them.
type AuthConfig struct {
	// Enabled asks for a token on the guarded routes.
	Enabled bool `koanf:"enabled"`
	// Tokens are "role:sha256", the SHA-256 of the token in hex, so the
	// configuration never holds a token itself; list a hash twice to give
	// it both roles. From the environment:
	// MOENDA_AUTH__TOKENS=publisher:<hex>,admin:<hex>.
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
		role, hash, ok := strings.Cut(t, ":")
		if !ok || !slices.Contains(roles, role) {
			errs = append(errs, fmt.Errorf("auth.tokens[%d] must be ROLE:SHA256 with ROLE one of %s", i, strings.Join(roles, ", ")))
			continue
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

// tokens checks bearer tokens against the configured hashes.
type tokens struct {
	enabled bool
	hashes  [][sha256.Size]byte
	roles   []string // roles[i] is what hashes[i] may do
	logger  *slog.Logger
}

func newTokens(a AuthConfig, logger *slog.Logger) tokens {
	t := tokens{enabled: a.Enabled, logger: logger}
	for _, s := range a.Tokens {
		role, hash, _ := strings.Cut(s, ":") // validated by Load
		var h [sha256.Size]byte
		_, _ = hex.Decode(h[:], []byte(hash))
		t.hashes, t.roles = append(t.hashes, h), append(t.roles, role)
	}
	return t
}

// require answers 401 to a request without a valid token and 403 to one
// whose token lacks role; writes only, when writesOnly is set.
func (t tokens) require(role string, writesOnly bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !t.enabled || (writesOnly && isRead(r.Method)) {
				next.ServeHTTP(w, r)
				return
			}
			raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || raw == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="moenda"`)
				t.refuse(w, r, http.StatusUnauthorized, "a token is required: send Authorization: Bearer <token> with a "+role+" token")
				return
			}
			known, allowed := t.check(raw, role)
			switch {
			case !known:
				w.Header().Set("WWW-Authenticate", `Bearer realm="moenda", error="invalid_token"`)
				t.refuse(w, r, http.StatusUnauthorized, "the token is not one of auth.tokens")
			case !allowed:
				t.refuse(w, r, http.StatusForbidden, "the token lacks the "+role+" role")
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}

// refuse answers code with msg, and leaves a trace of the refusal for
// audit: who asked for what, under which correlation id. The token itself
// is never logged.
func (t tokens) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	t.logger.WarnContext(r.Context(), "request refused", "status", code, "reason", msg, "method", r.Method, "path", r.URL.Path,
		"remote_addr", r.RemoteAddr, "correlation_id", event.CorrelationID(r.Context()))
	httpjson.Error(w, code, msg)
}

// check compares the token's hash with every configured one in constant
// time, so the answer's timing says nothing of how close a guess came.
func (t tokens) check(token, role string) (known, allowed bool) {
	sum := sha256.Sum256([]byte(token))
	for i, h := range t.hashes {
		if subtle.ConstantTimeCompare(sum[:], h[:]) == 1 {
			known = true
			allowed = allowed || t.roles[i] == role
		}
	}
	return known, allowed
}

func isRead(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}
