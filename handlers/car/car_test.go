package car

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// stores returns every store the plugin runs on, each with the routing
// rule its outbox applies (nil: every event).
func stores(t *testing.T) map[string]func(routable func(string) error) plugintest.Store {
	return plugintest.Routed(t, Plugin())
}

// fixture is the plugin built as the platform builds it, over one store,
// with a clock that moves one second at each reading.
type fixture struct {
	*plugintest.Plugin
	delivered int // events of Committed already delivered by pump
}

func newFixture(t *testing.T, s plugintest.Store) *fixture {
	t.Helper()
	return &fixture{Plugin: plugintest.Build(t, s, plugintest.Defaults(Plugin()))}
}

func (f *fixture) submeter(municipio string) Processo {
	f.T.Helper()
	var p Processo
	f.Must(http.StatusCreated, "POST", "/processos", fmt.Sprintf(`{"requerente_id":"req-1","municipio_ibge":%q}`, municipio), &p)
	return p
}

// escrever makes every write of a processo, in 2111300: submits it,
// attaches planta.pdf, sends the mensagem texto and regularizes it.
func (f *fixture) escrever(texto string) (Processo, Documento, Mensagem) {
	f.T.Helper()
	p := f.submeter("2111300")
	var d Documento
	f.Must(http.StatusCreated, "POST", "/processos/"+p.ID+"/documentos", `{"nome":"planta.pdf"}`, &d)
	var m Mensagem
	f.Must(http.StatusCreated, "POST", "/processos/"+p.ID+"/mensagens", fmt.Sprintf(`{"texto":%q}`, texto), &m)
	f.Must(http.StatusOK, "POST", "/processos/"+p.ID+"/regularizar", "", nil)
	return p, d, m
}

func (f *fixture) ficha(id string) Ficha {
	f.T.Helper()
	var out Ficha
	f.Must(http.StatusOK, "GET", "/processos/"+id, "", &out)
	return out
}

// reached lists the subscriptions a published event reaches and whose
// handler handles it: the bindings' topic patterns, then Handles.
func reached(e event.Event) []string {
	var subs []string
	for _, s := range Plugin().Subscriptions {
		if plugintest.Reaches(s, e) {
			subs = append(subs, s.Name)
		}
	}
	return subs
}

// pump delivers every event committed since the last pump to the
// subscriptions it reaches, in order, until none is left.
func (f *fixture) pump() {
	f.T.Helper()
	for es := f.Events(); f.delivered < len(es); es = f.Events() {
		e := es[f.delivered]
		f.delivered++
		for _, sub := range reached(e) {
			if err := f.Deliver(sub, e); err != nil {
				f.T.Fatalf("deliver %s to %s: %v", e.Name, sub, err)
			}
		}
	}
}

func TestSpec(t *testing.T) {
	def := Plugin()
	if def.Name != "car" || def.Exchange != "car.events" {
		t.Fatalf("spec = %+v", def.Spec)
	}
	want := []string{"processo.submetido.v1", "processo.regular.v1", "documento.anexado.v1", "canal.web.mensagem.v1"}
	if !reflect.DeepEqual(def.Publishes, want) {
		t.Fatalf("publishes %v, want %v", def.Publishes, want)
	}
	queues := map[string]string{}
	for _, s := range def.Subscriptions {
		queues[s.Name] = def.Queue(s)
	}
	wantQueues := map[string]string{
		"analista": "processos.analista", "notificacao": "processos.notificacao", "ocr": "documentos.ocr",
		"sicar": "integracao.sicar", "mensagens": "canal.web.mensagens",
	}
	if !reflect.DeepEqual(queues, wantQueues) {
		t.Fatalf("queues %v, want %v", queues, wantQueues)
	}
	plugintest.CheckDefinition(t, def, "00001_car.sql")

	// The seed's bindings: * is one word.
	routing := []struct {
		name string
		subs []string
	}{
		{"processo.submetido.v1", []string{"analista", "notificacao"}},
		{"processo.regular.v1", []string{"notificacao", "sicar"}},
		{"documento.anexado.v1", []string{"ocr"}},
		{"canal.web.mensagem.v1", []string{"mensagens"}},
		{"canal.web.mensagem.resposta.v1", nil},
		{"processo.submetido.v2", nil}, // bound, but a version no handler lists
	}
	for _, tt := range routing {
		if got := reached(event.Event{Name: tt.name}); !slices.Equal(got, tt.subs) {
			t.Errorf("%s reaches %v, want %v", tt.name, got, tt.subs)
		}
	}
	// processo.regular is bound twice to different queues, *.regular among them.
	if !topology.Match("*.regular", "processo.regular") || topology.Match("processo.*", "canal.web.mensagem") {
		t.Error("the topic patterns do not match as the seed means")
	}
}

func TestConfig(t *testing.T) {
	plugintest.CheckConfigs(t, Plugin(), []plugintest.ConfigCase{
		{Name: "defaults", Config: &Config{Analistas: defaultConfig().Analistas}, Want: ""},
		{Name: "one analyst", Config: &Config{Analistas: []string{"ana"}}, Want: ""},
		{Name: "none", Config: &Config{Analistas: nil}, Want: "handlers.car.analistas is empty"},
		{Name: "an empty name", Config: &Config{Analistas: []string{"ana", ""}}, Want: "handlers.car.analistas[1] is empty"},
		{Name: "a blank name", Config: &Config{Analistas: []string{" ", "ana"}}, Want: "handlers.car.analistas[0] is empty"},
		{Name: "twice", Config: &Config{Analistas: []string{"ana", "bruno", "ana"}}, Want: `handlers.car.analistas[2] "ana" is listed twice`},
	})
	if got := Plugin().NewConfig().(*Config).Analistas; !slices.Equal(got, []string{"ana", "bruno", "carla"}) {
		t.Fatalf("default analistas = %v", got)
	}
}

// The routes answer in Portuguese, naming fields as they are on the wire.
func TestRoutes(t *testing.T) {
	plugintest.Stores(t, Plugin()).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		p := f.submeter("2111300")
		unknown := uuid.NewString()
		tests := []struct {
			method, path, body string
			code               int
			want               string // a part of the answer
		}{
			{"POST", "/processos", `{"requerente_id":"req-9","municipio_ibge":"3550308"}`, http.StatusCreated, `"requerente_id":"req-9","municipio_ibge":"3550308","status":"submetido",`},
			{"POST", "/processos", `{"requerente_id":" ","municipio_ibge":"123"}`, http.StatusBadRequest, `{"error":"requisição inválida: requerente_id é obrigatório\nrequisição inválida: municipio_ibge deve ter exatamente 7 dígitos`},
			{"POST", "/processos", `{"requerente_id":"r","municipio_ibge":"21113000"}`, http.StatusBadRequest, `municipio_ibge deve ter exatamente 7 dígitos (o código IBGE do município, como 2111300)`},
			{"POST", "/processos", `{"requerente_id":"r","municipio_ibge":"211130a"}`, http.StatusBadRequest, `municipio_ibge deve ter exatamente 7 dígitos`},
			{"POST", "/processos", `{"requerente_id":"r","municipio_ibge":"２１１１３００"}`, http.StatusBadRequest, `municipio_ibge deve ter exatamente 7 dígitos`},
			{"POST", "/processos", `{"requerente_id":"r","municipio_ibge":2111300}`, http.StatusBadRequest, `field municipio_ibge must be a string, got a number`},
			{"POST", "/processos", `{"requerente_id":"` + strings.Repeat("é", 101) + `","municipio_ibge":"2111300"}`, http.StatusBadRequest, `requerente_id tem mais de 100 caracteres`},
			{"POST", "/processos", `{"requerente":"r","municipio_ibge":"2111300"}`, http.StatusBadRequest, `unknown field \"requerente\"`},
			{"POST", "/processos", ``, http.StatusBadRequest, `body is empty`},
			{"GET", "/processos/" + p.ID, "", http.StatusOK, `"status":"submetido","submetido_em":"2026-01-15T10:30:01Z","regularizado_em":null,"analista":null,"notificacoes":[],"documentos":[],"sicar":null,"mensagens":[]}`},
			{"GET", "/processos/" + strings.ToUpper(p.ID), "", http.StatusOK, `"id":"` + p.ID + `"`},
			{"GET", "/processos/" + unknown, "", http.StatusNotFound, `{"error":"processo não encontrado"}`},
			{"GET", "/processos/123", "", http.StatusBadRequest, `{"error":"requisição inválida: id no caminho deve ser um UUID, como 550e8400-e29b-41d4-a716-446655440000"}`},
			{"POST", "/processos/" + unknown + "/regularizar", "", http.StatusNotFound, `{"error":"processo não encontrado"}`},
			{"POST", "/processos/x/regularizar", "", http.StatusBadRequest, `id no caminho deve ser um UUID`},
			{"POST", "/processos/" + p.ID + "/documentos", `{"nome":"planta.pdf"}`, http.StatusCreated, `"nome":"planta.pdf","anexado_em":"2026-01-15T10:30:`},
			{"POST", "/processos/" + p.ID + "/documentos", `{"nome":"planta.pdf"}`, http.StatusCreated, `"ocr":null}`},
			{"POST", "/processos/" + unknown + "/documentos", `{"nome":"planta.pdf"}`, http.StatusNotFound, `{"error":"processo não encontrado"}`},
			{"POST", "/processos/" + p.ID + "/documentos", `{"nome":""}`, http.StatusBadRequest, `{"error":"requisição inválida: nome é obrigatório"}`},
			{"POST", "/processos/" + p.ID + "/documentos", `{"nome":"` + strings.Repeat("a", 256) + `"}`, http.StatusBadRequest, `{"error":"requisição inválida: nome tem mais de 255 caracteres"}`},
			{"POST", "/processos/" + p.ID + "/documentos", `{"nome":"a","tipo":"pdf"}`, http.StatusBadRequest, `unknown field \"tipo\"`},
			{"POST", "/processos/" + p.ID + "/mensagens", `{"texto":"Olá"}`, http.StatusCreated, `"texto":"Olá","enviada_em":"2026-01-15T10:30:`},
			{"POST", "/processos/" + p.ID + "/mensagens", `{"texto":"Olá"}`, http.StatusCreated, `"entregue_em":null}`},
			{"POST", "/processos/" + unknown + "/mensagens", `{"texto":"Olá"}`, http.StatusNotFound, `{"error":"processo não encontrado"}`},
			{"POST", "/processos/" + p.ID + "/mensagens", `{"texto":"\n"}`, http.StatusBadRequest, `{"error":"requisição inválida: texto é obrigatório"}`},
			{"POST", "/processos/" + p.ID + "/mensagens", `{"texto":"` + strings.Repeat("a", 4001) + `"}`, http.StatusBadRequest, `{"error":"requisição inválida: texto tem mais de 4000 caracteres"}`},
			{"POST", "/processos/" + p.ID + "/regularizar", "", http.StatusOK, `"status":"regular","submetido_em":"2026-01-15T10:30:01Z","regularizado_em":"2026-01-15T10:30:`},
			{"POST", "/processos/" + p.ID + "/regularizar", "", http.StatusOK, `"status":"regular"`},
		}
		for _, tt := range tests {
			rec := f.Do(tt.method, tt.path, tt.body)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("%s %s %s = %d %s, want %d with %s", tt.method, tt.path, handlers.Cut(tt.body, 80), rec.Code, rec.Body, tt.code, tt.want)
			}
		}
		if got := f.ficha(p.ID); got.Status != StatusRegular || len(got.Documentos) != 2 || len(got.Mensagens) != 2 {
			t.Fatalf("after the routes: %+v", got)
		}
	})
}

// names lists the events' names.
func names(es []event.Event) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// payload decodes an event's payload as a generic object.
func payload(t *testing.T, e event.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Every write raises its event, once, in its unit of work, with the
// seed's payload.
func TestWritesRaiseTheirEvents(t *testing.T) {
	plugintest.Stores(t, Plugin()).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		p, d, m := f.escrever("Olá, requerente")
		f.Must(http.StatusOK, "POST", "/processos/"+p.ID+"/regularizar", "", nil)

		ref := map[string]any{"processo_id": p.ID, "requerente_id": "req-1", "municipio_ibge": "2111300"}
		with := func(extra map[string]any) map[string]any {
			out := map[string]any{}
			for k, v := range ref {
				out[k] = v
			}
			for k, v := range extra {
				out[k] = v
			}
			return out
		}
		want := []struct {
			name, key string
			payload   map[string]any
		}{
			{"processo.submetido.v1", "processo.submetido", ref},
			{"documento.anexado.v1", "documento.anexado", with(map[string]any{"documento_id": d.ID, "nome": "planta.pdf"})},
			{"canal.web.mensagem.v1", "canal.web.mensagem", with(map[string]any{"mensagem_id": m.ID, "texto": "Olá, requerente"})},
			{"processo.regular.v1", "processo.regular", ref}, // once, though regularized twice
		}
		es := f.Events()
		if len(es) != len(want) {
			t.Fatalf("events %v, want %d", names(es), len(want))
		}
		for i, w := range want {
			e := es[i]
			if e.Name != w.name || e.RoutingKey() != w.key || e.Source != "car" || e.AggregateID != p.ID || e.Validate() != nil {
				t.Errorf("event %d = %+v, want %s", i, e, w.name)
			}
			if got := payload(t, e); !reflect.DeepEqual(got, w.payload) {
				t.Errorf("%s payload = %v, want %v", w.name, got, w.payload)
			}
		}
	})
}

// A write and its event are one unit: when the event cannot be written,
// the write is not made either.
func TestWriteAndEventCommitTogether(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			refuse := func(key string) error {
				if key == "processo.submetido" {
					return nil
				}
				return errors.New("outbox refuses " + key)
			}
			f := newFixture(t, newStore(refuse))
			p := f.submeter("2111300")
			for _, req := range []struct{ path, body string }{
				{"/regularizar", ""},
				{"/documentos", `{"nome":"planta.pdf"}`},
				{"/mensagens", `{"texto":"Olá"}`},
			} {
				if rec := f.Do("POST", "/processos/"+p.ID+req.path, req.body); rec.Code != http.StatusInternalServerError {
					t.Errorf("POST %s without its event = %d %s, want 500", req.path, rec.Code, rec.Body)
				}
			}
			got := f.ficha(p.ID)
			if got.Status != StatusSubmetido || got.RegularizadoEm != nil || len(got.Documentos) != 0 || len(got.Mensagens) != 0 {
				t.Fatalf("writes without their events were kept: %+v", got)
			}
			if es := f.Events(); len(es) != 1 || es[0].Name != EventProcessoSubmetido {
				t.Fatalf("events %v, want processo.submetido only", names(es))
			}
		})
	}
}

// Every consumer's effect shows in GET /processos/{id}.
func TestConsumersEffects(t *testing.T) {
	plugintest.Stores(t, Plugin()).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		p, d, m := f.escrever("Olá")

		before := f.ficha(p.ID)
		if before.Analista != nil || len(before.Notificacoes) != 0 || before.Documentos[0].OCR != nil || before.SICAR != nil || before.Mensagens[0].EntregueEm != nil {
			t.Fatalf("effects before any delivery: %+v", before)
		}
		f.pump()
		got := f.ficha(p.ID)
		if got.Analista == nil || *got.Analista != "ana" {
			t.Errorf("analista = %v, want ana", got.Analista)
		}
		var evs []string
		for _, n := range got.Notificacoes {
			evs = append(evs, n.Evento)
			if n.RequerenteID != "req-1" || !strings.Contains(n.Texto, p.ID) || n.CriadaEm.IsZero() {
				t.Errorf("notificacao = %+v", n)
			}
		}
		if !slices.Equal(evs, []string{"processo.submetido", "processo.regular"}) {
			t.Errorf("notificacoes of %v, want submetido then regular", evs)
		}
		if len(got.Documentos) != 1 || got.Documentos[0].ID != d.ID || got.Documentos[0].OCR == nil || got.Documentos[0].OCR.Status != "pendente" {
			t.Errorf("documentos = %+v, want one with ocr pendente", got.Documentos)
		}
		if got.SICAR == nil || got.SICAR.Status != "solicitada" || got.SICAR.MunicipioIBGE != "2111300" || got.SICAR.SolicitadaEm.IsZero() {
			t.Errorf("sicar = %+v", got.SICAR)
		}
		if len(got.Mensagens) != 1 || got.Mensagens[0].ID != m.ID || got.Mensagens[0].EntregueEm == nil || got.Mensagens[0].EntregueEm.Before(m.EnviadaEm) {
			t.Errorf("mensagens = %+v, want one delivered after it was sent", got.Mensagens)
		}
		rec := f.Do("GET", "/processos/"+p.ID, "")
		for _, part := range []string{`"analista":"ana"`, `"ocr":{"status":"pendente"}`, `"sicar":{"status":"solicitada","municipio_ibge":"2111300","solicitada_em":"2026-01-15T10:30:`, `"entregue_em":"2026-01-15T10:30:`} {
			if !strings.Contains(rec.Body.String(), part) {
				t.Errorf("GET = %s, want %s", rec.Body, part)
			}
		}
	})
}

// Analysts are assigned in turn, exactly: a processo keeps its analyst
// whatever is redelivered, and a delivery that rolls back takes no turn.
func TestRoundRobin(t *testing.T) {
	plugintest.Stores(t, Plugin()).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		var ps []Processo
		for range 4 {
			ps = append(ps, f.submeter("2111300"))
		}
		es := f.Events()

		failed := errors.New("the inbox claim failed")
		err := f.Tx.InTx(context.Background(), func(ctx context.Context, _ handlers.Tx) error {
			if err := f.Handlers[SubAnalista](ctx, es[0]); err != nil {
				return err
			}
			return failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("InTx = %v", err)
		}
		if a := f.ficha(ps[0].ID).Analista; a != nil {
			t.Fatalf("a rolled-back delivery assigned %s", *a)
		}

		for i, e := range es[:3] {
			if err := f.Deliver(SubAnalista, e); err != nil {
				t.Fatal(err)
			}
			if i == 0 { // the same event again, and another event about the same processo
				again := e
				again.ID = uuid.NewString()
				for _, x := range []event.Event{e, again} {
					if err := f.Deliver(SubAnalista, x); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if err := f.Deliver(SubAnalista, es[3]); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ps {
			if a := f.ficha(p.ID).Analista; a != nil {
				got = append(got, *a)
			} else {
				got = append(got, "")
			}
		}
		if want := []string{"ana", "bruno", "carla", "ana"}; !slices.Equal(got, want) {
			t.Fatalf("analistas = %v, want %v", got, want)
		}
	})
}

// The same event delivered twice has one effect, on every consumer.
func TestSameEventTwiceHasOneEffect(t *testing.T) {
	plugintest.Stores(t, Plugin()).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		p := f.submeter("2111300")
		f.Must(http.StatusCreated, "POST", "/processos/"+p.ID+"/documentos", `{"nome":"planta.pdf"}`, nil)
		f.Must(http.StatusCreated, "POST", "/processos/"+p.ID+"/mensagens", `{"texto":"Olá"}`, nil)
		f.Must(http.StatusOK, "POST", "/processos/"+p.ID+"/regularizar", "", nil)
		f.pump()
		once := f.ficha(p.ID)
		if len(once.Notificacoes) != 2 {
			t.Fatalf("notificacoes = %+v", once.Notificacoes)
		}
		f.delivered = 0
		f.pump() // every event again, later by the clock
		if twice := f.ficha(p.ID); !reflect.DeepEqual(twice, once) {
			t.Fatalf("after redelivery:\n%+v\nwant\n%+v", twice, once)
		}
		// The OCR job, the SICAR request and the delivery are per
		// documento, processo and mensagem, not per event.
		for _, e := range f.Events() {
			again := e
			again.ID = uuid.NewString()
			for _, sub := range reached(e) {
				if sub == SubNotificacao {
					continue // one notification per event, by design
				}
				if err := f.Deliver(sub, again); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := f.ficha(p.ID); !reflect.DeepEqual(got, once) {
			t.Fatalf("after other events about the same entities:\n%+v\nwant\n%+v", got, once)
		}
	})
}

// A payload that cannot be decoded or lacks its ids is permanent: it is
// dead-lettered at once. A database error is not.
func TestBadPayloadIsPermanent(t *testing.T) {
	id, doc := uuid.NewString(), uuid.NewString()
	ref := fmt.Sprintf(`"processo_id":%q,"requerente_id":"r","municipio_ibge":"2111300"`, id)
	tests := []struct {
		name, sub, event, payload string
	}{
		{"not JSON", SubAnalista, EventProcessoSubmetido, `{"processo_id":`},
		{"an array", SubNotificacao, EventProcessoSubmetido, `[1]`},
		{"null", SubSICAR, EventProcessoRegular, `null`},
		{"no processo_id", SubAnalista, EventProcessoSubmetido, `{"requerente_id":"r","municipio_ibge":"2111300"}`},
		{"a number for processo_id", SubNotificacao, EventProcessoRegular, `{"processo_id":7,"requerente_id":"r","municipio_ibge":"2111300"}`},
		{"processo_id not a UUID", SubSICAR, EventProcessoRegular, `{"processo_id":"p1","requerente_id":"r","municipio_ibge":"2111300"}`},
		{"no requerente_id", SubNotificacao, EventProcessoSubmetido, fmt.Sprintf(`{"processo_id":%q,"municipio_ibge":"2111300"}`, id)},
		{"municipio_ibge of 6 digits", SubAnalista, EventProcessoSubmetido, fmt.Sprintf(`{"processo_id":%q,"requerente_id":"r","municipio_ibge":"211130"}`, id)},
		{"no documento_id", SubOCR, EventDocumentoAnexado, `{` + ref + `,"nome":"a"}`},
		{"documento_id not a UUID", SubOCR, EventDocumentoAnexado, `{` + ref + `,"documento_id":"d1"}`},
		{"no mensagem_id", SubMensagens, EventMensagemWeb, `{` + ref + `,"texto":"a"}`},
		{"a document for the notifier", SubNotificacao, EventDocumentoAnexado, `{` + ref + `,"documento_id":"` + doc + `"}`},
	}
	plugintest.Stores(t, Plugin()).Each(t, func(t *testing.T, s plugintest.Store) {
		f := newFixture(t, s)
		for _, tt := range tests {
			e := event.Event{ID: uuid.NewString(), Name: tt.event, OccurredAt: time.Now(), Payload: json.RawMessage(tt.payload)}
			if err := f.Deliver(tt.sub, e); !event.IsPermanent(err) {
				t.Errorf("%s: %s = %v, want a permanent error", tt.name, tt.sub, err)
			}
		}
	})

	down := errors.New("connection refused")
	p, err := build(defaultConfig(), handlers.Deps{Logger: testenv.Logger(), Tx: failing{down}})
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		SubAnalista: EventProcessoSubmetido, SubNotificacao: EventProcessoSubmetido, SubSICAR: EventProcessoRegular,
		SubOCR: EventDocumentoAnexado, SubMensagens: EventMensagemWeb,
	}
	body := fmt.Sprintf(`{%s,"documento_id":%q,"mensagem_id":%q}`, ref, doc, uuid.NewString())
	for sub, name := range good {
		e := event.Event{ID: uuid.NewString(), Name: name, OccurredAt: time.Now(), Payload: json.RawMessage(body)}
		if err := p.Handlers[sub](context.Background(), e); !errors.Is(err, down) || event.IsPermanent(err) {
			t.Errorf("%s with the database down = %v, want it retried", sub, err)
		}
	}
}

// failing is a transactor whose database is away.
type failing struct{ err error }

func (f failing) InTx(context.Context, func(context.Context, handlers.Tx) error) error { return f.err }
