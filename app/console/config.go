package console

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is what YAML sets for the console (console.*).
type Config struct {
	// ShowBodies shows dead letters' bodies to viewers. Bodies may carry
	// personal data: false shows them to admins alone.
	ShowBodies bool `koanf:"show_bodies"`
	// SessionSecret signs the session cookies, from the environment alone
	// (MOENDA_CONSOLE__SESSION_SECRET), at least 32 bytes. Empty: each
	// process makes its own at start, so a restart logs everyone out and
	// replicas behind one address do not know each other's sessions.
	SessionSecret string `koanf:"session_secret"`
	// SessionTTL is how long a login lasts.
	SessionTTL time.Duration `koanf:"session_ttl"`
	// PathPrefix is where a reverse proxy serves moenda, like /moenda:
	// the session cookie's path starts with it. Empty: the proxy's
	// X-Forwarded-Prefix header, if any. Links are relative either way.
	PathPrefix string `koanf:"path_prefix"`
}

// DefaultConfig shows bodies, and keeps a login for a working day.
func DefaultConfig() Config {
	return Config{ShowBodies: true, SessionTTL: 8 * time.Hour}
}

// minSecret is the shortest session secret taken: an HMAC-SHA256 key
// shorter than its output is weaker than it need be.
const minSecret = 32

// Validate reports every bad key at once.
func (c Config) Validate() error {
	var errs []error
	if c.SessionSecret != "" && len(c.SessionSecret) < minSecret {
		// The value is not quoted: it is a secret.
		errs = append(errs, fmt.Errorf("console.session_secret must be at least %d bytes, got %d: make one with openssl rand -hex 32", minSecret, len(c.SessionSecret)))
	}
	if c.SessionTTL < time.Minute || c.SessionTTL > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("console.session_ttl must be 1m to 168h, got %s", c.SessionTTL))
	}
	if c.PathPrefix != "" && !validPrefix(c.PathPrefix) {
		errs = append(errs, fmt.Errorf("console.path_prefix %q must start with / and hold only A-Z a-z 0-9 / . _ - (no trailing /), like /moenda", c.PathPrefix))
	}
	return errors.Join(errs...)
}

// validPrefix reports whether p is a plain absolute path without a
// trailing slash: safe in a cookie's Path, whoever sent it.
func validPrefix(p string) bool {
	if len(p) < 2 || len(p) > 128 || p[0] != '/' || strings.HasSuffix(p, "/") || strings.Contains(p, "//") || strings.Contains(p, "..") {
		return false
	}
	for _, c := range []byte(p) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
