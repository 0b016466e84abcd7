package tarefas

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

type api struct {
	svc    *Service
	logger *slog.Logger
}

func (a api) routes(r chi.Router) {
	r.Post("/tarefas", a.criar)
	r.Patch("/tarefas/{id}/concluir", a.concluir)
}

// criar answers POST /tarefas with 201 and the task.
func (a api) criar(w http.ResponseWriter, r *http.Request) {
	var cmd CriarTarefa
	if !httpjson.Decode(w, r, &cmd) {
		return
	}
	t, err := a.svc.Criar(r.Context(), cmd)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusCreated, t)
}

// concluir answers PATCH /tarefas/{id}/concluir: 404 when the task does
// not exist or is another user's, 409 while subtasks are pending, 200 with
// the task otherwise. The notification happens later, elsewhere.
func (a api) concluir(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		httpjson.Error(w, http.StatusBadRequest, "id in the path must be a positive integer")
		return
	}
	var body struct {
		UsuarioID int64 `json:"usuario_id"`
	}
	if !httpjson.Decode(w, r, &body) {
		return
	}
	if body.UsuarioID <= 0 {
		httpjson.Error(w, http.StatusBadRequest, "usuario_id must be a positive integer")
		return
	}
	t, err := a.svc.Concluir(r.Context(), id, body.UsuarioID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, t)
}

// fail answers a use case's error: the client's mistakes by their kind,
// the rest with httpjson.ServerError (503 while the database is away).
func (a api) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrInvalida):
		httpjson.Error(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrNaoEncontrada):
		httpjson.Error(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrSubtarefasPendentes):
		httpjson.Error(w, http.StatusConflict, err.Error())
	default:
		httpjson.ServerError(w, r, a.logger, fmt.Errorf("tarefas: %w", err))
	}
}
