package faults

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/moenda/moenda/app/harness"
)

// proxies are Toxiproxies in front of PostgreSQL and RabbitMQ, in this
// process, through which the case's nodes connect.
type proxies struct{ db, amqp *toxiproxy.Proxy }

// throughProxies starts the proxies and points the nodes started after it
// at them; they run until the system closes.
func (r *run) throughProxies() (*proxies, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	px := &proxies{}
	var urls [2]string
	for i, raw := range []string{r.DBURL, r.AMQPURL} {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		p := toxiproxy.NewProxy(server, []string{"postgres", "amqp"}[i], "127.0.0.1:0", u.Host)
		if err := p.Start(); err != nil {
			return nil, fmt.Errorf("start a proxy to %s: %w", u.Host, err)
		}
		r.Closers = append(r.Closers, p.Stop)
		u.Host = p.Listen
		urls[i] = u.String()
		if i == 0 {
			px.db = p
		} else {
			px.amqp = p
		}
	}
	r.NodeDB, r.NodeAMQP = urls[0], urls[1]
	return px, nil
}

// toxic adds a toxic of kind to p, in stream (upstream or downstream), and
// returns what removes it.
func toxic(p *toxiproxy.Proxy, name, kind, stream string, attributes string) (remove func(context.Context) error, err error) {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attributes)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return nil, fmt.Errorf("toxic %s on %s: %w", name, p.Name, err)
	}
	return func(ctx context.Context) error { return p.Toxics.RemoveToxic(ctx, name) }, nil
}

func networkDegradation(ctx context.Context, r *run) error {
	hold := time.Duration(r.scale(20, 10)) * time.Second
	r.injected("nodes connect through Toxiproxy: %s of 200±100 ms latency on both servers; RabbitMQ blackholed for 30 s; new PostgreSQL connections reset for 5 s; both streams sliced into ~64-byte pieces for %s", hold, hold)
	px, err := r.throughProxies()
	if err != nil {
		return err
	}
	if err := r.steady(ctx, 2); err != nil {
		return err
	}
	type step struct {
		fault  string
		hold   time.Duration
		toxics func() ([]func(context.Context) error, error)
	}
	both := func(kind, attrs string) func() ([]func(context.Context) error, error) {
		return func() ([]func(context.Context) error, error) {
			var removes []func(context.Context) error
			for _, p := range []*toxiproxy.Proxy{px.db, px.amqp} {
				for _, stream := range []string{"upstream", "downstream"} {
					rm, err := toxic(p, kind+"_"+stream, kind, stream, attrs)
					if err != nil {
						return removes, err
					}
					removes = append(removes, rm)
				}
			}
			return removes, nil
		}
	}
	one := func(p **toxiproxy.Proxy, kind, stream, attrs string) func() ([]func(context.Context) error, error) {
		return func() ([]func(context.Context) error, error) {
			rm, err := toxic(*p, kind, kind, stream, attrs)
			if err != nil {
				return nil, err
			}
			return []func(context.Context) error{rm}, nil
		}
	}
	steps := []step{
		{"latency 200±100 ms", hold, both("latency", `{"latency":100,"jitter":50}`)},
		{"RabbitMQ blackholed", 30 * time.Second, one(&px.amqp, "timeout", "upstream", `{"timeout":0}`)},
		{"PostgreSQL connections reset", 5 * time.Second, one(&px.db, "reset_peer", "upstream", `{"timeout":0}`)},
		{"sliced streams", hold, both("slicer", `{"average_size":64,"size_variation":32,"delay":10}`)},
	}
	longest := time.Duration(0)
	for _, st := range steps {
		longest = max(longest, st.hold)
	}
	r.after = append(r.after, func([]harness.Op, harness.Observed) {
		bound := longest + r.result.Bound
		r.judge("p99", r.result.Latency.P99 <= bound, "p99 %s; bound %s (the longest fault, %s, and the recovery bound)",
			r.result.Latency.P99.Round(time.Millisecond), bound, longest)
	})
	for _, st := range steps {
		// Past the recovery bound since the last step, so each
		// recovery can be seen.
		if err := r.tail(ctx); err != nil {
			return err
		}
		var removes []func(context.Context) error
		err := r.inject(ctx, st.fault, st.hold, func(context.Context) (err error) {
			removes, err = st.toxics()
			return err
		}, func(ctx context.Context) error {
			for _, rm := range removes {
				if err := rm(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return r.tail(ctx)
}
