package amqp

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/moenda/moenda/adapters/testenv"
)

func TestConfigNodes(t *testing.T) {
	one := "amqp://guest:guest@127.0.0.1:5672/"
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"url alone", Config{URL: one}, []string{one}},
		{"urls replace url", Config{URL: one, URLs: []string{"amqp://a:5672/", "amqp://b:5672/"}}, []string{"amqp://a:5672/", "amqp://b:5672/"}},
		{"empty urls leave url", Config{URL: one, URLs: []string{}}, []string{one}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.Nodes()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Nodes() = %v, want %v", got, tt.want)
			}
			if len(tt.cfg.URLs) > 0 {
				got[0] = "changed"
				if tt.cfg.URLs[0] == "changed" {
					t.Fatal("Nodes() returned the config's own slice")
				}
			}
		})
	}
}

// Every bad node is reported with its path, its password hidden.
func TestConfigValidateURLs(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // each in the error; nil for none
	}{
		{"url", Config{URL: "amqp://guest:guest@127.0.0.1:5672/"}, nil},
		{"bad url", Config{URL: "http://guest:s3cret@mq/"}, []string{`amqp.url "http://guest:xxxxx@mq/" must look like amqp://`}},
		{"urls", Config{URL: "broken", URLs: []string{"amqp://guest:guest@a:5672/", "amqps://guest:guest@b:5671/"}}, nil},
		{"bad nodes in urls", Config{URL: "amqp://guest:guest@127.0.0.1:5672/", URLs: []string{"amqp://guest:guest@a:5672/", "http://guest:s3cret@b/", "", "amqp://guest:s3cret@"}}, []string{
			`amqp.urls[1] "http://guest:xxxxx@b/" must look like`,
			`amqp.urls[2] "" must look like`,
			`amqp.urls[3] "amqp://guest:xxxxx@" must look like`,
		}},
		{"a node twice", Config{URLs: []string{"amqp://guest:s3cret@a:5672/", "amqp://guest:s3cret@b:5672/", "amqp://guest:s3cret@a:5672/"}}, []string{
			`amqp.urls[2] "amqp://guest:xxxxx@a:5672/" repeats amqp.urls[0]`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Prefetch = 1
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows a password:\n%v", err)
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tt.want) {
				t.Errorf("%d problems reported, want %d:\n%v", n, len(tt.want), err)
			}
		})
	}
}

func TestNewNodesRefusesWhatCannotBeDialed(t *testing.T) {
	tests := []struct {
		name string
		urls []string
		want string
	}{
		{"none", nil, "url is empty"},
		{"one empty", []string{""}, "url is empty"},
		{"one of several empty", []string{"amqp://a:5672/", ""}, "urls[1] is empty"},
		{"not AMQP", []string{"amqp://a:5672/", "http://guest:s3cret@b/"}, `urls[1] "http://guest:xxxxx@b/"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newNodes(tt.urls)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("newNodes(%q) = %v, want an error saying %q", tt.urls, err, tt.want)
			}
		})
	}
}

// deadURL is base with the address of a local port nothing listens on:
// a node that refuses connections.
func deadURL(t *testing.T, base string) string {
	t.Helper()
	return withHost(t, base, testenv.ClosedAddr(t))
}

func withHost(t *testing.T, base, host string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host
	return u.String()
}

// proxyTo starts a Toxiproxy in this process in front of the node of
// base and returns it with base's URL through it; it stops when the test
// ends. Stopping it is a node going away: its connections die and new
// ones are refused.
func proxyTo(t *testing.T, name, base string) (*toxiproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, withHost(t, base, p.Listen)
}

func testDial(n *nodes) (*amqp091.Connection, string, error) {
	return n.dial(context.Background(), amqp091.Config{
		Dial:       amqp091.DefaultDial(2 * time.Second),
		Properties: amqp091.Table{"connection_name": "moenda test"},
	})
}

// TestNodesDialOrder: nodes are tried in order and the first that answers
// is kept; a connection closed by its owner comes back to the same node,
// one lost starts the next dial at the following node, wrapping around,
// and a dead node on the way is passed over.
func TestNodesDialOrder(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	t.Run("first that answers", func(t *testing.T) {
		urls := []string{deadURL(t, vhost.URL), deadURL(t, vhost.URL), vhost.URL}
		n, err := newNodes(urls)
		if err != nil {
			t.Fatal(err)
		}
		conn, node, err := testDial(n)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if node != vhost.URL || n.current() != vhost.URL {
			t.Fatalf("connected to %s (current %s), want the third node %s", node, n.current(), vhost.URL)
		}
	})
	t.Run("none answers", func(t *testing.T) {
		urls := []string{deadURL(t, "amqp://guest:s3cret@x/"), deadURL(t, "amqp://guest:s3cret@x/")}
		n, err := newNodes(urls)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = testDial(n)
		if err == nil {
			t.Fatal("dial succeeded with no node listening")
		}
		for _, u := range urls {
			if want := "connect to " + strings.Replace(u, "s3cret", "xxxxx", 1); !strings.Contains(err.Error(), want) {
				t.Errorf("error does not say %q:\n%v", want, err)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error shows a password:\n%v", err)
		}
	})
	t.Run("after a loss, the next node", func(t *testing.T) {
		var proxies []*toxiproxy.Proxy
		var urls []string
		for _, name := range []string{"a", "b", "c"} {
			p, u := proxyTo(t, name, vhost.URL)
			proxies = append(proxies, p)
			urls = append(urls, u)
		}
		n, err := newNodes(urls)
		if err != nil {
			t.Fatal(err)
		}
		dialTo := func(want int, why string) *amqp091.Connection {
			t.Helper()
			conn, node, err := testDial(n)
			if err != nil {
				t.Fatalf("%s: %v", why, err)
			}
			if node != urls[want] {
				t.Fatalf("%s: connected to %s, want node %d, %s", why, node, want, urls[want])
			}
			return conn
		}
		// lose takes conn away as a node restart does: the proxy drops
		// it, and comes back at once.
		lose := func(conn *amqp091.Connection, node int) {
			t.Helper()
			proxies[node].Stop()
			testenv.Eventually(t, 5*time.Second, "the connection to see its loss", conn.IsClosed)
			if err := proxies[node].Start(); err != nil {
				t.Fatal(err)
			}
		}

		conn := dialTo(0, "first dial")
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		conn = dialTo(0, "after closing it ourselves")
		lose(conn, 0)
		conn = dialTo(1, "after losing node 0")
		lose(conn, 1)
		conn = dialTo(2, "after losing node 1")
		lose(conn, 2)
		conn = dialTo(0, "after losing node 2 (wraps around)")
		proxies[1].Stop() // node 1 is down for good
		lose(conn, 0)
		conn = dialTo(2, "after losing node 0, with node 1 down")
		_ = conn.Close()
	})
}

// TestKeptConnectionBoundsASilentBroker: a broker that takes a request
// and never answers (here a path that drops its answers) does not hold
// the depth reader: the read fails within its bound, naming it, and once
// the broker answers again the next read dials afresh and answers.
func TestKeptConnectionBoundsASilentBroker(t *testing.T) {
	vhost := testenv.RabbitMQ(t)
	if _, err := testenv.Channel(t, vhost.URL).QueueDeclare("kept.q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	proxy, through := proxyTo(t, "silent", vhost.URL)
	n, err := newNodes([]string{through})
	if err != nil {
		t.Fatal(err)
	}
	d := &DepthReader{conn: &kept{nodes: n, name: "moenda test depths", dial: 2 * time.Second, answer: 500 * time.Millisecond}}
	t.Cleanup(func() { _ = d.Close() })
	if _, err := d.Depths([]string{"kept.q"}); err != nil {
		t.Fatal(err)
	}
	body := `{"name":"silent","type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = d.Depths([]string{"kept.q"})
	if err == nil || !strings.Contains(err.Error(), "did not answer within 500ms") {
		t.Fatalf("a silent broker: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the read took %v, bounded by 500ms and the close's second", took)
	}
	if err := proxy.Toxics.RemoveToxic(context.Background(), "silent"); err != nil {
		t.Fatal(err)
	}
	got, err := d.Depths([]string{"kept.q"})
	if err != nil || got["kept.q"] != 0 {
		t.Fatalf("after the broker answers again: %v, %v", got, err)
	}
}
