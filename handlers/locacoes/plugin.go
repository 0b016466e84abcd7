// Package locacoes is seed 004's RabbitRide: its user-, car- and
// rental-service as one plugin. Customers register and log in for an
// HS256 token (claims userId, name, cpf); with it they list the cars and
// ask for a rental. The rental is the saga's orchestrator: stored
// PENDENTE with rental.requested, it consumes analysis.completed on the
// seed's rental.analysis.completed.queue, reserves the car (the seed's
// synchronous call) and raises rental.confirmed or rental.failed, each
// step in the one transaction that changes its state. The credit analysis
// is the credito plugin, the e-mails the emails plugin.
package locacoes

import (
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/moenda/moenda/handlers"
)

// Config is the plugin's section, handlers.locacoes.
type Config struct {
	// JWTSecret signs the users' tokens (HS256), at least 32 bytes. Set it
	// from the environment: MOENDA_HANDLERS__LOCACOES__JWT_SECRET. Unset,
	// each process draws a random one: tokens then end with the process
	// and are not shared between replicas.
	JWTSecret string `koanf:"jwt_secret"`
	// TokenValidade is how long a token is accepted after login.
	TokenValidade time.Duration `koanf:"token_validade"`
	// CustoSenha is the bcrypt cost of stored passwords: each step doubles
	// a login's time (see BENCHMARKS.md, "locacoes: bcrypt's cost"). Below
	// 10 is for tests only.
	CustoSenha int `koanf:"custo_senha"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.JWTSecret != "" && len(c.JWTSecret) < 32 {
		errs = append(errs, fmt.Errorf("handlers.locacoes.jwt_secret has %d bytes; HS256 wants at least 32 (e.g. openssl rand -hex 32)", len(c.JWTSecret)))
	}
	if c.TokenValidade < time.Minute || c.TokenValidade > 24*time.Hour {
		errs = append(errs, fmt.Errorf("handlers.locacoes.token_validade must be between 1m and 24h, got %s", c.TokenValidade))
	}
	if c.CustoSenha < bcrypt.MinCost || c.CustoSenha > 16 {
		errs = append(errs, fmt.Errorf("handlers.locacoes.custo_senha must be between %d and 16, got %d", bcrypt.MinCost, c.CustoSenha))
	}
	return errors.Join(errs...)
}

var defaults = Config{TokenValidade: time.Hour, CustoSenha: 12}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SubAnalises is the subscription to analysis.completed; its queue is the
// seed's rental.analysis.completed.queue.
const SubAnalises = "analises"

// Plugin returns the plugin's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:      "locacoes",
		Publishes: []string{EventRentalRequested, EventRentalConfirmed, EventRentalFailed},
		Payloads: []handlers.Payload{
			handlers.PayloadOf[RentalRequested](EventRentalRequested),
			handlers.PayloadOf[RentalConfirmed](EventRentalConfirmed),
			handlers.PayloadOf[RentalFailed](EventRentalFailed),
		},
		Subscriptions: []handlers.Subscription{{
			Name:    SubAnalises,
			Queue:   "rental.analysis.completed.queue",
			Events:  []string{"analysis.completed"},
			Handles: []string{EventAnalysisCompleted},
		}},
		Exchange:      Exchange,
		Migrations:    handlers.MigrationsDir(migrationFiles, "migrations"),
		NeedsPostgres: true,
		RouteAuth:     handlers.AuthOwn, // customers' HS256 tokens, not the platform's
	}, defaults, build)
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	now := deps.Clock()
	secret := []byte(cfg.JWTSecret)
	if len(secret) == 0 {
		secret = []byte(rand.Text() + rand.Text())
		deps.Logger.Warn("locacoes: handlers.locacoes.jwt_secret is not set: tokens are signed with a random secret that ends with this process; set MOENDA_HANDLERS__LOCACOES__JWT_SECRET")
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("not a password"), cfg.CustoSenha)
	if err != nil {
		return handlers.Plugin{}, err
	}
	svc := &Service{tx: deps.Tx, tokens: tokens{secret: secret, validity: cfg.TokenValidade, now: now},
		custoSenha: cfg.CustoSenha, dummyHash: dummy, now: now, logger: deps.Logger}
	return handlers.Plugin{
		Handlers: map[string]handlers.HandlerFunc{SubAnalises: svc.concluirAnalise},
		Routes:   api{svc: svc, logger: deps.Logger}.routes,
	}, nil
}
