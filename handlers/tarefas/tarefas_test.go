package tarefas

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/memory"
	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
)

func TestConcluir(t *testing.T) {
	now := time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)
	tests := []struct {
		name       string
		tarefa     Tarefa
		wantErr    error
		wantEvents int
	}{
		{"pending subtasks", Tarefa{ID: 1, UsuarioID: 1, Titulo: "x", SubtarefasPendentes: 2}, ErrSubtarefasPendentes, 0},
		{"open task", Tarefa{ID: 1, UsuarioID: 1, Titulo: "x"}, nil, 1},
		{"already concluded: no second event", Tarefa{ID: 1, UsuarioID: 1, Titulo: "x", Concluida: true}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := tt.tarefa
			err := task.Concluir(now)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Concluir error = %v, want %v", err, tt.wantErr)
			}
			if len(task.Eventos()) != tt.wantEvents {
				t.Fatalf("%d events, want %d", len(task.Eventos()), tt.wantEvents)
			}
			if tt.wantErr != nil && task.Concluida {
				t.Fatal("a refused conclusion changed the task")
			}
			if tt.wantEvents == 1 {
				e := task.Eventos()[0]
				var p TarefaConcluida
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					t.Fatal(err)
				}
				if e.Name != "tarefa.concluida.v1" || e.RoutingKey() != "tarefa.concluida" || !e.OccurredAt.Equal(now) || p != (TarefaConcluida{TarefaID: 1, UsuarioID: 1, Titulo: "x"}) {
					t.Fatalf("event = %+v payload %+v", e, p)
				}
			}
		})
	}
}

// published collects what the transactor's outbox lets out.
type published struct{ msgs []*message.Message }

func (p *published) Publish(_ string, msgs ...*message.Message) error {
	p.msgs = append(p.msgs, msgs...)
	return nil
}
func (p *published) Close() error { return nil }

var routeAll = func(string) error { return nil }

// services returns the service over every store it runs on, so the same
// behaviour is checked against each.
func services(t *testing.T) map[string]func(routable func(string) error) (*Service, func() int) {
	return map[string]func(func(string) error) (*Service, func() int){
		"memory": func(routable func(string) error) (*Service, func() int) {
			pub := &published{}
			svc := &Service{tx: memory.NewTransactor(pub, routable), repo: newMemoryStore().repository, now: time.Now}
			return svc, func() int { return len(pub.msgs) }
		},
		"postgres": func(routable func(string) error) (*Service, func() int) {
			db := testenv.Postgres(t)
			out := outbox.New(routable, watermill.NewSlogLogger(testenv.Logger()))
			svc := &Service{
				tx:   postgres.NewTransactor(db.Pool, out, nil),
				repo: func(tx handlers.Tx) Repository { return postgresRepository{tx: tx.Postgres()} },
				now:  time.Now,
			}
			return svc, func() int {
				var n int
				if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM watermill_outbox").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
		},
	}
}

func TestServiceOnEveryStore(t *testing.T) {
	for name, newService := range services(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			svc, events := newService(routeAll)
			pai, err := svc.Criar(ctx, CriarTarefa{UsuarioID: 1, Titulo: "pai"})
			if err != nil {
				t.Fatal(err)
			}
			sub, err := svc.Criar(ctx, CriarTarefa{UsuarioID: 1, Titulo: "sub", TarefaPaiID: &pai.ID})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Criar(ctx, CriarTarefa{UsuarioID: 2, Titulo: "alheia", TarefaPaiID: &pai.ID}); !errors.Is(err, ErrInvalida) {
				t.Fatalf("subtask under another user's task: %v", err)
			}
			if _, err := svc.Concluir(ctx, pai.ID, 2); !errors.Is(err, ErrNaoEncontrada) {
				t.Fatalf("another user's task: %v", err)
			}
			if _, err := svc.Concluir(ctx, pai.ID, 1); !errors.Is(err, ErrSubtarefasPendentes) {
				t.Fatalf("pending subtask: %v", err)
			}
			if _, err := svc.Concluir(ctx, sub.ID, 1); err != nil {
				t.Fatal(err)
			}
			done, err := svc.Concluir(ctx, pai.ID, 1)
			if err != nil || !done.Concluida || done.ConcluidaEm == nil {
				t.Fatalf("Concluir = %+v, %v", done, err)
			}
			if _, err := svc.Concluir(ctx, pai.ID, 1); err != nil {
				t.Fatalf("concluding again: %v", err)
			}
			if n := events(); n != 2 {
				t.Fatalf("%d events for two conclusions", n)
			}
		})
	}
}

// The task and its event are one unit: if the event cannot be written,
// the task is not concluded either.
func TestConclusionAndEventCommitTogether(t *testing.T) {
	for name, newService := range services(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			refuse := func(string) error { return errors.New("outbox refuses") }
			svc, events := newService(refuse)
			task, err := svc.Criar(ctx, CriarTarefa{UsuarioID: 1, Titulo: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Concluir(ctx, task.ID, 1); err == nil {
				t.Fatal("Concluir succeeded although its event could not be written")
			}
			if n := events(); n != 0 {
				t.Fatalf("%d events left", n)
			}
			err = svc.tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
				got, err := svc.repo(tx).GetDoUsuario(ctx, task.ID, 1)
				if err == nil && got.Concluida {
					t.Error("the task was concluded without its event")
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
