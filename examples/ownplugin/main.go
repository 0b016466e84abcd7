// Command notes is moenda with a plugin of its own, built from its own
// module: POST /notes stores a note and publishes note.added, and the
// plugin's subscription marks the note seen; GET /notes/{id} shows it.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/app"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// moenda's shipped plugins, and this module's beside them. Alone,
	// app.WithPlugins(Plugin()), it wants configs of its own (--config-dir):
	// the shipped ones set up the shipped plugins' queues.
	plugins := append(app.Shipped(), Plugin())
	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.WithPlugins(plugins...))
	stop()
	os.Exit(code)
}

// NoteAdded is published when a note is stored.
const NoteAdded = "note.added.v1"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Plugin is the notes plugin: its table, its route, its event and the
// subscription that handles it.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "notes",
		Publishes: []string{NoteAdded},
		Exchange:  "notes.events",
		Subscriptions: []handlers.Subscription{
			{Name: "added", Events: []string{"note.added"}, Handles: []string{NoteAdded}},
		},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
	}, struct{}{}, build)
}

type note struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	Seen bool   `json:"seen"`
}

// store keeps notes in PostgreSQL, or in the process where the
// environment has none (broker.kind memory).
type store struct {
	memory *handlers.Staged[string, note]
}

func (s store) put(ctx context.Context, tx handlers.Tx, n note) error {
	if pg := tx.Postgres(); pg != nil {
		_, err := pg.Exec(ctx, `INSERT INTO notes (id, text, seen) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET text = $2, seen = $3`, n.ID, n.Text, n.Seen)
		return err
	}
	s.memory.Unit(tx).Put(n.ID, n)
	return nil
}

// errNoNote: no note with that id.
var errNoNote = handlers.NewError(handlers.ErrNotFound, "no such note")

func (s store) get(ctx context.Context, tx handlers.Tx, id string) (note, error) {
	if pg := tx.Postgres(); pg != nil {
		var n note
		err := pg.QueryRow(ctx, `SELECT id, text, seen FROM notes WHERE id = $1`, id).Scan(&n.ID, &n.Text, &n.Seen)
		if errors.Is(err, pgx.ErrNoRows) {
			return note{}, errNoNote
		}
		return n, err
	}
	if n, ok := s.memory.Unit(tx).Get(id); ok {
		return n, nil
	}
	return note{}, errNoNote
}

func build(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
	s := store{memory: handlers.NewStaged[string, note]()}
	add := func(ctx context.Context, n note) (note, error) {
		if n.ID == "" || n.Seen {
			return note{}, handlers.NewError(handlers.ErrInvalid, "a note needs an id, and is not seen yet")
		}
		return handlers.Result(ctx, deps.Tx, func(ctx context.Context, tx handlers.Tx) (note, error) {
			if err := s.put(ctx, tx, n); err != nil {
				return note{}, err
			}
			e, err := event.New(NoteAdded, "notes", map[string]string{"id": n.ID})
			if err != nil {
				return note{}, err
			}
			return n, tx.Publish(ctx, e) // leaves with the note's row, or not at all
		})
	}
	get := func(ctx context.Context, id string) (note, error) {
		return handlers.Result(ctx, deps.Tx, func(ctx context.Context, tx handlers.Tx) (note, error) { return s.get(ctx, tx, id) })
	}
	pathID := func(r *http.Request) (string, error) { return chi.URLParam(r, "id"), nil }
	routes := func(r chi.Router) {
		r.Post("/notes", httpjson.Command(deps.Logger, http.StatusCreated, add))
		r.Get("/notes/{id}", httpjson.Param(deps.Logger, http.StatusOK, pathID, get))
	}
	added := func(ctx context.Context, e event.Event) error {
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil || p.ID == "" {
			return event.Permanent(fmt.Errorf("payload of %s: %v", e.Name, err))
		}
		// Joins the delivery's unit of work: the note is seen once.
		return deps.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			n, err := s.get(ctx, tx, p.ID)
			if err != nil {
				return fmt.Errorf("note %q: %w", p.ID, err)
			}
			n.Seen = true
			return s.put(ctx, tx, n)
		})
	}
	return handlers.Plugin{Handlers: map[string]handlers.HandlerFunc{"added": added}, Routes: routes}, nil
}
