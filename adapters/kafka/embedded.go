package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// StartEmbedded runs an in-process cluster (franz-go's kfake, which speaks
// the Kafka protocol) at cfg.Brokers[0], for development and tests: it
// keeps records in memory only, so they end with the process. If a cluster
// already answers there (another moenda process's), it is used instead and
// started is false. stop ends the cluster this call started.
func StartEmbedded(cfg Config, logger *slog.Logger) (stop func(), started bool, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, false, err
	}
	_, portText, _ := net.SplitHostPort(cfg.Brokers[0])
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, false, fmt.Errorf("kafka.embedded: port %q: %w", portText, err)
	}
	c, err := kfake.NewCluster(kfake.Ports(port), kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(cfg.Partitions)))
	if errors.Is(err, syscall.EADDRINUSE) {
		if werr := withClient(cfg, "moenda probe", func(sarama.Client) error { return nil }); werr != nil {
			return nil, false, fmt.Errorf("kafka.embedded: %s is taken by something that is not Kafka (%w); free it or set kafka.brokers to another port", cfg.Brokers[0], werr)
		}
		logger.Info("kafka: using the embedded cluster another process runs", "brokers", cfg.Brokers)
		return func() {}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("kafka.embedded: start at %s: %w", cfg.Brokers[0], err)
	}
	logger.Warn("kafka: embedded cluster started; it keeps records in memory only, for development and tests, and they end with this process",
		"brokers", c.ListenAddrs())
	return c.Close, true, nil
}
