package emails

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/notify"
)

const rentalID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

// start builds the plugin as the app does, sending through a test server;
// log receives what the plugin logs.
func start(t *testing.T) (*testenv.SMTPServer, handlers.Plugin, *bytes.Buffer) {
	t.Helper()
	srv := testenv.SMTP(t)
	def := Plugin()
	cfg := def.NewConfig().(*Config)
	cfg.SMTP.Addr = srv.Addr()
	if err := def.ValidateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	p, err := def.Build(cfg, handlers.Deps{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return srv, p, &log
}

// newEvent is an event as the broker delivers it, with ids in its context
// as the router sets them.
func newEvent(t *testing.T, name, payload string) (context.Context, event.Event) {
	t.Helper()
	e := event.Event{ID: uuid.NewString(), Name: name, CorrelationID: uuid.NewString(), Payload: json.RawMessage(payload)}
	return event.WithCausation(event.WithCorrelation(context.Background(), e.CorrelationID), e.ID), e
}

func TestSpec(t *testing.T) {
	def := Plugin()
	if _, err := handlers.NewRegistry(def); err != nil {
		t.Fatal(err)
	}
	if def.Name != "emails" || def.Exchange != "rental.exchange" || len(def.Publishes) != 0 || def.Migrations != nil {
		t.Fatalf("spec %+v", def.Spec)
	}
	want := map[string][3]string{
		"confirmados": {"notification.confirmed.queue", "rental.confirmed", "rental.confirmed.v1"},
		"falhas":      {"notification.failed.queue", "rental.failed", "rental.failed.v1"},
	}
	if len(def.Subscriptions) != len(want) {
		t.Fatalf("subscriptions %+v", def.Subscriptions)
	}
	for _, s := range def.Subscriptions {
		w := want[s.Name]
		if def.Queue(s) != w[0] || strings.Join(s.Events, ",") != w[1] || strings.Join(s.Handles, ",") != w[2] {
			t.Errorf("subscription %+v, want queue, events, handles %q", s, w)
		}
	}
}

func TestHandlers(t *testing.T) {
	tests := []struct {
		subscription, name, payload string
		to, subject                 string
		body                        []string
	}{
		{
			"confirmados", EventRentalConfirmed,
			`{"eventId": "x", "occurredAt": "2025-05-01T10:00:00Z", "rentalId": "` + rentalID + `", "userEmail": "joao@example.test", "carroDescricao": "Fiat Argo 2023 (ABC1D23)"}`,
			"joao@example.test", "Reserva confirmada",
			[]string{"Fiat Argo 2023 (ABC1D23)", rentalID, "monospace", "#2e7d32"},
		},
		{
			"falhas", EventRentalFailed,
			`{"rentalId": "` + rentalID + `", "userEmail": "maria@example.test", "motivo": "CPF com restrição na análise de crédito", "occurredAt": "2025-05-01T10:00:00Z"}`,
			"maria@example.test", "Reserva não confirmada",
			[]string{"CPF com restrição na análise de crédito", rentalID, "outro carro", "suporte", "#ef6c00"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.subscription, func(t *testing.T) {
			srv, p, log := start(t)
			ctx, e := newEvent(t, tt.name, tt.payload)
			if err := p.Handlers[tt.subscription](ctx, e); err != nil {
				t.Fatal(err)
			}
			got := srv.Messages()
			if len(got) != 1 {
				t.Fatalf("server received %d messages, want 1", len(got))
			}
			m := got[0]
			if m.Subject != tt.subject || strings.Join(m.To, ",") != tt.to || m.MessageID != e.ID+"@moenda" {
				t.Errorf("subject %q to %q message id %q; want %q to %q message id %q", m.Subject, m.To, m.MessageID, tt.subject, tt.to, e.ID+"@moenda")
			}
			if m.From != "nao-responda@rabbitride.local" {
				t.Errorf("sent from %q", m.From)
			}
			for _, w := range tt.body {
				if !strings.Contains(m.HTML, w) {
					t.Errorf("body lacks %q:\n%s", w, m.HTML)
				}
			}
			line := log.String()
			for _, w := range []string{"e-mail sent", "event_id=" + e.ID, "correlation_id=" + e.CorrelationID, "rental_id=" + rentalID, "to=" + tt.to} {
				if !strings.Contains(line, w) {
					t.Errorf("log %q lacks %q", line, w)
				}
			}
		})
	}
}

func TestBadPayloadsArePermanent(t *testing.T) {
	tests := []struct {
		name, subscription, event, payload, field string
	}{
		{"not JSON", "confirmados", EventRentalConfirmed, `rentalId=1`, "invalid character"},
		{"not an object", "falhas", EventRentalFailed, `["` + rentalID + `"]`, "cannot unmarshal array"},
		{"wrong type", "confirmados", EventRentalConfirmed, `{"rentalId": 7, "userEmail": "a@example.test"}`, "rentalId"},
		{"no rentalId", "confirmados", EventRentalConfirmed, `{"userEmail": "a@example.test", "carroDescricao": "Gol"}`, "rentalId is missing"},
		{"no userEmail", "falhas", EventRentalFailed, `{"rentalId": "` + rentalID + `", "motivo": "x"}`, "userEmail is missing"},
		{"empty userEmail", "confirmados", EventRentalConfirmed, `{"rentalId": "` + rentalID + `", "userEmail": ""}`, "userEmail is missing"},
		{"invalid userEmail", "falhas", EventRentalFailed, `{"rentalId": "` + rentalID + `", "userEmail": "maria at example"}`, `userEmail "maria at example" is not an e-mail address`},
		{"userEmail with a name", "falhas", EventRentalFailed, `{"rentalId": "` + rentalID + `", "userEmail": "Maria <m@example.test>"}`, "is not an e-mail address"},
		{"null", "falhas", EventRentalFailed, `null`, "rentalId is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, p, _ := start(t)
			ctx, e := newEvent(t, tt.event, tt.payload)
			err := p.Handlers[tt.subscription](ctx, e)
			if !event.IsPermanent(err) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %v, want a permanent one naming %q", err, tt.field)
			}
			if n := len(srv.Messages()); n != 0 {
				t.Fatalf("%d e-mails sent", n)
			}
		})
	}
}

func TestServerDownIsRetried(t *testing.T) {
	srv, p, _ := start(t)
	srv.Stop()
	ctx, e := newEvent(t, EventRentalFailed, `{"rentalId": "`+rentalID+`", "userEmail": "maria@example.test", "motivo": "x"}`)
	err := p.Handlers["falhas"](ctx, e)
	if err == nil || event.IsPermanent(err) {
		t.Fatalf("error %v, want a retryable one", err)
	}
	if !strings.Contains(err.Error(), rentalID) || !strings.Contains(err.Error(), srv.Addr()) {
		t.Errorf("error %q names neither the rental nor the server", err)
	}
	srv.Start()
	if err := p.Handlers["falhas"](ctx, e); err != nil {
		t.Fatalf("server back: %v", err)
	}
}

func TestUnknownRecipientIsPermanent(t *testing.T) {
	srv, p, _ := start(t)
	srv.RejectRecipient("ninguem@example.test")
	ctx, e := newEvent(t, EventRentalConfirmed, `{"rentalId": "`+rentalID+`", "userEmail": "ninguem@example.test", "carroDescricao": "Gol"}`)
	if err := p.Handlers["confirmados"](ctx, e); !event.IsPermanent(err) {
		t.Fatalf("error %v, want a permanent one", err)
	}
}

// recorder keeps what it is asked to send.
type recorder struct{ mails []notify.Mail }

func (r *recorder) Send(_ context.Context, m notify.Mail) error {
	r.mails = append(r.mails, m)
	return nil
}

func TestTemplatesRender(t *testing.T) {
	tests := []struct {
		name    string
		handle  func(m *mailer) handlers.HandlerFunc
		event   string
		payload any
		want    []string
		absent  []string
	}{
		{
			"confirmed", func(m *mailer) handlers.HandlerFunc { return m.confirmed }, EventRentalConfirmed,
			map[string]string{"rentalId": rentalID, "userEmail": "a@example.test", "carroDescricao": `Gol <b>"turbo"</b> & cia`},
			[]string{"<title>Reserva confirmada</title>", "#2e7d32", rentalID, "Gol &lt;b&gt;&#34;turbo&#34;&lt;/b&gt; &amp; cia"},
			[]string{"<b>", "{{", "#ef6c00"},
		},
		{
			"failed", func(m *mailer) handlers.HandlerFunc { return m.failed }, EventRentalFailed,
			map[string]string{"rentalId": rentalID, "userEmail": "a@example.test", "motivo": `<script>alert("oi")</script>`},
			[]string{"<title>Reserva não confirmada</title>", "#ef6c00", rentalID, "&lt;script&gt;alert(&#34;oi&#34;)&lt;/script&gt;", "outro carro", "suporte"},
			[]string{"<script>", "{{", "#2e7d32", "não foi informado"},
		},
		{
			"failed without a reason", func(m *mailer) handlers.HandlerFunc { return m.failed }, EventRentalFailed,
			map[string]string{"rentalId": rentalID, "userEmail": "a@example.test"},
			[]string{"O motivo não foi informado."},
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			m, err := newMailer(r, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			body, err := json.Marshal(tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			ctx, e := newEvent(t, tt.event, string(body))
			if err := tt.handle(m)(ctx, e); err != nil {
				t.Fatal(err)
			}
			if len(r.mails) != 1 {
				t.Fatalf("%d mails", len(r.mails))
			}
			html := r.mails[0].HTML
			if !strings.HasPrefix(html, "<!DOCTYPE html>") || !strings.HasSuffix(strings.TrimSpace(html), "</html>") {
				t.Errorf("not a whole document:\n%s", html)
			}
			for _, w := range tt.want {
				if !strings.Contains(html, w) {
					t.Errorf("body lacks %q:\n%s", w, html)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(html, a) {
					t.Errorf("body has %q:\n%s", a, html)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	c := defaults
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c.SMTP.Addr, c.SMTP.Username = "mailhog", "moenda"
	err := c.Validate()
	for _, w := range []string{"handlers.emails.smtp.addr", "handlers.emails.smtp.password", "MOENDA_HANDLERS__EMAILS__SMTP__PASSWORD"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
}
