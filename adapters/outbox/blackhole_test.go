package outbox_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
)

// throughProxy opens a pool on the stack's database through a Toxiproxy
// in this process, with the platform's connection settings; both end
// with the test.
func (s *stack) throughProxy(t *testing.T) (*toxiproxy.Proxy, postgres.Config) {
	t.Helper()
	u, err := url.Parse(s.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "postgres", "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	u.Host = p.Listen
	cfg := postgres.DefaultConfig()
	cfg.URL = u.String()
	return p, cfg
}

// blackhole makes p drop everything, both ways, without closing a
// connection, as a network path gone black does; the returned function
// (also run when the test ends) lets traffic through again.
func blackhole(t *testing.T, p *toxiproxy.Proxy) (heal func()) {
	t.Helper()
	var names []string
	for _, stream := range []string{"upstream", "downstream"} {
		name := "blackhole_" + stream
		body := `{"name":"` + name + `","type":"timeout","stream":"` + stream + `","toxicity":1,"attributes":{"timeout":0}}`
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	heal = func() {
		for _, name := range names {
			_ = p.Toxics.RemoveToxic(context.Background(), name)
		}
		names = nil
	}
	t.Cleanup(heal)
	return heal
}

// Two polling relays of one group, the leader connected through a path
// that then goes black: PostgreSQL ends the leader's lock session after
// outbox.lock_idle_timeout of silence, the standby takes the lock well
// within 30 s, and every event committed meanwhile arrives. Toxiproxy's
// own sockets answer TCP keepalives, so what this exercises is the
// server's idle_session_timeout; the keepalives cover a path whose peer
// host is gone (TestConnectionsSetKeepalivesAtBothEnds).
func TestStandbyTakesOverFromALeaderCutOffByABlackhole(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	cfg := testConfig
	cfg.PollInterval = outbox.DefaultConfig().PollInterval
	cfg.LockIdleTimeout = outbox.DefaultConfig().LockIdleTimeout
	ctx := context.Background()

	px, pcfg := s.throughProxy(t)
	poolA, err := postgres.Connect(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(poolA.Close)
	pubs := &publishLog{}
	destA := s.publisher(t, "moenda outbox relay a", cfg.ConfirmWindow, s.top)
	a, err := outbox.NewRelay(poolA, namedDestination{destA, "a", pubs}, s.top.Routable, cfg, testenv.Logger().With("relay", "a"))
	if err != nil {
		t.Fatal(err)
	}
	s.run(t, "relay a", a)
	testenv.Eventually(t, 10*time.Second, "relay a to lead", a.Active)
	destB := s.publisher(t, "moenda outbox relay b", cfg.ConfirmWindow, s.top)
	b := s.newRelay(t, namedDestination{destB, "b", pubs}, s.top.Routable, cfg, testenv.Logger().With("relay", "b"))
	s.run(t, "relay b", b)

	committed := s.commitContinuously(t)
	n := len(pubs.list())
	testenv.Eventually(t, 10*time.Second, "relay a publishing", func() bool { return len(pubs.list()) > n })
	heal := blackhole(t, px)
	cut := time.Now()
	testenv.Eventually(t, 30*time.Second, "relay b to take the lock after relay a's path went black", b.Active)
	takeover := time.Since(cut)
	n = len(pubs.list())
	testenv.Eventually(t, 10*time.Second, "relay b publishing", func() bool {
		by := pubs.list()
		return len(by) > n && by[len(by)-1] == "b"
	})
	want := committed()
	heal()
	testenv.Eventually(t, 60*time.Second, "every committed event on the queue", func() bool { return delivered(got(), want) == len(want) })
	testenv.Eventually(t, 10*time.Second, "relay a to stand by once its path is back", func() bool { return !a.Active() })
	t.Logf("takeover %s after the blackhole (lock_idle_timeout %s, poll_interval %s); %d events, %d deliveries",
		takeover.Round(10*time.Millisecond), cfg.LockIdleTimeout, cfg.PollInterval, len(want), len(got()))
}

// stallingDestination holds its first batch for stall before passing it
// on, as a broker under an alarm does.
type stallingDestination struct {
	outbox.Destination
	stall time.Duration
	once  *sync.Once
}

func (d stallingDestination) PublishBatch(ctx context.Context, keys []string, msgs []*message.Message) error {
	d.once.Do(func() { time.Sleep(d.stall) })
	return d.Destination.PublishBatch(ctx, keys, msgs)
}

// A leader whose batch waits on the broker for longer than
// lock_idle_timeout keeps its lock: it pings its session meanwhile, so
// only a silent relay loses it.
func TestALeaderWaitingOnTheBrokerKeepsItsLock(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	cfg := testConfig
	cfg.LockIdleTimeout = time.Second
	logs := &levelCounts{}
	dest := stallingDestination{s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), 3 * time.Second, &sync.Once{}}
	s.run(t, "relay", s.newRelay(t, dest, s.top.Routable, cfg, slog.New(countingHandler{testenv.Logger().Handler(), logs})))
	want := map[string]bool{}
	s.commit(t, 10, want)
	testenv.Eventually(t, 20*time.Second, "every event on the queue", func() bool { return delivered(got(), want) == len(want) })
	if n := logs.get(slog.LevelWarn) + logs.get(slog.LevelError); n != 0 {
		t.Fatalf("the relay logged %d warnings and errors while its batch waited 3 s on the broker, want none (lost its lock?)", n)
	}
	if len(got()) != len(want) {
		t.Fatalf("%d deliveries of %d events: the batch went out again", len(got()), len(want))
	}
}

// lock_idle_timeout must leave a healthy relay, which sends a statement at
// least every poll interval, several of them before its session ends.
func TestConfigChecksLockIdleTimeout(t *testing.T) {
	tests := []struct {
		name          string
		idle, polling time.Duration
		want          string // "" when valid
	}{
		{"the defaults", 20 * time.Second, time.Second, ""},
		{"left alone", 0, time.Second, ""},
		{"shorter than three idle polls: a leader reads more often", 20 * time.Second, time.Minute, ""},
		{"under a second", 900 * time.Millisecond, time.Second, "outbox.lock_idle_timeout must be 0 or whole milliseconds of at least 1s, got 900ms"},
		{"negative", -time.Second, time.Second, "outbox.lock_idle_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := outbox.DefaultConfig()
			cfg.LockIdleTimeout, cfg.PollInterval = tt.idle, tt.polling
			checkValidate(t, cfg, tt.want)
		})
	}
}

// blockedDestination takes no batch: it holds each until its context
// ends, as a broker that stopped answering does, and says on calls when
// one comes in.
type blockedDestination struct{ calls chan struct{} }

func (d blockedDestination) PublishBatch(ctx context.Context, _ []string, _ []*message.Message) error {
	select {
	case d.calls <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// A leader whose lock session ends while its batch waits on the broker
// stops leading at once: it does not wait on that batch, which it could
// no longer record, and so it can take the lock again, or leave it to a
// standby, and send the batch again.
func TestALeaderThatLosesItsSessionMidBatchStopsLeading(t *testing.T) {
	s := newStack(t)
	dest := blockedDestination{calls: make(chan struct{}, 2)}
	s.run(t, "relay", s.newRelay(t, dest, s.top.Routable, testConfig, testenv.Logger()))
	s.commit(t, 1, map[string]bool{})
	select {
	case <-dest.calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay published nothing within 20 s")
	}
	if n := s.terminateLockHolder(t, testConfig.ConsumerGroup); n != 1 {
		t.Fatalf("ended %d lock sessions, want 1", n)
	}
	select {
	case <-dest.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("10 s after its lock session ended, the relay still waits on the batch it cannot record: it never led again")
	}
}

// A logical leader whose batch waits on the broker (an alarm) for longer
// than postgres.user_timeout keeps its stream. Meanwhile it does not read
// it, so the server's sends wait on a full TCP window; a user timeout on
// the server's side of a replication connection would end the stream
// there, and the relay would lose its slot and decode the backlog again.
func TestALogicalLeaderWaitingOnTheBrokerKeepsItsStream(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	cfg := logical(testConfig)
	pcfg := postgres.DefaultConfig()
	pcfg.URL, pcfg.UserTimeout = s.db.URL, 2*time.Second
	pool, err := postgres.Connect(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &levelCounts{}
	dest := stallingDestination{s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top), 8 * time.Second, &sync.Once{}}
	relay, err := outbox.NewRelay(pool, dest, s.top.Routable, cfg, slog.New(countingHandler{testenv.Logger().Handler(), logs}))
	if err != nil {
		t.Fatal(err)
	}
	s.run(t, "relay", relay)
	testenv.Eventually(t, 30*time.Second, "the relay to lead", relay.Active)
	// About 18 MB of stream behind the stalled batch: more than both
	// ends' socket buffers hold.
	want := map[string]bool{}
	s.commitBulk(t, 30_000, 500, want)
	testenv.Eventually(t, 90*time.Second, "every event on the queue", func() bool { return delivered(got(), want) == len(want) })
	if n := logs.get(slog.LevelWarn) + logs.get(slog.LevelError); n != 0 {
		t.Fatalf("the relay logged %d warnings and errors while its batch waited 8 s on the broker, want none (its stream ended?)", n)
	}
	if n := len(got()); n != len(want) {
		t.Fatalf("%d deliveries of %d events", n, len(want))
	}
}
