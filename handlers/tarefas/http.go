package tarefas

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

// routes mounts the task endpoints.
func routes(svc *Service, logger *slog.Logger) func(chi.Router) {
	return func(r chi.Router) {
		// 200 and a page of the user's tasks, newest first: limite (1 to
		// MaxLimite, DefaultLimite when absent) tasks with an id below
		// antes_de, when given. The page's proximo_antes_de asks for the
		// next one. GET /tarefas?usuario_id=N.
		r.Get("/tarefas", httpjson.Param(logger, http.StatusOK, listarParams, svc.Listar))
		// 201 and the task.
		r.Post("/tarefas", httpjson.Command(logger, http.StatusCreated, svc.Criar))
		// 200 and the task, or 404 when it does not exist or is another
		// user's. GET /tarefas/{id}?usuario_id=N.
		r.Get("/tarefas/{id}", httpjson.Param(logger, http.StatusOK, alvoParams, func(ctx context.Context, a alvo) (Tarefa, error) {
			return svc.Buscar(ctx, a.id, a.usuarioID)
		}))
		// 404 when the task does not exist or is another user's, 409 while
		// subtasks are pending, 200 with the task otherwise. The
		// notification happens later, elsewhere.
		r.Patch("/tarefas/{id}/concluir", httpjson.ParamCommand(logger, http.StatusOK, pathID, func(ctx context.Context, id int64, cmd ConcluirTarefa) (Tarefa, error) {
			if cmd.UsuarioID <= 0 {
				return Tarefa{}, fmt.Errorf("%w: usuario_id deve ser um inteiro positivo", ErrInvalida)
			}
			return svc.Concluir(ctx, id, cmd.UsuarioID)
		}))
	}
}

// listarParams reads GET /tarefas's query string.
func listarParams(r *http.Request) (ListarTarefas, error) {
	p, err := query(r, "usuario_id", "limite", "antes_de")
	if err != nil {
		return ListarTarefas{}, err
	}
	limite := int(min(p["limite"], MaxLimite+1)) // over MaxLimite is refused all the same, and cannot wrap
	return ListarTarefas{UsuarioID: p["usuario_id"], Limite: limite, AntesDe: p["antes_de"]}, nil
}

// alvo is the task a route names and the user who asks for it.
type alvo struct{ id, usuarioID int64 }

// alvoParams reads the task id in the path and usuario_id in the query.
func alvoParams(r *http.Request) (alvo, error) {
	id, err := pathID(r)
	if err != nil {
		return alvo{}, err
	}
	p, err := query(r, "usuario_id")
	if err != nil {
		return alvo{}, err
	}
	return alvo{id: id, usuarioID: p["usuario_id"]}, nil
}

// ConcluirTarefa is the body of PATCH /tarefas/{id}/concluir.
type ConcluirTarefa struct {
	UsuarioID int64 `json:"usuario_id"`
}

// pathID reads the task id in the path.
func pathID(r *http.Request) (int64, error) {
	return httpjson.PathID("id", fmt.Errorf("%w: id no caminho deve ser um inteiro positivo", ErrInvalida))(r)
}

// query reads the query string of a route whose parameters are positive
// integers, strictly (see httpjson.Query): accepted names them, the first
// required.
func query(r *http.Request, accepted ...string) (map[string]int64, error) {
	p, err := httpjson.Query(r, accepted...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(p))
	for _, name := range accepted {
		v, ok := p[name]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: parâmetro %s deve ser um inteiro positivo", ErrInvalida, name)
		}
		out[name] = n
	}
	if _, ok := out[accepted[0]]; !ok {
		return nil, fmt.Errorf("%w: parâmetro %s é obrigatório", ErrInvalida, accepted[0])
	}
	return out, nil
}
