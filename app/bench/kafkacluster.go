package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"

	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/app/bench/procstat"
)

// clusterReady is the line `bench kafka-cluster` writes once its cluster
// answers.
const clusterReady = "ready"

// KafkaCluster runs the embedded cluster of a kafka.Config read as JSON
// from r, as a process of its own (`moenda bench kafka-cluster`), so that
// a broker's memory and CPU are its own, as RabbitMQ's and PostgreSQL's
// are, and not mixed with the clients' it serves (BENCHMARKS.md, "Kafka:
// the embedded cluster in a process of its own"). It writes a line to w
// once the cluster answers, and stops when r ends.
func KafkaCluster(r io.Reader, w io.Writer) error {
	var cfg kafka.Config
	dec := json.NewDecoder(r)
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("bench kafka-cluster: read the settings from standard input: %w", err)
	}
	cfg.Embedded = true
	stop, started, err := kafka.StartEmbedded(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("bench kafka-cluster: %w", err)
	}
	defer stop()
	if !started {
		return fmt.Errorf("bench kafka-cluster: a cluster already answers at %s; the bench measures one of its own", cfg.Brokers[0])
	}
	if _, err := fmt.Fprintln(w, clusterReady); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, dec.Buffered()); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, r)
	return err
}

// startKafkaCluster runs `bench kafka-cluster` of serve's binary for cfg
// and returns once the cluster answers. stop ends it.
func (e *env) startKafkaCluster(ctx context.Context, cfg kafka.Config) (p process, stop func(), err error) {
	job, err := json.Marshal(cfg)
	if err != nil {
		return process{}, nil, err
	}
	cmd := exec.CommandContext(ctx, e.opts.ServeBin, "bench", "kafka-cluster")
	cmd.Stderr = os.Stderr
	// Memory the cluster frees with a round's topics stays its own
	// (MADV_FREE) rather than going back to the kernel, to be faulted in
	// again by the next round: a broker keeps its memory between topics.
	cmd.Env = append(os.Environ(), "GODEBUG=madvdontneed=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return process{}, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return process{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return process{}, nil, fmt.Errorf("start %s bench kafka-cluster: %w", e.opts.ServeBin, err)
	}
	end := func() error {
		_ = stdin.Close()
		return cmd.Wait()
	}
	if _, err := stdin.Write(append(job, '\n')); err != nil {
		return process{}, nil, fmt.Errorf("bench kafka-cluster: write its settings: %w", errors.Join(err, end()))
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != clusterReady {
		return process{}, nil, fmt.Errorf("bench kafka-cluster at %s did not start: %w", cfg.Brokers[0], errors.Join(err, end()))
	}
	return process{role: procKafka, pid: cmd.Process.Pid}, func() { _ = end() }, nil
}

// clusterCPU is the CPU the cluster's process has used, none for a cluster
// the bench did not start.
func (k *kafkaBench) clusterCPU() (cpuSample, error) {
	if k.cluster.pid == 0 {
		return cpuSample{}, nil
	}
	used, err := procstat.Process(k.cluster.pid)
	return cpuSample{procKafka: used}, err
}

// timed is timed for work against k's cluster, with the CPU of its
// process beside the others'.
func (k *kafkaBench) timed(work func() (int, error)) (flow, error) {
	before, err := k.clusterCPU()
	if err != nil {
		return flow{}, err
	}
	f, err := timed(work)
	if err != nil {
		return flow{}, err
	}
	after, err := k.clusterCPU()
	for role, used := range after.since(before) {
		f.cpu[role] = used
	}
	return f, err
}
