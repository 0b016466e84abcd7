package tarefas

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

type api struct {
	svc    *Service
	logger *slog.Logger
}

func (a api) routes(r chi.Router) {
	r.Get("/tarefas", a.listar)
	// 201 and the task.
	r.Post("/tarefas", httpjson.Command(a.logger, http.StatusCreated, a.svc.Criar))
	r.Get("/tarefas/{id}", a.buscar)
	r.Patch("/tarefas/{id}/concluir", a.concluir)
}

// listar answers GET /tarefas?usuario_id=N with 200 and a page of the
// user's tasks, newest first: limite (1 to MaxLimite, DefaultLimite when
// absent) tasks with an id below antes_de, when given. The page's
// proximo_antes_de asks for the next one.
func (a api) listar(w http.ResponseWriter, r *http.Request) {
	p, err := query(r, "usuario_id", "limite", "antes_de")
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	limite := int(min(p["limite"], MaxLimite+1)) // over MaxLimite is refused all the same, and cannot wrap
	page, err := a.svc.Listar(r.Context(), ListarTarefas{UsuarioID: p["usuario_id"], Limite: limite, AntesDe: p["antes_de"]})
	httpjson.Respond(w, r, a.logger, http.StatusOK, page, err)
}

// buscar answers GET /tarefas/{id}?usuario_id=N with 200 and the task, or
// 404 when it does not exist or is another user's.
func (a api) buscar(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	p, err := query(r, "usuario_id")
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	t, err := a.svc.Buscar(r.Context(), id, p["usuario_id"])
	httpjson.Respond(w, r, a.logger, http.StatusOK, t, err)
}

// concluir answers PATCH /tarefas/{id}/concluir: 404 when the task does
// not exist or is another user's, 409 while subtasks are pending, 200 with
// the task otherwise. The notification happens later, elsewhere.
func (a api) concluir(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	var body struct {
		UsuarioID int64 `json:"usuario_id"`
	}
	if !httpjson.Decode(w, r, &body) {
		return
	}
	if body.UsuarioID <= 0 {
		httpjson.Fail(w, r, a.logger, fmt.Errorf("%w: usuario_id deve ser um inteiro positivo", ErrInvalida))
		return
	}
	t, err := a.svc.Concluir(r.Context(), id, body.UsuarioID)
	httpjson.Respond(w, r, a.logger, http.StatusOK, t, err)
}

// pathID reads the task id in the path.
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: id no caminho deve ser um inteiro positivo", ErrInvalida)
	}
	return id, nil
}

// query reads the query string of a route whose parameters are positive
// integers: accepted names them, the first required. A parameter not
// accepted (a misspelt name) or given twice is an error, as an unknown
// field in a body is.
func query(r *http.Request, accepted ...string) (map[string]int64, error) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query string malformada", ErrInvalida)
	}
	out := map[string]int64{}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		vs := values[name]
		switch {
		case !slices.Contains(accepted, name):
			return nil, fmt.Errorf("%w: parâmetro desconhecido %s (aceitos: %s)", ErrInvalida, quote(name), strings.Join(accepted, ", "))
		case len(vs) > 1:
			return nil, fmt.Errorf("%w: parâmetro %s repetido", ErrInvalida, name)
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
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

// quote quotes s, cut to 64 bytes, for a message.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}
