package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// recordedReader is the reader recorded for group.
func (s *stack) recordedReader(t *testing.T, group string) string {
	t.Helper()
	var reader *string
	err := s.db.Pool.QueryRow(context.Background(), `SELECT reader FROM watermill_offsets_outbox WHERE consumer_group = $1`, group).Scan(&reader)
	if err != nil || reader == nil {
		return ""
	}
	return *reader
}

// One relay streams the group; a second process joins it with auto, as a
// role that may not replicate. It would poll, and the polling relay's
// lock is not what the streaming one holds: it stands by instead, says
// why, and each of 1,000 events is published once.
func TestAutoRelayThatCannotStreamStandsByWhileItsGroupStreams(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	pubs := &publishLog{}
	auto := testConfig
	auto.Reader = outbox.ReaderAuto
	s.runRelay(t, "streaming", auto, pubs, nil)
	testenv.Eventually(t, 30*time.Second, "the group to record the logical reader", func() bool {
		return s.recordedReader(t, auto.ConsumerGroup) == outbox.ReaderLogical
	})

	_, plain := s.db.NoReplicationRole(t)
	dest := s.publisher(t, "moenda outbox relay polling", auto.ConfirmWindow, s.top)
	joined, err := outbox.NewRelay(plain.Pool, namedDestination{dest, "joined", pubs}, s.top.Routable, auto, testenv.Logger().With("relay", "joined"))
	if err != nil {
		t.Fatal(err)
	}
	s.run(t, "joined relay", joined)
	testenv.Eventually(t, 10*time.Second, "the joined relay to decide", func() bool { return joined.Standby() != "" || joined.Active() })

	want := map[string]bool{}
	s.commitBulk(t, 1000, 10, want)
	testenv.Eventually(t, 60*time.Second, "every event", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	time.Sleep(3 * auto.PollInterval) // a second copy would arrive by now
	if n, total := distinct(got(), want); n != len(want) || total != len(want) {
		t.Fatalf("%d deliveries of %d events: each should be published once", total, len(want))
	}
	for _, by := range pubs.list() {
		if by != "streaming" {
			t.Fatalf("the joined relay published (%v)", pubs.list())
		}
	}
	if why := joined.Standby(); joined.Active() || !strings.Contains(why, "the group reads logical") || !strings.Contains(why, "may not replicate") {
		t.Fatalf("the joined relay: active %v, standing by because %q; want the group's reader and what this process lacks", joined.Active(), why)
	}
}

// An operator switches a streaming group to polling on purpose: the relay
// set to poll stands by while the logical one streams (both would
// publish), then takes the group over once it stops, records poll, and
// drops the slot; nothing is lost or published twice on the way.
func TestExplicitReaderSwitchesTheGroupOnceItsLeaderStops(t *testing.T) {
	s := newStack(t)
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	pubs := &publishLog{}
	want := map[string]bool{}
	stopLogical := s.run(t, "logical relay", s.newRelay(t, namedDestination{s.publisher(t, "logical", 64, s.top), "logical", pubs},
		s.top.Routable, logical(testConfig), testenv.Logger()))
	testenv.Eventually(t, 30*time.Second, "the group to record the logical reader", func() bool {
		return s.recordedReader(t, testConfig.ConsumerGroup) == outbox.ReaderLogical
	})
	polling := s.newRelay(t, namedDestination{s.publisher(t, "poll", 64, s.top), "poll", pubs}, s.top.Routable, testConfig, testenv.Logger())
	s.run(t, "polling relay", polling)
	testenv.Eventually(t, 10*time.Second, "the polling relay to decide", func() bool { return polling.Standby() != "" || polling.Active() })
	s.commitBulk(t, 300, 10, want)
	testenv.Eventually(t, 30*time.Second, "the events while the logical relay leads", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	time.Sleep(3 * testConfig.PollInterval)
	if n := len(got()); n != len(want) {
		t.Fatalf("%d deliveries of %d events while both ran", n, len(want))
	}
	if why := polling.Standby(); polling.Active() || !strings.Contains(why, "streams its slot") {
		t.Fatalf("the polling relay: active %v, standing by because %q", polling.Active(), why)
	}

	stopLogical()
	testenv.Eventually(t, 10*time.Second, "the polling relay to lead", polling.Active)
	if r := s.recordedReader(t, testConfig.ConsumerGroup); r != outbox.ReaderPoll || polling.Standby() != "" {
		t.Fatalf("after the switch the group reads %q, the relay stands by %q", r, polling.Standby())
	}
	s.commitBulk(t, 300, 10, want)
	testenv.Eventually(t, 30*time.Second, "every event", func() bool { n, _ := distinct(got(), want); return n == len(want) })
	testenv.Eventually(t, 10*time.Second, "the slot dropped", func() bool {
		return s.count(t, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`) == 0
	})
	n, total := distinct(got(), want)
	t.Logf("%d events, %d deliveries across the switch", n, total)
}

// cuttablePool returns a pool on db's database holding one connection
// already, and a switch that, while on, fails every new connection as an
// unreachable network does.
func cuttablePool(t *testing.T, db testenv.Database) (*pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	ctx := context.Background()
	cut := &atomic.Bool{}
	cfg := db.Pool.Config().Copy()
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if cut.Load() {
			return nil, errors.New("network unreachable (cut by the test)")
		}
		return dialer.DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	return pool, cut
}

// A capability check that fails on the way (the server out of reach for a
// moment) decides nothing: auto does not settle on polling for it.
func TestAFailedCapabilityCheckDecidesNothing(t *testing.T) {
	ctx := context.Background()
	pool, cut := cuttablePool(t, testenv.Postgres(t))
	cut.Store(true) // the replication connection is dialled each check
	logs := newWarnings()
	if got, err := outbox.ChooseReader(ctx, pool, outbox.ReaderAuto, slog.New(logs)); err == nil || got != "" {
		t.Fatalf("auto with the replication connection cut = %q, %v; want no decision and the error", got, err)
	}
	pool.Reset() // nor can the server be asked at all
	if got, err := outbox.ChooseReader(ctx, pool, outbox.ReaderAuto, slog.New(logs)); err == nil || got != "" {
		t.Fatalf("auto with the server out of reach = %q, %v; want no decision and the error", got, err)
	}
	if w := logs.all(); len(w) != 0 {
		t.Fatalf("warned of polling: %v", w)
	}
	cut.Store(false)
	if got, err := outbox.ChooseReader(ctx, pool, outbox.ReaderAuto, slog.New(logs)); err != nil || got != outbox.ReaderLogical {
		t.Fatalf("auto once the server is back = %q, %v; want logical", got, err)
	}
}

// An auto relay whose capability check fails for a while neither polls
// nor records a reader meanwhile; once the check succeeds it streams, and
// the group records logical.
func TestAutoRelayRetriesAFailedCapabilityCheck(t *testing.T) {
	s := newStack(t)
	pool, cut := cuttablePool(t, s.db)
	cut.Store(true) // the pool's connection lives; the replication connection cannot be made
	auto := testConfig
	auto.Reader = outbox.ReaderAuto
	relay, err := outbox.NewRelay(pool, s.publisher(t, "auto", 64, s.top), s.top.Routable, auto, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	s.run(t, "relay", relay)
	time.Sleep(20 * auto.RetryInterval)
	if relay.Reader() != "" || relay.Active() || s.recordedReader(t, auto.ConsumerGroup) != "" {
		t.Fatalf("with the check failing, the relay reads %q (active %v), the group recorded %q; want nothing decided",
			relay.Reader(), relay.Active(), s.recordedReader(t, auto.ConsumerGroup))
	}
	cut.Store(false)
	testenv.Eventually(t, 30*time.Second, "the relay to stream", relay.Active)
	if relay.Reader() != outbox.ReaderLogical || s.recordedReader(t, auto.ConsumerGroup) != outbox.ReaderLogical {
		t.Fatalf("the relay reads %q, the group recorded %q; want logical", relay.Reader(), s.recordedReader(t, auto.ConsumerGroup))
	}
}

// A group whose position was kept before readers were recorded has none:
// its next leader records its own, and keeps the position as it was.
func TestAGroupFromBeforeRecordsItsReaderOnItsFirstLeadership(t *testing.T) {
	eachReader(t, func(t *testing.T, cfg outbox.Config) {
		s := newStack(t)
		got, old := s.auditedBulk(t, 20, 10)
		_, err := s.db.Pool.Exec(context.Background(), `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
			SELECT $1, max("offset"), max(transaction_id) FROM watermill_outbox`, cfg.ConsumerGroup)
		if err != nil {
			t.Fatal(err)
		}
		s.startActiveRelay(t, cfg)
		if r := s.recordedReader(t, cfg.ConsumerGroup); r != cfg.Reader {
			t.Fatalf("the group recorded %q, want %q", r, cfg.Reader)
		}
		want := map[string]bool{}
		s.commitBulk(t, 20, 10, want)
		s.out.Committed()
		testenv.Eventually(t, 30*time.Second, "the events after the position", func() bool { n, _ := distinct(got(), want); return n == len(want) })
		time.Sleep(3 * cfg.PollInterval)
		if n, _ := distinct(got(), old); n != 0 {
			t.Fatalf("%d events behind the group's position were published again", n)
		}
	})
}

// A polling relay that finds its group's reader unrecorded holds the
// group's lock for the moment it checks whether a slot is streamed. A
// logical relay that took the slot meanwhile waits that moment out,
// keeping its slot, and records logical: were it to let the slot go, the
// polling relay would find it idle on its next look and record poll. A
// lock held longer is a polling relay leading: it stands by until it ends.
func TestALogicalRelayWaitsOutAPollingRelaysLookAtTheLock(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	cfg := testConfig
	cfg.Reader = outbox.ReaderAuto
	stop := s.run(t, "first relay", s.newRelay(t, s.publisher(t, "first", cfg.ConfirmWindow, s.top), s.top.Routable, cfg, testenv.Logger()))
	testenv.Eventually(t, 30*time.Second, "the group to record the logical reader", func() bool {
		return s.recordedReader(t, cfg.ConsumerGroup) == outbox.ReaderLogical
	})
	stop()
	// The slot is there, idle, and the group's reader unrecorded, as a
	// polling relay finds it while the logical one has yet to record it.
	// The first relay's WAL sender may outlive its stop a moment: were it
	// still streaming, the second relay's stream would seem to start, and
	// then the slot to go idle as that sender ends.
	const streamed = `SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND active`
	testenv.Eventually(t, 30*time.Second, "the first relay's slot to be let go", func() bool { return s.count(t, streamed) == 0 })
	if _, err := s.db.Pool.Exec(ctx, `UPDATE watermill_offsets_outbox SET reader = NULL`); err != nil {
		t.Fatal(err)
	}
	looking, err := s.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer looking.Release()
	if _, err := looking.Exec(ctx, "SELECT pg_advisory_lock($1)", outbox.LockKey(cfg.ConsumerGroup)); err != nil {
		t.Fatal(err)
	}
	relay := s.newRelay(t, s.publisher(t, "second", cfg.ConfirmWindow, s.top), s.top.Routable, cfg, testenv.Logger())
	s.run(t, "second relay", relay)
	testenv.Eventually(t, 30*time.Second, "the relay to stream its slot", func() bool { return s.count(t, streamed) == 1 })

	idle := 0
	for deadline := time.Now().Add(5 * cfg.PollInterval); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if s.count(t, streamed) != 1 {
			idle++
		}
	}
	if why := relay.Standby(); idle > 0 || why != "" {
		t.Fatalf("while another session held the lock a moment, the slot was idle at %d looks and the relay stands by because %q", idle, why)
	}
	// Held past the wait, the lock is a polling relay leading the group.
	testenv.Eventually(t, 15*time.Second, "the relay to stand by", func() bool {
		return strings.Contains(relay.Standby(), "a polling relay of the group leads it")
	})
	if _, err := looking.Exec(ctx, "SELECT pg_advisory_unlock($1)", outbox.LockKey(cfg.ConsumerGroup)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the relay to lead", relay.Active)
	if r := s.recordedReader(t, cfg.ConsumerGroup); r != outbox.ReaderLogical {
		t.Fatalf("the group reads %q; want logical", r)
	}
}
