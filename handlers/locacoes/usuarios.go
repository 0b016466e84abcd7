package locacoes

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/crypto/bcrypt"

	"github.com/moenda/moenda/handlers"
)

// Registro is the body of POST /auth/register.
type Registro struct {
	Nome  string `json:"nome"`
	Email string `json:"email"`
	Cpf   string `json:"cpf"`
	Senha string `json:"senha"`
}

// Login is the body of POST /auth/login.
type Login struct {
	Email string `json:"email"`
	Senha string `json:"senha"`
}

// usuario is a registered customer.
type usuario struct {
	ID    string `json:"id"`
	Nome  string `json:"nome"`
	Email string `json:"email"`
	Cpf   string `json:"-"`
}

// Bounds of a password: bcrypt reads 72 bytes at most, and a longer
// password would be silently cut.
const (
	minSenha = 8
	maxSenha = 72
)

// validate reports every bad field at once, and returns the registration
// with its CPF reduced to digits and its e-mail trimmed.
func (r Registro) validate() (Registro, error) {
	var errs []error
	r.Nome, r.Email = strings.TrimSpace(r.Nome), strings.TrimSpace(r.Email)
	if r.Nome == "" || utf8.RuneCountInString(r.Nome) > 100 {
		errs = append(errs, errors.New("nome deve ter de 1 a 100 caracteres"))
	}
	if a, err := mail.ParseAddress(r.Email); err != nil || a.Address != r.Email || len(r.Email) > 254 {
		errs = append(errs, fmt.Errorf("email %q não é um endereço de e-mail, como ana@exemplo.com.br", r.Email))
	}
	r.Cpf = strings.NewReplacer(".", "", "-", "").Replace(r.Cpf)
	if !cpfValido(r.Cpf) {
		errs = append(errs, errors.New("cpf deve ter 11 dígitos com dígitos verificadores válidos, como 529.982.247-25"))
	}
	if n := len(r.Senha); n < minSenha || n > maxSenha {
		errs = append(errs, fmt.Errorf("senha deve ter de %d a %d bytes", minSenha, maxSenha))
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalida, err)
	}
	return r, nil
}

// cpfValido checks a CPF's 11 digits and its two check digits.
func cpfValido(cpf string) bool {
	if len(cpf) != 11 || strings.Count(cpf, cpf[:1]) == 11 {
		return false
	}
	d := make([]int, 11)
	for i := range cpf {
		if cpf[i] < '0' || cpf[i] > '9' {
			return false
		}
		d[i] = int(cpf[i] - '0')
	}
	for n := 9; n <= 10; n++ {
		sum := 0
		for i := 0; i < n; i++ {
			sum += d[i] * (n + 1 - i)
		}
		if check := sum * 10 % 11 % 10; check != d[n] {
			return false
		}
	}
	return true
}

// registrar stores a new customer, the password as a bcrypt hash, and
// returns a token for them.
func (s *Service) registrar(ctx context.Context, r Registro) (usuario, Token, error) {
	r, err := r.validate()
	if err != nil {
		return usuario{}, Token{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Senha), s.custoSenha)
	if err != nil {
		return usuario{}, Token{}, fmt.Errorf("hash the password: %w", err)
	}
	u := usuario{ID: uuid.NewString(), Nome: r.Nome, Email: r.Email, Cpf: r.Cpf}
	err = s.inTx(ctx, func(ctx context.Context, db pgx.Tx, _ handlers.Tx) error {
		_, err := db.Exec(ctx, `INSERT INTO locacoes_usuarios (id, nome, email, cpf, senha_hash, criado_em) VALUES ($1, $2, $3, $4, $5, $6)`,
			u.ID, u.Nome, u.Email, u.Cpf, hash, s.now())
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return fmt.Errorf("%w: já existe um cadastro com este e-mail ou CPF; entre com POST /auth/login", ErrConflito)
		}
		return err
	})
	if err != nil {
		return usuario{}, Token{}, err
	}
	t, err := s.tokens.issue(u)
	return u, t, err
}

// entrar checks the e-mail and password and returns a token.
func (s *Service) entrar(ctx context.Context, l Login) (Token, error) {
	var u usuario
	var hash []byte
	err := s.inTx(ctx, func(ctx context.Context, db pgx.Tx, _ handlers.Tx) error {
		err := db.QueryRow(ctx, `SELECT id, nome, email, cpf, senha_hash FROM locacoes_usuarios WHERE lower(email) = lower($1)`,
			strings.TrimSpace(l.Email)).Scan(&u.ID, &u.Nome, &u.Email, &u.Cpf, &hash)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return Token{}, err
	}
	if hash == nil {
		_ = bcrypt.CompareHashAndPassword(s.dummyHash, []byte(l.Senha))
		return Token{}, ErrCredenciais
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(l.Senha)) != nil {
		return Token{}, ErrCredenciais
	}
	return s.tokens.issue(u)
}
