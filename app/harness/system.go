package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/await"
	"github.com/moenda/moenda/adapters/testenv/cluster"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers/faultprobe"
)

// Config names what a system runs on: the moenda binary its nodes run,
// and the local servers, on which it makes a database and a vhost of its
// own; or clusters the system starts for itself.
type Config struct {
	ServeBin    string
	PostgresURL string
	AMQPURL     string
	// RabbitNodes, when above zero, runs the system on a RabbitMQ cluster
	// of that many nodes started for it, not on AMQPURL: the nodes get
	// every node's URL (amqp.urls).
	RabbitNodes int
	// Standby, when not empty, runs the system on a PostgreSQL primary and
	// a streaming standby started for it, not on PostgresURL: StandbySync
	// or StandbyAsync. The nodes reach whichever takes writes through a
	// multi-host URL.
	Standby string
}

// The replication of a Config's standby.
const (
	StandbySync  = "sync"
	StandbyAsync = "async"
)

// ErrNotLocal refuses servers that are not on this machine: the harness
// creates and drops databases and vhosts on them, and its users restart
// and kill them.
var ErrNotLocal = errors.New("refuses to run against anything but this machine")

// CheckLocal reports ErrNotLocal unless both servers are on this machine.
func (c Config) CheckLocal() error {
	if c.Standby != "" && c.Standby != StandbySync && c.Standby != StandbyAsync {
		return fmt.Errorf("harness: standby %q is neither %s nor %s", c.Standby, StandbySync, StandbyAsync)
	}
	if (c.Standby == "" && !loopback(c.PostgresURL)) || (c.RabbitNodes == 0 && !loopback(c.AMQPURL)) {
		return fmt.Errorf("%w: postgres.url and amqp.url must name 127.0.0.1, ::1 or localhost", ErrNotLocal)
	}
	return nil
}

// System is what one run owns on the local servers: a database and a
// vhost of its own, the moenda serve processes running on them (nodes),
// and the history. Close removes the database and the vhost.
type System struct {
	cfg Config
	// Dir holds the run's files: configuration, node logs, history.
	Dir     string
	DBName  string
	DBURL   string
	VHost   string
	AMQPURL string
	// Pool is on the run's database, named CheckerApp.
	Pool        *pgxpool.Pool
	History     *History
	historyPath string
	Nodes       []*Node
	// NodeDB and NodeAMQP are the URLs the nodes connect to: the run's
	// database and vhost, or a proxy in front of them. NodeAMQPURLs, on a
	// cluster, are every node's (amqp.urls).
	NodeDB, NodeAMQP string
	NodeAMQPURLs     []string
	// Rabbit and Postgres are the clusters the system started for
	// itself (Config.RabbitNodes, Config.Standby); nil on the local
	// servers.
	Rabbit   *cluster.RabbitMQ
	Postgres *cluster.PostgresPair
	// Ledger says the nodes run the failure ledger (failures.enabled):
	// it, not the probe's dead-letter queue, keeps the dead letters, and
	// Observe reads them there.
	Ledger bool
	// Closers run when the system closes, after the nodes stop.
	Closers []func()
	admin   *pgxpool.Pool // the server's maintenance database
	// overlay is the run's configuration, layered on base.yaml, and
	// extra a file layered over it (--config) when not empty.
	overlay, extra string
	// counted holds the counters of Counted, added up over the
	// processes that ended.
	countedMu sync.Mutex
	counted   map[string]float64
}

// Node is one `moenda serve` process; it keeps its address across
// restarts, so writers find it again.
type Node struct {
	Name string
	Role string // serve --role; "" runs all of moenda
	Addr string
	Log  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// restarted is set once the node has been started a second time.
	restarted bool
	// index is the node's place in System.Nodes.
	index int
}

// rotate is a cluster's URLs starting from the node's own place among
// them: each process lists the nodes in another order, as a deployment
// spreading its connections over a cluster would, since moenda dials
// them in the order given.
func (nd *Node) rotate(urls []string) []string {
	if len(urls) == 0 {
		return nil
	}
	i := nd.index % len(urls)
	return append(slices.Clone(urls[i:]), urls[:i]...)
}

// NewSystem makes the database and the vhost, and writes the nodes'
// configuration (overlay, and extra over it when not empty) into dir,
// which it empties first: a re-run replaces what an earlier one kept.
func NewSystem(ctx context.Context, cfg Config, dir, overlay, extra string) (_ *System, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s := &System{cfg: cfg, Dir: dir, overlay: overlay, extra: extra}
	defer func() {
		if err != nil {
			s.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := s.startClusters(ctx); err != nil {
		return nil, err
	}
	if s.admin, err = pgxpool.New(ctx, onPath(s.cfg.PostgresURL, "postgres")); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL's maintenance database: %w", err)
	}
	s.DBName = "moenda_faults_" + id
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+s.DBName); err != nil {
		s.DBName = ""
		return nil, fmt.Errorf("create the run's database (the user needs CREATEDB): %w", err)
	}
	s.DBURL = onPath(s.cfg.PostgresURL, s.DBName)
	pc, err := pgxpool.ParseConfig(s.DBURL)
	if err != nil {
		return nil, err
	}
	// Named, so that a nemesis can end every session of the database but
	// the checker's.
	pc.ConnConfig.RuntimeParams["application_name"] = CheckerApp
	if s.Pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	name := "moenda-faults-" + id
	if _, err := s.Rabbitmqctl(ctx, "add_vhost", name); err != nil {
		return nil, err
	}
	s.VHost = name
	u, err := url.Parse(s.cfg.AMQPURL)
	if err != nil {
		return nil, fmt.Errorf("amqp.url: %w", err)
	}
	if _, err := s.Rabbitmqctl(ctx, "set_permissions", "-p", name, u.User.Username(), ".*", ".*", ".*"); err != nil {
		return nil, err
	}
	s.AMQPURL = onPath(s.cfg.AMQPURL, name)
	s.NodeDB, s.NodeAMQP = s.DBURL, s.AMQPURL
	if s.Rabbit != nil {
		for _, raw := range s.Rabbit.URLs() {
			s.NodeAMQPURLs = append(s.NodeAMQPURLs, onPath(raw, name))
		}
	}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	s.historyPath = filepath.Join(dir, "history.jsonl")
	if s.History, err = CreateHistory(s.historyPath); err != nil {
		return nil, err
	}
	return s, nil
}

// startClusters starts the clusters cfg asks for, under the system's
// directory, and points cfg at them.
func (s *System) startClusters(ctx context.Context) error {
	logger := slog.New(slog.DiscardHandler)
	if s.cfg.RabbitNodes > 0 {
		c, err := cluster.StartRabbitMQ(ctx, logger, filepath.Join(s.Dir, "rabbitmq"), s.cfg.RabbitNodes)
		if err != nil {
			return err
		}
		s.Rabbit = c
		s.cfg.AMQPURL = c.URLs()[0]
	}
	if s.cfg.Standby != "" {
		p, err := cluster.StartPostgresPair(ctx, logger, filepath.Join(s.Dir, "postgres"), s.cfg.Standby == StandbySync)
		if err != nil {
			return err
		}
		s.Postgres = p
		s.cfg.PostgresURL = p.URL("postgres")
	}
	return nil
}

// Rabbitmqctl runs rabbitmqctl quietly on the system's broker: the
// machine's, or a node of its cluster that is up.
func (s *System) Rabbitmqctl(ctx context.Context, args ...string) (string, error) {
	if s.Rabbit != nil {
		return s.Rabbit.CtlAny(ctx, args...)
	}
	return cluster.Rabbitmqctl(ctx, args...)
}

// DialAMQP connects to the system's vhost as the checker, through the
// first node that answers within a second: on a cluster, one node's
// absence does not blind the checker.
func (s *System) DialAMQP() (*amqp091.Connection, error) {
	urls := s.NodeAMQPURLs
	if len(urls) == 0 {
		urls = []string{s.AMQPURL}
	}
	var errs []error
	for _, u := range urls {
		conn, err := amqp091.DialConfig(u, amqp091.Config{Dial: amqp091.DefaultDial(time.Second),
			Properties: amqp091.Table{"connection_name": CheckerApp}})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// writeConfig writes the environment the nodes run: base.yaml, and the
// run's overlay on it.
func (s *System) writeConfig() error {
	base, err := configs.FS.ReadFile("base.yaml")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "base.yaml"), base, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "faults.yaml"), []byte(s.overlay), 0o600); err != nil {
		return err
	}
	if s.extra == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(s.Dir, "case.yaml"), []byte(s.extra), 0o600)
}

// onPath is the URL with another path: a PostgreSQL URL's database, an
// AMQP URL's vhost.
func onPath(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}

// Start starts n more nodes running all of moenda and waits until each
// answers /readyz.
func (s *System) Start(ctx context.Context, n int) error {
	_, err := s.StartRole(ctx, "", n)
	return err
}

// StartRole starts n more nodes of role (serve --role; "" for all) and
// waits until each answers /readyz.
func (s *System) StartRole(ctx context.Context, role string, n int) ([]*Node, error) {
	var started []*Node
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return started, err
		}
		addr := l.Addr().String()
		_ = l.Close()
		name := fmt.Sprintf("n%d", len(s.Nodes)+1)
		if role != "" {
			name += "-" + role
		}
		nd := &Node{Name: name, Role: role, Addr: addr, Log: filepath.Join(s.Dir, name+".log"), index: len(s.Nodes)}
		s.Nodes = append(s.Nodes, nd)
		started = append(started, nd)
		if err := s.Restart(ctx, nd); err != nil {
			return started, err
		}
	}
	return started, nil
}

// Restart starts nd's process (again) and waits until it is ready.
func (s *System) Restart(ctx context.Context, nd *Node) error {
	logf, err := os.OpenFile(nd.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	args := []string{"--config-dir", s.Dir, "--env", "faults"}
	if s.extra != "" {
		args = append(args, "--config", filepath.Join(s.Dir, "case.yaml"))
	}
	args = append(args, "serve")
	if nd.Role != "" {
		args = append(args, "--role", nd.Role)
	}
	cmd := exec.Command(s.cfg.ServeBin, args...)
	cmd.Env = append(os.Environ(), "MOENDA_POSTGRES__URL="+s.NodeDB, "MOENDA_AMQP__URL="+s.NodeAMQP, "MOENDA_AMQP__URLS="+strings.Join(nd.rotate(s.NodeAMQPURLs), ","), "MOENDA_HTTP__ADDR="+nd.Addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s serve: %w", s.cfg.ServeBin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	nd.mu.Lock()
	nd.restarted = nd.cmd != nil
	nd.cmd, nd.done = cmd, done
	nd.mu.Unlock()
	return nd.waitReady(ctx, time.Minute)
}

// waitReady waits until nd answers /readyz with 200.
func (nd *Node) waitReady(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		select {
		case <-nd.exited():
			return fmt.Errorf("node %s exited while starting; its log: %s", nd.Name, nd.Log)
		default:
		}
		resp, err := http.Get("http://" + nd.Addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !await.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("node %s was not ready within %s; its log: %s", nd.Name, bound, nd.Log)
}

// PID is the node's process id; 0 when it never started.
func (nd *Node) PID() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

// Restarted reports whether the node's process was started a second
// time: it is then a new process.
func (nd *Node) Restarted() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.restarted
}

// exited is closed once the node's process has ended.
func (nd *Node) exited() <-chan struct{} {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return nd.done
}

// Running reports whether the node's process runs.
func (nd *Node) Running() bool {
	select {
	case <-nd.exited():
		return false
	default:
		return true
	}
}

// kill ends the node's process with SIGKILL and waits for it.
func (nd *Node) kill() {
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
func (nd *Node) stop(bound time.Duration) (time.Duration, error) {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.mu.Unlock()
	if cmd == nil || !nd.Running() {
		return 0, nil
	}
	at := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return time.Since(at), nil
	case <-time.After(bound):
		nd.kill()
		return time.Since(at), fmt.Errorf("node %s did not exit within %s of SIGTERM", nd.Name, bound)
	}
}

// Kill ends nd with SIGKILL, having counted its counters first.
func (s *System) Kill(nd *Node) {
	s.count(nd)
	nd.kill()
}

// Stop sends nd SIGTERM, having counted its counters first, and returns
// how long the process took to exit; past bound it is killed and the
// error says so.
func (s *System) Stop(nd *Node, bound time.Duration) (time.Duration, error) {
	s.count(nd)
	return nd.stop(bound)
}

// Bases are the API addresses of the nodes that serve it.
func (s *System) Bases() []string {
	var out []string
	for _, nd := range s.Nodes {
		if nd.Role == "" || nd.Role == "api" {
			out = append(out, "http://"+nd.Addr)
		}
	}
	return out
}

// Mark records a nemesis line in the history.
func (s *System) Mark(fault, phase string) {
	_ = s.History.Add(Line{Fault: fault, Phase: phase, Op: Op{At: time.Now()}})
}

// Acknowledged counts the commands acknowledged so far, from the history.
func (s *System) Acknowledged() int { return s.History.count(OK) }

// CloseHistory closes the history and reads it back: the operations,
// for Check, and the nemesis's lines, for the recovery times.
func (s *System) CloseHistory() ([]Op, []Line, error) {
	closed := s.History.Close()
	f, err := os.Open(s.historyPath)
	if err != nil {
		return nil, nil, errors.Join(closed, err)
	}
	defer f.Close()
	ops, lines, err := ReadHistory(f)
	return ops, lines, errors.Join(closed, err)
}

// Close stops the nodes and removes the database and the vhost.
func (s *System) Close(ctx context.Context) {
	for _, nd := range s.Nodes {
		nd.kill()
	}
	for _, c := range s.Closers {
		c()
	}
	if s.History != nil {
		_ = s.History.Close()
	}
	if s.Pool != nil {
		s.Pool.Close()
	}
	if s.VHost != "" && s.Rabbit == nil {
		_, _ = cluster.Rabbitmqctl(ctx, "delete_vhost", s.VHost)
	}
	if s.admin != nil {
		if s.DBName != "" {
			_, _ = s.admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, s.DBName)
			_, _ = s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.DBName+" WITH (FORCE)")
		}
		s.admin.Close()
	}
	if s.Rabbit != nil {
		s.Rabbit.Close()
	}
	if s.Postgres != nil {
		s.Postgres.Close()
	}
}

// Terminate ends every session of the run's database but the checker's.
func (s *System) Terminate(ctx context.Context) (int, error) {
	var n int
	err := s.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND application_name <> $2`, s.DBName, CheckerApp).Scan(&n)
	return n, err
}

// CheckerApp is the application and connection name of the checker's
// own sessions and connections.
const CheckerApp = "moenda-faults"

// loopback reports whether a URL's host is this machine.
func loopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	return u.Host != "" && !strings.Contains(u.Host, ",") && loopbackHost(u.Hostname())
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ProbeQueues are the queues of the probe the checker watches.
var ProbeQueues = struct{ Work, DLQ, Unrouted string }{faultprobe.Queue, faultprobe.Queue + ".dlq", faultprobe.Exchange + ".unrouted"}
