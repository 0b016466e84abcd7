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

// Stores returns a constructor for each store, by name. routable decides
// which events the outbox takes (nil: every one); the PostgreSQL store is
// a fresh database with the platform's migrations and sets.
func Stores(t testing.TB, routable func(string) error, sets ...migrations.Set) map[string]func() Store {
	if routable == nil {
		routable = func(string) error { return nil }
	}
	return map[string]func() Store{
		"memory": func() Store {
			pub := &collector{}
			return Store{Tx: memory.NewTransactor(pub, routable), Committed: pub.bodies}
		},
		"postgres": func() Store {
			db := testenv.Postgres(t)
			if _, err := migrations.Up(context.Background(), db.Pool, testenv.Logger(), sets...); err != nil {
				t.Fatal(err)
			}
			out := outbox.New(routable, watermill.NewSlogLogger(testenv.Logger()))
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
	return memory.NewTransactor(&collector{}, func(string) error { return nil })
}
