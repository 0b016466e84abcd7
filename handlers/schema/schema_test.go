package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type item struct {
	ProdutoID  int64 `json:"produtoId"`
	Quantidade uint  `json:"quantidade"`
}

type base struct {
	ID   string `json:"id"`
	Nome string `json:"nome"`
}

type payload struct {
	base
	Nome     string            `json:"nome_completo"`
	Itens    []item            `json:"itens"`
	Quando   time.Time         `json:"quando"`
	Talvez   *string           `json:"talvez,omitempty"`
	Nulo     *int64            `json:"nulo"`
	Dados    json.RawMessage   `json:"dados,omitempty"`
	Rotulos  map[string]string `json:"rotulos,omitempty"`
	Contado  int64             `json:"contado,string"`
	Par      [2]float64        `json:"par"`
	Bytes    []byte            `json:"bytes,omitzero"`
	Ignorado string            `json:"-"`
	privado  string
}

type loop struct {
	Next *loop `json:"next"`
}

func TestFor(t *testing.T) {
	_ = payload{privado: "left out: encoding/json writes exported fields only"}
	for _, tt := range []struct {
		name string
		t    reflect.Type
		want string // the schema as JSON
		err  string
	}{
		{"string", reflect.TypeFor[string](), `{"type":"string"}`, ""},
		{"unsigned", reflect.TypeFor[uint8](), `{"type":"integer","minimum":0}`, ""},
		{"time", reflect.TypeFor[time.Time](), `{"type":"string","format":"date-time"}`, ""},
		{"pointer", reflect.TypeFor[*bool](), `{"type":["boolean","null"]}`, ""},
		{"raw", reflect.TypeFor[json.RawMessage](), `{}`, ""},
		{"struct", reflect.TypeFor[item](), `{"type":"object","properties":{"produtoId":{"type":"integer"},"quantidade":{"type":"integer","minimum":0}},"required":["produtoId","quantidade"]}`, ""},
		{"everything", reflect.TypeFor[payload](), `{"type":"object","properties":{` +
			`"bytes":{"type":"string","contentEncoding":"base64"},` +
			`"contado":{"type":"string"},` +
			`"dados":{},` +
			`"id":{"type":"string"},` +
			`"itens":{"type":"array","items":{"type":"object","properties":{"produtoId":{"type":"integer"},"quantidade":{"type":"integer","minimum":0}},"required":["produtoId","quantidade"]}},` +
			`"nome":{"type":"string"},` +
			`"nome_completo":{"type":"string"},` +
			`"nulo":{"type":["integer","null"]},` +
			`"par":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2},` +
			`"quando":{"type":"string","format":"date-time"},` +
			`"rotulos":{"type":"object","additionalProperties":{"type":"string"}},` +
			`"talvez":{"type":["string","null"]}},` +
			`"required":["nome_completo","itens","quando","nulo","contado","par","id","nome"]}`, ""},
		{"recursive", reflect.TypeFor[loop](), "", "refers to itself"},
		{"channel", reflect.TypeFor[struct{ C chan int }](), "", "field C: schema: encoding/json cannot write a chan int"},
		{"map keyed by floats", reflect.TypeFor[map[float64]int](), "", "cannot write a map keyed by float64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := For(tt.t)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("For = %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("schema\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

type order struct {
	PedidoID int64  `json:"pedidoId"`
	Itens    []item `json:"itens"`
	Total    struct {
		Valor string `json:"valor"`
	} `json:"total"`
	Em    time.Time      `json:"em"`
	Nota  *string        `json:"nota,omitempty"`
	Extra map[string]int `json:"extra,omitempty"`
}

func TestCheck(t *testing.T) {
	s, err := For(reflect.TypeFor[order]())
	if err != nil {
		t.Fatal(err)
	}
	v, err := Compile("order.v1", s)
	if err != nil {
		t.Fatal(err)
	}
	const ok = `"pedidoId":1,"itens":[{"produtoId":2,"quantidade":3}],"total":{"valor":"1.00"},"em":"2026-01-15T10:30:00Z"`
	for _, tt := range []struct {
		name, payload, want string // want: the mismatch, "" when it matches
	}{
		{"a match", `{` + ok + `}`, ""},
		{"an unknown field", `{` + ok + `,"novo":true}`, ""},
		{"an unknown nested field", `{"pedidoId":1,"itens":[{"produtoId":2,"quantidade":3,"cor":"azul"}],"total":{"valor":"1.00","moeda":"BRL"},"em":"2026-01-15T10:30:00Z"}`, ""},
		{"an optional field null", `{` + ok + `,"nota":null}`, ""},
		{"a missing field", `{"itens":[],"total":{"valor":"1"},"em":"2026-01-15T10:30:00Z"}`, "payload.pedidoId is missing"},
		{"the first missing field by name", `{"itens":[]}`, "payload.em is missing"},
		{"a wrong type", `{` + strings.Replace(ok, `"pedidoId":1`, `"pedidoId":"1"`, 1) + `}`, "payload.pedidoId must be integer, got string"},
		{"a fraction for an integer", `{` + strings.Replace(ok, `"pedidoId":1`, `"pedidoId":1.5`, 1) + `}`, "payload.pedidoId must be integer, got number"},
		{"deep in a list", `{` + strings.Replace(ok, `"quantidade":3`, `"quantidade":-3`, 1) + `}`, "payload.itens[0].quantidade"},
		{"a nested object", `{` + strings.Replace(ok, `"valor":"1.00"`, `"valor":1`, 1) + `}`, "payload.total.valor must be string, got number"},
		{"a bad time", `{` + strings.Replace(ok, `2026-01-15T10:30:00Z`, `2026-01-15`, 1) + `}`, "payload.em"},
		{"a map's value", `{` + ok + `,"extra":{"a b":"x"}}`, `payload.extra["a b"] must be integer, got string`},
		{"not an object", `[1]`, "payload must be object, got array"},
		{"the first of two by path", `{` + strings.Replace(strings.Replace(ok, `"pedidoId":1`, `"pedidoId":"x"`, 1), `"valor":"1.00"`, `"valor":1`, 1) + `}`, "payload.pedidoId must be integer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := v.Check([]byte(tt.payload))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want a match", err)
				}
				return
			}
			var m *Mismatch
			if !errors.As(err, &m) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want %q", err, tt.want)
			}
		})
	}
}

// Checking one payload many times gives the same answer: the first path
// is chosen, not whatever the validator met first.
func TestCheckIsStable(t *testing.T) {
	s, _ := For(reflect.TypeFor[order]())
	v, err := Compile("order.v1", s)
	if err != nil {
		t.Fatal(err)
	}
	first := v.Check([]byte(`{"pedidoId":"x","itens":"y","total":1,"em":2}`)).Error()
	for range 50 {
		if got := v.Check([]byte(`{"pedidoId":"x","itens":"y","total":1,"em":2}`)).Error(); got != first {
			t.Fatalf("Check = %q, then %q", first, got)
		}
	}
	if !strings.HasPrefix(first, "payload.em ") {
		t.Fatalf("Check = %q, want payload.em first", first)
	}
}
