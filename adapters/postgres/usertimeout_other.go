//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeout is nil where TCP_USER_TIMEOUT does not exist: the client
// relies on its keepalive alone, the server still applies the setting.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
