package locacoes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

type api struct {
	svc    *Service
	logger *slog.Logger
}

// routes mounts the seed's endpoints: auth is open, the cars and the
// rentals need a user's token.
func (a api) routes(r chi.Router) {
	r.Post("/auth/register", a.registrar)
	r.Post("/auth/login", a.entrar)
	r.Group(func(r chi.Router) {
		r.Use(a.svc.tokens.authenticated)
		// 200 and the catalog.
		r.Get("/carros", httpjson.Run(a.logger, http.StatusOK, a.svc.carros))
		r.Post("/rentals", a.solicitar)
		r.Get("/rentals/{id}", a.buscar)
		r.Post("/rentals/{id}/devolucao", a.devolver)
	})
}

// registrar answers POST /auth/register with 201, the user and a token;
// 409 when the e-mail or CPF is registered already.
func (a api) registrar(w http.ResponseWriter, r *http.Request) {
	var req Registro
	if !httpjson.Decode(w, r, &req) {
		return
	}
	u, t, err := a.svc.registrar(r.Context(), req)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	httpjson.Write(w, http.StatusCreated, struct {
		Token
		Usuario usuario `json:"usuario"`
	}{t, u})
}

// entrar answers POST /auth/login with 200 and a token, or 401.
func (a api) entrar(w http.ResponseWriter, r *http.Request) {
	var req Login
	if !httpjson.Decode(w, r, &req) {
		return
	}
	t, err := a.svc.entrar(r.Context(), req)
	if errors.Is(err, ErrCredenciais) {
		unauthorized(w, "", err.Error())
		return
	}
	httpjson.Respond(w, r, a.logger, http.StatusOK, t, err)
}

// solicitar answers POST /rentals with 202 and the rental, PENDENTE: the
// saga decides it.
func (a api) solicitar(w http.ResponseWriter, r *http.Request) {
	var req Solicitacao
	if !httpjson.Decode(w, r, &req) {
		return
	}
	l, err := a.svc.solicitar(r.Context(), claimsOf(r.Context()), req)
	if err != nil {
		httpjson.Fail(w, r, a.logger, err)
		return
	}
	w.Header().Set("Location", "/rentals/"+l.ID)
	httpjson.Write(w, http.StatusAccepted, l)
}

// buscar answers GET /rentals/{id} with the rental and its history.
func (a api) buscar(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, a.svc.buscar)
}

// devolver answers POST /rentals/{id}/devolucao: the car comes back.
func (a api) devolver(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, a.svc.devolver)
}

// answer runs a use case on the caller's rental named in the path.
func (a api) answer(w http.ResponseWriter, r *http.Request, use func(context.Context, Claims, string) (Locacao, error)) {
	l, err := use(r.Context(), claimsOf(r.Context()), chi.URLParam(r, "id"))
	httpjson.Respond(w, r, a.logger, http.StatusOK, l, err)
}
