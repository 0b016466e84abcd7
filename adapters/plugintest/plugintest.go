// Package plugintest runs a plugin's tests on each store the platform
// gives plugins: in memory, and PostgreSQL with the plugin's migrations.
// A plugin picks its store per unit of work, so one suite checks both.
package plugintest

import (
	"context"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/migrations"
)

// Store is the unit of work over one store, and the bodies of the events
// its units of work committed, in order.
type Store struct {
	Tx        handlers.Transactor
	Committed func() [][]byte
}

// StoreSet is a constructor for each store, by name.
type StoreSet map[string]func() Store

// Each runs test as a subtest on a new store of each kind, named after it.
func (s StoreSet) Each(t *testing.T, test func(t *testing.T, s Store)) {
	for name, newStore := range s {
		t.Run(name, func(t *testing.T) { test(t, newStore()) })
	}
}

// Stores returns a constructor for each store, by name, whose outbox
// takes every event; the PostgreSQL store is a fresh database with the
// platform's migrations and those of defs, as the platform runs them.
func Stores(t testing.TB, defs ...handlers.Definition) StoreSet {
	out := StoreSet{}
	for name, store := range Routed(t, defs...) {
		out[name] = func() Store { return store(nil) }
	}
	return out
}

// Routed is Stores for a test that chooses which events each store's
// outbox takes: routable decides (nil: every one).
func Routed(t testing.TB, defs ...handlers.Definition) map[string]func(routable func(string) error) Store {
	sets := make([]migrations.Set, len(defs))
	for i, def := range defs {
		sets[i] = migrations.Set{Name: def.Name, Files: def.Migrations}
	}
	return map[string]func(func(string) error) Store{
		"memory": func(routable func(string) error) Store {
			pub := &collector{}
			return Store{Tx: memory.NewTransactor(pub, anyEvent(routable)), Committed: pub.bodies}
		},
		"postgres": func(routable func(string) error) Store {
			db := testenv.Postgres(t)
			if _, err := migrations.Up(context.Background(), db.Pool, testenv.Logger(), sets...); err != nil {
				t.Fatal(err)
			}
			out := outbox.New(anyEvent(routable), watermill.NewSlogLogger(testenv.Logger()))
			return Store{Tx: postgres.NewTransactor(db.Pool, out), Committed: func() [][]byte {
				rows, err := db.Pool.Query(context.Background(), `SELECT payload FROM watermill_outbox ORDER BY transaction_id, "offset"`)
				if err != nil {
					t.Fatal(err)
				}
				bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
				if err != nil {
					t.Fatal(err)
				}
				return bodies
			}}
		},
	}
}

// anyEvent is routable, or a rule that takes every event when it is nil.
func anyEvent(routable func(string) error) func(string) error {
	if routable == nil {
		return func(string) error { return nil }
	}
	return routable
}

// collector keeps what the memory transactor publishes: what committed.
type collector struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (c *collector) Publish(_ string, msgs ...*message.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msgs...)
	return nil
}

func (c *collector) Close() error { return nil }

func (c *collector) bodies() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]byte, len(c.msgs))
	for i, m := range c.msgs {
		out[i] = m.Payload
	}
	return out
}

// Memory is a unit of work in memory whose events go nowhere: for building
// a plugin in a test that delivers nothing.
func Memory() handlers.Transactor {
	return memory.NewTransactor(&collector{}, anyEvent(nil))
}
