package tarefas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/adapters/plugintest"
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

// onEveryStore runs test on the service over a fresh store of each kind
// it runs on, as a subtest named after the store, so the same behaviour is
// checked against each: routable is the rule its outbox applies (nil:
// every event), and events counts the events its units committed.
func onEveryStore(t *testing.T, routable func(string) error, test func(t *testing.T, svc *Service, events func() int)) {
	for name, newStore := range plugintest.Routed(t, Plugin()) {
		t.Run(name, func(t *testing.T) {
			s := newStore(routable)
			svc := &Service{handlers.NewStore(s.Tx, time.Now, newPostgresRepository, handlers.Memory(newMemoryRepository))}
			test(t, svc, func() int { return len(s.Committed()) })
		})
	}
}

func TestServiceOnEveryStore(t *testing.T) {
	onEveryStore(t, nil, func(t *testing.T, svc *Service, events func() int) {
		ctx := context.Background()
		pai := criar(t, svc, 1, "pai", nil)
		sub := criar(t, svc, 1, "sub", &pai.ID)
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

// The task and its event are one unit: if the event cannot be written,
// the task is not concluded either.
func TestConclusionAndEventCommitTogether(t *testing.T) {
	refuse := func(string) error { return errors.New("outbox refuses") }
	onEveryStore(t, refuse, func(t *testing.T, svc *Service, events func() int) {
		ctx := context.Background()
		task := criar(t, svc, 1, "x", nil)
		if _, err := svc.Concluir(ctx, task.ID, 1); err == nil {
			t.Fatal("Concluir succeeded although its event could not be written")
		}
		if n := events(); n != 0 {
			t.Fatalf("%d events left", n)
		}
		err := svc.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
			got, err := svc.Repo(tx).Get(ctx, task.ID, 1)
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

// criar creates a task or fails the test.
func criar(t *testing.T, svc *Service, usuarioID int64, titulo string, pai *int64) Tarefa {
	t.Helper()
	task, err := svc.Criar(context.Background(), CriarTarefa{UsuarioID: usuarioID, Titulo: titulo, TarefaPaiID: pai})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// ids lists the tasks' ids in order.
func ids(ts []Tarefa) []int64 {
	out := []int64{}
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// The reads see the user's own tasks only, on every store: another user's
// task is not found, like a missing one.
func TestTarefasReadOnEveryStore(t *testing.T) {
	onEveryStore(t, nil, func(t *testing.T, svc *Service, _ func() int) {
		ctx := context.Background()
		a := criar(t, svc, 1, "a", nil)
		b := criar(t, svc, 1, "b", nil)
		sub := criar(t, svc, 1, "sub", &a.ID)
		c := criar(t, svc, 2, "c", nil)
		if _, err := svc.Concluir(ctx, sub.ID, 1); err != nil {
			t.Fatal(err)
		}

		buscar := []struct {
			name          string
			id, usuarioID int64
			wantErr       error
		}{
			{"own task", a.ID, 1, nil},
			{"own subtask, concluded", sub.ID, 1, nil},
			{"another user's task", c.ID, 1, ErrNaoEncontrada},
			{"no such task", c.ID + 100, 1, ErrNaoEncontrada},
			{"id 0", 0, 1, ErrInvalida},
			{"usuario_id 0", a.ID, 0, ErrInvalida},
		}
		for _, tt := range buscar {
			t.Run("Buscar "+tt.name, func(t *testing.T) {
				got, err := svc.Buscar(ctx, tt.id, tt.usuarioID)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Buscar(%d, %d) error = %v, want %v", tt.id, tt.usuarioID, err, tt.wantErr)
				}
				if tt.wantErr == nil && (got.ID != tt.id || got.UsuarioID != tt.usuarioID) {
					t.Fatalf("Buscar(%d, %d) = %+v", tt.id, tt.usuarioID, got)
				}
			})
		}
		got, err := svc.Buscar(ctx, sub.ID, 1)
		if err != nil || got.Titulo != "sub" || !got.Concluida || got.ConcluidaEm == nil || got.TarefaPaiID == nil || *got.TarefaPaiID != a.ID {
			t.Fatalf("Buscar(subtask) = %+v, %v", got, err)
		}

		listar := []struct {
			name    string
			q       ListarTarefas
			want    []int64
			next    int64 // 0: the last page
			wantErr error
		}{
			{"all, newest first", ListarTarefas{UsuarioID: 1}, []int64{sub.ID, b.ID, a.ID}, 0, nil},
			{"a page of two", ListarTarefas{UsuarioID: 1, Limite: 2}, []int64{sub.ID, b.ID}, b.ID, nil},
			{"the page after it", ListarTarefas{UsuarioID: 1, Limite: 2, AntesDe: b.ID}, []int64{a.ID}, 0, nil},
			{"exactly limite left: no next page", ListarTarefas{UsuarioID: 1, Limite: 3}, []int64{sub.ID, b.ID, a.ID}, 0, nil},
			{"another user's tasks", ListarTarefas{UsuarioID: 2}, []int64{c.ID}, 0, nil},
			{"a user without tasks", ListarTarefas{UsuarioID: 3}, []int64{}, 0, nil},
			{"antes_de past the last", ListarTarefas{UsuarioID: 1, AntesDe: a.ID}, []int64{}, 0, nil},
			{"limite of MaxLimite", ListarTarefas{UsuarioID: 1, Limite: MaxLimite}, []int64{sub.ID, b.ID, a.ID}, 0, nil},
			{"limite over MaxLimite", ListarTarefas{UsuarioID: 1, Limite: MaxLimite + 1}, nil, 0, ErrInvalida},
			{"negative limite", ListarTarefas{UsuarioID: 1, Limite: -1}, nil, 0, ErrInvalida},
			{"negative antes_de", ListarTarefas{UsuarioID: 1, AntesDe: -1}, nil, 0, ErrInvalida},
			{"usuario_id 0", ListarTarefas{}, nil, 0, ErrInvalida},
		}
		for _, tt := range listar {
			t.Run("Listar "+tt.name, func(t *testing.T) {
				page, err := svc.Listar(ctx, tt.q)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Listar(%+v) error = %v, want %v", tt.q, err, tt.wantErr)
				}
				if err != nil {
					return
				}
				if got := ids(page.Tarefas); !slices.Equal(got, tt.want) || page.Tarefas == nil {
					t.Fatalf("Listar(%+v) ids = %v, want %v", tt.q, got, tt.want)
				}
				if next := page.ProximoAntesDe; (next == nil) != (tt.next == 0) || next != nil && *next != tt.next {
					t.Fatalf("Listar(%+v) proximo_antes_de = %v, want %d", tt.q, next, tt.next)
				}
				for _, task := range page.Tarefas {
					if task.UsuarioID != tt.q.UsuarioID {
						t.Fatalf("Listar(%+v) returned another user's task %+v", tt.q, task)
					}
				}
			})
		}
	})
}

// The routes answer in Portuguese, naming fields and parameters as they
// are on the wire, on every store.
func TestTarefasRoutes(t *testing.T) {
	onEveryStore(t, nil, func(t *testing.T, svc *Service, _ func() int) {
		r := chi.NewRouter()
		routes(svc, testenv.Logger())(r)
		a := criar(t, svc, 1, "a", nil)
		b := criar(t, svc, 1, "b", nil)
		c := criar(t, svc, 2, "c", nil)

		tests := []struct {
			method, path, body string
			code               int
			want               string // a part of the answer
		}{
			{"GET", fmt.Sprintf("/tarefas/%d?usuario_id=1", a.ID), "", http.StatusOK, fmt.Sprintf(`{"id":%d,"usuario_id":1,"titulo":"a","concluida":false,`, a.ID)},
			{"GET", fmt.Sprintf("/tarefas/%d?usuario_id=1", c.ID), "", http.StatusNotFound, `{"error":"tarefa não encontrada"}`},
			{"GET", "/tarefas/999999?usuario_id=1", "", http.StatusNotFound, `{"error":"tarefa não encontrada"}`},
			{"GET", fmt.Sprintf("/tarefas/%d", a.ID), "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro usuario_id é obrigatório"}`},
			{"GET", fmt.Sprintf("/tarefas/%d?usuario_id=x", a.ID), "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro usuario_id deve ser um inteiro positivo"}`},
			{"GET", fmt.Sprintf("/tarefas/%d?usuario_id=0", a.ID), "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro usuario_id deve ser um inteiro positivo"}`},
			{"GET", fmt.Sprintf("/tarefas/%d?usuario_id=1&usuario_id=2", a.ID), "", http.StatusBadRequest, `{"error":"parameter usuario_id is given more than once"}`},
			{"GET", fmt.Sprintf("/tarefas/%d?usuario=1", a.ID), "", http.StatusBadRequest, `{"error":"unknown parameter \"usuario\" (accepted: usuario_id)"}`},
			{"GET", "/tarefas/abc?usuario_id=1", "", http.StatusBadRequest, `{"error":"requisição inválida: id no caminho deve ser um inteiro positivo"}`},
			{"GET", "/tarefas/0?usuario_id=1", "", http.StatusBadRequest, `{"error":"requisição inválida: id no caminho deve ser um inteiro positivo"}`},
			{"GET", "/tarefas?usuario_id=1", "", http.StatusOK, fmt.Sprintf(`{"tarefas":[{"id":%d,`, b.ID)},
			{"GET", "/tarefas?usuario_id=1", "", http.StatusOK, `"proximo_antes_de":null}`},
			{"GET", "/tarefas?usuario_id=1&limite=1", "", http.StatusOK, fmt.Sprintf(`"proximo_antes_de":%d}`, b.ID)},
			{"GET", fmt.Sprintf("/tarefas?usuario_id=1&limite=1&antes_de=%d", b.ID), "", http.StatusOK, fmt.Sprintf(`{"tarefas":[{"id":%d,`, a.ID)},
			{"GET", "/tarefas?usuario_id=3", "", http.StatusOK, `{"tarefas":[],"proximo_antes_de":null}`},
			{"GET", "/tarefas", "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro usuario_id é obrigatório"}`},
			{"GET", "/tarefas?usuario_id=-1", "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro usuario_id deve ser um inteiro positivo"}`},
			{"GET", "/tarefas?usuario_id=1&limite=101", "", http.StatusBadRequest, `{"error":"requisição inválida: limite deve ser um inteiro de 1 a 100"}`},
			{"GET", "/tarefas?usuario_id=1&limite=99999999999999999999", "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro limite deve ser um inteiro positivo"}`},
			{"GET", "/tarefas?usuario_id=1&limite=0", "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro limite deve ser um inteiro positivo"}`},
			{"GET", "/tarefas?usuario_id=1&antes_de=x", "", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro antes_de deve ser um inteiro positivo"}`},
			{"GET", "/tarefas?usuario_id=1&limit=5", "", http.StatusBadRequest, `{"error":"unknown parameter \"limit\" (accepted: usuario_id, limite, antes_de)"}`},
			{"GET", "/tarefas?usuario_id=%zz", "", http.StatusBadRequest, `{"error":"the query string is malformed: invalid URL escape \"%zz\""}`},
			{"POST", "/tarefas", `{"usuario_id": 0, "titulo": " "}`, http.StatusBadRequest, `{"error":"requisição inválida: usuario_id deve ser um inteiro positivo\nrequisição inválida: titulo é obrigatório"}`},
			{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "` + strings.Repeat("á", 501) + `"}`, http.StatusBadRequest, `{"error":"requisição inválida: titulo tem mais de 500 caracteres"}`},
			{"POST", "/tarefas", `{"usuario_id": 1, "titulo": "x", "tarefa_pai_id": 0}`, http.StatusBadRequest, `{"error":"requisição inválida: tarefa_pai_id deve ser um inteiro positivo ou null"}`},
			{"POST", "/tarefas", fmt.Sprintf(`{"usuario_id": 1, "titulo": "x", "tarefa_pai_id": %d}`, c.ID), http.StatusBadRequest, fmt.Sprintf(`{"error":"requisição inválida: tarefa_pai_id %d não é uma tarefa do usuario_id 1"}`, c.ID)},
			{"PATCH", "/tarefas/abc/concluir", `{"usuario_id": 1}`, http.StatusBadRequest, `{"error":"requisição inválida: id no caminho deve ser um inteiro positivo"}`},
			{"PATCH", fmt.Sprintf("/tarefas/%d/concluir", a.ID), `{}`, http.StatusBadRequest, `{"error":"requisição inválida: usuario_id deve ser um inteiro positivo"}`},
			{"PATCH", fmt.Sprintf("/tarefas/%d/concluir", c.ID), `{"usuario_id": 1}`, http.StatusNotFound, `{"error":"tarefa não encontrada"}`},
		}
		for _, tt := range tests {
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%s %s %s = %d %s, want %d with %s", tt.method, tt.path, tt.body, rec.Code, rec.Body, tt.code, tt.want)
			}
		}
	})
}
