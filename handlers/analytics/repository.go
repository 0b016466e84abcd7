package analytics

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/handlers"
)

// repository stores facts inside one unit of work.
type repository interface {
	// Add stores each fact unless one with its event id is already stored.
	Add(ctx context.Context, facts ...fato) error
	// DeleteFrom removes the facts that occurred at or after from; the
	// zero time removes all.
	DeleteFrom(ctx context.Context, from time.Time) error
	// Count groups the facts by UTC day and type (and municipality), of
	// the UTC day dia only when it is not nil. Unsorted.
	Count(ctx context.Context, dia *time.Time) (Contagens, error)
}

// postgresRepository works inside the unit of work's pgx transaction.
type postgresRepository struct{ tx pgx.Tx }

func newPostgresRepository(tx pgx.Tx) repository { return postgresRepository{tx: tx} }

func (r postgresRepository) Add(ctx context.Context, facts ...fato) error {
	ids, eventos, em, municipios := make([]string, len(facts)), make([]string, len(facts)), make([]time.Time, len(facts)), make([]*string, len(facts))
	for i, f := range facts {
		ids[i], eventos[i], em[i], municipios[i] = f.EventID, f.Evento, f.OcorridoEm, f.MunicipioIBGE
	}
	_, err := r.tx.Exec(ctx, `
		INSERT INTO analytics_eventos (event_id, evento, ocorrido_em, municipio_ibge)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[])
		ON CONFLICT (event_id) DO NOTHING`, ids, eventos, em, municipios)
	if err != nil {
		return fmt.Errorf("analytics: insert %d events from %s: %w", len(facts), ids[0], err)
	}
	return nil
}

func (r postgresRepository) DeleteFrom(ctx context.Context, from time.Time) error {
	var err error
	if from.IsZero() {
		_, err = r.tx.Exec(ctx, `DELETE FROM analytics_eventos`)
	} else {
		_, err = r.tx.Exec(ctx, `DELETE FROM analytics_eventos WHERE ocorrido_em >= $1`, from)
	}
	if err != nil {
		return fmt.Errorf("analytics: delete from %s: %w", from.Format(time.RFC3339Nano), err)
	}
	return nil
}

// dayRange is the WHERE clause of Count: the half-open UTC day [$1, $2),
// or everything when $1 is NULL. A range, not a cast of the column, so the
// index on ocorrido_em serves it.
const dayRange = `($1::timestamptz IS NULL OR (ocorrido_em >= $1 AND ocorrido_em < $2))`

func (r postgresRepository) Count(ctx context.Context, dia *time.Time) (Contagens, error) {
	var start, end *time.Time
	if dia != nil {
		s, e := dayBounds(*dia)
		start, end = &s, &e
	}
	rows, err := r.tx.Query(ctx, `
		SELECT (ocorrido_em AT TIME ZONE 'UTC')::date, evento, count(*)
		FROM analytics_eventos WHERE `+dayRange+` GROUP BY 1, 2`, start, end)
	if err != nil {
		return Contagens{}, fmt.Errorf("analytics: count per day: %w", err)
	}
	porDia, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PorDia, error) {
		var c PorDia
		var d time.Time
		err := row.Scan(&d, &c.Evento, &c.Total)
		c.Dia = d.Format(dateLayout)
		return c, err
	})
	if err != nil {
		return Contagens{}, fmt.Errorf("analytics: count per day: %w", err)
	}
	rows, err = r.tx.Query(ctx, `
		SELECT (ocorrido_em AT TIME ZONE 'UTC')::date, evento, municipio_ibge, count(*)
		FROM analytics_eventos WHERE municipio_ibge IS NOT NULL AND `+dayRange+` GROUP BY 1, 2, 3`, start, end)
	if err != nil {
		return Contagens{}, fmt.Errorf("analytics: count per municipio: %w", err)
	}
	porMunicipio, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PorMunicipio, error) {
		var c PorMunicipio
		var d time.Time
		err := row.Scan(&d, &c.Evento, &c.MunicipioIBGE, &c.Total)
		c.Dia = d.Format(dateLayout)
		return c, err
	})
	if err != nil {
		return Contagens{}, fmt.Errorf("analytics: count per municipio: %w", err)
	}
	return Contagens{PorDia: porDia, PorMunicipio: porMunicipio}, nil
}

// dayBounds is the UTC day of t: its first instant and the next day's.
func dayBounds(t time.Time) (time.Time, time.Time) {
	y, m, d := t.UTC().Date()
	start := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 0, 1)
}

// memoryRepository is one unit of work's view of the facts kept in the
// process, by event id, staged per unit of work (handlers.Memory). Times
// are rounded to the microsecond, as PostgreSQL stores them, so both
// stores draw the same line at Rewind's from.
type memoryRepository struct{ *handlers.Unit[string, fato] }

func newMemoryRepository(u *handlers.Unit[string, fato]) repository { return memoryRepository{u} }

func (r memoryRepository) Add(_ context.Context, facts ...fato) error {
	for _, f := range facts {
		if _, ok := r.Get(f.EventID); ok {
			continue
		}
		f.OcorridoEm = f.OcorridoEm.Round(time.Microsecond)
		r.Put(f.EventID, f)
	}
	return nil
}

func (r memoryRepository) DeleteFrom(_ context.Context, from time.Time) error {
	from = from.Round(time.Microsecond)
	for id, f := range r.All() {
		if !f.OcorridoEm.Before(from) {
			r.Delete(id)
		}
	}
	return nil
}

func (r memoryRepository) Count(_ context.Context, dia *time.Time) (Contagens, error) {
	type diaKey struct{ dia, evento string }
	type municipioKey struct{ dia, evento, municipio string }
	porDia := map[diaKey]int64{}
	porMunicipio := map[municipioKey]int64{}
	for _, f := range r.All() {
		if dia != nil {
			start, end := dayBounds(*dia)
			if f.OcorridoEm.Before(start) || !f.OcorridoEm.Before(end) {
				continue
			}
		}
		d := f.OcorridoEm.UTC().Format(dateLayout)
		porDia[diaKey{d, f.Evento}]++
		if f.MunicipioIBGE != nil {
			porMunicipio[municipioKey{d, f.Evento, *f.MunicipioIBGE}]++
		}
	}
	var c Contagens
	for k, n := range porDia {
		c.PorDia = append(c.PorDia, PorDia{Dia: k.dia, Evento: k.evento, Total: n})
	}
	for k, n := range porMunicipio {
		c.PorMunicipio = append(c.PorMunicipio, PorMunicipio{Dia: k.dia, Evento: k.evento, MunicipioIBGE: k.municipio, Total: n})
	}
	return c, nil
}
