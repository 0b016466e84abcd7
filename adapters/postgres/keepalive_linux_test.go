package postgres_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
)

// Every connection of the pool notices a silent peer at both ends: the
// client's socket has the configured keepalive and TCP_USER_TIMEOUT, and
// the server applies the same to its side of the session. Without them a
// dead client keeps its session, and any lock it holds, for the kernel's
// two hours.
func TestConnectionsSetKeepalivesAtBothEnds(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	cfg := postgres.DefaultConfig()
	cfg.URL = db.URL
	cfg.KeepaliveIdle, cfg.KeepaliveInterval, cfg.KeepaliveCount, cfg.UserTimeout = 7*time.Second, 2*time.Second, 4, 15*time.Second
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	server := map[string]string{}
	for _, name := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		server[name] = v
	}
	want := map[string]string{"tcp_keepalives_idle": "7", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "4", "tcp_user_timeout": "15000"}
	for k, v := range want {
		if server[k] != v {
			t.Errorf("server side %s = %q, want %q", k, server[k], v)
		}
	}

	tcp, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
	if !ok {
		t.Skipf("the connection is %T, not TCP", conn.Conn().PgConn().Conn())
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	client := map[string]int{}
	opts := []struct {
		name         string
		level, value int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
		{"TCP_USER_TIMEOUT", unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
	}
	if err := raw.Control(func(fd uintptr) {
		for _, o := range opts {
			v, err := unix.GetsockoptInt(int(fd), o.level, o.value)
			if err != nil {
				t.Errorf("%s: %v", o.name, err)
			}
			client[o.name] = v
		}
	}); err != nil {
		t.Fatal(err)
	}
	wantClient := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 7, "TCP_KEEPINTVL": 2, "TCP_KEEPCNT": 4, "TCP_USER_TIMEOUT": 15000}
	for k, v := range wantClient {
		if client[k] != v {
			t.Errorf("client side %s = %d, want %d", k, client[k], v)
		}
	}
}

// Settings PostgreSQL cannot take, or that would never end a dead
// connection, are refused before any connection, each with its key.
func TestKeepaliveSettingsAreValidated(t *testing.T) {
	cfg := postgres.DefaultConfig()
	cfg.KeepaliveIdle, cfg.KeepaliveInterval, cfg.KeepaliveCount, cfg.UserTimeout = 1500*time.Millisecond, 0, 0, -time.Second
	err := cfg.Validate()
	for _, key := range []string{"postgres.keepalive_idle", "postgres.keepalive_interval", "postgres.keepalive_count", "postgres.user_timeout"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("the error %v does not name %s", err, key)
		}
	}
}
