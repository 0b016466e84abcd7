package locacoes

import (
	"errors"
	"fmt"
	"time"

	"github.com/moenda/moenda/handlers"
)

// Seed 004's wire contract: the exchange, and the events by name. The
// fields of each payload keep the seed's camelCase spelling.
const (
	Exchange               = "rental.exchange"
	EventRentalRequested   = "rental.requested.v1"
	EventAnalysisCompleted = "analysis.completed.v1"
	EventRentalConfirmed   = "rental.confirmed.v1"
	EventRentalFailed      = "rental.failed.v1"
)

// Source names this plugin in the events it publishes.
const Source = "locacoes"

// States of a rental. PENDENTE waits for the credit analysis; the saga
// ends it CONFIRMADO (the car reserved), REJEITADO (the analysis refused
// it) or FALHOU (the car was not available); DEVOLVIDO is a confirmed
// rental whose car came back.
const (
	StatusPendente   = "PENDENTE"
	StatusConfirmado = "CONFIRMADO"
	StatusRejeitado  = "REJEITADO"
	StatusFalhou     = "FALHOU"
	StatusDevolvido  = "DEVOLVIDO"
)

// descricoes say each state in words for GET /rentals/{id}.
var descricoes = map[string]string{
	StatusPendente:   "Aguardando a análise de crédito",
	StatusConfirmado: "Reserva confirmada",
	StatusRejeitado:  "Reprovado na análise de crédito",
	StatusFalhou:     "Não foi possível reservar o carro",
	StatusDevolvido:  "Carro devolvido",
}

// Results of the credit analysis, as the seed spells them.
const (
	Approved = "APPROVED"
	Rejected = "REJECTED"
)

// States of a car.
const (
	CarroDisponivel = "DISPONIVEL"
	CarroReservado  = "RESERVADO"
)

var (
	// ErrInvalida wraps a request that names a bad field. Its messages
	// are in Portuguese and name fields as they are on the wire.
	ErrInvalida = handlers.NewError(handlers.ErrInvalid, "requisição inválida")
	// ErrNaoEncontrado: no such rental (or not the caller's), or car.
	ErrNaoEncontrado = handlers.NewError(handlers.ErrNotFound, "não encontrado")
	// ErrConflito wraps a request the current state forbids.
	ErrConflito = handlers.NewError(handlers.ErrConflict, "conflito")
	// ErrCredenciais: the e-mail and password match no user.
	ErrCredenciais = errors.New("e-mail ou senha inválidos")
)

// Carro is a car of the catalog, as GET /carros shows it.
type Carro struct {
	ID          string `json:"id"`
	Placa       string `json:"placa"`
	Modelo      string `json:"modelo"`
	Marca       string `json:"marca"`
	Cor         string `json:"cor"`
	Ano         int    `json:"ano"`
	ValorDiaria string `json:"valorDiaria"`
	Status      string `json:"status"`
}

// Descricao is the car as an e-mail names it.
func (c Carro) Descricao() string {
	return fmt.Sprintf("%s %s %s %d, placa %s", c.Marca, c.Modelo, c.Cor, c.Ano, c.Placa)
}

// Passo is one step of a rental's history.
type Passo struct {
	Status string    `json:"status"`
	Motivo *string   `json:"motivo,omitempty"`
	Em     time.Time `json:"em"`
}

// Locacao is a rental, as GET /rentals/{id} shows it: the saga's state and
// its history.
type Locacao struct {
	ID              string    `json:"id"`
	CarroID         string    `json:"carroId"`
	Status          string    `json:"status"`
	StatusDescricao string    `json:"statusDescricao"`
	Motivo          *string   `json:"motivo,omitempty"`
	CriadoEm        time.Time `json:"criadoEm"`
	AtualizadoEm    time.Time `json:"atualizadoEm"`
	Historico       []Passo   `json:"historico"`
}

// Payloads of the saga's events.
type (
	RentalRequested struct {
		RentalID  string `json:"rentalId"`
		UserID    string `json:"userId"`
		UserEmail string `json:"userEmail"`
		UserCpf   string `json:"userCpf"`
		CarroID   string `json:"carroId"`
	}
	AnalysisCompleted struct {
		RentalID  string  `json:"rentalId"`
		Resultado string  `json:"resultado"`
		Motivo    *string `json:"motivo"`
	}
	RentalConfirmed struct {
		RentalID       string `json:"rentalId"`
		UserEmail      string `json:"userEmail"`
		CarroDescricao string `json:"carroDescricao"`
	}
	RentalFailed struct {
		RentalID  string `json:"rentalId"`
		UserEmail string `json:"userEmail"`
		Motivo    string `json:"motivo"`
	}
)
