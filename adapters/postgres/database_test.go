package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/moenda/moenda/adapters/postgres"
	"github.com/moenda/moenda/adapters/testenv"
)

// missingDatabase is testenv.MissingDatabase, its URL as user when not nil.
func missingDatabase(t *testing.T, user *url.Userinfo) (admin, name, dbURL string) {
	t.Helper()
	admin, name, dbURL = testenv.MissingDatabase(t)
	if user != nil {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = user
		dbURL = u.String()
	}
	return admin, name, dbURL
}

// onAdmin runs fn on a connection of its own to admin, within 30 s,
// failing the test on fn's error.
func onAdmin(t *testing.T, admin string, fn func(ctx context.Context, conn *pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := fn(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

func adminExec(t *testing.T, admin, sql string) {
	t.Helper()
	onAdmin(t, admin, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	})
}

func databaseExists(t *testing.T, admin, name string) bool {
	t.Helper()
	var exists bool
	onAdmin(t, admin, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	})
	return exists
}

// ensure runs EnsureDatabase on dbURL and returns what it logged.
func ensure(t *testing.T, dbURL string) (string, error) {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	err := postgres.EnsureDatabase(context.Background(), postgres.Config{URL: dbURL, ConnectTimeout: 5 * time.Second}, logger)
	return logs.String(), err
}

func TestEnsureDatabaseCreatesAMissingDatabase(t *testing.T) {
	admin, name, dbURL := missingDatabase(t, nil)
	logs, err := ensure(t, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if !databaseExists(t, admin, name) {
		t.Fatalf("database %s was not created", name)
	}
	if strings.Count(logs, "\n") != 1 || !strings.Contains(logs, "level=INFO") ||
		!strings.Contains(logs, `msg="postgres: created the database, which did not exist"`) || !strings.Contains(logs, fmt.Sprintf("database=%q", name)) {
		t.Fatalf("want one INFO line naming the database, got:\n%s", logs)
	}
	// The database it made works: a pool connects to it.
	pool, err := postgres.Connect(context.Background(), postgres.Config{URL: dbURL, MaxConns: 1, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
}

func TestEnsureDatabaseLeavesAnExistingDatabaseAlone(t *testing.T) {
	db := testenv.EmptyPostgres(t)
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE kept (id int)"); err != nil {
		t.Fatal(err)
	}
	logs, err := ensure(t, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if logs != "" {
		t.Errorf("logged for an existing database:\n%s", logs)
	}
	if _, err := db.Pool.Exec(context.Background(), "SELECT * FROM kept"); err != nil {
		t.Errorf("the existing database changed: %v", err)
	}
}

func TestEnsureDatabaseTellsARoleWithoutCreatedbWhatToRun(t *testing.T) {
	role := "moenda_t_" + strings.ReplaceAll(testenv.Name("r"), "-", "")
	admin, name, dbURL := missingDatabase(t, url.UserPassword(role, "s3cret"))
	adminExec(t, admin, "CREATE ROLE "+role+" LOGIN NOCREATEDB")
	t.Cleanup(func() { adminExec(t, admin, "DROP ROLE IF EXISTS "+role) })
	cc, err := pgx.ParseConfig(admin)
	if err != nil {
		t.Fatal(err)
	}

	logs, err := ensure(t, dbURL)
	if err == nil {
		t.Fatal("no error for a role that may not create databases")
	}
	msg := err.Error()
	want := fmt.Sprintf(`postgres: database %q does not exist and role %q may not create it; have a role that may (a superuser such as postgres) create it: createdb -h %s -p %d -U postgres -O %s '%s'`,
		name, role, cc.Host, cc.Port, role, name)
	if msg != want {
		t.Errorf("error\n%s\nwant\n%s", msg, want)
	}
	if strings.Contains(msg, "s3cret") || strings.Contains(msg, "\n") {
		t.Errorf("want one line without the password: %q", msg)
	}
	if logs != "" {
		t.Errorf("logged:\n%s", logs)
	}
	if databaseExists(t, admin, name) {
		t.Errorf("database %s exists", name)
	}
}
