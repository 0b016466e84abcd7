// Package emails is RabbitRide's notification service (seed 004): it tells
// the customer by e-mail how a rental ended. It consumes rental.confirmed
// on queue notification.confirmed.queue and rental.failed on
// notification.failed.queue, both bound to rental.exchange, and sends one
// HTML e-mail per event over SMTP (MailHog in development).
//
// Two queues rather than one, as the seed argues: each handler deals with
// one event type, the broker counts confirmed and failed rentals apart, and
// each has its own dead-letter queue, so one flow can be reprocessed alone.
//
// It keeps no state and publishes nothing. Delivery is at least once: an
// event handled twice (a crash between the send and the ack) sends its
// e-mail twice, both with a Message-ID made from the event's id, so the
// duplicate can be recognised.
package emails

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/mail"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/notify"
)

// The events it handles, and the exchange they are published to.
const (
	Exchange             = "rental.exchange"
	EventRentalConfirmed = "rental.confirmed.v1"
	EventRentalFailed    = "rental.failed.v1"
)

// Subjects of the e-mails.
const (
	SubjectConfirmed = "Reserva confirmada"
	SubjectFailed    = "Reserva não confirmada"
)

// Sender sends one e-mail; *notify.SMTP is the one the plugin builds.
type Sender interface {
	Send(ctx context.Context, m notify.Mail) error
}

// Config is the plugin's section, handlers.emails.
type Config struct {
	SMTP notify.SMTPConfig `koanf:"smtp"`
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	return c.SMTP.Validate("handlers.emails.smtp")
}

// Defaults: MailHog on this machine, as in the seed's development setup,
// and a sender customers cannot answer.
var defaults = Config{SMTP: notify.SMTPConfig{
	Addr:    "localhost:1025",
	From:    "RabbitRide <nao-responda@rabbitride.local>",
	Timeout: notify.DefaultSMTPTimeout,
}}

// Plugin returns the plugin's definition.
func Plugin() handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name:     "emails",
		Exchange: Exchange,
		Subscriptions: []handlers.Subscription{
			{Name: "confirmados", Queue: "notification.confirmed.queue", Events: []string{"rental.confirmed"}, Handles: []string{EventRentalConfirmed}},
			{Name: "falhas", Queue: "notification.failed.queue", Events: []string{"rental.failed"}, Handles: []string{EventRentalFailed}},
		},
	}, defaults, build)
}

func build(cfg Config, deps handlers.Deps) (handlers.Plugin, error) {
	m, err := newMailer(notify.NewSMTP(cfg.SMTP), deps.Logger)
	if err != nil {
		return handlers.Plugin{}, err
	}
	return handlers.Plugin{Handlers: map[string]handlers.HandlerFunc{
		"confirmados": m.confirmed,
		"falhas":      m.failed,
	}}, nil
}

//go:embed templates/*.html
var templateFiles embed.FS

// mailer renders and sends the saga's e-mails.
type mailer struct {
	send       Sender
	log        *slog.Logger
	confirmado *template.Template
	falha      *template.Template
}

func newMailer(s Sender, log *slog.Logger) (*mailer, error) {
	confirmado, err := template.ParseFS(templateFiles, "templates/layout.html", "templates/confirmado.html")
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	falha, err := template.ParseFS(templateFiles, "templates/layout.html", "templates/falha.html")
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return &mailer{send: s, log: log, confirmado: confirmado, falha: falha}, nil
}

// recipient is what both events carry about whom to tell.
type recipient struct {
	RentalID  string `json:"rentalId"`
	UserEmail string `json:"userEmail"`
}

// check names every field that makes the e-mail impossible to send.
func (r recipient) check() error {
	var errs []error
	if r.RentalID == "" {
		errs = append(errs, errors.New("rentalId is missing"))
	}
	if r.UserEmail == "" {
		errs = append(errs, errors.New("userEmail is missing"))
	} else if a, err := mail.ParseAddress(r.UserEmail); err != nil || a.Address != r.UserEmail {
		errs = append(errs, fmt.Errorf("userEmail %q is not an e-mail address", r.UserEmail))
	}
	return errors.Join(errs...)
}

// confirmedPayload is rental.confirmed.v1's payload, the part the e-mail reads.
type confirmedPayload struct {
	recipient
	CarroDescricao string `json:"carroDescricao"`
}

// failedPayload is rental.failed.v1's payload, the part the e-mail reads.
type failedPayload struct {
	recipient
	Motivo string `json:"motivo"`
}

// confirmed handles rental.confirmed.v1.
func (m *mailer) confirmed(ctx context.Context, e event.Event) error {
	var p confirmedPayload
	if err := decode(e, &p); err != nil {
		return err
	}
	return m.deliver(ctx, e, p.recipient, SubjectConfirmed, m.confirmado, p)
}

// failed handles rental.failed.v1.
func (m *mailer) failed(ctx context.Context, e event.Event) error {
	var p failedPayload
	if err := decode(e, &p); err != nil {
		return err
	}
	return m.deliver(ctx, e, p.recipient, SubjectFailed, m.falha, p)
}

// decode reads e's payload into p. No retry can fix a payload that does
// not decode or names no one to write to: both are permanent.
func decode(e event.Event, p interface{ check() error }) error {
	if err := json.Unmarshal(e.Payload, p); err != nil {
		return event.Permanent(fmt.Errorf("payload of %s: %w", e.Name, err))
	}
	if err := p.check(); err != nil {
		return event.Permanent(fmt.Errorf("payload of %s: %w", e.Name, err))
	}
	return nil
}

// deliver renders tmpl with data and sends it to r. The Message-ID is the
// event's id, so a mail sent twice for one event is recognisably the same.
func (m *mailer) deliver(ctx context.Context, e event.Event, r recipient, subject string, tmpl *template.Template, data any) error {
	var body bytes.Buffer
	if err := tmpl.Execute(&body, data); err != nil {
		return event.Permanent(fmt.Errorf("%s: render %s: %w", e.Name, tmpl.Name(), err))
	}
	if err := m.send.Send(ctx, notify.Mail{To: r.UserEmail, Subject: subject, HTML: body.String(), MessageID: e.ID + "@moenda"}); err != nil {
		return fmt.Errorf("%s: e-mail about rental %s: %w", e.Name, r.RentalID, err)
	}
	m.log.InfoContext(ctx, "e-mail sent", "subject", subject, "rental_id", r.RentalID, "to", r.UserEmail,
		"event_id", event.CausationID(ctx), "correlation_id", event.CorrelationID(ctx))
	return nil
}
