package memory_test

import (
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/adapters/transport"
	"github.com/moenda/moenda/adapters/transport/transporttest"
)

func TestTransportConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Features{}, func(t *testing.T, top *topology.Topology, _ []string) transporttest.Subject {
		tr, err := memory.NewTransport(transport.Settings{Topology: top, CloseTimeout: 2 * time.Second, Logger: testenv.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		return transporttest.Subject{Transport: tr}
	})
}
