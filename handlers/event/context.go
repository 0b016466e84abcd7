package event

import "context"

type ctxKey int

const (
	correlationKey ctxKey = iota
	causationKey
)

// WithCorrelation returns ctx carrying the correlation id that events
// published under it inherit.
func WithCorrelation(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey, id)
}

// WithCausation returns ctx carrying the id of the event or request that
// caused the events published under it.
func WithCausation(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, causationKey, id)
}

// CorrelationID returns the correlation id carried by ctx, or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey).(string)
	return id
}

// CausationID returns the causation id carried by ctx, or "".
func CausationID(ctx context.Context) string {
	id, _ := ctx.Value(causationKey).(string)
	return id
}

// Stamp fills the correlation and causation ids of e from ctx where e has
// none, so application code never threads them by hand.
func Stamp(ctx context.Context, e Event) Event {
	if e.CorrelationID == "" {
		e.CorrelationID = CorrelationID(ctx)
	}
	if e.CorrelationID == "" {
		e.CorrelationID = e.ID
	}
	if e.CausationID == "" {
		e.CausationID = CausationID(ctx)
	}
	return e
}
