package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/moenda/moenda/adapters/redact"
)

// maintenanceDB is the database every PostgreSQL server has, where a
// missing database can be created from.
const maintenanceDB = "postgres"

// EnsureDatabase creates the database postgres.url names when the server
// does not have it, so that a first start on a fresh server needs no
// createdb. A role that may not create databases gets an error with the
// command that does. An existing database is left alone; any other
// connection failure is left to Connect, which reports it.
func EnsureDatabase(ctx context.Context, cfg Config, logger *slog.Logger) error {
	cc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return fmt.Errorf("postgres: postgres.url: %w", redact.Error(err, cfg.URL))
	}
	cc.ConnectTimeout = cfg.ConnectTimeout
	name := cc.Database
	if name == "" { // the server's default: the role's name
		name = cc.User
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err == nil {
		_ = conn.Close(ctx)
		return nil
	}
	if !isCode(err, "3D000") { // invalid_catalog_name: the database does not exist
		return nil
	}

	createdb := createdbCommand(cc, name)
	mc := cc.Copy()
	mc.Database = maintenanceDB
	conn, err = pgx.ConnectConfig(ctx, mc)
	if err != nil {
		return unreachable{
			msg: fmt.Sprintf("postgres: database %q does not exist, and connecting to database %q to create it failed (%s); create it with: %s",
				name, maintenanceDB, oneLine(err), createdb),
			err: err,
		}
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	switch {
	case err == nil:
		logger.Info("postgres: created the database, which did not exist", "database", name, "host", cc.Host, "port", cc.Port)
		return nil
	case isCode(err, "42P04", "23505"): // another process created it meanwhile
		return nil
	case isCode(err, "42501"): // insufficient_privilege: neither superuser nor CREATEDB
		return fmt.Errorf("postgres: database %q does not exist and role %q may not create it; have a role that may (a superuser such as postgres) create it: %s",
			name, cc.User, createdb)
	default:
		return fmt.Errorf("postgres: create database %q: %w", name, err)
	}
}

// createdbCommand is the shell command that creates database name on cc's
// server, run as the postgres superuser and owned by cc's role, so that
// the role may create its tables in it. It holds no password.
func createdbCommand(cc *pgx.ConnConfig, name string) string {
	args := []string{"createdb", "-h", cc.Host, "-p", strconv.Itoa(int(cc.Port)), "-U", "postgres", "-O", cc.User, name}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote quotes s for a POSIX shell when it holds anything else than
// plain characters, so the command can be pasted as it is.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isCode reports whether err carries a PostgreSQL error with one of codes.
func isCode(err error, codes ...string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	for _, c := range codes {
		if pgErr.Code == c {
			return true
		}
	}
	return false
}

// oneLine joins pgx's error, which spans a line per address tried.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
