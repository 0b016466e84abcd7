package postgres

import (
	"errors"
	"strings"
	"testing"
)

// A session names its host and process within PostgreSQL's 63 bytes,
// keeping the process id whole however long the host name.
func TestApplicationName(t *testing.T) {
	for _, tt := range []struct {
		name string
		host func() (string, error)
		want string
	}{
		{"a host", func() (string, error) { return "relay-1", nil }, "moenda relay-1 pid 4242"},
		{"no host name", func() (string, error) { return "", errors.New("no") }, "moenda unknown-host pid 4242"},
		{"a long host", func() (string, error) { return strings.Repeat("h", 80), nil }, "moenda " + strings.Repeat("h", 63-len("moenda  pid 4242")) + " pid 4242"},
	} {
		got := applicationName(tt.host, 4242)
		if got != tt.want || len(got) > 63 {
			t.Errorf("%s: %q (%d bytes), want %q", tt.name, got, len(got), tt.want)
		}
	}
}
