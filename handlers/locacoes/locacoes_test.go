package locacoes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

const secret = "a-test-secret-of-at-least-32-bytes!!"

type fixture struct {
	*plugintest.Plugin
	mu    sync.Mutex
	clock time.Time
}

// newFixture builds the plugin on a fresh PostgreSQL database, with a
// clock the test moves.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{clock: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	s := plugintest.Stores(t, Plugin())["postgres"]()
	cfg := defaults
	cfg.JWTSecret, cfg.CustoSenha = secret, 4
	f.Plugin = plugintest.Build(t, s, func(deps handlers.Deps) (handlers.Plugin, error) {
		deps.Now = f.now
		return build(cfg, deps)
	})
	return f
}

func (f *fixture) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = f.clock.Add(d)
}

// request is a request with the user's token, when there is one.
func request(method, path, token, body string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

func (f *fixture) do(method, path, token, body string) *httptest.ResponseRecorder {
	return f.Serve(request(method, path, token, body))
}

func (f *fixture) must(code int, method, path, token, body string, out any) {
	f.T.Helper()
	f.Expect(code, request(method, path, token, body), out)
}

// register registers a user with cpf and returns their token.
func (f *fixture) register(email, cpf string) string {
	f.T.Helper()
	var out Token
	f.must(http.StatusCreated, "POST", "/auth/register", "", `{"nome":"Ana","email":"`+email+`","cpf":"`+cpf+`","senha":"segredo123"}`, &out)
	return out.Token
}

// carro returns the id of the available car of plate placa.
func (f *fixture) carro(token, placa string) string {
	f.T.Helper()
	var cs []Carro
	f.must(http.StatusOK, "GET", "/carros", token, "", &cs)
	for _, c := range cs {
		if c.Placa == placa {
			return c.ID
		}
	}
	f.T.Fatalf("no car %s in %+v", placa, cs)
	return ""
}

func (f *fixture) rent(token, carro string) Locacao {
	f.T.Helper()
	var l Locacao
	f.must(http.StatusAccepted, "POST", "/rentals", token, `{"carroId":"`+carro+`"}`, &l)
	return l
}

func (f *fixture) analysed(rental, resultado string, motivo *string) error {
	e := plugintest.Event(EventAnalysisCompleted, "credito", AnalysisCompleted{RentalID: rental, Resultado: resultado, Motivo: motivo})
	return f.Handlers[SubAnalises](context.Background(), e)
}

// events returns the committed events named name.
func (f *fixture) events(name string) []event.Event {
	var out []event.Event
	for _, e := range f.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func TestRegisterAndLogin(t *testing.T) {
	f := newFixture(t)
	token := f.register("ana@example.com", "529.982.247-25")
	claims, err := tokens{secret: []byte(secret), now: f.now}.check(token)
	if err != nil || claims.Cpf != "52998224725" || claims.Name != "Ana" || claims.Email != "ana@example.com" || claims.UserID == "" {
		t.Fatalf("claims %+v, %v", claims, err)
	}
	var login Token
	f.must(http.StatusOK, "POST", "/auth/login", "", `{"email":"ANA@example.com","senha":"segredo123"}`, &login)
	if login.Tipo != "Bearer" || !login.ExpiraEm.Equal(f.now().Add(time.Hour)) {
		t.Fatalf("login %+v", login)
	}
	for _, tt := range []struct {
		name, path, body string
		code             int
		says             string
	}{
		{"wrong password", "/auth/login", `{"email":"ana@example.com","senha":"errada123"}`, 401, "e-mail ou senha inválidos"},
		{"unknown e-mail", "/auth/login", `{"email":"bia@example.com","senha":"segredo123"}`, 401, "e-mail ou senha inválidos"},
		{"e-mail taken", "/auth/register", `{"nome":"Ana","email":"ana@example.com","cpf":"11144477735","senha":"segredo123"}`, 409, "já existe um cadastro"},
		{"cpf taken", "/auth/register", `{"nome":"Ana","email":"outra@example.com","cpf":"52998224725","senha":"segredo123"}`, 409, "já existe um cadastro"},
		{"every bad field", "/auth/register", `{"nome":"","email":"ana","cpf":"12345678900","senha":"curta"}`, 400, "nome deve ter"},
		{"unknown field", "/auth/register", `{"nome":"Ana","email":"c@example.com","cpf":"11144477735","senha":"segredo123","admin":true}`, 400, "admin"},
	} {
		rec := f.do("POST", tt.path, "", tt.body)
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tt.name, rec.Code, rec.Body, tt.code, tt.says)
		}
	}
	rec := f.do("POST", "/auth/register", "", `{"nome":"","email":"ana","cpf":"12345678900","senha":"curta"}`)
	for _, field := range []string{"nome", "email", "cpf", "senha"} {
		if !strings.Contains(rec.Body.String(), field) {
			t.Errorf("the 400 does not name %s: %s", field, rec.Body)
		}
	}
}

// The cars and rentals answer 401 without a valid token: none, expired,
// forged, or signed by another algorithm.
func TestEndpointsNeedAToken(t *testing.T) {
	f := newFixture(t)
	token := f.register("ana@example.com", "52998224725")
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{UserID: "x", Email: "x@example.com", Cpf: "52998224725",
		RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer, ExpiresAt: jwt.NewNumericDate(f.now().Add(time.Hour))}}).SignedString([]byte("another-secret-of-at-least-32-bytes!"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, Claims{UserID: "x", Email: "x@example.com", Cpf: "52998224725",
		RegisteredClaims: jwt.RegisteredClaims{Issuer: issuer, ExpiresAt: jwt.NewNumericDate(f.now().Add(time.Hour))}}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, path := range []string{"GET /carros", "POST /rentals", "GET /rentals/6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10"} {
		method, p, _ := strings.Cut(path, " ")
		for name, tok := range map[string]string{"no token": "", "forged": forged, "alg none": none, "garbage": "abc.def.ghi"} {
			if rec := f.do(method, p, tok, `{"carroId":"6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10"}`); rec.Code != 401 || rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %s: %d %s", path, name, rec.Code, rec.Body)
			}
		}
	}
	f.must(http.StatusOK, "GET", "/carros", token, "", nil)
	f.advance(time.Hour + time.Second)
	if rec := f.do("GET", "/carros", token, ""); rec.Code != 401 || !strings.Contains(rec.Body.String(), "token expirado") {
		t.Errorf("an expired token: %d %s", rec.Code, rec.Body)
	}
	if n := len(f.events(EventRentalRequested)); n != 0 {
		t.Errorf("%d rentals requested without a token", n)
	}
}

func TestRentalSaga(t *testing.T) {
	f := newFixture(t)
	ana := f.register("ana@example.com", "52998224725")
	bia := f.register("bia@example.com", "11144477735")
	corolla := f.carro(ana, "RIO2A26")

	l := f.rent(ana, corolla)
	if l.Status != StatusPendente || l.CarroID != corolla {
		t.Fatalf("rental %+v", l)
	}
	reqs := f.events(EventRentalRequested)
	var req RentalRequested
	if len(reqs) != 1 || json.Unmarshal(reqs[0].Payload, &req) != nil || req.RentalID != l.ID || req.UserEmail != "ana@example.com" ||
		req.UserCpf != "52998224725" || req.CarroID != corolla || req.UserID == "" || reqs[0].AggregateID != l.ID {
		t.Fatalf("rental.requested %+v %+v", reqs, req)
	}
	if rec := f.do("POST", "/rentals", ana, `{"carroId":"`+corolla+`"}`); rec.Code != 409 {
		t.Errorf("a second rental in analysis: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", "/rentals", bia, `{"carroId":"6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10"}`); rec.Code != 404 {
		t.Errorf("an unknown car: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", "/rentals/"+l.ID, bia, ""); rec.Code != 404 {
		t.Errorf("another user's rental: %d %s", rec.Code, rec.Body)
	}

	if err := f.analysed(l.ID, Approved, nil); err != nil {
		t.Fatal(err)
	}
	f.must(http.StatusOK, "GET", "/rentals/"+l.ID, ana, "", &l)
	if l.Status != StatusConfirmado || len(l.Historico) != 2 || l.Historico[1].Status != StatusConfirmado {
		t.Fatalf("approved: %+v", l)
	}
	var ok RentalConfirmed
	if c := f.events(EventRentalConfirmed); len(c) != 1 || json.Unmarshal(c[0].Payload, &ok) != nil || ok.CarroDescricao != "Toyota Corolla Prata 2022, placa RIO2A26" || ok.UserEmail != "ana@example.com" {
		t.Fatalf("rental.confirmed %+v", ok)
	}
	// The same analysis again, under another event id: nothing changes.
	if err := f.analysed(l.ID, Approved, nil); err != nil || len(f.events(EventRentalConfirmed)) != 1 {
		t.Fatalf("a second analysis: %v, %d confirmations", err, len(f.events(EventRentalConfirmed)))
	}

	// The car is taken: bia's rental of it fails.
	other := f.rent(bia, corolla)
	if err := f.analysed(other.ID, Approved, nil); err != nil {
		t.Fatal(err)
	}
	f.must(http.StatusOK, "GET", "/rentals/"+other.ID, bia, "", &other)
	var failed RentalFailed
	if other.Status != StatusFalhou || other.Motivo == nil || !strings.Contains(*other.Motivo, "não está disponível (RESERVADO)") {
		t.Fatalf("a reserved car: %+v", other)
	}
	if fs := f.events(EventRentalFailed); len(fs) != 1 || json.Unmarshal(fs[0].Payload, &failed) != nil || failed.Motivo != *other.Motivo || failed.UserEmail != "bia@example.com" {
		t.Fatalf("rental.failed %+v", failed)
	}

	// Rejected by the analysis, with its reason.
	rejected := f.rent(bia, f.carro(bia, "SAO3B17"))
	motivo := "CPF com restrição: pendência"
	if err := f.analysed(rejected.ID, Rejected, &motivo); err != nil {
		t.Fatal(err)
	}
	f.must(http.StatusOK, "GET", "/rentals/"+rejected.ID, bia, "", &rejected)
	if rejected.Status != StatusRejeitado || *rejected.Motivo != motivo || len(f.events(EventRentalFailed)) != 2 {
		t.Fatalf("rejected: %+v", rejected)
	}

	// Returning the car frees it.
	f.must(http.StatusOK, "POST", "/rentals/"+l.ID+"/devolucao", ana, "", &l)
	if l.Status != StatusDevolvido || f.carroStatus(ana, "RIO2A26") != CarroDisponivel {
		t.Fatalf("returned: %+v", l)
	}
	if rec := f.do("POST", "/rentals/"+rejected.ID+"/devolucao", bia, ""); rec.Code != 409 {
		t.Errorf("returning a rejected rental: %d %s", rec.Code, rec.Body)
	}

	for _, bad := range []string{`{"rentalId":"` + l.ID + `","resultado":"MAYBE"}`, `{"rentalId":"nope","resultado":"APPROVED"}`, `{"rentalId":"6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b10","resultado":"APPROVED"}`} {
		e := event.Event{ID: "6f1c2a8e-3b7d-4c2e-9a41-0c6f7e2d9b11", Name: EventAnalysisCompleted, OccurredAt: f.now(), Payload: json.RawMessage(bad)}
		if err := f.Handlers[SubAnalises](context.Background(), e); !event.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent error", bad, err)
		}
	}
}

func (f *fixture) carroStatus(token, placa string) string {
	var cs []Carro
	f.must(http.StatusOK, "GET", "/carros", token, "", &cs)
	for _, c := range cs {
		if c.Placa == placa {
			return c.Status
		}
	}
	return ""
}

// Two approved rentals of one car decided at once: exactly one wins.
func TestConcurrentReservationsOfOneCar(t *testing.T) {
	f := newFixture(t)
	cpfs := []string{"52998224725", "11144477735", "39053344705", "71428793860"}
	tokens := make([]string, len(cpfs))
	for i, cpf := range cpfs {
		tokens[i] = f.register("u"+cpf+"@example.com", cpf)
	}
	civic := f.carro(tokens[0], "SAO3B17")
	rentals := make([]string, len(tokens))
	for i, tok := range tokens {
		rentals[i] = f.rent(tok, civic).ID
	}
	var wg sync.WaitGroup
	for _, id := range rentals {
		wg.Go(func() {
			if err := f.analysed(id, Approved, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	won := 0
	for i, id := range rentals {
		var l Locacao
		f.must(http.StatusOK, "GET", "/rentals/"+id, tokens[i], "", &l)
		if l.Status == StatusConfirmado {
			won++
		} else if l.Status != StatusFalhou {
			t.Errorf("rental %s is %s", id, l.Status)
		}
	}
	if won != 1 || len(f.events(EventRentalConfirmed)) != 1 || len(f.events(EventRentalFailed)) != len(rentals)-1 {
		t.Fatalf("%d rentals won the car; %d confirmations, %d failures", won, len(f.events(EventRentalConfirmed)), len(f.events(EventRentalFailed)))
	}
}

func TestCPF(t *testing.T) {
	for cpf, want := range map[string]bool{"52998224725": true, "11144477735": true, "52998224724": false, "11111111111": false, "5299822472": false, "5299822472a": false} {
		if cpfValido(cpf) != want {
			t.Errorf("cpfValido(%s) = %v", cpf, !want)
		}
	}
}
