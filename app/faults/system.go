package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/poll"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers/faultprobe"
)

// system is what one case owns on the local servers: a database and a
// vhost of its own, the moenda serve processes running on them (nodes),
// and the history. close removes the database and the vhost.
type system struct {
	opts    Options
	dir     string // the case's files: configuration, node logs, history
	dbName  string
	dbURL   string
	vhost   string
	amqpURL string
	admin   *pgxpool.Pool // the server's maintenance database
	pool    *pgxpool.Pool // the case's database
	hist    *History
	histAt  string
	nodes   []*node
	// nodeDB and nodeAMQP are the URLs the nodes connect to: the case's
	// database and vhost, or a proxy in front of them.
	nodeDB, nodeAMQP string
	// closers run when the system closes, after the nodes stop.
	closers []func()
	// overlay is the case's configuration, layered on base.yaml, and
	// extra a file layered over it (--config) when not empty.
	overlay, extra string
}

// node is one `moenda serve` process; it keeps its address across
// restarts, so writers find it again.
type node struct {
	name string
	role string // serve --role; "" runs all of moenda
	addr string
	log  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// restarted is set once the node has been started a second time.
	restarted bool
}

func newSystem(ctx context.Context, opts Options, dir, overlay, extra string) (_ *system, err error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s := &system{opts: opts, dir: dir, overlay: overlay, extra: extra}
	defer func() {
		if err != nil {
			s.close(context.WithoutCancel(ctx))
		}
	}()
	if s.admin, err = pgxpool.New(ctx, onDatabase(opts.PostgresURL, "postgres")); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL's maintenance database: %w", err)
	}
	s.dbName = "moenda_faults_" + id
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+s.dbName); err != nil {
		s.dbName = ""
		return nil, fmt.Errorf("create the case's database (the user needs CREATEDB): %w", err)
	}
	s.dbURL = onDatabase(opts.PostgresURL, s.dbName)
	pc, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return nil, err
	}
	// Named, so that the nemesis ends every session of the database but
	// the checker's.
	pc.ConnConfig.RuntimeParams["application_name"] = checkerApp
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	name := "moenda-faults-" + id
	if _, err := rabbitmqctl(ctx, "add_vhost", name); err != nil {
		return nil, err
	}
	s.vhost = name
	u, _ := url.Parse(opts.AMQPURL) // checked by Run
	if _, err := rabbitmqctl(ctx, "set_permissions", "-p", name, u.User.Username(), ".*", ".*", ".*"); err != nil {
		return nil, err
	}
	u.Path = "/" + name
	s.amqpURL = u.String()
	s.nodeDB, s.nodeAMQP = s.dbURL, s.amqpURL
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	s.histAt = filepath.Join(dir, "history.jsonl")
	if s.hist, err = CreateHistory(s.histAt); err != nil {
		return nil, err
	}
	return s, nil
}

// writeConfig writes the environment the nodes run: base.yaml, and the
// case's overlay on it.
func (s *system) writeConfig() error {
	base, err := configs.FS.ReadFile("base.yaml")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "base.yaml"), base, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "faults.yaml"), []byte(s.overlay), 0o600); err != nil {
		return err
	}
	if s.extra == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(s.dir, "case.yaml"), []byte(s.extra), 0o600)
}

// onDatabase is the PostgreSQL URL with another database.
func onDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}

// start starts n more nodes running all of moenda and waits until each
// answers /readyz.
func (s *system) start(ctx context.Context, n int) error {
	_, err := s.startRole(ctx, "", n)
	return err
}

// startRole starts n more nodes of role (serve --role; "" for all) and
// waits until each answers /readyz.
func (s *system) startRole(ctx context.Context, role string, n int) ([]*node, error) {
	var started []*node
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return started, err
		}
		addr := l.Addr().String()
		_ = l.Close()
		name := fmt.Sprintf("n%d", len(s.nodes)+1)
		if role != "" {
			name += "-" + role
		}
		nd := &node{name: name, role: role, addr: addr, log: filepath.Join(s.dir, name+".log")}
		s.nodes = append(s.nodes, nd)
		started = append(started, nd)
		if err := s.run(ctx, nd); err != nil {
			return started, err
		}
	}
	return started, nil
}

// run starts nd's process and waits until it is ready.
func (s *system) run(ctx context.Context, nd *node) error {
	logf, err := os.OpenFile(nd.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	args := []string{"--config-dir", s.dir, "--env", "faults"}
	if s.extra != "" {
		args = append(args, "--config", filepath.Join(s.dir, "case.yaml"))
	}
	args = append(args, "serve")
	if nd.role != "" {
		args = append(args, "--role", nd.role)
	}
	cmd := exec.Command(s.opts.ServeBin, args...)
	cmd.Env = append(os.Environ(), "MOENDA_POSTGRES__URL="+s.nodeDB, "MOENDA_AMQP__URL="+s.nodeAMQP, "MOENDA_AMQP__URLS=", "MOENDA_HTTP__ADDR="+nd.addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s serve: %w", s.opts.ServeBin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	nd.mu.Lock()
	nd.restarted = nd.cmd != nil
	nd.cmd, nd.done = cmd, done
	nd.mu.Unlock()
	return s.waitReady(ctx, nd, time.Minute)
}

// waitReady waits until nd answers /readyz with 200.
func (s *system) waitReady(ctx context.Context, nd *node, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		select {
		case <-nd.exited():
			return fmt.Errorf("node %s exited while starting; its log: %s", nd.name, nd.log)
		default:
		}
		resp, err := http.Get("http://" + nd.addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !poll.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("node %s was not ready within %s; its log: %s", nd.name, bound, nd.log)
}

// pid is the node's process id; 0 when it never started.
func (nd *node) pid() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

// exited is closed once the node's process has ended.
func (nd *node) exited() <-chan struct{} {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return nd.done
}

func (nd *node) running() bool {
	select {
	case <-nd.exited():
		return false
	default:
		return true
	}
}

// kill ends the node's process with SIGKILL and waits for it.
func (nd *node) kill() {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// stop sends SIGTERM and returns how long the process took to exit; past
// bound it is killed and the error says so.
func (nd *node) stop(bound time.Duration) (time.Duration, error) {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.mu.Unlock()
	if cmd == nil || !nd.running() {
		return 0, nil
	}
	at := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return time.Since(at), nil
	case <-time.After(bound):
		nd.kill()
		return time.Since(at), fmt.Errorf("node %s did not exit within %s of SIGTERM", nd.name, bound)
	}
}

// bases are the API addresses of the nodes that serve it.
func (s *system) bases() []string {
	var out []string
	for _, nd := range s.nodes {
		if nd.role == "" || nd.role == "api" {
			out = append(out, "http://"+nd.addr)
		}
	}
	return out
}

// mark records a nemesis line in the history.
func (s *system) mark(fault, phase string) {
	_ = s.hist.Add(Line{Fault: fault, Phase: phase, Op: Op{At: time.Now()}})
}

// close stops the nodes and removes the database and the vhost.
func (s *system) close(ctx context.Context) {
	for _, nd := range s.nodes {
		nd.kill()
	}
	for _, c := range s.closers {
		c()
	}
	if s.hist != nil {
		_ = s.hist.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.vhost != "" {
		_, _ = rabbitmqctl(ctx, "delete_vhost", s.vhost)
	}
	if s.admin != nil {
		if s.dbName != "" {
			_, _ = s.admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, s.dbName)
			_, _ = s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.dbName+" WITH (FORCE)")
		}
		s.admin.Close()
	}
}

// terminate ends every session of the case's database but the checker's.
func (s *system) terminate(ctx context.Context) (int, error) {
	var n int
	err := s.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND application_name <> $2`, s.dbName, checkerApp).Scan(&n)
	return n, err
}

// rabbitmqctl runs rabbitmqctl quietly and returns its output.
func rabbitmqctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// checkerApp is the application name of the checker's sessions.
const checkerApp = "moenda-faults"

var errNotLoopback = errors.New("faults: refuses to run against anything but this machine")

// loopback reports whether a URL's host is this machine.
func loopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// probeQueues are the queues of the probe the checker watches.
var probeQueues = struct{ work, dlq, unrouted string }{faultprobe.Queue, faultprobe.Queue + ".dlq", faultprobe.Exchange + ".unrouted"}
