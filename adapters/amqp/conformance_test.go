package amqp

import (
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/adapters/transport/transporttest"
)

func TestTransportConformance(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	newTransport := func(t *testing.T, url string, top *topology.Topology) transport.Transport {
		tr, err := NewTransport(Config{URLs: []string{url}, Prefetch: 10},
			transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, ConfirmWindow: 16, Logger: testenv.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	transporttest.Run(t, transporttest.Features{
		Depths: true,
		Unreachable: func(t *testing.T, top *topology.Topology, _ []string) transport.Transport {
			return newTransport(t, deadURL(t, vhost.URL), top)
		},
	}, func(t *testing.T, top *topology.Topology, _ []string) transporttest.Subject {
		return transporttest.Subject{Transport: newTransport(t, vhost.URL, top)}
	})
}
