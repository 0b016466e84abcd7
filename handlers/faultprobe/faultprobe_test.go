package faultprobe

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/migrations"
)

// A database the probe migrated before its tables were renamed keeps its
// rows: the plugin's name keys its history, so only the renaming
// migration runs.
func TestMigrationsRenameInPlace(t *testing.T) {
	ctx := context.Background()
	db := testenv.EmptyPostgres(t)
	all := Plugin().Migrations
	before := fstest.MapFS{}
	for _, name := range []string{"00001_faultprobe.sql", "00002_counter_shards.sql"} {
		b, err := fs.ReadFile(all, name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = &fstest.MapFile{Data: b}
	}
	if _, err := migrations.Up(ctx, db.Pool, testenv.Logger(), migrations.Set{Name: Name, Files: before}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO faultprobe_efeitos (event_id, writer, seq, aggregate, nota) VALUES ('e1', 1, 2, '', 'kept')`); err != nil {
		t.Fatal(err)
	}
	n, err := migrations.Up(ctx, db.Pool, testenv.Logger(), migrations.Set{Name: Name, Files: all})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("applied %d migrations over the earlier history, want only the renaming one", n)
	}
	var note string
	var shards int
	if err := db.Pool.QueryRow(ctx, `SELECT note, (SELECT count(*) FROM faultprobe_counter) FROM faultprobe_effects WHERE event_id = 'e1'`).Scan(&note, &shards); err != nil {
		t.Fatal(err)
	}
	if note != "kept" || shards != counterShards {
		t.Fatalf("note %q, %d counter shards; want the row kept and %d shards", note, shards, counterShards)
	}
}
