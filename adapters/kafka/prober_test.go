package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moenda/moenda/adapters/kafka"
)

// A readiness probe asks the cluster on the client it keeps: ten probes
// open one client, whose connections say hello (ApiVersions) once each,
// where a client per probe would say it ten times. A probe whose context
// ends first returns at once.
func TestProberKeepsOneClient(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hellos atomic.Int32
	c.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		hellos.Add(1)
		return nil, nil, false
	})
	cfg := kafka.DefaultConfig()
	cfg.Brokers = c.ListenAddrs()
	p := kafka.NewProber(cfg)
	defer p.Close()
	for i := range 10 {
		if err := p.Ping(context.Background()); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if n := hellos.Load(); n > 2 {
		t.Fatalf("10 probes said hello %d times: a client per probe", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := p.Ping(ctx); err == nil && time.Since(start) > time.Second {
		t.Fatalf("a probe whose context had ended took %s", time.Since(start))
	}
}
