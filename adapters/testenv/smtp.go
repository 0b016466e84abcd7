package testenv

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// ReceivedMail is one message the test SMTP server accepted, decoded.
type ReceivedMail struct {
	// From and To are the envelope's sender and recipients.
	From string
	To   []string
	// Subject is decoded from its RFC 2047 encoded words.
	Subject string
	// MessageID is the Message-ID without its angle brackets.
	MessageID string
	// HTML is the text/html body, its transfer encoding undone (line
	// breaks stay CRLF); empty when the body is of another type.
	HTML string
	// TLS tells whether the message came over STARTTLS.
	TLS    bool
	Header mail.Header
}

// SMTPServer is an SMTP server in the test's process, on 127.0.0.1, that
// keeps what it accepts. Like MailHog it takes any sender and recipient,
// unless told otherwise.
type SMTPServer struct {
	t    testing.TB
	addr string

	mu       sync.Mutex
	srv      *smtp.Server // nil while stopped
	listener net.Listener
	served   chan struct{}
	msgs     []ReceivedMail
	rejected map[string]bool
	user     string
	password string
	tls      *tls.Config
}

// SMTP starts a server on a free port and stops it when the test ends.
func SMTP(t testing.TB) *SMTPServer {
	t.Helper()
	s := &SMTPServer{t: t, addr: "127.0.0.1:0", rejected: map[string]bool{}}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port, the same across Stop and Start.
func (s *SMTPServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Messages returns a copy of what the server accepted, in order.
func (s *SMTPServer) Messages() []ReceivedMail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ReceivedMail(nil), s.msgs...)
}

// RejectRecipient makes RCPT TO addr answer 550, as a server that knows no
// such mailbox.
func (s *SMTPServer) RejectRecipient(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected[strings.ToLower(addr)] = true
}

// RequireAuth makes MAIL fail with go-smtp's ErrAuthRequired (a 5xx)
// until the client has authenticated with AUTH PLAIN as username and
// password; other credentials get 535.
func (s *SMTPServer) RequireAuth(username, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user, s.password = username, password
}

// OfferTLS restarts the server offering STARTTLS, with a self-signed
// certificate for 127.0.0.1, and returns a pool that trusts it.
func (s *SMTPServer) OfferTLS() *x509.CertPool {
	s.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		s.t.Fatalf("testenv: smtp: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		s.t.Fatalf("testenv: smtp: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		s.t.Fatalf("testenv: smtp: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	s.Stop()
	s.mu.Lock()
	s.tls = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}}
	s.mu.Unlock()
	s.Start()
	return pool
}

// Start listens on Addr again after Stop. The port may linger in
// TIME_WAIT for a moment, so the bind is retried for a few seconds.
func (s *SMTPServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	var l net.Listener
	var err error
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		l, err = net.Listen("tcp", s.addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Since(start) > 5*time.Second {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("testenv: smtp: listen on %s: %v", s.addr, err)
	}
	s.addr = l.Addr().String()
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &smtpSession{s: s, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.TLSConfig = s.tls
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, time.Minute
	srv.ErrorLog = log.New(LogWriter(), "testenv smtp: ", 0)
	s.srv, s.listener, s.served = srv, l, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = srv.Serve(l)
	}(s.served)
}

// Stop closes the listener and every connection: clients are refused, as
// by a server that is down.
func (s *SMTPServer) Stop() {
	s.mu.Lock()
	srv, l, served := s.srv, s.listener, s.served
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	// Close closes the listeners Serve has registered; Serve may not have
	// run yet.
	_ = srv.Close()
	_ = l.Close()
	<-served
}

// smtpSession is one client's conversation.
type smtpSession struct {
	s      *SMTPServer
	conn   *smtp.Conn
	authed bool
	from   string
	to     []string
}

func (ss *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, password string) error {
		ss.s.mu.Lock()
		defer ss.s.mu.Unlock()
		if ss.s.user != "" && (username != ss.s.user || password != ss.s.password) {
			return smtp.ErrAuthFailed
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	ss.s.mu.Lock()
	required := ss.s.user != ""
	ss.s.mu.Unlock()
	if required && !ss.authed {
		return smtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.s.mu.Lock()
	rejected := ss.s.rejected[strings.ToLower(to)]
	ss.s.mu.Unlock()
	if rejected {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user here"}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *smtpSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m, err := parseMail(raw)
	if err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: err.Error()}
	}
	m.From, m.To = ss.from, ss.to
	_, m.TLS = ss.conn.TLSConnectionState()
	ss.s.mu.Lock()
	ss.s.msgs = append(ss.s.msgs, m)
	ss.s.mu.Unlock()
	return nil
}

func (ss *smtpSession) Reset()        { ss.from, ss.to = "", nil }
func (ss *smtpSession) Logout() error { return nil }

// parseMail decodes the headers and the text/html body of raw.
func parseMail(raw []byte) (ReceivedMail, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return ReceivedMail{}, fmt.Errorf("not an RFC 5322 message: %w", err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		return ReceivedMail{}, fmt.Errorf("subject: %w", err)
	}
	body := msg.Body
	if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		body = quotedprintable.NewReader(body)
	}
	text, err := io.ReadAll(body)
	if err != nil {
		return ReceivedMail{}, fmt.Errorf("body: %w", err)
	}
	m := ReceivedMail{
		Subject:   subject,
		MessageID: strings.TrimSuffix(strings.TrimPrefix(msg.Header.Get("Message-ID"), "<"), ">"),
		Header:    msg.Header,
	}
	if mt, _, _ := mime.ParseMediaType(msg.Header.Get("Content-Type")); mt == "text/html" {
		m.HTML = string(text)
	}
	return m, nil
}
