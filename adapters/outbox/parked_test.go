package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// write commits one event named name in a unit of work of its own.
func (s *stack) write(t *testing.T, name string) event.Event {
	t.Helper()
	e, err := event.New(name, "tarefas", map[string]any{"tarefa_id": 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := event.WithCorrelation(context.Background(), "req-"+name)
	if err := s.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error { return tx.Publish(ctx, e) }); err != nil {
		t.Fatal(err)
	}
	return event.Stamp(ctx, e)
}

// writeRaw commits an outbox row with metadata as it is, as a writer
// outside moenda (or a bug) could.
func (s *stack) writeRaw(t *testing.T, id, metadata string) {
	t.Helper()
	if _, err := s.db.Pool.Exec(context.Background(), `INSERT INTO watermill_outbox (uuid, payload, metadata, transaction_id)
		VALUES ($1, '{}', $2, pg_current_xact_id())`, id, metadata); err != nil {
		t.Fatal(err)
	}
}

// narrowTopology is the stack's layout after a configuration change that
// left only tarefa.criada on eventos.dominio: tarefa.concluida has no
// exchange any more.
func (s *stack) narrowTopology(t *testing.T) *topology.Topology {
	t.Helper()
	return tarefasTopology(t, []string{"tarefa.criada"}, topology.Subscription{Queue: "auditoria.tarefas", Patterns: []string{"tarefa.#"}})
}

func parkedRows(t *testing.T, s *stack) []outbox.Parked {
	t.Helper()
	list, n, err := outbox.ListParked(context.Background(), s.db.Pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(list) {
		t.Fatalf("ListParked counted %d rows and listed %d", n, len(list))
	}
	return list
}

// A relay whose topology has no exchange for a row's routing key parks
// the row and moves on; after a configuration that routes it, Republish
// delivers it to its queue and the parked rows are empty.
func TestRelayParksUnroutableRowsAndRepublishDeliversThem(t *testing.T) {
	eachReader(t, func(t *testing.T, base outbox.Config) {
		s := newStack(t)
		ctx := context.Background()
		narrow := s.narrowTopology(t)
		audited := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")

		lost := s.write(t, "tarefa.concluida.v1") // no exchange carries it under narrow
		s.writeRaw(t, "00000000-0000-0000-0000-00000000000a", `{"event_name": "sem nome\u0000"}`)
		later := map[string]bool{}
		for range 3 {
			later[s.write(t, "tarefa.criada.v1").ID] = true
		}

		cfg := base
		relayDest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, narrow)
		stop := s.run(t, "relay", s.newRelay(t, relayDest, narrow.Routable, cfg, testenv.Logger()))
		testenv.Eventually(t, 10*time.Second, "the rows behind the parked ones", func() bool {
			done, err := outbox.CaughtUp(ctx, s.db.Pool, cfg.ConsumerGroup)
			return err == nil && done && len(audited()) >= len(later)
		})
		for _, d := range audited() {
			if !later[d.MessageId] {
				t.Fatalf("the relay published %s (%s), which it should have parked", d.MessageId, d.RoutingKey)
			}
		}
		check := func(label string, got []outbox.Parked) {
			t.Helper()
			if len(got) != 2 {
				t.Fatalf("%s: %d parked rows, want 2: %+v", label, len(got), got)
			}
			byID := map[string]outbox.Parked{}
			for _, p := range got {
				byID[p.EventID] = p
				if p.ConsumerGroup != cfg.ConsumerGroup || p.ParkedAt.IsZero() || p.Detail == "" || p.TransactionID == 0 {
					t.Errorf("%s: parked row %+v lacks its group, time, detail or key", label, p)
				}
			}
			if p := byID[lost.ID]; p.Reason != outbox.ReasonUnroutable || p.EventName != "tarefa.concluida.v1" || p.RoutingKey != "tarefa.concluida" {
				t.Errorf("%s: the unroutable row is parked as %+v", label, p)
			}
			if p := byID["00000000-0000-0000-0000-00000000000a"]; p.Reason != outbox.ReasonNoEvent || p.EventName != "sem nome" || p.RoutingKey != "" {
				t.Errorf("%s: the row naming no event is parked as %+v", label, p)
			}
		}
		check("after the first pass", parkedRows(t, s))

		// A relay that reads the same rows again (a crash before its position
		// was recorded; here, a reset) does not list them twice.
		stop()
		if err := outbox.ResetPosition(ctx, s.db.Pool, cfg.ConsumerGroup); err != nil {
			t.Fatal(err)
		}
		s.run(t, "relay again", s.newRelay(t, relayDest, narrow.Routable, cfg, testenv.Logger()))
		testenv.Eventually(t, 10*time.Second, "the second pass", func() bool {
			done, err := outbox.CaughtUp(ctx, s.db.Pool, cfg.ConsumerGroup)
			return err == nil && done && len(audited()) >= 2*len(later)
		})
		check("after a second pass over the same rows", parkedRows(t, s))

		// Under the narrow configuration nothing can go: both stay.
		res, err := outbox.Republish(ctx, s.db.Pool, map[string]outbox.Destination{cfg.ConsumerGroup: relayDest}, narrow.Routable)
		if err != nil {
			t.Fatal(err)
		}
		if res.Republished != 0 || len(res.StillUnroutable) != 2 {
			t.Fatalf("republish under the configuration that parked them: %+v", res)
		}

		// The configuration routes tarefa.concluida again.
		notified := testenv.Consume(t, s.vhost.URL, "notificacoes.tarefas-concluidas")
		dest := s.publisher(t, "moenda outbox relay", cfg.ConfirmWindow, s.top)
		res, err = outbox.Republish(ctx, s.db.Pool, map[string]outbox.Destination{cfg.ConsumerGroup: dest}, s.top.Routable)
		if err != nil {
			t.Fatal(err)
		}
		if res.Republished != 1 || len(res.StillUnroutable) != 1 || res.StillUnroutable[0].Reason != outbox.ReasonNoEvent {
			t.Fatalf("republish = %+v, want 1 republished and the row naming no event left", res)
		}
		testenv.Eventually(t, 10*time.Second, "the republished event on its queue", func() bool { return len(notified()) == 1 })
		d := notified()[0]
		if d.MessageId != lost.ID || d.RoutingKey != "tarefa.concluida" || d.Exchange != "eventos.dominio" || d.CorrelationId != "req-tarefa.concluida.v1" {
			t.Fatalf("republished as id %s key %q on %q with correlation %q, want %s", d.MessageId, d.RoutingKey, d.Exchange, d.CorrelationId, lost.ID)
		}
		if _, ok := d.Headers["routing_key"]; ok {
			t.Errorf("republished with the legacy routing_key header: %v", d.Headers)
		}
		left := parkedRows(t, s)
		if len(left) != 1 || left[0].Reason != outbox.ReasonNoEvent {
			t.Fatalf("parked after republishing: %+v", left)
		}
		// The row naming no event can never go: once it is removed by hand,
		// nothing is left.
		if _, err := s.db.Pool.Exec(ctx, `DELETE FROM moenda_outbox_parked`); err != nil {
			t.Fatal(err)
		}
		if res, err := outbox.Republish(ctx, s.db.Pool, nil, s.top.Routable); err != nil || res.Republished != 0 || len(res.StillUnroutable) != 0 {
			t.Fatalf("republish with nothing parked: %+v, %v", res, err)
		}
	})
}

// failingDestination refuses every batch, as a broker that is away.
type failingDestination struct{}

func (failingDestination) PublishBatch(context.Context, []string, []*message.Message) error {
	return errors.New("the broker is away")
}

// Republish sends a parked row only through its own group's destination:
// a group this configuration runs no relay for keeps its rows, and a
// destination that fails keeps them parked for the next attempt.
func TestRepublishKeepsWhatItCannotSend(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	e := s.write(t, "tarefa.concluida.v1")
	if _, err := s.db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
		SELECT transaction_id, "offset", g, uuid, 'tarefa.concluida.v1', 'tarefa.concluida', 'unroutable', 'test' FROM watermill_outbox, unnest(ARRAY['moenda-relay', 'moenda-relay-kafka']) g`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		dests       map[string]outbox.Destination
		wantErr     bool
		republished int
		still       []string // why each row is still parked, by group order
		parked      int
	}{
		{"no relay for either group", nil, false, 0, []string{"no relay of this configuration publishes for consumer group moenda-relay", "no relay of this configuration publishes for consumer group moenda-relay-kafka"}, 2},
		{"the broker away", map[string]outbox.Destination{"moenda-relay": failingDestination{}}, true, 0, nil, 2},
		{"one group's relay", map[string]outbox.Destination{"moenda-relay": s.publisher(t, "republish", 8, s.top)}, false, 1, []string{"no relay of this configuration publishes for consumer group moenda-relay-kafka"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := outbox.Republish(ctx, s.db.Pool, tt.dests, s.top.Routable)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if res.Republished != tt.republished || len(res.StillUnroutable) != len(tt.still) {
				t.Fatalf("republish = %+v", res)
			}
			for i, why := range tt.still {
				if got := res.StillUnroutable[i]; got.Detail != why || got.EventID != e.ID {
					t.Errorf("still parked %d: %+v, want %q", i, got, why)
				}
			}
			if n := len(parkedRows(t, s)); n != tt.parked {
				t.Fatalf("%d rows parked, want %d", n, tt.parked)
			}
		})
	}
}

// However many rows stay parked, a republish counts them all and lists
// only the first outbox.StillShown.
func TestRepublishCountsWhatItLeavesAndListsTheFirst(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	const rows = outbox.StillShown + 50
	if _, err := s.db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
		SELECT pg_current_xact_id(), i, 'moenda-relay', 'id', '', '', 'no_event', 'test' FROM generate_series(1, $1) i`, rows); err != nil {
		t.Fatal(err)
	}
	res, err := outbox.Republish(ctx, s.db.Pool, nil, s.top.Routable)
	if err != nil {
		t.Fatal(err)
	}
	if res.Republished != 0 || res.StillParked != rows || len(res.StillUnroutable) != outbox.StillShown {
		t.Fatalf("republished %d, still parked %d, %d listed; want 0, %d, %d", res.Republished, res.StillParked, len(res.StillUnroutable), rows, outbox.StillShown)
	}
}

// ListParked lists the oldest first, at most limit, and counts them all.
func TestListParkedLimit(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	for i := range 3 {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail, parked_at)
			VALUES (pg_current_xact_id(), $1, 'g', 'id', '', '', 'no_event', 'test', now() - make_interval(mins => $2))`, i, 10-i); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ limit, want int }{{0, 3}, {1, 1}, {2, 2}, {5, 3}} {
		list, n, err := outbox.ListParked(ctx, db.Pool, tt.limit)
		if err != nil || n != 3 || len(list) != tt.want {
			t.Fatalf("limit %d: %d listed, %d counted, %v", tt.limit, len(list), n, err)
		}
		for i := 1; i < len(list); i++ {
			if list[i].ParkedAt.Before(list[i-1].ParkedAt) {
				t.Fatalf("limit %d: not oldest first: %v", tt.limit, list)
			}
		}
	}
	if _, _, err := outbox.ListParked(ctx, db.Pool, -1); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a negative limit: %v", err)
	}
}

// CountParked counts one group's parked rows, none of another's.
func TestCountParkedCountsOneGroup(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	for i, group := range []string{"g", "g", "other"} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
			VALUES (pg_current_xact_id(), $1, $2, 'id', '', '', 'no_event', 'test')`, i, group); err != nil {
			t.Fatal(err)
		}
	}
	for group, want := range map[string]int64{"g": 2, "other": 1, "none": 0} {
		if n, err := outbox.CountParked(ctx, db.Pool, group); err != nil || n != want {
			t.Errorf("CountParked(%s) = %d, %v; want %d", group, n, err, want)
		}
	}
}

// Two republishes at once (the command and the admin endpoint) send each
// parked row once between them.
func TestConcurrentRepublishSendsEachRowOnce(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	const rows = 300
	for range rows {
		s.write(t, "tarefa.concluida.v1")
	}
	if _, err := s.db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
		SELECT transaction_id, "offset", 'moenda-relay', uuid, 'tarefa.concluida.v1', 'tarefa.concluida', 'unroutable', 'test' FROM watermill_outbox`); err != nil {
		t.Fatal(err)
	}
	got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
	results := make(chan outbox.Republished, 2)
	for i := range 2 {
		dest := s.publisher(t, fmt.Sprint("republish ", i), 64, s.top)
		go func() {
			res, err := outbox.Republish(ctx, s.db.Pool, map[string]outbox.Destination{"moenda-relay": dest}, s.top.Routable)
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	a, b := <-results, <-results
	if a.Republished+b.Republished != rows {
		t.Fatalf("republished %d and %d, want %d in all", a.Republished, b.Republished, rows)
	}
	testenv.Eventually(t, 10*time.Second, "every republished event", func() bool { return len(got()) >= rows })
	time.Sleep(200 * time.Millisecond) // a second copy would arrive by now
	if n := len(got()); n != rows {
		t.Fatalf("%d deliveries of %d parked rows", n, rows)
	}
	if n := len(parkedRows(t, s)); n != 0 {
		t.Fatalf("%d rows still parked", n)
	}
}
