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

func (s *store) get(ctx context.Context, tx handlers.Tx, id int64) (lembrete, bool, error) {
	if ptx := tx.Postgres(); ptx != nil {
		var l lembrete
		err := ptx.QueryRow(ctx, `SELECT id, texto, visto FROM lembretes WHERE id = $1`, id).Scan(&l.ID, &l.Texto, &l.Visto)
		if errors.Is(err, pgx.ErrNoRows) {
			return l, false, nil
		}
		return l, err == nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.rows[id]
	return l, ok, nil
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	s := &store{rows: map[int64]lembrete{}}
	routes := func(r chi.Router) {
		r.Post("/lembretes", func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Texto string `json:"texto"`
			}
			if !httpjson.Decode(w, r, &body) {
				return
			}
			var id int64
			err := deps.Tx.InTx(r.Context(), func(ctx context.Context, tx handlers.Tx) error {
				var err error
				if id, err = s.add(ctx, tx, body.Texto); err != nil {
					return err
				}
				e, err := event.New(EventCriado, "lembretes", map[string]int64{"id": id})
				if err != nil {
					return err
				}
				return tx.Publish(ctx, e)
			})
			if err != nil {
				httpjson.ServerError(w, r, deps.Logger, err)
				return
			}
			httpjson.Write(w, http.StatusCreated, map[string]int64{"id": id})
		})
		r.Get("/lembretes/{id}", func(w http.ResponseWriter, r *http.Request) {
			id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
			if err != nil {
				httpjson.Error(w, http.StatusBadRequest, "id deve ser um inteiro")
				return
			}
			var l lembrete
			var found bool
			err = deps.Tx.InTx(r.Context(), func(ctx context.Context, tx handlers.Tx) error {
				l, found, err = s.get(ctx, tx, id)
				return err
			})
			switch {
			case err != nil:
				httpjson.ServerError(w, r, deps.Logger, err)
			case !found:
				httpjson.Error(w, http.StatusNotFound, "lembrete não encontrado")
			default:
				httpjson.Write(w, http.StatusOK, l)
			}
		})
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
