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

// The database's own state, not the work's, makes a unit of work
// unavailable: it waits without spending an attempt, and HTTP answers 503.
// A disk full and memory exhausted cannot be made safely on a shared
// server, so they are checked here with the error pgx returns; read-only
// is made for real in TestAReadOnlyDatabaseIsUnavailable.
func TestClassifyTheDatabasesStateAsUnavailable(t *testing.T) {
	tests := []struct {
		code        string
		unavailable bool
	}{
		{"25006", true},  // read_only_sql_transaction: a failover whose address has not moved yet
		{"53100", true},  // disk_full
		{"53200", true},  // out_of_memory
		{"53300", true},  // too_many_connections
		{"57P01", true},  // admin_shutdown
		{"23505", false}, // unique_violation: the work's own fault
		{"22P02", false}, // invalid_text_representation
		{"25001", false}, // active_sql_transaction: the work's own fault
	}
	for _, tt := range tests {
		err := fmt.Errorf("credito: record the analysis: %w", &pgconn.PgError{Severity: "ERROR", Code: tt.code, Message: "from the server"})
		got := classify(err, false)
		if errors.Is(got, handlers.ErrUnavailable) != tt.unavailable {
			t.Errorf("SQLSTATE %s: unavailable %v, want %v (%v)", tt.code, errors.Is(got, handlers.ErrUnavailable), tt.unavailable, got)
		}
		var pgErr *pgconn.PgError
		if !errors.As(got, &pgErr) || pgErr.Code != tt.code {
			t.Errorf("SQLSTATE %s: the server's error is lost: %v", tt.code, got)
		}
	}
}
