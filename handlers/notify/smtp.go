package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/moenda/moenda/handlers/event"
)

// SMTPConfig is what YAML sets for an SMTP notifier.
type SMTPConfig struct {
	// Addr is the server's host:port: MailHog's localhost:1025 in
	// development, the provider's submission port (587) in production.
	Addr string `koanf:"addr"`
	// From is the sender, an address with an optional display name, such as
	// "RabbitRide <nao-responda@rabbitride.local>".
	From string `koanf:"from"`
	// Username turns on AUTH PLAIN; empty sends without authenticating.
	Username string `koanf:"username"`
	// Password goes with Username. Set it from the environment, never in a
	// file.
	Password string `koanf:"password"`
	// Timeout bounds one send, from the dial to the server's answer to the
	// message.
	Timeout time.Duration `koanf:"timeout"`
}

// DefaultSMTPTimeout bounds a send when the config sets none: well above a
// healthy server's few hundred milliseconds, well below a handler's patience.
const DefaultSMTPTimeout = 10 * time.Second

// Validate reports every problem at once; path prefixes the key names.
func (c SMTPConfig) Validate(path string) error {
	var errs []error
	if host, port, err := net.SplitHostPort(c.Addr); err != nil || host == "" || !validPort(port) {
		errs = append(errs, fmt.Errorf("%s.addr %q must be host:port, such as localhost:1025", path, c.Addr))
	}
	if _, err := mail.ParseAddress(c.From); err != nil {
		errs = append(errs, fmt.Errorf("%s.from %q must be an e-mail address, such as \"RabbitRide <nao-responda@rabbitride.local>\": %w", path, c.From, err))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s.timeout must be positive, got %s", path, c.Timeout))
	}
	switch {
	case c.Username != "" && c.Password == "":
		errs = append(errs, fmt.Errorf("%s.password is missing: set it in %s, or clear %s.username to send without AUTH", path, envName(path+".password"), path))
	case c.Username == "" && c.Password != "":
		errs = append(errs, fmt.Errorf("%s.password is set without %s.username: set both, or neither to send without AUTH", path, path))
	}
	return errors.Join(errs...)
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536
}

// envName is the variable that sets key, as the config loader maps them.
func envName(key string) string {
	return "MOENDA_" + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// Mail is one HTML e-mail to one recipient.
type Mail struct {
	// To is the recipient, an address with an optional display name.
	To      string
	Subject string
	// HTML is the whole body, a text/html document.
	HTML string
	// MessageID is the Message-ID without its angle brackets, such as
	// "<event id>@moenda": derived from what caused the mail, it lets the
	// recipient's client recognise a duplicate. Empty gets a random one.
	MessageID string
}

// SMTP sends mail through one SMTP server, one connection per mail: a
// notifier sends a few mails a minute, not enough to keep one open.
type SMTP struct {
	cfg SMTPConfig
	// rootCAs verifies the server's STARTTLS certificate; nil is the
	// system's pool. Tests set it.
	rootCAs *x509.CertPool
}

// NewSMTP returns a sender for a config that passed Validate.
func NewSMTP(cfg SMTPConfig) *SMTP {
	return &SMTP{cfg: cfg}
}

// helloName is how the client introduces itself, as go-smtp and net/smtp do.
const helloName = "localhost"

// Send delivers m, within cfg.Timeout or ctx, whichever ends first. A failure
// to connect, a timeout or a 4xx reply may pass and is returned as it is,
// to be retried; a 5xx reply (an unknown recipient, a rejected message) or a
// mail that cannot be written is marked event.Permanent.
func (s *SMTP) Send(ctx context.Context, m Mail) error {
	msg, rcpt, from, err := s.message(m, time.Now())
	if err != nil {
		return event.Permanent(fmt.Errorf("smtp %s: %w", s.cfg.Addr, err))
	}
	deadline := time.Now().Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}

	c, secure, err := s.connect(ctx, deadline)
	if err != nil {
		return s.fail(ctx, "connect", err)
	}
	defer c.Close()

	if s.cfg.Username != "" {
		if host, _, _ := net.SplitHostPort(s.cfg.Addr); !secure && !isLoopback(host) {
			// As net/smtp's PlainAuth: the password travels in clear otherwise.
			return fmt.Errorf("smtp %s: the server offers no STARTTLS; the password is only sent over TLS or to this machine", s.cfg.Addr)
		}
		if err := c.Auth(sasl.NewPlainClient("", s.cfg.Username, s.cfg.Password)); err != nil {
			return s.fail(ctx, "AUTH PLAIN as "+s.cfg.Username, err)
		}
	}
	if err := c.Mail(from, nil); err != nil {
		return s.fail(ctx, "MAIL FROM "+from, err)
	}
	if err := c.Rcpt(rcpt, nil); err != nil {
		return s.fail(ctx, "RCPT TO "+rcpt, err)
	}
	w, err := c.Data()
	if err != nil {
		return s.fail(ctx, "DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return s.fail(ctx, "sending the message", err)
	}
	if err := w.Close(); err != nil {
		return s.fail(ctx, "message to "+rcpt, err)
	}
	// The server has taken the mail: a failed QUIT must not send it twice.
	_ = c.Quit()
	return nil
}

// connect dials and greets the server, switching to TLS when it offers
// STARTTLS. go-smtp v0.25.1 only starts TLS through NewClientStartTLS, which
// fails on a server that does not offer it, so a first connection asks and,
// if it does, a second one starts TLS.
func (s *SMTP) connect(ctx context.Context, deadline time.Time) (c *smtp.Client, secure bool, err error) {
	conn, err := s.dial(ctx, deadline)
	if err != nil {
		return nil, false, err
	}
	c = smtp.NewClient(conn)
	if err := c.Hello(helloName); err != nil {
		c.Close()
		return nil, false, err
	}
	if ok, _ := c.Extension("STARTTLS"); !ok {
		return c, false, nil
	}
	_ = c.Quit()
	c.Close()
	conn, err = s.dial(ctx, deadline)
	if err != nil {
		return nil, false, err
	}
	host, _, _ := net.SplitHostPort(s.cfg.Addr)
	c, err = smtp.NewClientStartTLS(conn, &tls.Config{ServerName: host, RootCAs: s.rootCAs, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, false, fmt.Errorf("STARTTLS: %w", err)
	}
	// The handshake runs on the first command after STARTTLS.
	if err := c.Hello(helloName); err != nil {
		c.Close()
		return nil, false, fmt.Errorf("STARTTLS: %w", err)
	}
	return c, true, nil
}

func (s *SMTP) dial(ctx context.Context, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	// Closing the connection is the one way to stop go-smtp mid-command.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	return deadlineConn{Conn: conn, deadline: deadline, stop: stop}, nil
}

// deadlineConn keeps one deadline for the whole exchange. go-smtp sets a
// deadline of minutes around each command and clears it after, which
// would let a server that answers slowly, command by command, hold a send
// far longer than cfg.Timeout.
type deadlineConn struct {
	net.Conn
	deadline time.Time
	stop     func() bool
}

func (c deadlineConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

func (c deadlineConn) clamp(t time.Time) time.Time {
	if t.IsZero() || t.After(c.deadline) {
		return c.deadline
	}
	return t
}

func (c deadlineConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.clamp(t)) }
func (c deadlineConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c deadlineConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

// fail names the step and the server; a 5xx reply is permanent.
func (s *SMTP) fail(ctx context.Context, step string, err error) error {
	var reply *smtp.SMTPError
	switch {
	case errors.As(err, &reply) && reply.Code >= 500:
		return event.Permanent(fmt.Errorf("smtp %s: %s: rejected: %w", s.cfg.Addr, step, err))
	case ctx.Err() != nil:
		return fmt.Errorf("smtp %s: %s: %w (%v)", s.cfg.Addr, step, context.Cause(ctx), err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("smtp %s: %s: no answer within %s: %w", s.cfg.Addr, step, s.cfg.Timeout, err)
	default:
		return fmt.Errorf("smtp %s: %s: %w", s.cfg.Addr, step, err)
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// message writes m as an RFC 5322 message with CRLF line endings, and
// returns the envelope's recipient and sender.
func (s *SMTP) message(m Mail, now time.Time) (msg []byte, rcpt, from string, err error) {
	sender, err := mail.ParseAddress(s.cfg.From)
	if err != nil {
		return nil, "", "", fmt.Errorf("sender %q: %w", s.cfg.From, err)
	}
	to, err := mail.ParseAddress(m.To)
	if err != nil {
		return nil, "", "", fmt.Errorf("recipient %q is not an e-mail address: %w", m.To, err)
	}
	id := m.MessageID
	if id == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b) + "@moenda"
	}
	if !validMessageID(id) {
		return nil, "", "", fmt.Errorf("message id %q must be printable ASCII left@right, without spaces or angle brackets", id)
	}

	var b bytes.Buffer
	header := func(name, value string) { b.WriteString(name + ": " + value + "\r\n") }
	header("From", sender.String())
	header("To", to.String())
	// Q-encoding also encodes CR and LF, so a subject cannot add headers.
	header("Subject", mime.QEncoding.Encode("utf-8", m.Subject))
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", "<"+id+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/html; charset=UTF-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	// Quoted-printable keeps lines under 76 characters and the body 7-bit,
	// whatever the HTML's lines and accents; it writes CRLF line breaks.
	qp := quotedprintable.NewWriter(&b)
	if _, err := qp.Write([]byte(m.HTML)); err != nil {
		return nil, "", "", err
	}
	if err := qp.Close(); err != nil {
		return nil, "", "", err
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return b.Bytes(), to.Address, sender.Address, nil
}

func validMessageID(id string) bool {
	left, right, ok := strings.Cut(id, "@")
	if !ok || left == "" || right == "" {
		return false
	}
	for _, r := range id {
		if r <= ' ' || r > '~' || r == '<' || r == '>' {
			return false
		}
	}
	return true
}
