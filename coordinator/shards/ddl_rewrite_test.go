package shards

import (
	"context"
	"errors"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// rewriteSnap has a distributed table public.items (by id, two shards) and
// a reference table app.kinds.
func rewriteSnap() *metadata.Snapshot {
	return &metadata.Snapshot{
		Nodes: []metadata.Node{{ID: 1, Host: "h1", Port: 1, Active: true}, {ID: 2, Host: "h2", Port: 2, Active: true}},
		Tables: map[string]*metadata.Table{
			"public.items": {Name: "public.items", Kind: metadata.Distributed, DistColumn: "id", DistType: "int8", ShardCount: 2},
			"app.kinds":    {Name: "app.kinds", Kind: metadata.Reference},
			"public.Mixed": {Name: "public.Mixed", Kind: metadata.Distributed, DistColumn: "Key", DistType: "text", ShardCount: 1,
				ShardSchema: metadata.ShardsSchema},
		},
		Shards: map[string][]metadata.Shard{
			"public.items": {{ID: 102008, Table: "public.items", MinHash: -1 << 31, MaxHash: -1, Nodes: []int32{1}},
				{ID: 102009, Table: "public.items", MinHash: 0, MaxHash: 1<<31 - 1, Nodes: []int32{2}}},
			"app.kinds":    {{ID: 102010, Table: "app.kinds", Nodes: []int32{1, 2}}},
			"public.Mixed": {{ID: 102011, Table: "public.Mixed", MinHash: -1 << 31, MaxHash: 1<<31 - 1, Nodes: []int32{1}}},
		},
	}
}

// TestDDLRewrite checks the statement each shard gets: the shard's name,
// suffixed index and constraint names, CONCURRENTLY dropped, one shard per
// statement for statements that name several tables.
func TestDDLRewrite(t *testing.T) {
	long := strings.Repeat("x", 60)
	for _, tc := range []struct{ sql, table, shell, want string }{
		{"CREATE INDEX items_name_idx ON items (name)", "public.items", "",
			"CREATE INDEX items_name_idx_102008 ON public.items_102008 USING btree (name)"},
		{"create unique index concurrently if not exists k on app.kinds using hash (lower(label)) where id > 0", "app.kinds",
			"CREATE UNIQUE INDEX IF NOT EXISTS k ON app.kinds USING hash (lower(label)) WHERE id > 0",
			"CREATE UNIQUE INDEX IF NOT EXISTS k_102010 ON app.kinds_102010 USING hash (lower(label)) WHERE id > 0"},
		{"CREATE INDEX ON items (qty)", "public.items", "", "CREATE INDEX ON public.items_102008 USING btree (qty)"},
		{"CREATE INDEX " + long + " ON items (qty)", "public.items", "",
			"CREATE INDEX " + suffixed(long, "_102008") + " ON public.items_102008 USING btree (qty)"},
		{`ALTER TABLE ONLY items ADD COLUMN note text DEFAULT 'x' CONSTRAINT note_short CHECK (length(note) < 10),
			ADD CONSTRAINT items_key UNIQUE (id, name), DROP CONSTRAINT IF EXISTS gone CASCADE, VALIDATE CONSTRAINT v,
			ALTER COLUMN qty TYPE bigint USING qty::bigint, ALTER qty SET DEFAULT 0, ALTER qty DROP DEFAULT,
			ALTER qty SET NOT NULL, ALTER qty DROP NOT NULL, DROP COLUMN old, ADD CHECK (qty > 0)`, "public.items", "",
			"ALTER TABLE ONLY public.items_102008 ADD COLUMN note text DEFAULT 'x' CONSTRAINT note_short_102008 CHECK (length(note) < 10), " +
				"ADD CONSTRAINT items_key_102008 UNIQUE (id, name), DROP CONSTRAINT IF EXISTS gone_102008 CASCADE, " +
				"VALIDATE CONSTRAINT v_102008, ALTER COLUMN qty TYPE bigint USING qty::bigint, ALTER COLUMN qty SET DEFAULT 0, " +
				"ALTER COLUMN qty DROP DEFAULT, ALTER COLUMN qty SET NOT NULL, ALTER COLUMN qty DROP NOT NULL, DROP old, ADD CHECK (qty > 0)"},
		{`CREATE UNIQUE INDEX "Idx" ON "Mixed" ("Key", "Other") INCLUDE (x) NULLS NOT DISTINCT WITH (fillfactor = 70)`, "public.Mixed", "",
			`CREATE UNIQUE INDEX "Idx_102011" ON pgfleet_shards."Mixed_102011" USING btree ("Key", "Other") INCLUDE (x) NULLS NOT DISTINCT WITH (fillfactor=70)`},
		{`ALTER TABLE "Mixed" ADD COLUMN IF NOT EXISTS "New" int, DROP COLUMN IF EXISTS "Old", ADD CONSTRAINT "Pk" PRIMARY KEY ("Key")`, "public.Mixed", "",
			`ALTER TABLE pgfleet_shards."Mixed_102011" ADD COLUMN IF NOT EXISTS "New" int, DROP IF EXISTS "Old", ADD CONSTRAINT "Pk_102011" PRIMARY KEY ("Key")`},
		{`DROP TABLE "Mixed"`, "public.Mixed", "", `DROP TABLE pgfleet_shards."Mixed_102011"`},
		{"ALTER TABLE items RENAME COLUMN qty TO amount", "public.items", "",
			"ALTER TABLE public.items_102008 RENAME COLUMN qty TO amount"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (kind) REFERENCES app.kinds (id) ON DELETE CASCADE", "public.items", "",
			"ALTER TABLE public.items_102008 ADD CONSTRAINT f_102008 FOREIGN KEY (kind) REFERENCES app.kinds_102010 (id) ON DELETE CASCADE"},
		{"ALTER TABLE items ADD COLUMN k int CONSTRAINT kf REFERENCES app.kinds", "public.items", "",
			"ALTER TABLE public.items_102008 ADD COLUMN k int CONSTRAINT kf_102008 REFERENCES app.kinds_102010"},
		{"ALTER TABLE items ADD CONSTRAINT s FOREIGN KEY (id, parent) REFERENCES items (id, pid)", "public.items", "",
			"ALTER TABLE public.items_102008 ADD CONSTRAINT s_102008 FOREIGN KEY (id, parent) REFERENCES public.items_102008 (id, pid)"},
		{"ALTER TABLE items ALTER CONSTRAINT f DEFERRABLE INITIALLY DEFERRED", "public.items", "",
			"ALTER TABLE public.items_102008 ALTER CONSTRAINT f_102008 DEFERRABLE INITIALLY DEFERRED"},
		{"ALTER TABLE app.kinds RENAME CONSTRAINT a TO b", "app.kinds", "",
			"ALTER TABLE app.kinds_102010 RENAME CONSTRAINT a_102010 TO b_102010"},
		{"TRUNCATE items, plain, app.kinds RESTART IDENTITY", "app.kinds", "", "TRUNCATE app.kinds_102010 RESTART IDENTITY"},
		// IF EXISTS is the table's: a shard of it must be there (a missing
		// one moved), its columns and constraints keep theirs.
		{"DROP TABLE IF EXISTS plain, items", "public.items", "", "DROP TABLE public.items_102008"},
		{"ALTER TABLE IF EXISTS items ADD COLUMN z int, DROP COLUMN IF EXISTS y", "public.items", "",
			"ALTER TABLE public.items_102008 ADD COLUMN z int, DROP IF EXISTS y"},
		{"ALTER TABLE IF EXISTS items RENAME COLUMN qty TO amount", "public.items", "",
			"ALTER TABLE public.items_102008 RENAME COLUMN qty TO amount"},
		// GRANT and REVOKE: one shard per statement, the rest as written.
		{"GRANT SELECT, UPDATE (qty) ON plain, items, app.kinds TO someone, PUBLIC", "app.kinds", "",
			"GRANT select, update (qty) ON app.kinds_102010 TO someone, public"},
		{`REVOKE ALL ON TABLE "Mixed" FROM someone CASCADE`, "public.Mixed", "",
			`REVOKE ALL ON pgfleet_shards."Mixed_102011" FROM someone CASCADE`},
		{"GRANT INSERT ON ALL TABLES IN SCHEMA public, other TO someone", "public.items", "",
			"GRANT insert ON public.items_102008 TO someone"},
		{"REVOKE GRANT OPTION FOR SELECT ON items FROM someone", "public.items", "",
			"REVOKE GRANT OPTION FOR select ON public.items_102008 FROM someone"},
	} {
		d, err := parseDDL(context.Background(), nil, tc.sql, rewriteSnap())
		if err != nil || d == nil {
			t.Errorf("%s: %v %v", tc.sql, d, err)
			continue
		}
		var tg *ddlTarget
		for i := range d.targets {
			if d.targets[i].table.Name == tc.table {
				tg = &d.targets[i]
			}
		}
		if tg == nil {
			t.Errorf("%s: no target %s in %v", tc.sql, tc.table, d.tableNames())
			continue
		}
		id := rewriteSnap().Shards[tc.table][0].ID
		sh := rewriteSnap().Shards[tc.table][0]
		got, err := d.shardSQL(*tg, id, func(rv *pg_query.RangeVar) (*pg_query.RangeVar, error) {
			return referencedShard(rewriteSnap(), rv, sh)
		})
		if err != nil || got != tc.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", tc.sql, got, err, tc.want)
		}
		shell, err := d.shellSQL()
		want := tc.shell
		if want == "" {
			want = tc.sql
		}
		if err != nil || shell != want {
			t.Errorf("%s: shell gets %q (%v), want %q", tc.sql, shell, err, want)
		}
	}
}

func TestDDLTablesWithoutDatabase(t *testing.T) {
	snap := rewriteSnap()
	for _, tc := range []struct {
		sql  string
		want string // tables, comma-separated; "0A000"; "lookup"
	}{
		{"SELECT * FROM items WHERE id = 1", ""},
		{"INSERT INTO items (id) VALUES (1)", ""},
		{"CREATE TABLE plain (a int)", ""},
		{"ALTER TABLE plain ADD COLUMN b int", ""},
		{"CREATE INDEX ON plain (a)", ""},
		{"DROP TABLE plain", ""},
		{"TRUNCATE plain", ""},
		{"not sql at all", ""},
		{"CREATE INDEX ON items (a)", "public.items"},
		{"CREATE UNIQUE INDEX ON items (id, a)", "public.items"},
		{"CREATE UNIQUE INDEX ON app.kinds (a)", "app.kinds"},
		{"ALTER TABLE items ADD COLUMN b int", "public.items"},
		{"ALTER TABLE public.items ADD PRIMARY KEY (id)", "public.items"},
		{"TRUNCATE app.kinds, items", "app.kinds,public.items"},
		{"DROP TABLE IF EXISTS items, app.kinds, plain", "public.items,app.kinds"},
		{"ALTER TABLE items RENAME COLUMN a TO b", "public.items"},
		{"DROP INDEX some_index", "lookup"},
		{"ALTER INDEX some_index SET (fillfactor = 50)", "lookup"},
		{"ALTER INDEX some_index RENAME TO other", "lookup"},
		{"CREATE UNIQUE INDEX ON items (a)", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT k UNIQUE (a)", "0A000"},
		{"ALTER TABLE items ADD COLUMN k int UNIQUE", "0A000"},
		{"ALTER TABLE items ADD COLUMN k int PRIMARY KEY", "0A000"},
		{"ALTER TABLE items ADD COLUMN k bigserial", "0A000"},
		{"ALTER TABLE items ADD COLUMN k int GENERATED ALWAYS AS IDENTITY", "0A000"},
		{"ALTER TABLE items ADD COLUMN k int DEFAULT nextval('s')", "0A000"},
		{"ALTER TABLE items ALTER COLUMN k SET DEFAULT nextval('s')", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES app.kinds (id)", "public.items"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (id) REFERENCES items", "lookup"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES plain (id)", "lookup"}, // (does plain exist?)
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES \"Mixed\" (\"Key\")", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (a, id) REFERENCES items (id, a)", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (id) REFERENCES app.kinds ON UPDATE CASCADE", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (id) REFERENCES app.kinds ON DELETE SET NULL", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (id, a) REFERENCES app.kinds ON DELETE SET NULL (a)", "public.items"},
		{"ALTER TABLE app.kinds ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES items (id)", "0A000"},
		{"ALTER TABLE app.kinds ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES app.kinds (id) ON DELETE SET DEFAULT", "0A000"},
		{"ALTER TABLE plain ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES app.kinds (id)", "app.kinds"},
		{"ALTER TABLE plain ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES app.kinds (id), INHERIT items", "0A000"},
		{"CREATE TABLE plain (a int REFERENCES app.kinds (id))", "app.kinds"},
		{"CREATE TEMP TABLE plain (a int REFERENCES app.kinds (id))", "0A000"},
		{"CREATE TABLE plain (a int REFERENCES app.kinds (id)) PARTITION BY HASH (a)", "0A000"},
		{"CREATE TABLE plain (a int REFERENCES app.kinds (id), LIKE items)", "0A000"},
		{"CREATE TABLE plain (a int, FOREIGN KEY (a) REFERENCES items)", "public.items"},
		{"CREATE TABLE plain (a int, FOREIGN KEY (a) REFERENCES items); SELECT 1", "0A000"},
		{"SELECT 1; ALTER TABLE plain ADD FOREIGN KEY (a) REFERENCES app.kinds", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT x EXCLUDE USING gist (id WITH =)", "0A000"},
		{"ALTER TABLE items ADD CONSTRAINT k PRIMARY KEY USING INDEX i", "0A000"},
		{"ALTER TABLE items ALTER COLUMN id TYPE int", "0A000"},
		{"ALTER TABLE items DROP COLUMN id", "0A000"},
		{"ALTER TABLE items RENAME COLUMN id TO key", "0A000"},
		{"ALTER TABLE items RENAME TO things", "0A000"},
		{"ALTER TABLE items SET SCHEMA app", "0A000"},
		{"ALTER TABLE items OWNER TO someone", "0A000"},
		{"ALTER TABLE items SET (fillfactor = 50)", "0A000"},
		{"ALTER TABLE items ENABLE ROW LEVEL SECURITY", "0A000"},
		{"DROP TABLE items CASCADE", "public.items"}, // run as RESTRICT (analyzeDrop)
		{"DROP TRIGGER t ON items", "0A000"},
		{"CREATE TRIGGER t BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION f()", "0A000"},
		{"GRANT SELECT ON items TO someone", "public.items"},
		{"GRANT SELECT ON ALL TABLES IN SCHEMA public TO someone", "public.Mixed,public.items"},
		{"GRANT SELECT ON plain, items TO someone WITH GRANT OPTION", "0A000"},
		{"GRANT SELECT ON plain TO someone", ""},
		{"GRANT EXECUTE ON FUNCTION items() TO someone", ""},
		{"VACUUM items", "0A000"},
		{"LOCK TABLE app.kinds", "0A000"},
		{"CREATE VIEW v AS SELECT * FROM items", "0A000"},
		{"CREATE TABLE copy AS SELECT * FROM app.kinds", "0A000"},
		{"DROP SCHEMA app CASCADE", "0A000"},
		{"DROP SCHEMA other CASCADE", ""},
		{`CREATE UNIQUE INDEX ON "Mixed" ("Other")`, "0A000"},
		{"ALTER TABLE items ADD COLUMN b int; SELECT 1", "0A000"},
	} {
		got, err := DDLTables(context.Background(), nil, tc.sql, snap)
		var pe *pgerr.Error
		switch {
		case tc.want == "lookup":
			if !errors.Is(err, ErrIndexLookup) {
				t.Errorf("%s: %v, %v; want ErrIndexLookup", tc.sql, got, err)
			}
		case tc.want == "0A000":
			if errors.As(err, &pe) && pe.Code == pgerr.FeatureNotSupported {
				break
			}
			// A foreign key's refusal comes after the shell's statement
			// (PostgreSQL's own errors first).
			if d, derr := parseDDL(context.Background(), nil, tc.sql, snap); derr != nil || d == nil || !errors.As(d.late, &pe) || pe.Code != pgerr.FeatureNotSupported {
				t.Errorf("%s: %v, %v; want 0A000", tc.sql, got, err)
			}
		case err != nil || strings.Join(got, ",") != tc.want:
			t.Errorf("%s: %v, %v; want %q", tc.sql, got, err, tc.want)
		}
	}
	if got, err := DDLTables(context.Background(), nil, "DROP INDEX i", &metadata.Snapshot{}); err != nil || got != nil {
		t.Errorf("DROP INDEX with an empty catalog: %v %v", got, err)
	}
}
