package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/moenda/moenda/adapters/kafka"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The cluster answers once KafkaCluster says it is ready, and stops when
// its input ends.
func TestKafkaClusterAnswersUntilItsInputEnds(t *testing.T) {
	cfg := kafka.DefaultConfig()
	cfg.Brokers = []string{freeAddr(t)}
	job, _ := json.Marshal(cfg)
	in, feed := io.Pipe()
	out, said := io.Pipe()
	ended := make(chan error, 1)
	go func() { ended <- KafkaCluster(in, said) }()
	go func() { _, _ = feed.Write(append(job, '\n')) }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != clusterReady {
		t.Fatalf("first line %q, %v", line, err)
	}
	if err := kafka.Ping(cfg); err != nil {
		t.Fatalf("the cluster does not answer once ready: %v", err)
	}
	_ = feed.Close()
	if err := <-ended; err != nil {
		t.Fatalf("ended with %v", err)
	}
	if _, err := sarama.NewClient(cfg.Brokers, cfg.Sarama("after")); err == nil {
		t.Fatal("the cluster still answers after its input ended")
	}
}

// A cluster of another process at the address is not the bench's own:
// KafkaCluster says so rather than measuring it.
func TestKafkaClusterRefusesAnAddressAnotherClusterHolds(t *testing.T) {
	cfg := kafka.DefaultConfig()
	cfg.Brokers, cfg.Embedded = []string{freeAddr(t)}, true
	stop, _, err := kafka.StartEmbedded(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	job, _ := json.Marshal(cfg)
	err = KafkaCluster(strings.NewReader(string(job)), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "already answers") {
		t.Fatalf("got %v, want the address named as another cluster's", err)
	}
}
