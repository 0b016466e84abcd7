package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// key is an outbox row's primary key.
type key struct {
	txID   int64
	offset int64
}

// fillOutbox commits n outbox rows, each in a transaction of its own, and
// returns their keys in the relay's order.
func fillOutbox(t *testing.T, db testenv.Database, n int) []key {
	t.Helper()
	ctx := context.Background()
	for range n {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_outbox (uuid, payload, metadata, transaction_id)
			VALUES (gen_random_uuid()::text, '{}', '{}', pg_current_xact_id())`); err != nil {
			t.Fatal(err)
		}
	}
	return outboxKeys(t, db)
}

func outboxKeys(t *testing.T, db testenv.Database) []key {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT transaction_id::text::bigint, "offset" FROM watermill_outbox ORDER BY transaction_id, "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.txID, &k.offset); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// Prune deletes only rows every given group has published, written before
// the cutoff, and not parked (by any group).
func TestPruneDeletesOnlyPublishedOldUnparkedRows(t *testing.T) {
	tests := []struct {
		name      string
		newer     []int          // rows written after the cutoff; the others before it
		parked    []int          // rows parked (by a group not pruned for)
		positions map[string]int // each group's position: the last row it published
		groups    []string
		cutoffAge time.Duration // the cutoff is this long ago
		batch     int
		left      []int
	}{
		{
			name:  "behind every group, before the cutoff, not parked",
			newer: []int{7, 8, 9}, parked: []int{1}, positions: map[string]int{"rabbit": 5, "kafka": 8},
			groups: []string{"rabbit", "kafka"}, cutoffAge: 7 * 24 * time.Hour, batch: 1000,
			left: []int{1, 6, 7, 8, 9},
		},
		{
			name:  "the same, two rows a batch",
			newer: []int{7, 8, 9}, parked: []int{1}, positions: map[string]int{"rabbit": 5, "kafka": 8},
			groups: []string{"rabbit", "kafka"}, cutoffAge: 7 * 24 * time.Hour, batch: 2,
			left: []int{1, 6, 7, 8, 9},
		},
		{
			name:  "only the groups of the configuration count",
			newer: []int{7, 8, 9}, parked: []int{1}, positions: map[string]int{"rabbit": 5, "kafka": 8},
			groups: []string{"kafka"}, cutoffAge: 7 * 24 * time.Hour, batch: 1000,
			left: []int{1, 7, 8, 9},
		},
		{
			name:  "a group with no position yet has published nothing",
			newer: []int{7, 8, 9}, positions: map[string]int{"rabbit": 9},
			groups: []string{"rabbit", "kafka"}, cutoffAge: 7 * 24 * time.Hour, batch: 1000,
			left: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		},
		{
			name:  "nothing before the cutoff",
			newer: []int{7, 8, 9}, positions: map[string]int{"rabbit": 9},
			groups: []string{"rabbit"}, cutoffAge: 30 * 24 * time.Hour, batch: 1000,
			left: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		},
		{
			name:  "a newer row among older ones stays",
			newer: []int{3, 7, 8, 9}, positions: map[string]int{"rabbit": 9},
			groups: []string{"rabbit"}, cutoffAge: 7 * 24 * time.Hour, batch: 1000,
			left: []int{3, 7, 8, 9},
		},
		{
			// The pass stops at the batch that meets it; the older rows
			// behind it go once it is past the cutoff too.
			name:  "a newer row among older ones ends the pass",
			newer: []int{3, 7, 8, 9}, positions: map[string]int{"rabbit": 9},
			groups: []string{"rabbit"}, cutoffAge: 7 * 24 * time.Hour, batch: 2,
			left: []int{3, 4, 5, 6, 7, 8, 9},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testenv.Postgres(t)
			ctx := context.Background()
			keys := fillOutbox(t, db, 10)
			for i, k := range keys {
				age := "10 days"
				if slices.Contains(tt.newer, i) {
					age = "0"
				}
				if _, err := db.Pool.Exec(ctx, `UPDATE watermill_outbox SET created_at = now()::timestamp - $3::interval
					WHERE transaction_id = $1::text::xid8 AND "offset" = $2`, fmt.Sprint(k.txID), k.offset, age); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tt.parked {
				if _, err := db.Pool.Exec(ctx, `INSERT INTO moenda_outbox_parked (transaction_id, "offset", consumer_group, event_id, event_name, routing_key, reason, detail)
					VALUES ($1::text::xid8, $2, 'another-group', 'id', 'x.y.v1', 'x.y', 'unroutable', 'test')`, fmt.Sprint(keys[i].txID), keys[i].offset); err != nil {
					t.Fatal(err)
				}
			}
			for group, i := range tt.positions {
				if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
					VALUES ($1, $2, $3::text::xid8)`, group, keys[i].offset, fmt.Sprint(keys[i].txID)); err != nil {
					t.Fatal(err)
				}
			}
			n, err := outbox.Prune(ctx, db.Pool, tt.groups, time.Now().Add(-tt.cutoffAge), tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			var left []int
			remaining := outboxKeys(t, db)
			for i, k := range keys {
				if slices.Contains(remaining, k) {
					left = append(left, i)
				}
			}
			if !slices.Equal(left, tt.left) || n != len(keys)-len(tt.left) {
				t.Fatalf("rows left %v (%d deleted), want %v", left, n, tt.left)
			}
		})
	}
}

// Two processes pruning at once share the work: every eligible row is
// deleted once, and neither fails.
func TestPruneFromTwoProcessesAtOnce(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	const rows = 3000
	if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_outbox (uuid, payload, metadata, transaction_id, created_at)
		SELECT gen_random_uuid()::text, '{}', '{}', pg_current_xact_id(), now()::timestamp - interval '10 days' FROM generate_series(1, $1)`, rows); err != nil {
		t.Fatal(err)
	}
	keys := outboxKeys(t, db)
	last := keys[len(keys)-1]
	if _, err := db.Pool.Exec(ctx, `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ('rabbit', $1, $2::text::xid8)`, last.offset, fmt.Sprint(last.txID)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	deleted := make([]int, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			deleted[i], errs[i] = outbox.Prune(ctx, db.Pool, []string{"rabbit"}, time.Now().Add(-time.Hour), 100)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if deleted[0]+deleted[1] != rows || len(outboxKeys(t, db)) != 0 {
		t.Fatalf("deleted %v of %d rows; %d left", deleted, rows, len(outboxKeys(t, db)))
	}
}

// Pruning while the relay publishes, with every row already past the
// cutoff, never deletes a row before the relay has published it.
func TestPruneNeverRunsAheadOfTheRelay(t *testing.T) {
	eachReader(t, func(t *testing.T, base outbox.Config) {
		s := newStack(t)
		got := testenv.Consume(t, s.vhost.URL, "auditoria.tarefas")
		cfg := base
		cfg.BatchSize = 10
		s.startRelay(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		pruned := make(chan int, 1)
		go func() {
			total := 0
			// Each prune runs to its end, so that none the stop
			// interrupts deletes rows it does not count.
			for ctx.Err() == nil {
				n, err := outbox.Prune(context.Background(), s.db.Pool, []string{cfg.ConsumerGroup}, time.Now().Add(time.Hour), 7)
				if err != nil {
					t.Errorf("prune: %v", err)
				}
				total += n
			}
			pruned <- total
		}()
		want := map[string]bool{}
		s.commit(t, 300, want)
		testenv.Eventually(t, 30*time.Second, "every event", func() bool {
			ids := map[string]bool{}
			for _, d := range got() {
				ids[d.MessageId] = true
			}
			return len(ids) == len(want)
		})
		testenv.Eventually(t, 10*time.Second, "the outbox pruned", func() bool {
			return s.count(t, `SELECT count(*) FROM watermill_outbox`) == 0
		})
		cancel()
		if n := <-pruned; n != len(want) {
			t.Fatalf("pruned %d rows, want %d", n, len(want))
		}
	})
}

// Retention settings are checked with the rest of the relay's: a
// negative retention, or one with no interval to apply it, names the key.
func TestConfigChecksRetention(t *testing.T) {
	tests := []struct {
		name      string
		retention time.Duration
		interval  time.Duration
		want      string // "" when valid
	}{
		{"the defaults", 7 * 24 * time.Hour, 5 * time.Minute, ""},
		{"rows kept forever need no interval", 0, 0, ""},
		{"negative retention", -time.Hour, time.Minute, "outbox.retention must not be negative, got -1h0m0s (0 keeps published rows forever)"},
		{"retention with no interval", time.Hour, 0, "outbox.retention_interval must be at least 1s while outbox.retention is set, got 0s"},
		{"an interval too short", time.Hour, time.Millisecond, "outbox.retention_interval must be at least 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := outbox.DefaultConfig()
			cfg.Retention, cfg.RetentionInterval = tt.retention, tt.interval
			checkValidate(t, cfg, tt.want)
		})
	}
}
