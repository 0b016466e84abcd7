package console

import (
	"strings"
	"testing"
)

// The diagram places every exchange, queue, retry queue and dead-letter
// queue once, in its column, with no two boxes of a column overlapping,
// and an edge for each binding and each failure path.
func TestLayoutPlacesEveryQueue(t *testing.T) {
	m := Map{
		Exchanges: []MapExchange{{Name: "car.events", Kind: "topic", Keys: []string{"documento.anexado"}, Publishers: []string{"car"}}, {Name: "pedidos", Kind: "topic"}},
		Queues: []MapQueue{
			{Name: "documentos.ocr", Plugin: "car", Handler: "ocr", Bindings: []MapBinding{{"car.events", "documento.*"}},
				RetryQueues: []string{"documentos.ocr.retry.1s", "documentos.ocr.retry.5s", "documentos.ocr.retry.25s"}, DeadLetterQueue: "car.dlq.documentos.ocr"},
			{Name: "analytics.metricas", Plugin: "analytics", Handler: "metricas", Bindings: []MapBinding{{"car.events", "#"}, {"pedidos", "#"}}},
			{Name: "foreign.queue", Bindings: []MapBinding{{"pedidos", "pedido.criado"}, {"unknown", "x"}}},
		},
	}
	d := layout(m)
	if len(d.Exchanges) != 2 || len(d.Queues) != 3 || len(d.Failures) != 4 {
		t.Fatalf("placed %d exchanges, %d queues, %d failure queues", len(d.Exchanges), len(d.Queues), len(d.Failures))
	}
	bindings, failurePaths := 0, 0
	for _, e := range d.Edges {
		switch e.Class {
		case "binding":
			bindings++
		case "to-retry", "to-dlq":
			failurePaths++
		}
		if !strings.HasPrefix(e.Path, "M") {
			t.Errorf("edge path %q", e.Path)
		}
	}
	if bindings != 4 || failurePaths != 4 { // the binding to an exchange not drawn is left out
		t.Errorf("%d binding edges and %d failure paths, want 4 and 4", bindings, failurePaths)
	}
	for _, col := range [][]placed{d.Exchanges, d.Queues, d.Failures} {
		for i := 1; i < len(col); i++ {
			if col[i].Y < col[i-1].Y+col[i-1].H {
				t.Errorf("%s overlaps %s", col[i].Title, col[i-1].Title)
			}
		}
	}
	last := d.Failures[len(d.Failures)-1]
	if d.Height < last.Y+last.H || d.Width < last.X+last.W {
		t.Errorf("the diagram (%dx%d) cuts %s off", d.Width, d.Height, last.Title)
	}
	if d.Queues[2].Lines[0] != "not consumed here" {
		t.Errorf("a queue no plugin consumes: %v", d.Queues[2].Lines)
	}
}
