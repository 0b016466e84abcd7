package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A session cookie holds until it expires, and not a moment after; one
// signed with another key, or changed, is nobody's.
func TestSessionsExpireAndAreSigned(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := sessions{key: []byte("0123456789abcdef0123456789abcdef"), ttl: time.Hour, now: func() time.Time { return now }}
	ss := s.fresh(TokenHash("t"))
	v := s.encode(ss)
	if got, ok := s.decode(v); !ok || got.ID != ss.ID || got.Token != ss.Token {
		t.Fatalf("decode(encode) = %+v, %v", got, ok)
	}
	other := s
	other.key = []byte("fedcba9876543210fedcba9876543210")
	if _, ok := other.decode(v); ok {
		t.Error("a cookie signed with another key was taken")
	}
	payload, sig, _ := strings.Cut(v, ".")
	if _, ok := s.decode(payload + "x." + sig); ok {
		t.Error("a changed cookie was taken")
	}
	now = now.Add(time.Hour)
	if _, ok := s.decode(v); ok {
		t.Error("an expired session was taken")
	}
	if s.csrf(ss) == s.csrf(s.fresh(ss.Token)) {
		t.Error("two sessions share a CSRF token")
	}
}

// The cookie is Secure everywhere but on a loopback host over plain HTTP.
func TestSessionCookieIsSecureOffLoopback(t *testing.T) {
	for _, tt := range []struct {
		host, proto string
		secure      bool
	}{
		{"127.0.0.1:8080", "", false},
		{"localhost:8080", "", false},
		{"[::1]:8080", "", false},
		{"127.0.0.1:8080", "https", true},
		{"moenda.example.com", "", true},
		{"10.0.0.5:8080", "", true},
	} {
		r := httptest.NewRequest(http.MethodGet, "/console/failures", nil)
		r.Host = tt.host
		if tt.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tt.proto)
		}
		if got := secure(r); got != tt.secure {
			t.Errorf("secure(%s, %q) = %v, want %v", tt.host, tt.proto, got, tt.secure)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	bad := Config{SessionSecret: "short-Secret-0f", SessionTTL: time.Second, PathPrefix: "moenda/"}
	err := bad.Validate()
	for _, want := range []string{"console.session_secret must be at least 32 bytes", "console.session_ttl", "console.path_prefix"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q in it", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "short-Secret-0f") {
		t.Errorf("the error quotes the secret: %v", err)
	}
	for p, ok := range map[string]bool{"/moenda": true, "/a/b-c_d.e": true, "/": false, "//evil.example": false, "/a/../b": false, "/a/": false, `/a"b`: false} {
		if validPrefix(p) != ok {
			t.Errorf("validPrefix(%q) = %v, want %v", p, !ok, ok)
		}
	}
}

// root is the relative way from a page to the console's root.
func TestRoot(t *testing.T) {
	for path, want := range map[string]string{"/console": "console/", "/console/": "./", "/console/failures": "./", "/console/failures/7": "../", "/console/redrives/1/progress": "../../"} {
		if got := root(httptest.NewRequest(http.MethodGet, path, nil)); got != want {
			t.Errorf("root(%s) = %q, want %q", path, got, want)
		}
	}
}
