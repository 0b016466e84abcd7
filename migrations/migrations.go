// Package migrations holds the platform's versioned SQL schema, embedded in
// the binary, and applies it and the plugins' own with goose. A PostgreSQL
// session advisory lock makes two replicas starting at once apply each
// migration exactly once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Set is one history of migrations: the platform's, or a plugin's from its
// own folder. Each keeps its applied versions in a table of its own, so two
// plugins never collide on a version number.
type Set struct {
	// Name is the plugin's name; its versions are kept in
	// moenda_migrations_<name>.
	Name string
	// Files holds the set's goose files, 00001_name.sql and on.
	Files fs.FS
}

// Up applies every pending migration of the platform, then of each set in
// order, and returns how many it applied. The platform's own history skips
// version 2: it created the Tarefas table, which the tarefas plugin now
// migrates itself; do not reuse it.
func Up(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, sets ...Set) (int, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	n, err := up(ctx, db, logger, "platform", files)
	if err != nil {
		return n, err
	}
	for _, s := range sets {
		m, err := up(ctx, db, logger, s.Name, s.Files, goose.WithTableName(table(s.Name)))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// up applies one history under the session lock that keeps two replicas
// starting at once from applying a migration twice.
func up(ctx context.Context, db *sql.DB, logger *slog.Logger, name string, files fs.FS, opts ...goose.ProviderOption) (int, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, fmt.Errorf("migrations: lock: %w", err)
	}
	opts = append(opts, goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, opts...)
	if err != nil {
		return 0, fmt.Errorf("migrations of %s: %w", name, err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations of %s: apply: %w", name, err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "migration applied", "set", name, "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return len(results), nil
}

// table names the version table of a plugin's migrations.
func table(plugin string) string {
	return "moenda_migrations_" + strings.NewReplacer(".", "_", "-", "_").Replace(plugin)
}
