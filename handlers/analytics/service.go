package analytics

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
)

// dateLayout is how a day is written on the wire: 2026-11-30.
const dateLayout = time.DateOnly

// Contagens is the answer of GET /analytics/contagens: events per UTC day
// and type, and per municipality for the events that name one, sorted by
// dia, evento, municipio_ibge.
type Contagens struct {
	PorDia       []PorDia       `json:"por_dia"`
	PorMunicipio []PorMunicipio `json:"por_municipio"`
}

// PorDia counts the events of one type on one UTC day.
type PorDia struct {
	Dia    string `json:"dia"`
	Evento string `json:"evento"`
	Total  int64  `json:"total"`
}

// PorMunicipio counts the events of one type on one UTC day that name one
// municipio_ibge.
type PorMunicipio struct {
	Dia           string `json:"dia"`
	Evento        string `json:"evento"`
	MunicipioIBGE string `json:"municipio_ibge"`
	Total         int64  `json:"total"`
}

// ErrInvalida wraps a request with a bad parameter. Its messages are in
// Portuguese and name parameters as they are on the wire.
var ErrInvalida = handlers.NewError(handlers.ErrInvalid, "requisição inválida")

// fato is what the plugin keeps of one event.
type fato struct {
	EventID       string
	Evento        string
	OcorridoEm    time.Time
	MunicipioIBGE *string
}

// service holds the plugin's work; each piece runs in one unit of work, a
// handler's joining its delivery's, so a fact commits with the inbox claim.
type service struct {
	handlers.Store[repository]
}

// handle records the event as a fact. It never rejects an event: one
// whose payload names no usable municipio_ibge is counted without one.
// Database errors are returned, so the platform retries.
func (s *service) handle(ctx context.Context, e event.Event) error {
	return s.handleBatch(ctx, []event.Event{e})
}

// handleBatch records events as facts in one statement: what a replay
// uses.
func (s *service) handleBatch(ctx context.Context, events []event.Event) error {
	facts := make([]fato, len(events))
	for i, e := range events {
		facts[i] = fato{EventID: e.ID, Evento: e.RoutingKey(), OcorridoEm: e.OccurredAt, MunicipioIBGE: municipio(e.Payload)}
	}
	return s.Write(ctx, func(ctx context.Context, repo repository) error {
		return repo.Add(ctx, facts...)
	})
}

// rewind forgets the facts of events that occurred at or after from (the
// zero time: all): `moenda replay` reads them again, and they must count
// once, as if never seen.
func (s *service) rewind(ctx context.Context, from time.Time) error {
	return s.Write(ctx, func(ctx context.Context, repo repository) error {
		return repo.DeleteFrom(ctx, from)
	})
}

// contagens counts the facts, of the UTC day dia only when it is not nil.
func (s *service) contagens(ctx context.Context, dia *time.Time) (Contagens, error) {
	c, err := handlers.Read(ctx, s.Store, func(ctx context.Context, repo repository) (Contagens, error) {
		return repo.Count(ctx, dia)
	})
	if err != nil {
		return Contagens{}, err
	}
	// Sorted here, byte-wise, whatever the store and its collation.
	slices.SortFunc(c.PorDia, func(a, b PorDia) int {
		return cmp.Or(strings.Compare(a.Dia, b.Dia), strings.Compare(a.Evento, b.Evento))
	})
	slices.SortFunc(c.PorMunicipio, func(a, b PorMunicipio) int {
		return cmp.Or(strings.Compare(a.Dia, b.Dia), strings.Compare(a.Evento, b.Evento), strings.Compare(a.MunicipioIBGE, b.MunicipioIBGE))
	})
	c.PorDia, c.PorMunicipio = handlers.List(c.PorDia), handlers.List(c.PorMunicipio)
	return c, nil
}

// municipio reads a top-level municipio_ibge of the payload: a string, or
// a number kept as written. Anything else (no object, no field, null,
// another type, an empty string or one PostgreSQL cannot store) is nil.
func municipio(payload json.RawMessage) *string {
	if !bytes.Contains(payload, []byte("municipio_ibge")) && bytes.IndexByte(payload, '\\') < 0 {
		return nil // most events, with no need to decode (3 us saved an event)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(payload, &obj) != nil {
		return nil
	}
	raw := bytes.TrimSpace(obj["municipio_ibge"])
	if len(raw) == 0 {
		return nil
	}
	switch {
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" || strings.ContainsRune(s, 0) {
			return nil
		}
		return &s
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		s := string(raw) // already validated as a JSON number by the decode above
		return &s
	default:
		return nil
	}
}
