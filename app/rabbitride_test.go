package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/handlers/event"
)

// rideSecret signs the users' tokens in these tests, so they outlive a
// process.
const rideSecret = "MOENDA_HANDLERS__LOCACOES__JWT_SECRET=a-test-secret-of-at-least-32-bytes!!"

// rabbitRide is seed 004's system on the shipped configuration, a fresh
// database and vhost, and an SMTP server in the test.
type rabbitRide struct {
	t     *testing.T
	base  string
	db    testenv.Database
	vhost testenv.VHost
	smtp  *testenv.SMTPServer
	// wire lists what rental.exchange carried, through a queue of the
	// test's bound with #.
	wire func() []amqp091.Delivery
}

func (r *rabbitRide) environ() []string {
	return []string{"MOENDA_POSTGRES__URL=" + r.db.URL, "MOENDA_AMQP__URL=" + r.vhost.URL,
		"MOENDA_HANDLERS__EMAILS__SMTP__ADDR=" + r.smtp.Addr(), rideSecret}
}

// newRabbitRide prepares the services; start serves on them.
func newRabbitRide(t *testing.T) *rabbitRide {
	return &rabbitRide{t: t, db: testenv.EmptyPostgres(t), vhost: testenv.RabbitMQ(t), smtp: testenv.SMTP(t)}
}

func startRabbitRide(t *testing.T) *rabbitRide {
	r := newRabbitRide(t)
	r.base = start(t, "test", r.environ()...).base
	r.spy()
	return r
}

// spy binds a queue of the test's to rental.exchange, once declared.
func (r *rabbitRide) spy() {
	ch := testenv.Channel(r.t, r.vhost.URL)
	if _, err := ch.QueueDeclare("wire.spy", true, false, false, false, nil); err != nil {
		r.t.Fatal(err)
	}
	if err := ch.QueueBind("wire.spy", "#", "rental.exchange", false, nil); err != nil {
		r.t.Fatal(err)
	}
	r.wire = testenv.Consume(r.t, r.vhost.URL, "wire.spy")
}

// call sends a request with token (if any) and decodes the answer into out.
func (r *rabbitRide) call(method, path, token, body string, out any) int {
	r.t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			r.t.Fatalf("%s %s: %s", method, path, raw)
		}
	}
	return resp.StatusCode
}

// register registers a user with cpf and returns their token.
func (r *rabbitRide) register(email, cpf string) string {
	r.t.Helper()
	var out struct{ Token string }
	if code := r.call("POST", "/auth/register", "", fmt.Sprintf(`{"nome":"Cliente","email":%q,"cpf":%q,"senha":"segredo123"}`, email, cpf), &out); code != http.StatusCreated {
		r.t.Fatalf("register %s: %d", email, code)
	}
	return out.Token
}

// carro returns the id of the car of plate placa.
func (r *rabbitRide) carro(token, placa string) string {
	r.t.Helper()
	var cs []struct{ ID, Placa string }
	if code := r.call("GET", "/carros", token, "", &cs); code != http.StatusOK {
		r.t.Fatalf("GET /carros: %d", code)
	}
	for _, c := range cs {
		if c.Placa == placa {
			return c.ID
		}
	}
	r.t.Fatalf("no car %s", placa)
	return ""
}

type rideRental struct {
	ID, Status string
	Motivo     *string
	Historico  []struct{ Status string }
}

func (r *rabbitRide) rent(token, carro string) string {
	r.t.Helper()
	var l rideRental
	if code := r.call("POST", "/rentals", token, `{"carroId":"`+carro+`"}`, &l); code != http.StatusAccepted || l.Status != "PENDENTE" {
		r.t.Fatalf("POST /rentals: %d %+v", code, l)
	}
	return l.ID
}

// ends waits for the saga to leave PENDENTE and returns the rental.
func (r *rabbitRide) ends(token, id string) rideRental {
	r.t.Helper()
	var l rideRental
	testenv.Eventually(r.t, 20*time.Second, "the saga's end of "+id, func() bool {
		return r.call("GET", "/rentals/"+id, token, "", &l) == http.StatusOK && l.Status != "PENDENTE"
	})
	return l
}

// mails waits until n e-mails arrived, then a moment for any extra one.
func (r *rabbitRide) mails(n int) []testenv.ReceivedMail {
	r.t.Helper()
	testenv.Eventually(r.t, 20*time.Second, fmt.Sprintf("%d e-mails", n), func() bool { return len(r.smtp.Messages()) >= n })
	time.Sleep(300 * time.Millisecond)
	return r.smtp.Messages()
}

// Seed 004's topology, exactly: the exchange, the four queues with their
// routing keys, each dead-lettering to rental.dlx, bound with # to the one
// rental.dlq.
func TestRabbitRideTopologyIsTheSeeds(t *testing.T) {
	r := startRabbitRide(t)
	got := declared(t, r.vhost.Name)
	want := []string{
		"exchange rental.exchange type=topic durable alternate-exchange=rental.exchange.unrouted",
		"exchange rental.dlx type=topic durable",
		"queue rental.dlq durable",
		`binding rental.dlx -> rental.dlq key="#"`,
	}
	for q, key := range map[string]string{
		"analysis.requested.queue": "rental.requested", "rental.analysis.completed.queue": "analysis.completed",
		"notification.confirmed.queue": "rental.confirmed", "notification.failed.queue": "rental.failed",
	} {
		want = append(want,
			fmt.Sprintf("queue %s durable x-dead-letter-exchange=rental.dlx x-dead-letter-routing-key=%s", q, q),
			fmt.Sprintf(`binding rental.exchange -> %s key="%s"`, q, key),
			fmt.Sprintf("queue %s.retry.1s durable x-dead-letter-exchange= x-dead-letter-routing-key=%s x-message-ttl=1000", q, q),
			fmt.Sprintf("queue %s.retry.2s durable x-dead-letter-exchange= x-dead-letter-routing-key=%s x-message-ttl=2000", q, q))
	}
	for _, line := range want {
		if !slices.Contains(got, line) {
			t.Errorf("RabbitMQ lacks: %s", line)
		}
	}
}

// Approved: CONFIRMADO, one confirmation e-mail, and every event on the
// wire in the seed's flat JSON.
func TestRabbitRideApproved(t *testing.T) {
	r := startRabbitRide(t)
	token := r.register("ana@example.com", "52998224725")
	id := r.rent(token, r.carro(token, "RIO2A26"))
	l := r.ends(token, id)
	if l.Status != "CONFIRMADO" || len(l.Historico) != 2 {
		t.Fatalf("rental %+v", l)
	}
	mails := r.mails(1)
	if len(mails) != 1 || mails[0].Subject != "Reserva confirmada" || !slices.Contains(mails[0].To, "ana@example.com") ||
		!strings.Contains(mails[0].HTML, id) || !strings.Contains(mails[0].HTML, "Toyota Corolla") {
		t.Fatalf("e-mails %+v", mails)
	}
	testenv.Eventually(t, 5*time.Second, "three events on the wire", func() bool { return len(r.wire()) == 3 })
	fields := map[string][]string{
		"rental.requested":   {"eventId", "occurredAt", "rentalId", "userId", "userEmail", "userCpf", "carroId"},
		"analysis.completed": {"eventId", "occurredAt", "rentalId", "resultado"},
		"rental.confirmed":   {"eventId", "occurredAt", "rentalId", "userEmail", "carroDescricao"},
	}
	for _, d := range r.wire() {
		var body map[string]any
		if err := json.Unmarshal(d.Body, &body); err != nil {
			t.Fatal(err)
		}
		want, ok := fields[d.RoutingKey]
		if !ok || body["rentalId"] != id || body["event_id"] != nil || d.MessageId != body["eventId"] || d.ContentType != "application/json" {
			t.Errorf("%s: %s", d.RoutingKey, d.Body)
		}
		for _, f := range want {
			if _, ok := body[f]; !ok {
				t.Errorf("%s lacks %s: %s", d.RoutingKey, f, d.Body)
			}
		}
	}
}

// A blacklisted CPF: REJEITADO, and one e-mail that gives the reason.
func TestRabbitRideBlacklistedCPF(t *testing.T) {
	r := startRabbitRide(t)
	token := r.register("bia@example.com", "11144477735")
	if _, err := r.db.Pool.Exec(context.Background(), `INSERT INTO credito_cpfs_bloqueados (cpf, motivo) VALUES ('11144477735', 'pendência financeira')`); err != nil {
		t.Fatal(err)
	}
	id := r.rent(token, r.carro(token, "SAO3B17"))
	if l := r.ends(token, id); l.Status != "REJEITADO" || l.Motivo == nil || *l.Motivo != "CPF com restrição: pendência financeira" {
		t.Fatalf("rental %+v", l)
	}
	mails := r.mails(1)
	if len(mails) != 1 || mails[0].Subject != "Reserva não confirmada" || !strings.Contains(mails[0].HTML, "CPF com restrição: pendência financeira") {
		t.Fatalf("e-mails %+v", mails)
	}
}

// A car reserved already: the second rental FALHOU, with one e-mail.
func TestRabbitRideCarAlreadyReserved(t *testing.T) {
	r := startRabbitRide(t)
	ana, bia := r.register("ana@example.com", "52998224725"), r.register("bia@example.com", "11144477735")
	polo := r.carro(ana, "BHZ4C58")
	if l := r.ends(ana, r.rent(ana, polo)); l.Status != "CONFIRMADO" {
		t.Fatalf("first rental %+v", l)
	}
	if l := r.ends(bia, r.rent(bia, polo)); l.Status != "FALHOU" || l.Motivo == nil || !strings.Contains(*l.Motivo, "não está disponível") {
		t.Fatalf("second rental %+v", l)
	}
	mails := r.mails(2)
	var failures []testenv.ReceivedMail
	for _, m := range mails {
		if slices.Contains(m.To, "bia@example.com") {
			failures = append(failures, m)
		}
	}
	if len(mails) != 2 || len(failures) != 1 || failures[0].Subject != "Reserva não confirmada" || !strings.Contains(failures[0].HTML, "não está disponível") {
		t.Fatalf("e-mails %+v", mails)
	}
}

// SMTP down: the notification is tried 3 times, 1 s then 2 s apart, and
// lands in rental.dlq with its failure headers; with SMTP back, the next
// e-mail goes out and the dead letter is still there.
func TestRabbitRideSMTPDown(t *testing.T) {
	r := startRabbitRide(t)
	dlq := testenv.Consume(t, r.vhost.URL, "rental.dlq")
	r.smtp.Stop()
	ana := r.register("ana@example.com", "52998224725")
	first := r.rent(ana, r.carro(ana, "POA5D91"))
	if l := r.ends(ana, first); l.Status != "CONFIRMADO" {
		t.Fatalf("rental %+v", l)
	}
	testenv.Eventually(t, 20*time.Second, "the dead letter", func() bool { return len(dlq()) == 1 })
	d := dlq()[0]
	h := func(k string) string { s, _ := d.Headers[k].(string); return s }
	firstAt, _ := time.Parse(time.RFC3339Nano, h(event.HeaderFirstFailureAt))
	lastAt, _ := time.Parse(time.RFC3339Nano, h(event.HeaderLastFailureAt))
	if h(event.HeaderReason) != event.ReasonRetriesExhausted || h(event.HeaderAttempts) != "3" || h(event.HeaderQueue) != "notification.confirmed.queue" ||
		!strings.Contains(h(event.HeaderError), r.smtp.Addr()) || !strings.Contains(string(d.Body), first) {
		t.Fatalf("dead letter headers %v body %s", d.Headers, d.Body)
	}
	if span := lastAt.Sub(firstAt); span < 2900*time.Millisecond || span > 8*time.Second {
		t.Errorf("the three attempts spanned %s; the seed's schedule is 1 s + 2 s", span)
	}
	r.smtp.Start()
	bia := r.register("bia@example.com", "11144477735")
	second := r.rent(bia, r.carro(bia, "CWB6E32"))
	mails := r.mails(1)
	if len(mails) != 1 || !strings.Contains(mails[0].HTML, second) {
		t.Fatalf("e-mails after SMTP came back: %+v", mails)
	}
	if n := len(dlq()); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
}

// analysis.completed delivered twice, as a Spring publisher would send it
// (no AMQP type, the name in the routing key): one state change and one
// e-mail.
func TestRabbitRideAnalysisDeliveredTwice(t *testing.T) {
	r := startRabbitRide(t)
	ana := r.register("ana@example.com", "52998224725")
	id := r.rent(ana, r.carro(ana, "REC7F44"))
	r.ends(ana, id)
	r.mails(1)
	var analysis amqp091.Delivery
	for _, d := range r.wire() {
		if d.RoutingKey == "analysis.completed" {
			analysis = d
		}
	}
	ch := testenv.Channel(t, r.vhost.URL)
	if err := ch.Publish("rental.exchange", "analysis.completed", false, false, amqp091.Publishing{ContentType: "application/json", Body: analysis.Body}); err != nil {
		t.Fatal(err)
	}
	var claims int
	testenv.Eventually(t, 10*time.Second, "the second delivery", func() bool {
		return len(r.wire()) == 4
	})
	time.Sleep(time.Second) // a second state change or e-mail would show by now
	l := r.ends(ana, id)
	if err := r.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM moenda_inbox WHERE consumer = 'rental.analysis.completed.queue'`).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if l.Status != "CONFIRMADO" || len(l.Historico) != 2 || len(r.smtp.Messages()) != 1 || claims != 1 {
		t.Fatalf("rental %+v, %d e-mails, %d inbox claims", l, len(r.smtp.Messages()), claims)
	}
}

// The process killed after the rental committed and before the relay
// published it: after a restart the saga completes (the outbox), where the
// seed's save-then-publish would have lost the event.
func TestRabbitRideKilledBetweenCommitAndPublish(t *testing.T) {
	r := newRabbitRide(t)
	serve := func() *serveProcess {
		p := startServe(t, r.environ()...)
		r.base = p.base
		return p
	}
	// Holding the relay's lock keeps the first process from publishing.
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, r.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, outbox.LockKey("moenda-relay")); err != nil {
		t.Fatal(err)
	}
	first := serve()
	ana := r.register("ana@example.com", "52998224725")
	id := r.rent(ana, r.carro(ana, "FOR8G65"))
	var rows, published int
	if err := r.db.Pool.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM watermill_offsets_outbox WHERE offset_acked > 0) FROM watermill_outbox`).Scan(&rows, &published); err != nil || rows != 1 || published != 0 {
		t.Fatalf("%d outbox rows after the commit, %d relay positions past them: %v", rows, published, err)
	}
	if err := first.kill(); err != nil { // the event unpublished
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_unlock($1)`, outbox.LockKey("moenda-relay")); err != nil {
		t.Fatal(err)
	}
	serve()
	if l := r.ends(ana, id); l.Status != "CONFIRMADO" {
		t.Fatalf("rental after the restart %+v", l)
	}
	if mails := r.mails(1); len(mails) != 1 || !strings.Contains(mails[0].HTML, id) {
		t.Fatalf("e-mails %+v", mails)
	}
}

// credito's analysis waits before the delivery's unit of work opens, so
// the rentals waiting on it hold no database connection: with a pool of
// three, twelve analyses waiting at once leave the pool to the routes,
// and an unrelated read (GET /carros) answers at once.
func TestRabbitRideWaitingAnalysesHoldNoConnection(t *testing.T) {
	r := newRabbitRide(t)
	r.base = start(t, "test", append(r.environ(), "MOENDA_POSTGRES__MAX_CONNS=3", "MOENDA_HANDLERS__CREDITO__LATENCIA=3s")...).base
	var tokens []string // one rental in analysis per customer
	for i := range 12 {
		tokens = append(tokens, r.register(fmt.Sprintf("c%d@example.com", i), validCPF(100000000+i*7919)))
	}
	token := tokens[0]
	carro := r.carro(token, "RIO2A26")
	began := time.Now()
	var ids []string
	for _, tk := range tokens {
		ids = append(ids, r.rent(tk, carro))
	}
	accepted := time.Since(began)
	time.Sleep(time.Second) // the analyses are waiting now
	began = time.Now()
	var cs []struct{ ID string }
	if code := r.call("GET", "/carros", token, "", &cs); code != http.StatusOK {
		t.Fatalf("GET /carros: %d", code)
	}
	read := time.Since(began)
	for i, id := range ids {
		if l := r.ends(tokens[i], id); l.Status == "PENDENTE" {
			t.Fatalf("rental %+v", l)
		}
	}
	t.Logf("12 rentals accepted in %s; GET /carros took %s while their analyses waited", accepted.Round(time.Millisecond), read.Round(time.Millisecond))
	if read > 500*time.Millisecond {
		t.Fatalf("GET /carros took %s while 12 analyses waited on a pool of 3: the waits hold the pool", read)
	}
}

// validCPF is the CPF of the nine digits of base, with its check digits.
func validCPF(base int) string {
	d := []byte(fmt.Sprintf("%09d", base%1000000000))
	for n := 9; n <= 10; n++ {
		sum := 0
		for i := range n {
			sum += int(d[i]-'0') * (n + 1 - i)
		}
		c := 11 - sum%11
		if c >= 10 {
			c = 0
		}
		d = append(d, byte('0'+c))
	}
	return string(d)
}
