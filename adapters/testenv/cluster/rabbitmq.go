// Package cluster starts clusters of the services moenda runs on, on this
// machine, for the tests and the fault suite: RabbitMQ nodes joined in one
// cluster, each a rabbitmq-server of its own on loopback ports of its own.
// They live in a directory the caller gives, and leave the machine's own
// services (5672, 5432) alone.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// RabbitMQ is a cluster of RabbitMQ nodes started by StartRabbitMQ.
type RabbitMQ struct {
	logger *slog.Logger
	// server and ctl are the paths of rabbitmq-server and rabbitmqctl.
	server, ctl string
	// Nodes are the cluster's nodes; the first is the one the others
	// joined.
	Nodes []*RabbitNode

	mu sync.Mutex
	// asked is the node CtlAny asks, of the majority when it was chosen
	// at chosen.
	asked  *RabbitNode
	chosen time.Time
}

// RabbitNode is one node of a RabbitMQ cluster.
type RabbitNode struct {
	// Name is the node's Erlang name, rabbitN-ID@localhost: ID is the
	// cluster's, so that two clusters on one machine (two test processes)
	// neither share a name with epmd nor reach each other's nodes.
	Name string
	// Port is its AMQP port on 127.0.0.1, and DistPort its Erlang
	// distribution port (the one the other nodes reach it on).
	Port, DistPort int
	dir            string
	env            []string

	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when cmd's process has been waited for.
	exited chan struct{}
	// suspended is set between Suspend and Resume.
	suspended bool
}

// URL is the node's AMQP URL.
func (n *RabbitNode) URL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port)
}

// Dir is the node's directory: its configuration, data and logs (log/).
func (n *RabbitNode) Dir() string { return n.dir }

// URLs are the nodes' AMQP URLs, in order: amqp.urls for a process that
// spreads its connections over the cluster.
func (c *RabbitMQ) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// cookie is the Erlang cookie the nodes and rabbitmqctl share, in the
// cluster's own home directory: not the machine's node's.
const cookie = "moenda-test-cluster"

// StartRabbitMQ starts n RabbitMQ nodes under dir and joins them in one
// cluster, with pause_minority partition handling, the guest user allowed
// from loopback, and no plugins. It returns once every node has started
// and sees the others; on an error it stops what it started.
func StartRabbitMQ(ctx context.Context, logger *slog.Logger, dir string, n int) (_ *RabbitMQ, err error) {
	server, ctl, err := rabbitBinaries()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(cookie), 0o400); err != nil && !errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("cluster: the Erlang cookie: %w", err)
	}
	c := &RabbitMQ{logger: logger, server: server, ctl: ctl}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := range n {
		node, err := newRabbitNode(dir, home, id, i+1)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, node := range c.Nodes {
		g.Go(func() error { return c.start(gctx, node) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, node := range c.Nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", c.Nodes[0].Name}, {"start_app"}} {
			if _, err := c.Ctl(ctx, node, args...); err != nil {
				return nil, err
			}
		}
	}
	logger.Info("cluster: RabbitMQ started", "nodes", n, "urls", strings.Join(c.URLs(), " "))
	return c, nil
}

// rabbitBinaries finds rabbitmq-server and rabbitmqctl. Debian's
// /usr/sbin ones switch to the rabbitmq user when run as root, whose
// cookie and files the cluster's nodes do not share: the scripts they
// wrap are taken first.
func rabbitBinaries() (server, ctl string, err error) {
	for _, dir := range []string{"/usr/lib/rabbitmq/bin", ""} {
		if server, err = exec.LookPath(filepath.Join(dir, "rabbitmq-server")); err != nil {
			continue
		}
		if ctl, err = exec.LookPath(filepath.Join(dir, "rabbitmqctl")); err == nil {
			return server, ctl, nil
		}
	}
	return "", "", fmt.Errorf("cluster: rabbitmq-server is not installed (Debian's rabbitmq-server package; .ci/services installs it): %w", err)
}

// advanced is the nodes' advanced.config: what README's broker failover
// section recommends for quorum queues. A quorum queue's at-least-once
// dead-letter worker (moenda's retry queues) sends the messages it
// dead-letters again only once their confirm has waited
// dead_letter_worker_publisher_confirm_timeout; after a leader's death,
// RabbitMQ's default of 3 minutes holds retries back that long.
const advanced = "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 20000}]}].\n"

// newRabbitNode lays out node i's directories and configuration, on free
// loopback ports.
func newRabbitNode(dir, home, id string, i int) (*RabbitNode, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	node := &RabbitNode{Name: fmt.Sprintf("rabbit%d-%s@localhost", i, id), Port: ports[0], DistPort: ports[1],
		dir: filepath.Join(dir, fmt.Sprintf("rabbit%d", i))}
	for _, sub := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(node.dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	conf := fmt.Sprintf(`listeners.tcp.1 = 127.0.0.1:%d
loopback_users = none
cluster_partition_handling = pause_minority
log.file.level = info
log.console = false
`, node.Port)
	files := map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[].\n", "rabbitmq-env.conf": "", "advanced.config": advanced}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(node.dir, name), []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	node.env = append(os.Environ(),
		"HOME="+home,
		"RABBITMQ_NODENAME="+node.Name,
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", node.Port),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", node.DistPort),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_CONFIG_FILE="+filepath.Join(node.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(node.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(node.dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(node.dir, "rabbitmq-env.conf"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(node.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(node.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(node.dir, "pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	return node, nil
}

// start starts node's server and waits until it has booted.
func (c *RabbitMQ) start(ctx context.Context, node *RabbitNode) error {
	out, err := os.OpenFile(filepath.Join(node.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	cmd := exec.Command(c.server)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = node.env, node.dir, out, out
	// A process group of its own: Kill ends the node and nothing else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("cluster: start %s: %w", node.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a node killed on purpose exits with an error
		out.Close()
		close(exited)
	}()
	node.mu.Lock()
	node.cmd, node.exited, node.suspended = cmd, exited, false
	node.mu.Unlock()
	// await_startup fails at once while the node has not reached epmd
	// yet: it is asked again until the node answers, or exits.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := c.Ctl(waitCtx, node, "await_startup")
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("cluster: %s exited while starting (its logs are in %s): %w", node.Name, filepath.Join(node.dir, "log"), err)
		case <-waitCtx.Done():
			return fmt.Errorf("cluster: %s did not start in time: %w", node.Name, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Ctl runs rabbitmqctl on node with args, as the cluster's user, and
// returns its output.
func (c *RabbitMQ) Ctl(ctx context.Context, node *RabbitNode, args ...string) (string, error) {
	// An Erlang program that fails leaves erl_crash.dump where it runs:
	// in the node's directory, not the caller's.
	return runCtl(ctx, c.ctl, append([]string{"-n", node.Name}, args...), node.env, node.dir)
}

// Rabbitmqctl runs rabbitmqctl with args on the machine's own node, the
// one the command finds by itself.
func Rabbitmqctl(ctx context.Context, args ...string) (string, error) {
	return runCtl(ctx, "rabbitmqctl", args, nil, "")
}

// runCtl runs bin, a rabbitmqctl, quietly with args, in dir with env
// (the caller's when nil), within two minutes.
func runCtl(ctx context.Context, bin string, args, env []string, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-q"}, args...)...)
	cmd.Env, cmd.Dir = env, dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// CtlAny runs rabbitmqctl with args on a node of the cluster's majority
// that is up: a question about the whole cluster (its vhosts, its queues)
// while one node is away, or back from a partition. A node frozen past
// net_ticktime (SIGSTOP, a paused VM) comes back to find the others
// partitioned from it, and pause_minority, which pauses a node that sees
// the majority gone, leaves it running: measured on 3.10.8, it then
// reported itself the leader of the quorum queues it had led, with the 24
// messages one held before the freeze, for as long as it was watched,
// while the other nodes counted 0. When no node is known to be of the
// majority, the first that answers is asked.
func (c *RabbitMQ) CtlAny(ctx context.Context, args ...string) (string, error) {
	if node := c.majority(ctx); node != nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := c.Ctl(ctx, node, args...)
		cancel()
		if err == nil {
			return out, nil
		}
		c.mu.Lock()
		c.asked = nil
		c.mu.Unlock()
	}
	var errs []error
	for _, node := range c.Nodes {
		if !node.Up() {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := c.Ctl(ctx, node, args...)
		cancel()
		if err == nil {
			return out, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return "", fmt.Errorf("cluster: rabbitmqctl %s: no node of the cluster is up", strings.Join(args, " "))
	}
	return "", errors.Join(errs...)
}

// majorityFor is how long CtlAny keeps asking the node it chose.
const majorityFor = 15 * time.Second

// majority returns the first node that is up and, by its own cluster
// status, partitioned from fewer than half of the cluster's nodes; nil
// when none answers so. The choice is kept majorityFor while the node
// stays up.
func (c *RabbitMQ) majority(ctx context.Context) *RabbitNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asked != nil && c.asked.Up() && time.Since(c.chosen) < majorityFor {
		return c.asked
	}
	c.asked = nil
	for _, node := range c.Nodes {
		if !node.Up() {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := c.Ctl(ctx, node, "cluster_status", "--formatter", "json")
		cancel()
		if err == nil && inMajority(out, node.Name, len(c.Nodes)) {
			c.asked, c.chosen = node, time.Now()
			return node
		}
	}
	return nil
}

// inMajority reads node's cluster status, in JSON: whether the nodes it is
// not partitioned from, itself included, are more than half of the n.
func inMajority(status, node string, n int) bool {
	var s struct {
		Partitions map[string][]string `json:"partitions"`
	}
	if json.Unmarshal([]byte(status), &s) != nil {
		return false
	}
	return n-len(s.Partitions[node]) > n/2
}

// QueueLeader is the node that leads queue in vhost, as a node that is up
// reports it: a quorum queue's leader, or the node a classic queue lives
// on.
func (c *RabbitMQ) QueueLeader(ctx context.Context, vhost, queue string) (*RabbitNode, error) {
	out, err := c.CtlAny(ctx, "list_queues", "-p", vhost, "--no-table-headers", "name", "pid", "leader")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != queue {
			continue
		}
		// A classic queue has no leader: its process's id names its
		// node, <rabbit1-c0ffee@localhost.1796292795.1147.0>.
		leader, _, _ := strings.Cut(strings.TrimPrefix(f[1], "<"), ".")
		if len(f) == 3 {
			leader = f[2]
		}
		for _, n := range c.Nodes {
			if n.Name == leader {
				return n, nil
			}
		}
		return nil, fmt.Errorf("cluster: queue %s is led by %s, no node of the cluster", queue, leader)
	}
	return nil, fmt.Errorf("cluster: queue %s has no leader: %q", queue, strings.TrimSpace(out))
}

// Up reports whether node's server runs and is not suspended.
func (n *RabbitNode) Up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.suspended {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Suspend stops node's processes with SIGSTOP: to the others it is a
// machine that no longer answers, without closing a connection, until
// Resume. Past net_ticktime (60 s by default) the others count it gone.
func (c *RabbitMQ) Suspend(node *RabbitNode) error { return c.signal(node, syscall.SIGSTOP, true) }

// Resume lets a suspended node run again.
func (c *RabbitMQ) Resume(node *RabbitNode) error { return c.signal(node, syscall.SIGCONT, false) }

func (c *RabbitMQ) signal(node *RabbitNode, sig syscall.Signal, suspended bool) error {
	node.mu.Lock()
	defer node.mu.Unlock()
	if node.cmd == nil {
		return fmt.Errorf("cluster: %s was never started", node.Name)
	}
	if err := syscall.Kill(-node.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("cluster: %s to %s: %w", sig, node.Name, err)
	}
	node.suspended = suspended
	c.logger.Info("cluster: RabbitMQ node signalled", "node", node.Name, "signal", sig.String())
	return nil
}

// Kill ends node's server with SIGKILL, as a machine's death would, and
// waits until it is gone.
func (c *RabbitMQ) Kill(node *RabbitNode) error {
	node.mu.Lock()
	cmd, exited := node.cmd, node.exited
	node.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cluster: kill %s: %w", node.Name, err)
	}
	<-exited
	c.logger.Info("cluster: RabbitMQ node killed", "node", node.Name)
	return nil
}

// Restart starts node's server again after Kill; it rejoins the cluster
// it was in.
func (c *RabbitMQ) Restart(ctx context.Context, node *RabbitNode) error {
	return c.start(ctx, node)
}

// Close kills every node. The directory is the caller's to remove.
func (c *RabbitMQ) Close() {
	for _, node := range c.Nodes {
		if err := c.Kill(node); err != nil {
			c.logger.Warn("cluster: stop", "node", node.Name, "err", err)
		}
	}
}
