package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/moenda/moenda/adapters/await"

	"github.com/moenda/moenda/adapters/testenv/cluster"
)

// The nemesis's tools: each acts on the local servers and returns once
// its action has taken effect. Those that stop a server wait until it is
// up again.

// closeConnections closes every AMQP connection of the case's vhost.
func (r *run) closeConnections(ctx context.Context) error {
	_, err := r.Rabbitmqctl(ctx, "close_all_connections", "--vhost", r.VHost, "moenda faults: connection storm")
	return err
}

// stopBroker stops the RabbitMQ application gracefully; startBroker starts
// it and waits until it runs.
func stopBroker(ctx context.Context) error {
	_, err := cluster.Rabbitmqctl(ctx, "stop_app")
	return err
}

func startBroker(ctx context.Context) error {
	if _, err := cluster.Rabbitmqctl(ctx, "start_app"); err != nil {
		return err
	}
	_, err := cluster.Rabbitmqctl(ctx, "await_startup")
	return err
}

// crashBroker kills the RabbitMQ node with SIGKILL.
func crashBroker(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "pkill", "-9", "-u", "rabbitmq", "beam.smp").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pkill -9 beam.smp: %w: %s", err, out)
	}
	for range 100 {
		if exec.CommandContext(ctx, "pgrep", "-u", "rabbitmq", "beam.smp").Run() != nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("beam.smp still runs 10 s after SIGKILL")
}

// bootBroker starts the RabbitMQ node as the machine's services do, and
// waits until it runs.
func bootBroker(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "rabbitmq-server", "-detached")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rabbitmq-server -detached: %w: %s", err, out)
	}
	var err error
	for range 60 {
		if _, err = cluster.Rabbitmqctl(ctx, "await_startup"); err == nil {
			return nil
		}
		if !await.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	return err
}

// suspendListeners stops the broker accepting connections and closes
// those of the case's vhost: the broker is unreachable.
func (r *run) suspendListeners(ctx context.Context) error {
	if _, err := cluster.Rabbitmqctl(ctx, "suspend_listeners"); err != nil {
		return err
	}
	return r.closeConnections(ctx)
}

func resumeListeners(ctx context.Context) error {
	_, err := cluster.Rabbitmqctl(ctx, "resume_listeners")
	return err
}

// memoryAlarm sets the memory high watermark so low that the broker blocks
// every publisher, and returns what restores the watermark it had.
func memoryAlarm(ctx context.Context) (restore func(context.Context) error, err error) {
	was, err := cluster.Rabbitmqctl(ctx, "eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
	if err != nil {
		return nil, err
	}
	was = strings.TrimSpace(was)
	args := []string{"set_vm_memory_high_watermark", was}
	if strings.HasPrefix(was, "{absolute,") {
		args = []string{"set_vm_memory_high_watermark", "absolute", strings.TrimSuffix(strings.TrimPrefix(was, "{absolute,"), "}")}
	}
	if _, err := cluster.Rabbitmqctl(ctx, "set_vm_memory_high_watermark", "0.0001"); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { _, err := cluster.Rabbitmqctl(ctx, args...); return err }, nil
}

// restartPostgres restarts the local cluster with pg_ctlcluster in mode
// fast (sessions ended, a checkpoint) or immediate (crash recovery).
func restartPostgres(ctx context.Context, mode string) error {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		return fmt.Errorf("find the local PostgreSQL cluster in /etc/postgresql: %w", err)
	}
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", versions[0].Name(), "main", "restart", "-m", mode).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctlcluster restart -m %s: %w: %s", mode, err, out)
	}
	return nil
}
