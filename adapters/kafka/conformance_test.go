package kafka_test

import (
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/kafka"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/adapters/transport/transporttest"
)

// The suite runs on the embedded cluster, and on a real one when
// KAFKA_BROKERS is set (testenv.Kafka).
func TestTransportConformance(t *testing.T) {
	k := testenv.Kafka(t)
	newTransport := func(t *testing.T, cfg kafka.Config, top *topology.Topology, queues []string) transport.Transport {
		tr, err := kafka.NewTransport(cfg, transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, Logger: testenv.Logger()},
			queues, func(queue string) string { return queue })
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	transporttest.Run(t, transporttest.Features{
		Unreachable: func(t *testing.T, top *topology.Topology, queues []string) transport.Transport {
			cfg := k.Config
			cfg.Brokers = []string{testenv.ClosedAddr(t)}
			return newTransport(t, cfg, top, queues)
		},
	}, func(t *testing.T, top *topology.Topology, queues []string) transporttest.Subject {
		return transporttest.Subject{Transport: newTransport(t, k.Config, top, queues)}
	})
}
