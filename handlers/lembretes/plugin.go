// Package lembretes is the example plugin, living in this folder alone:
// its table (migrations/), its configuration section with Go defaults,
// the exchange its event goes to, an HTTP route, and a subscription. The
// platform's tests run it, on RabbitMQ and in memory, to show that adding a
// plugin needs no edit to migrations/ or configs/. No shipped binary
// carries it, and where one is registered it runs only when
// handlers.enabled names it (OptIn).
package lembretes

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/httpjson"
)

// EventCriado is raised when a reminder is created.
const EventCriado = "lembrete.criado.v1"

// Config is the section handlers.lembretes.
type Config struct {
	// Marca is written as the reminder's "visto" when its event is handled.
	Marca string `koanf:"marca"`
}

// Validate reports a bad section.
func (c Config) Validate() error {
	if c.Marca == "" {
		return errors.New("handlers.lembretes.marca is empty")
	}
	return nil
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Plugin returns the plugin's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "lembretes",
		Publishes: []string{EventCriado},
		Exchange:  "lembretes.eventos",
		Subscriptions: []handlers.Subscription{
			{Name: "criados", Events: []string{"lembrete.criado"}, Handles: []string{EventCriado}},
		},
		Migrations: handlers.MigrationsDir(migrationFiles, "migrations"),
		OptIn:      true,
	}, Config{Marca: "visto"}, build)
}

// lembrete is a reminder as stored.
type lembrete struct {
	ID    int64   `json:"id"`
	Texto string  `json:"texto"`
	Visto *string `json:"visto"`
}

// store keeps reminders in PostgreSQL when the unit of work has a
// transaction, in memory otherwise (applied on commit).
type store struct {
	mu   sync.Mutex
	next int64
	rows map[int64]lembrete
}

func (s *store) add(ctx context.Context, tx handlers.Tx, texto string) (int64, error) {
	if ptx := tx.Postgres(); ptx != nil {
		var id int64
		err := ptx.QueryRow(ctx, `INSERT INTO lembretes (texto) VALUES ($1) RETURNING id`, texto).Scan(&id)
		return id, err
	}
	s.mu.Lock()
	s.next++
	id := s.next
	s.mu.Unlock()
	tx.OnCommit(func() { s.mu.Lock(); s.rows[id] = lembrete{ID: id, Texto: texto}; s.mu.Unlock() })
	return id, nil
}

func (s *store) see(ctx context.Context, tx handlers.Tx, id int64, marca string) error {
	if ptx := tx.Postgres(); ptx != nil {
		_, err := ptx.Exec(ctx, `UPDATE lembretes SET visto = $2 WHERE id = $1`, id, marca)
		return err
	}
	tx.OnCommit(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.rows[id]
		r.Visto = &marca
		s.rows[id] = r
	})
	return nil
}

// errNaoEncontrado: no reminder with that id.
var errNaoEncontrado = handlers.NewError(handlers.ErrNotFound, "lembrete não encontrado")

func (s *store) get(ctx context.Context, tx handlers.Tx, id int64) (lembrete, error) {
	if ptx := tx.Postgres(); ptx != nil {
		var l lembrete
		err := ptx.QueryRow(ctx, `SELECT id, texto, visto FROM lembretes WHERE id = $1`, id).Scan(&l.ID, &l.Texto, &l.Visto)
		if errors.Is(err, pgx.ErrNoRows) {
			return l, errNaoEncontrado
		}
		return l, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.rows[id]
	if !ok {
		return l, errNaoEncontrado
	}
	return l, nil
}

// novo is the body of POST /lembretes.
type novo struct {
	Texto string `json:"texto"`
}

// pathID reads the reminder id in the path.
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil {
		return 0, handlers.NewError(handlers.ErrInvalid, "id deve ser um inteiro")
	}
	return id, nil
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	s := &store{rows: map[int64]lembrete{}}
	criar := func(ctx context.Context, body novo) (map[string]int64, error) {
		return handlers.Result(ctx, deps.Tx, func(ctx context.Context, tx handlers.Tx) (map[string]int64, error) {
			id, err := s.add(ctx, tx, body.Texto)
			if err != nil {
				return nil, err
			}
			e, err := event.New(EventCriado, "lembretes", map[string]int64{"id": id})
			if err != nil {
				return nil, err
			}
			return map[string]int64{"id": id}, tx.Publish(ctx, e)
		})
	}
	buscar := func(ctx context.Context, id int64) (lembrete, error) {
		return handlers.Result(ctx, deps.Tx, func(ctx context.Context, tx handlers.Tx) (lembrete, error) { return s.get(ctx, tx, id) })
	}
	routes := func(r chi.Router) {
		r.Post("/lembretes", httpjson.Command(deps.Logger, http.StatusCreated, criar))
		r.Get("/lembretes/{id}", httpjson.Param(deps.Logger, http.StatusOK, pathID, buscar))
	}
	criado := func(ctx context.Context, e event.Event) error {
		var p struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil || p.ID <= 0 {
			return event.Permanent(fmt.Errorf("payload of %s: %v", e.Name, err))
		}
		return deps.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error { return s.see(ctx, tx, p.ID, cfg.Marca) })
	}
	return handlers.Plugin{Handlers: map[string]handlers.HandlerFunc{"criados": criado}, Routes: routes}, nil
}
