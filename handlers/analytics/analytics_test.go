package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/moenda/moenda/adapters/plugintest"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// fixture is the plugin built as the platform builds it, over one store.
type fixture struct{ *plugintest.Plugin }

// onEveryStore runs test on the plugin built over a fresh store of each
// kind the plugin runs on, as a subtest named after the store, so the same
// behaviour is checked against each.
func onEveryStore(t *testing.T, test func(t *testing.T, f fixture)) {
	for name, newStore := range plugintest.Stores(t, Plugin()) {
		t.Run(name, func(t *testing.T) { test(t, fixture{plugintest.Build(t, newStore(), plugintest.Defaults(Plugin()))}) })
	}
}

// handle delivers each of es to the handler as the router does.
func (f fixture) handle(es ...event.Event) {
	f.T.Helper()
	for _, e := range es {
		if err := f.Deliver("metricas", e); err != nil {
			f.T.Fatalf("handle %s: %v", e.ID, err)
		}
	}
}

// unit runs fn in one unit of work, as a delivery's handler runs.
func (f fixture) unit(fn func(ctx context.Context) error) error {
	return f.Tx.InTx(context.Background(), func(ctx context.Context, _ handlers.Tx) error { return fn(ctx) })
}

func (f fixture) rewind(from time.Time) {
	f.T.Helper()
	if err := f.Rewind(context.Background(), from); err != nil {
		f.T.Fatalf("Rewind(%s): %v", from, err)
	}
}

// counts reads the counts through the route.
func (f fixture) counts(query string) Contagens {
	f.T.Helper()
	var c Contagens
	f.Must(http.StatusOK, "GET", "/analytics/contagens"+query, "", &c)
	return c
}

func ev(name string, at time.Time, payload string) event.Event {
	return event.Event{ID: uuid.NewString(), Name: name, OccurredAt: at, Payload: json.RawMessage(payload)}
}

var (
	day1 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	day2 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	// 23:30 in São Paulo on the 30th is 02:30 UTC on December 1st.
	day3 = time.Date(2026, 11, 30, 23, 30, 0, 0, time.FixedZone("BRT", -3*3600))
)

// events is a day-by-day history: its counts are want.
func events() []event.Event {
	return []event.Event{
		ev("tarefa.concluida.v1", day1, `{"municipio_ibge":"3550308"}`),
		ev("tarefa.concluida.v2", day1.Add(time.Hour), `{"municipio_ibge":3550308}`),
		ev("tarefa.concluida.v1", day1.Add(2*time.Hour), `{"titulo":"x"}`),
		ev("car.reserved.v1", day1, `{"municipio_ibge":"3304557"}`),
		ev("tarefa.concluida.v1", day2, `{"municipio_ibge":"3304557"}`),
		ev("car.reserved.v1", day2, `[1,2]`),
		ev("car.reserved.v1", day2.Add(time.Hour), `{"municipio_ibge":null}`),
		ev("tarefa.concluida.v1", day3, `{"municipio_ibge":"3550308"}`),
	}
}

var want = Contagens{
	PorDia: []PorDia{
		{"2026-11-29", "car.reserved", 1},
		{"2026-11-29", "tarefa.concluida", 3},
		{"2026-11-30", "car.reserved", 2},
		{"2026-11-30", "tarefa.concluida", 1},
		{"2026-12-01", "tarefa.concluida", 1},
	},
	PorMunicipio: []PorMunicipio{
		{"2026-11-29", "car.reserved", "3304557", 1},
		{"2026-11-29", "tarefa.concluida", "3550308", 2},
		{"2026-11-30", "tarefa.concluida", "3304557", 1},
		{"2026-12-01", "tarefa.concluida", "3550308", 1},
	},
}

func TestSpec(t *testing.T) {
	def := Plugin()
	if def.Name != "analytics" || !def.Replayable || len(def.Subscriptions) != 1 ||
		def.Queue(def.Subscriptions[0]) != "analytics.metricas" || !reflect.DeepEqual(def.Subscriptions[0].Events, []string{"#"}) {
		t.Fatalf("spec = %+v", def.Spec)
	}
	plugintest.CheckDefinition(t, def, "00001_eventos.sql")
}

func TestCountsOnEveryStore(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		if got := f.counts(""); len(got.PorDia) != 0 || len(got.PorMunicipio) != 0 {
			t.Fatalf("counts before any event = %+v", got)
		}
		if rec := f.Do("GET", "/analytics/contagens", ""); !strings.Contains(rec.Body.String(), `{"por_dia":[],"por_municipio":[]}`) {
			t.Fatalf("empty answer = %s, want empty lists, not null", rec.Body)
		}
		es := events()
		f.handle(es...)
		if got := f.counts(""); !reflect.DeepEqual(got, want) {
			t.Fatalf("counts = %+v\nwant     %+v", got, want)
		}
		t.Run("the same event twice counts once", func(t *testing.T) {
			f.handle(es[0], es[4])
			again := es[1]
			again.Name, again.Payload = "car.reserved.v1", json.RawMessage(`{"municipio_ibge":"1"}`) // same id, other content: the first wins
			f.handle(again)
			if got := f.counts(""); !reflect.DeepEqual(got, want) {
				t.Fatalf("counts after redelivery = %+v\nwant     %+v", got, want)
			}
		})
		t.Run("one day", func(t *testing.T) {
			got := f.counts("?dia=2026-11-30")
			wantDay := Contagens{PorDia: want.PorDia[2:4], PorMunicipio: want.PorMunicipio[2:3]}
			if !reflect.DeepEqual(got, wantDay) {
				t.Fatalf("counts of 2026-11-30 = %+v\nwant     %+v", got, wantDay)
			}
			if got := f.counts("?dia=2020-01-01"); len(got.PorDia) != 0 || len(got.PorMunicipio) != 0 {
				t.Fatalf("counts of a day without events = %+v", got)
			}
		})
	})
}

// The batch form, which a replay uses, counts what the handler counts, and
// a batch holding one event twice, or events already counted, counts each
// once.
func TestBatchCountsWhatTheHandlerCounts(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		es := events()
		batch := append(append([]event.Event{}, es...), es[0], es[2])
		f.handle(es[1])
		err := f.unit(func(ctx context.Context) error { return f.Batches["metricas"](ctx, batch) })
		if err != nil {
			t.Fatal(err)
		}
		if got := f.counts(""); !reflect.DeepEqual(got, want) {
			t.Fatalf("counts after a batch = %+v\nwant     %+v", got, want)
		}
	})
}

// A handler's facts are part of its delivery's unit of work: when that
// unit rolls back, nothing is counted, and the redelivery counts once.
func TestFactCommitsWithItsDelivery(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		e := ev("tarefa.concluida.v1", day1, `{"municipio_ibge":"3550308"}`)
		failed := errors.New("the inbox claim failed")
		err := f.unit(func(ctx context.Context) error {
			if err := f.Handlers["metricas"](ctx, e); err != nil {
				return err
			}
			return failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("InTx = %v", err)
		}
		if got := f.counts(""); len(got.PorDia) != 0 {
			t.Fatalf("a rolled-back delivery counted: %+v", got)
		}
		f.handle(e)
		if got := f.counts(""); !reflect.DeepEqual(got.PorDia, []PorDia{{"2026-11-29", "tarefa.concluida", 1}}) {
			t.Fatalf("counts = %+v", got)
		}
	})
}

func TestRewindOnEveryStore(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		es := events()
		f.handle(es...)

		// From the instant of day2's first events: they go, with all after them.
		f.rewind(day2)
		got := f.counts("")
		wantBefore := Contagens{PorDia: want.PorDia[:2], PorMunicipio: want.PorMunicipio[:2]}
		if !reflect.DeepEqual(got, wantBefore) {
			t.Fatalf("counts after Rewind(%s) = %+v\nwant     %+v", day2, got, wantBefore)
		}
		// A replay reads every event again, from the start: the counts
		// are what they were, nothing twice.
		f.handle(es...)
		if got := f.counts(""); !reflect.DeepEqual(got, want) {
			t.Fatalf("counts after the replay = %+v\nwant     %+v", got, want)
		}

		f.rewind(time.Time{})
		if got := f.counts(""); len(got.PorDia) != 0 || len(got.PorMunicipio) != 0 {
			t.Fatalf("counts after Rewind(zero) = %+v", got)
		}
		f.handle(es...)
		if got := f.counts(""); !reflect.DeepEqual(got, want) {
			t.Fatalf("counts after the full replay = %+v\nwant     %+v", got, want)
		}
	})
}

// Within one unit of work, what was rewound is gone and what is added
// after the rewind stays (the memory store stages both).
func TestRewindThenAddInOneUnit(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		old, late := ev("a.b.v1", day1, `{}`), ev("a.b.v1", day2, `{}`)
		f.handle(old, late)
		err := f.unit(func(ctx context.Context) error {
			if err := f.Rewind(ctx, day1.Add(time.Minute)); err != nil {
				return err
			}
			return f.Handlers["metricas"](ctx, late)
		})
		if err != nil {
			t.Fatal(err)
		}
		wantCounts := []PorDia{{"2026-11-29", "a.b", 1}, {"2026-11-30", "a.b", 1}}
		if got := f.counts(""); !reflect.DeepEqual(got.PorDia, wantCounts) {
			t.Fatalf("counts = %+v, want %+v", got.PorDia, wantCounts)
		}
	})
}

func TestMunicipio(t *testing.T) {
	tests := []struct {
		payload string
		want    string // "": none
	}{
		{`{"municipio_ibge":"3550308"}`, "3550308"},
		{`{"municipio_ibge": 3550308 }`, "3550308"},
		{`{"municipio_ibge":-1.5e3}`, "-1.5e3"},
		{`{"a":{"municipio_ibge":"1"}}`, ""},
		{`{"municipio_ibge":null}`, ""},
		{`{"municipio_ibge":true}`, ""},
		{`{"municipio_ibge":{"id":1}}`, ""},
		{`{"municipio_ibge":["1"]}`, ""},
		{`{"municipio_ibge":""}`, ""},
		{`{"municipio_ibge":"a\u0000b"}`, ""},
		{`{"municipio\u005fibge":"42"}`, "42"}, // an escaped key is still the key
		{`["municipio_ibge"]`, ""},
		{`"3550308"`, ""},
		{`null`, ""},
		{`not json`, ""},
		{``, ""},
	}
	for _, tt := range tests {
		got := municipio(json.RawMessage(tt.payload))
		if (got == nil) != (tt.want == "") || got != nil && *got != tt.want {
			t.Errorf("municipio(%s) = %v, want %q", tt.payload, got, tt.want)
		}
	}
}

// Any payload is counted: analytics never rejects an event.
func TestOddPayloadsAreCounted(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		for _, p := range []string{`[1]`, `"x"`, `{"municipio_ibge":"a\u0000b"}`, `{"municipio_ibge":false}`} {
			f.handle(ev("x.y.v1", day1, p))
		}
		got := f.counts("")
		if !reflect.DeepEqual(got.PorDia, []PorDia{{"2026-11-29", "x.y", 4}}) || len(got.PorMunicipio) != 0 {
			t.Fatalf("counts = %+v", got)
		}
	})
}

func TestContagensRoute(t *testing.T) {
	onEveryStore(t, func(t *testing.T, f fixture) {
		f.handle(ev("tarefa.concluida.v1", day2, `{"municipio_ibge":"3550308"}`))
		tests := []struct {
			path string
			code int
			want string // the whole answer
		}{
			{"/analytics/contagens", http.StatusOK, `{"por_dia":[{"dia":"2026-11-30","evento":"tarefa.concluida","total":1}],"por_municipio":[{"dia":"2026-11-30","evento":"tarefa.concluida","municipio_ibge":"3550308","total":1}]}`},
			{"/analytics/contagens?dia=2026-11-30", http.StatusOK, `{"por_dia":[{"dia":"2026-11-30","evento":"tarefa.concluida","total":1}],"por_municipio":[{"dia":"2026-11-30","evento":"tarefa.concluida","municipio_ibge":"3550308","total":1}]}`},
			{"/analytics/contagens?dia=2026-11-29", http.StatusOK, `{"por_dia":[],"por_municipio":[]}`},
			{"/analytics/contagens?dia=30/11/2026", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro dia deve ser uma data AAAA-MM-DD, como 2026-11-30; recebido \"30/11/2026\""}`},
			{"/analytics/contagens?dia=2026-02-30", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro dia deve ser uma data AAAA-MM-DD, como 2026-11-30; recebido \"2026-02-30\""}`},
			{"/analytics/contagens?dia=", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro dia deve ser uma data AAAA-MM-DD, como 2026-11-30; recebido \"\""}`},
			{"/analytics/contagens?dia=2026-11-30T00:00:00Z", http.StatusBadRequest, `{"error":"requisição inválida: parâmetro dia deve ser uma data AAAA-MM-DD, como 2026-11-30; recebido \"2026-11-30T00:00:00Z\""}`},
			{"/analytics/contagens?dia=2026-11-30&dia=2026-11-29", http.StatusBadRequest, `{"error":"parameter dia is given more than once"}`},
			{"/analytics/contagens?data=2026-11-30", http.StatusBadRequest, `{"error":"unknown parameter \"data\" (accepted: dia)"}`},
			{"/analytics/contagens?dia=%zz", http.StatusBadRequest, `{"error":"the query string is malformed: invalid URL escape \"%zz\""}`},
		}
		for _, tt := range tests {
			rec := f.Do("GET", tt.path, "")
			if rec.Code != tt.code || strings.TrimSpace(rec.Body.String()) != tt.want {
				t.Errorf("GET %s = %d %s, want %d %s", tt.path, rec.Code, rec.Body, tt.code, tt.want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("GET %s Content-Type = %q", tt.path, ct)
			}
		}
	})
}
