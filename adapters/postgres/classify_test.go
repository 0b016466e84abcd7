package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/moenda/moenda/handlers"
)

// A statement on a connection the server ended mid-transaction fails with
// pgx's "conn closed": the database went away, so the caller answers 503
// and a consumer retries without spending an attempt.
func TestClassifyAClosedConnectionAsUnavailable(t *testing.T) {
	closed := fmt.Errorf("outbox: write 1 events: %w", pgconn.ErrConnClosed)
	if err := classify(closed, true); !errors.Is(err, handlers.ErrUnavailable) {
		t.Fatalf("on a lost connection: %v", err)
	}
	if err := classify(errors.New("a handler's own failure"), true); errors.Is(err, handlers.ErrUnavailable) {
		t.Fatalf("any error after a lost connection: %v", err)
	}
	if err := classify(closed, false); errors.Is(err, handlers.ErrUnavailable) {
		t.Fatalf("with the connection still open: %v", err)
	}
}
