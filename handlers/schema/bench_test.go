package schema

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// benchOrder is a payload of an order's size: a few fields and a list of
// items, as POST /v1/events receives them.
type benchOrder struct {
	ID       int       `json:"pedidoId"`
	Customer string    `json:"clienteId"`
	At       time.Time `json:"criadoEm"`
	Items    []struct {
		Product  int     `json:"produtoId"`
		Quantity int     `json:"quantidade"`
		Price    float64 `json:"preco"`
	} `json:"itens"`
}

var orderPayload = []byte(`{"pedidoId":1042,"clienteId":"c-77","criadoEm":"2026-12-03T06:00:00Z",` +
	`"itens":[{"produtoId":1,"quantidade":2,"preco":10.5},{"produtoId":7,"quantidade":1,"preco":99.9},{"produtoId":9,"quantidade":3,"preco":1.25}]}`)

// BenchmarkCheck is the cost POST /v1/events adds for a payload whose
// type is declared; BenchmarkDecode, decoding the same payload into its
// Go type, is the yardstick: what a handler pays to read it.
func BenchmarkCheck(b *testing.B) {
	s, err := For(reflect.TypeFor[benchOrder]())
	if err != nil {
		b.Fatal(err)
	}
	v, err := Compile("order", s)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Check(orderPayload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var o benchOrder
		if err := json.Unmarshal(orderPayload, &o); err != nil {
			b.Fatal(err)
		}
	}
}
