package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Map is the topology as the Topology page draws it: the exchanges events
// are published to, and the queues bound to them, with who publishes and
// who subscribes. The platform builds it from the plugin registry and
// the declared topology, the catalog's sources.
type Map struct {
	Exchanges []MapExchange
	Queues    []MapQueue
}

// MapExchange is an exchange, the routing keys published to it, and the
// plugins that publish them.
type MapExchange struct {
	Name, Kind string
	Keys       []string
	Publishers []string
}

// MapQueue is a queue, what binds it, the plugin and handler that
// consume it (none for a queue a foreign service reads), and where its
// failures wait and end.
type MapQueue struct {
	Name            string
	Plugin, Handler string
	Bindings        []MapBinding
	RetryQueues     []string
	DeadLetterQueue string
}

// MapBinding binds a queue to an exchange with a routing-key pattern.
type MapBinding struct {
	Exchange, Key string
}

// The diagram's layout, in SVG user units: three columns (exchanges,
// queues, their retry and dead-letter queues), a row per queue.
const (
	colExchange = 10
	colQueue    = 380
	colFailure  = 780
	boxExchange = 260
	boxQueue    = 300
	boxFailure  = 320
	lineHeight  = 18
	rowGap      = 14
	topMargin   = 30
)

// diagram is the laid-out map the template draws.
type diagram struct {
	Width, Height int
	Exchanges     []placed
	Queues        []placed
	Failures      []placed
	Edges         []edge
}

// placed is a box at X, Y of W by H, with its lines of text.
type placed struct {
	X, Y, W, H int
	Title      string
	Lines      []string
	Class      string
}

// edge is a path from one box to another, labelled.
type edge struct {
	Path   string
	Label  string
	LX, LY int
	Class  string
}

// layout places m's boxes and edges: queues in rows, each exchange beside
// the first queue it feeds, each queue's retry and dead-letter queues to
// its right.
func layout(m Map) diagram {
	d := diagram{Width: colFailure + boxFailure + 10}
	y := topMargin
	queueAt := map[string]placed{}
	for _, q := range m.Queues {
		lines := []string{"not consumed here"}
		if q.Plugin != "" {
			lines = []string{"subscribes: " + q.Plugin + " / " + q.Handler}
		}
		box := placed{X: colQueue, Y: y, W: boxQueue, H: (1 + len(lines)) * lineHeight, Title: q.Name, Lines: lines, Class: "queue"}
		fy := y
		for _, rq := range q.RetryQueues {
			d.Failures = append(d.Failures, placed{X: colFailure, Y: fy, W: boxFailure, H: lineHeight + 4, Title: rq, Class: "retry"})
			d.Edges = append(d.Edges, edge{Path: curve(colQueue+boxQueue, y+box.H/2, colFailure, fy+lineHeight/2+2), Class: "to-retry"})
			fy += lineHeight + 8
		}
		if q.DeadLetterQueue != "" {
			d.Failures = append(d.Failures, placed{X: colFailure, Y: fy, W: boxFailure, H: lineHeight + 4, Title: q.DeadLetterQueue, Class: "dlq"})
			d.Edges = append(d.Edges, edge{Path: curve(colQueue+boxQueue, y+box.H/2, colFailure, fy+lineHeight/2+2), Class: "to-dlq"})
			fy += lineHeight + 8
		}
		d.Queues = append(d.Queues, box)
		queueAt[q.Name] = box
		y = max(y+box.H, fy) + rowGap
	}
	ey := topMargin
	exchangeAt := map[string]placed{}
	for _, x := range m.Exchanges {
		lines := []string{}
		if len(x.Publishers) > 0 {
			lines = append(lines, "published by: "+strings.Join(x.Publishers, ", "))
		}
		for _, k := range x.Keys {
			lines = append(lines, "key "+k)
		}
		box := placed{X: colExchange, Y: ey, W: boxExchange, H: (1 + len(lines)) * lineHeight, Title: x.Name + " (" + x.Kind + ")", Lines: lines, Class: "exchange"}
		d.Exchanges = append(d.Exchanges, box)
		exchangeAt[x.Name] = box
		ey += box.H + rowGap
	}
	for _, q := range m.Queues {
		qb := queueAt[q.Name]
		for i, b := range q.Bindings {
			xb, ok := exchangeAt[b.Exchange]
			if !ok {
				continue
			}
			ty := qb.Y + 6 + (i%4)*4
			d.Edges = append(d.Edges, edge{Path: curve(colExchange+boxExchange, xb.Y+lineHeight/2+2, colQueue, ty), Label: b.Key,
				LX: colQueue - 8, LY: ty - 3, Class: "binding"})
		}
	}
	d.Height = max(y, ey) + topMargin
	return d
}

// curve is an SVG path from (x1, y1) to (x2, y2), a cubic leaving and
// arriving horizontally.
func curve(x1, y1, x2, y2 int) string {
	mid := (x1 + x2) / 2
	return fmt.Sprintf("M%d %d C%d %d, %d %d, %d %d", x1, y1, mid, y1, mid, y2, x2, y2)
}

// topologyPage draws the topology as an SVG diagram, made here, and
// lists it as a table too (the diagram's text for screen readers).
func (c *Console) topologyPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "topology", "Topology", map[string]any{"Map": c.topology, "Diagram": layout(c.topology),
		"AsyncAPI": root(r) + "../v1/asyncapi.json"})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
