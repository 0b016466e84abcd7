package locacoes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/moenda/moenda/handlers/httpjson"
)

// issuer names moenda's rental users in their tokens, so a token of
// another HS256 issuer that shares the secret is still refused.
const issuer = "moenda/locacoes"

// Claims are the token's claims: the seed's userId, name and cpf, and the
// e-mail the saga writes to.
type Claims struct {
	UserID string `json:"userId"`
	Name   string `json:"name"`
	Cpf    string `json:"cpf"`
	Email  string `json:"email"`
	jwt.RegisteredClaims
}

// tokens issues and checks the users' HS256 tokens. They are not the
// platform's tokens: they name a customer, not a role.
type tokens struct {
	secret   []byte
	validity time.Duration
	now      func() time.Time
}

// Token is what register and login answer.
type Token struct {
	Token    string    `json:"token"`
	Tipo     string    `json:"tipo"`
	ExpiraEm time.Time `json:"expiraEm"`
}

func (t tokens) issue(u usuario) (Token, error) {
	now := t.now().UTC().Truncate(time.Second)
	exp := now.Add(t.validity)
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{
		UserID: u.ID, Name: u.Nome, Cpf: u.Cpf, Email: u.Email,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: issuer, Subject: u.ID,
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
		},
	}).SignedString(t.secret)
	if err != nil {
		return Token{}, fmt.Errorf("sign token: %w", err)
	}
	return Token{Token: signed, Tipo: "Bearer", ExpiraEm: exp}, nil
}

// check returns the claims of a valid token: signed with the secret in
// HS256 (no other algorithm is accepted), by this issuer, and not expired.
func (t tokens) check(raw string) (Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return t.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(issuer), jwt.WithExpirationRequired(), jwt.WithTimeFunc(t.now))
	if err != nil {
		return Claims{}, err
	}
	if c.UserID == "" || c.Email == "" || c.Cpf == "" {
		return Claims{}, errors.New("the token lacks userId, email or cpf")
	}
	return c, nil
}

type claimsKey struct{}

// authenticated answers 401 unless the request carries a valid token, and
// gives the next handler its claims.
func (t tokens) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || strings.TrimSpace(raw) == "" {
			unauthorized(w, "", "envie o token de POST /auth/login no cabeçalho Authorization: Bearer <token>")
			return
		}
		c, err := t.check(strings.TrimSpace(raw))
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			unauthorized(w, "invalid_token", "token expirado: faça login de novo em POST /auth/login")
			return
		case err != nil:
			unauthorized(w, "invalid_token", "token inválido: faça login em POST /auth/login")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, c)))
	})
}

func unauthorized(w http.ResponseWriter, code, msg string) {
	challenge := `Bearer realm="locacoes"`
	if code != "" {
		challenge += `, error="` + code + `"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	httpjson.Error(w, http.StatusUnauthorized, msg)
}

// claimsOf returns the claims authenticated put in ctx.
func claimsOf(ctx context.Context) Claims {
	c, _ := ctx.Value(claimsKey{}).(Claims)
	return c
}
