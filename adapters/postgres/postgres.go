// Package postgres opens the PostgreSQL pool and runs units of work: one
// pgx transaction holding the business rows and the outbox rows.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/redact"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// Config is what YAML sets for PostgreSQL.
type Config struct {
	// URL is postgres://user:password@host:port/db; keep the password in
	// MOENDA_POSTGRES__URL rather than in a file.
	URL string `koanf:"url"`
	// MaxConns bounds the pool.
	MaxConns int32 `koanf:"max_conns"`
	// ConnectTimeout bounds the first connection at start.
	ConnectTimeout time.Duration `koanf:"connect_timeout"`
	// IdleInTransactionTimeout ends sessions that hold a transaction open
	// and idle: one would delay every outbox reader.
	IdleInTransactionTimeout time.Duration `koanf:"idle_in_transaction_timeout"`
	// KeepaliveIdle, KeepaliveInterval and KeepaliveCount are the TCP
	// keepalive of every connection, set at both ends: a connection whose
	// peer falls silent (its network path gone black) ends after
	// KeepaliveIdle + KeepaliveCount × KeepaliveInterval, on the client and
	// on the server. Without them the server keeps a dead client's session,
	// and the relay lock it holds, for the kernel's two hours.
	KeepaliveIdle     time.Duration `koanf:"keepalive_idle"`
	KeepaliveInterval time.Duration `koanf:"keepalive_interval"`
	KeepaliveCount    int           `koanf:"keepalive_count"`
	// UserTimeout is TCP_USER_TIMEOUT at both ends: data sent and not
	// acknowledged for this long ends the connection, where keepalive
	// probes do not run (they wait for an idle connection). 0 leaves the
	// kernel's default, which retransmits for about a quarter of an hour.
	UserTimeout time.Duration `koanf:"user_timeout"`
}

// DefaultConfig is the local PostgreSQL, a pool sized for a small machine,
// and sessions idle in a transaction ended after 30 s (one holds back the
// outbox readers of the cluster).
func DefaultConfig() Config {
	return Config{
		URL:                      "postgres://postgres@127.0.0.1:5432/moenda?sslmode=disable",
		MaxConns:                 8,
		ConnectTimeout:           5 * time.Second,
		IdleInTransactionTimeout: 30 * time.Second,
		KeepaliveIdle:            5 * time.Second,
		KeepaliveInterval:        5 * time.Second,
		KeepaliveCount:           3,
		UserTimeout:              20 * time.Second,
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if _, err := pgxpool.ParseConfig(c.URL); err != nil || c.URL == "" {
		errs = append(errs, fmt.Errorf("postgres.url %q must look like postgres://user@host:5432/db", redact.URL(c.URL)))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("postgres.max_conns must be at least 1, got %d", c.MaxConns))
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("postgres.connect_timeout must be positive, got %s", c.ConnectTimeout))
	}
	if c.IdleInTransactionTimeout < 0 {
		errs = append(errs, fmt.Errorf("postgres.idle_in_transaction_timeout must not be negative, got %s", c.IdleInTransactionTimeout))
	}
	// PostgreSQL counts its keepalive settings in whole seconds.
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"keepalive_idle", c.KeepaliveIdle}, {"keepalive_interval", c.KeepaliveInterval}} {
		if d.v < time.Second || d.v%time.Second != 0 {
			errs = append(errs, fmt.Errorf("postgres.%s must be a whole number of seconds, at least 1s, got %s", d.key, d.v))
		}
	}
	if c.KeepaliveCount < 1 {
		errs = append(errs, fmt.Errorf("postgres.keepalive_count must be at least 1, got %d", c.KeepaliveCount))
	}
	if c.UserTimeout < 0 || c.UserTimeout%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("postgres.user_timeout must be 0 or a positive number of milliseconds, got %s", c.UserTimeout))
	}
	return errors.Join(errs...)
}

// keepalive sets cfg's keepalives on pc at both ends: the dialer's socket
// options on the client, the session's tcp_* parameters on the server,
// which applies them to its side of the connection (not to a Unix
// socket).
func keepalive(pc *pgconn.Config, cfg Config) {
	pc.DialFunc = (&net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: cfg.KeepaliveIdle, Interval: cfg.KeepaliveInterval, Count: cfg.KeepaliveCount},
		Control:         userTimeout(cfg.UserTimeout),
	}).DialContext
	pc.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(int(cfg.KeepaliveIdle / time.Second))
	pc.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(int(cfg.KeepaliveInterval / time.Second))
	pc.RuntimeParams["tcp_keepalives_count"] = strconv.Itoa(cfg.KeepaliveCount)
	pc.RuntimeParams["tcp_user_timeout"] = strconv.FormatInt(cfg.UserTimeout.Milliseconds(), 10)
}

// Connect opens the pool and checks that PostgreSQL answers, so a wrong URL
// or a server that is down fails at start with one clear line.
func Connect(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: postgres.url: %w", redact.Error(err, cfg.URL))
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	if cfg.IdleInTransactionTimeout > 0 {
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(cfg.IdleInTransactionTimeout.Milliseconds(), 10)
	}
	keepalive(&pc.ConnConfig.Config, cfg)
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = applicationName(os.Hostname, os.Getpid())
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, unreachable{
			msg: fmt.Sprintf("postgres: cannot reach %s:%d/%s (check postgres.url or MOENDA_POSTGRES__URL, and that PostgreSQL is running): %s",
				pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, strings.Join(strings.Fields(err.Error()), " ")),
			err: err,
		}
	}
	return pool, nil
}

// unreachable keeps pgx's error, which spans a line per address tried, but
// reads as one line.
type unreachable struct {
	msg string
	err error
}

func (u unreachable) Error() string { return u.msg }
func (u unreachable) Unwrap() error { return u.err }

// Transactor runs units of work in pgx transactions with the outbox bound
// to each.
type Transactor struct {
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
}

// NewTransactor returns a Transactor over pool writing events to out,
// which is told of each commit that wrote events (Outbox.Committed), to
// wake the relays.
func NewTransactor(pool *pgxpool.Pool, out *outbox.Outbox) *Transactor {
	return &Transactor{pool: pool, outbox: out}
}

// txKey marks a context that runs inside one of t's units of work.
type txKey struct{ t *Transactor }

// InTx runs fn in one transaction and commits if fn returns nil. Called
// inside a unit of work of t (a handler's), it joins it: fn's writes commit
// with the rest of that unit or not at all.
func (t *Transactor) InTx(ctx context.Context, fn func(ctx context.Context, tx handlers.Tx) error) error {
	if x, ok := ctx.Value(txKey{t}).(*tx); ok {
		return fn(ctx, x)
	}
	return t.run(ctx, fn)
}

// run opens a unit of work, runs fn in it and commits if fn returns nil;
// then it runs the commit hooks and tells the outbox. A database that
// cannot be reached fails with handlers.ErrUnavailable.
func (t *Transactor) run(ctx context.Context, fn func(ctx context.Context, tx handlers.Tx) error) error {
	x := &tx{outbox: t.outbox}
	// fn's own error while its connection is still open is not the
	// database's going away, even when it is a network error: a handler's
	// SMTP server being down spends an attempt like any failure.
	var fnErr error
	connected := false
	err := pgx.BeginFunc(ctx, t.pool, func(ptx pgx.Tx) error {
		x.tx = ptx
		fnErr = fn(context.WithValue(ctx, txKey{t}, x), x)
		connected = !ptx.Conn().IsClosed()
		return fnErr
	})
	if err != nil {
		return classify(err, !(connected && err == fnErr))
	}
	for _, h := range x.hooks {
		h()
	}
	if x.published {
		t.outbox.Committed()
	}
	return nil
}

// unavailable marks err with handlers.ErrUnavailable when it says the
// database could not be reached or went away (a restart, a cut
// connection), or cannot take any write for now (read-only after a
// failover, its disk full, out of memory), rather than that it refused the
// work.
func unavailable(err error) error { return classify(err, true) }

// classify is unavailable; network says whether a network error in err
// may be the database's.
func classify(err error, network bool) error {
	if errors.Is(err, handlers.ErrUnavailable) {
		return err
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) { // whatever the server said, it would not take the connection
		return fmt.Errorf("%w: %w", handlers.ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "57P"), // admin shutdown, crash shutdown, cannot connect now
			pgErr.Code == "53300",                // too many connections
			// The server's state, not the work's: a standby that was the
			// primary before a failover and still has its address
			// (read_only_sql_transaction), a full disk, memory exhausted.
			// The same work succeeds once the address moves or space frees.
			pgErr.Code == "25006", pgErr.Code == "53100", pgErr.Code == "53200":
			return fmt.Errorf("%w: %w", handlers.ErrUnavailable, err)
		}
		return err
	}
	if !network {
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w: %w", handlers.ErrUnavailable, err)
	}
	return err
}

type tx struct {
	tx        pgx.Tx
	outbox    *outbox.Outbox
	hooks     []func()
	published bool
}

func (t *tx) Publish(ctx context.Context, events ...event.Event) error {
	t.published = t.published || len(events) > 0
	return t.outbox.Publish(ctx, t.tx, events...)
}

func (t *tx) Postgres() pgx.Tx { return t.tx }

func (t *tx) OnCommit(fn func()) { t.hooks = append(t.hooks, fn) }

// applicationName names the sessions of this process on the server
// (pg_stat_activity, and the status page's relay leader): its host and
// process id, within the 63 bytes PostgreSQL keeps. A URL that sets
// application_name keeps its own.
func applicationName(hostname func() (string, error), pid int) string {
	host, err := hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	name := fmt.Sprintf("moenda %s pid %d", host, pid)
	if len(name) > 63 {
		suffix := fmt.Sprintf(" pid %d", pid)
		name = name[:63-len(suffix)] + suffix
	}
	return name
}
