package notify

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

func smtpConfig(addr string) SMTPConfig {
	return SMTPConfig{Addr: addr, From: "RabbitRide <nao-responda@rabbitride.local>", Timeout: 5 * time.Second}
}

func TestSMTPSend(t *testing.T) {
	srv := testenv.SMTP(t)
	html := "<html><body>\n<p>Olá, Zoë: sua reserva não foi confirmada.</p>\n<p>" + strings.Repeat("uma linha bem longa ", 20) + "</p>\n</body></html>\n"
	m := Mail{To: "Zoë Souza <zoe@example.test>", Subject: "Reserva não confirmada", HTML: html, MessageID: "0f8c1a5e-7d1b-4c35-9a8e-2b6d3f1e9c01@moenda"}
	if err := NewSMTP(smtpConfig(srv.Addr())).Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got := srv.Messages()
	if len(got) != 1 {
		t.Fatalf("server received %d messages, want 1", len(got))
	}
	r := got[0]
	for _, c := range []struct{ what, got, want string }{
		{"subject", r.Subject, m.Subject},
		{"envelope sender", r.From, "nao-responda@rabbitride.local"},
		{"envelope recipients", strings.Join(r.To, ","), "zoe@example.test"},
		{"message id", r.MessageID, m.MessageID},
		{"body", r.HTML, strings.ReplaceAll(html, "\n", "\r\n")},
		{"MIME-Version", r.Header.Get("MIME-Version"), "1.0"},
		{"Content-Type", r.Header.Get("Content-Type"), "text/html; charset=UTF-8"},
		{"Content-Transfer-Encoding", r.Header.Get("Content-Transfer-Encoding"), "quoted-printable"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	for _, h := range []string{"From", "To", "Date"} {
		if _, err := r.Header.AddressList(h); h != "Date" && err != nil {
			t.Errorf("header %s: %v", h, err)
		}
		if r.Header.Get(h) == "" {
			t.Errorf("header %s is missing", h)
		}
	}
	if _, err := r.Header.Date(); err != nil {
		t.Errorf("Date: %v", err)
	}
	if r.TLS {
		t.Error("the message came over TLS from a server that offers none")
	}
}

func TestSMTPMessageIsWellFormed(t *testing.T) {
	s := NewSMTP(smtpConfig("127.0.0.1:1"))
	msg, rcpt, from, err := s.message(Mail{To: "a@example.test", Subject: "Reserva não confirmada\r\nBcc: x@evil.test", HTML: "<p>é</p>\n" + strings.Repeat("x", 200)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rcpt != "a@example.test" || from != "nao-responda@rabbitride.local" {
		t.Errorf("envelope %s -> %s", from, rcpt)
	}
	for i, line := range bytes.SplitAfter(msg, []byte("\n")) {
		if len(line) > 0 && !bytes.HasSuffix(line, []byte("\r\n")) {
			t.Errorf("line %d does not end in CRLF: %q", i, line)
		}
		if len(line) > 78 {
			t.Errorf("line %d is %d bytes long", i, len(line))
		}
		if bytes.HasPrefix(line, []byte("Bcc:")) {
			t.Errorf("the subject added a header: %q", line)
		}
	}
	if !bytes.Contains(msg, []byte("Message-ID: <")) {
		t.Error("a mail without a MessageID gets no Message-ID")
	}

	for _, bad := range []Mail{
		{To: "not an address"},
		{To: "a@example.test", MessageID: "<x@moenda>"},
		{To: "a@example.test", MessageID: "x@moenda\r\nBcc: x@evil.test"},
		{To: "a@example.test", MessageID: "no-at-sign"},
	} {
		if _, _, _, err := s.message(bad, time.Now()); err == nil {
			t.Errorf("%+v accepted", bad)
		}
		if err := s.Send(context.Background(), bad); !event.IsPermanent(err) {
			t.Errorf("%+v: error %v, want a permanent one", bad, err)
		}
	}
}

func TestSMTPErrors(t *testing.T) {
	mail := Mail{To: "zoe@example.test", Subject: "Reserva confirmada", HTML: "<p>ok</p>", MessageID: "e1@moenda"}
	tests := []struct {
		name      string
		setup     func(srv *testenv.SMTPServer, cfg *SMTPConfig)
		permanent bool
	}{
		{"server down is retried", func(srv *testenv.SMTPServer, _ *SMTPConfig) { srv.Stop() }, false},
		{"unknown recipient is permanent", func(srv *testenv.SMTPServer, _ *SMTPConfig) { srv.RejectRecipient("zoe@example.test") }, true},
		{"authentication required is permanent", func(srv *testenv.SMTPServer, _ *SMTPConfig) { srv.RequireAuth("moenda", "s3cret") }, true},
		{"wrong password is permanent", func(srv *testenv.SMTPServer, cfg *SMTPConfig) {
			srv.RequireAuth("moenda", "s3cret")
			cfg.Username, cfg.Password = "moenda", "wrong"
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testenv.SMTP(t)
			cfg := smtpConfig(srv.Addr())
			tt.setup(srv, &cfg)
			start := time.Now()
			err := NewSMTP(cfg).Send(context.Background(), mail)
			if err == nil {
				t.Fatal("sent")
			}
			t.Log(err)
			if event.IsPermanent(err) != tt.permanent {
				t.Fatalf("error %v: permanent %v, want %v", err, event.IsPermanent(err), tt.permanent)
			}
			if !strings.Contains(err.Error(), srv.Addr()) {
				t.Errorf("error %q does not name the server", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("failing took %s", took)
			}
			if n := len(srv.Messages()); n != 0 {
				t.Errorf("server kept %d messages", n)
			}
		})
	}
}

func TestSMTPServerBackUp(t *testing.T) {
	srv := testenv.SMTP(t)
	s := NewSMTP(smtpConfig(srv.Addr()))
	m := Mail{To: "zoe@example.test", Subject: "x", HTML: "<p>x</p>"}
	srv.Stop()
	if err := s.Send(context.Background(), m); err == nil || event.IsPermanent(err) {
		t.Fatalf("server down: error %v, want a retryable one", err)
	}
	srv.Start()
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatalf("server back: %v", err)
	}
	if n := len(srv.Messages()); n != 1 {
		t.Fatalf("server received %d messages, want 1", n)
	}
}

func TestSMTPAuthPlain(t *testing.T) {
	srv := testenv.SMTP(t)
	srv.RequireAuth("moenda", "s3cret")
	cfg := smtpConfig(srv.Addr())
	cfg.Username, cfg.Password = "moenda", "s3cret"
	if err := NewSMTP(cfg).Send(context.Background(), Mail{To: "zoe@example.test", Subject: "x", HTML: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Messages()); n != 1 {
		t.Fatalf("server received %d messages, want 1", n)
	}
}

func TestSMTPStartTLS(t *testing.T) {
	srv := testenv.SMTP(t)
	pool := srv.OfferTLS()
	srv.RequireAuth("moenda", "s3cret")
	cfg := smtpConfig(srv.Addr())
	cfg.Username, cfg.Password = "moenda", "s3cret"

	s := NewSMTP(cfg)
	err := s.Send(context.Background(), Mail{To: "zoe@example.test", Subject: "x", HTML: "x"})
	if err == nil || event.IsPermanent(err) {
		t.Fatalf("a certificate nobody trusts: error %v, want a retryable one", err)
	}
	t.Log(err)
	s.rootCAs = pool
	if err := s.Send(context.Background(), Mail{To: "zoe@example.test", Subject: "x", HTML: "x"}); err != nil {
		t.Fatal(err)
	}
	got := srv.Messages()
	if len(got) != 1 || !got[0].TLS {
		t.Fatalf("received %+v, want one message over TLS", got)
	}
}

// A server that accepts the connection and never answers must not hold a
// send longer than the timeout, however go-smtp sets its own deadlines.
func TestSMTPTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	cfg := smtpConfig(l.Addr().String())
	cfg.Timeout = 300 * time.Millisecond
	start := time.Now()
	err = NewSMTP(cfg).Send(context.Background(), Mail{To: "zoe@example.test"})
	if err == nil || event.IsPermanent(err) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("error %v, want a retryable timeout", err)
	}
	t.Log(err)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("timing out took %s", took)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cfg.Timeout = time.Minute
	time.AfterFunc(200*time.Millisecond, cancel)
	start = time.Now()
	if err := NewSMTP(cfg).Send(ctx, Mail{To: "zoe@example.test"}); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: error %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("cancelling took %s", took)
	}
}

func TestSMTPConfigValidate(t *testing.T) {
	ok := smtpConfig("localhost:1025")
	tests := []struct {
		name string
		edit func(c *SMTPConfig)
		want []string // fragments of the error; none: valid
	}{
		{"defaults", func(*SMTPConfig) {}, nil},
		{"with AUTH", func(c *SMTPConfig) { c.Username, c.Password = "u", "p" }, nil},
		{"bare address", func(c *SMTPConfig) { c.From = "nao-responda@rabbitride.local" }, nil},
		{"no port", func(c *SMTPConfig) { c.Addr = "localhost" }, []string{"x.smtp.addr", "host:port"}},
		{"no host", func(c *SMTPConfig) { c.Addr = ":25" }, []string{"x.smtp.addr"}},
		{"bad port", func(c *SMTPConfig) { c.Addr = "localhost:smtp" }, []string{"x.smtp.addr"}},
		{"bad from", func(c *SMTPConfig) { c.From = "RabbitRide" }, []string{"x.smtp.from", "e-mail address"}},
		{"zero timeout", func(c *SMTPConfig) { c.Timeout = 0 }, []string{"x.smtp.timeout must be positive"}},
		{"username alone", func(c *SMTPConfig) { c.Username = "u" }, []string{"x.smtp.password is missing", "MOENDA_X__SMTP__PASSWORD"}},
		{"password alone", func(c *SMTPConfig) { c.Password = "p" }, []string{"x.smtp.username"}},
		{"every problem at once", func(c *SMTPConfig) { *c = SMTPConfig{} }, []string{"x.smtp.addr", "x.smtp.from", "x.smtp.timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate("x.smtp")
			if (err != nil) != (len(tt.want) > 0) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
