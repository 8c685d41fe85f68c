package shards_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// newDDLEnv distributes public.items by id into 8 shards over both workers
// and makes public.kinds a reference table.
func newDDLEnv(t *testing.T) (*env, *metadata.Snapshot) {
	t.Helper()
	e := newEnv(t)
	e.exec(0, `CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty int)`)
	e.exec(0, `INSERT INTO items SELECT g, 'item' || g, g % 10 FROM generate_series(1, 400) g`)
	e.exec(0, `CREATE TABLE kinds (id int PRIMARY KEY, label text)`)
	e.exec(0, `INSERT INTO kinds VALUES (1, 'one'), (2, 'two'), (3, 'three')`)
	if _, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "items", "id", 8, ""); err != nil {
		t.Fatal(err)
	}
	snap, err := shards.CreateReference(e.ctx, e.store, e.conns, e.home, "kinds")
	if err != nil {
		t.Fatal(err)
	}
	return e, snap
}

// placement is one shard table on one worker.
type placement struct {
	w    int    // worker index
	id   int64  // shard id
	rel  string // items_102008
	qual string // pgfleet_shards.items_102008
}

func (p placement) String() string { return fmt.Sprintf("%s on worker %d", p.qual, p.w) }

// placements lists every placement of a table's shards.
func (e *env) placements(snap *metadata.Snapshot, table string) []placement {
	e.t.Helper()
	_, rel, _ := strings.Cut(table, ".")
	schema := snap.Tables[table].ShardsIn()
	var out []placement
	for _, sh := range snap.Shards[table] {
		for _, node := range sh.Nodes {
			name := metadata.ShardName(rel, sh.ID)
			out = append(out, placement{w: e.worker(node), id: sh.ID, rel: name, qual: schema + "." + name})
		}
	}
	if len(out) == 0 {
		e.t.Fatalf("%s has no placements", table)
	}
	return out
}

// runDDL is RunDDL with the test's store, connections and default node.
func (e *env) runDDL(snap *metadata.Snapshot, sql string) (string, *metadata.Snapshot, error) {
	return shards.RunDDL(e.ctx, e.store, snap, e.conns, e.home, sql, nil)
}

// mustDDL runs a statement that must succeed with the tag.
func (e *env) mustDDL(snap *metadata.Snapshot, sql, wantTag string) *metadata.Snapshot {
	e.t.Helper()
	tag, after, err := e.runDDL(snap, sql)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	if tag != wantTag {
		e.t.Errorf("%s: tag %q, want %q", sql, tag, wantTag)
	}
	e.noPreparedXacts()
	return after
}

// indexes lists the indexes of a table (a qualified name, or one in schema
// public) on worker i.
func (e *env) indexes(i int, qualified string) []string {
	e.t.Helper()
	return e.strings(i, `SELECT c.relname::text FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
		WHERE x.indrelid = to_regclass($1) ORDER BY 1`, qualified)
}

// constraints lists the constraints of a table on worker i.
func (e *env) constraints(i int, qualified string) []string {
	e.t.Helper()
	return e.strings(i, `SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY 1`, qualified)
}

// column describes a column of a table on worker i: "type|notnull|default",
// or "" if there is no such column.
func (e *env) column(i int, qualified, col string) string {
	e.t.Helper()
	got := e.strings(i, `SELECT format_type(a.atttypid, a.atttypmod) || '|' || a.attnotnull || '|' ||
			coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped`, qualified, col)
	if len(got) == 0 {
		return ""
	}
	return got[0]
}

func TestDDLIndexes(t *testing.T) {
	e, snap := newDDLEnv(t)
	items := e.placements(snap, "public.items")
	kinds := e.placements(snap, "public.kinds")
	if len(kinds) != 2 {
		t.Fatalf("reference table placements %v, want one per worker", kinds)
	}

	// A named index: every shard has it under its suffixed name, the shell
	// under its own.
	snap = e.mustDDL(snap, "CREATE INDEX items_name_idx ON items (name)", "CREATE INDEX")
	for _, p := range items {
		if got := e.indexes(p.w, p.qual); !slices.Contains(got, fmt.Sprintf("items_name_idx_%d", p.id)) {
			t.Errorf("%s has indexes %v, want items_name_idx_%d", p, got, p.id)
		}
	}
	if got := e.indexes(0, "items"); !slices.Contains(got, "items_name_idx") {
		t.Errorf("the shell has indexes %v, want items_name_idx", got)
	}

	// An unnamed index: the shards get the name PostgreSQL gave the shell's.
	snap = e.mustDDL(snap, "CREATE INDEX ON items (qty) WHERE qty > 0", "CREATE INDEX")
	if got := e.indexes(0, "items"); !slices.Contains(got, "items_qty_idx") {
		t.Fatalf("the shell has indexes %v, want items_qty_idx", got)
	}
	for _, p := range items {
		name := fmt.Sprintf("items_qty_idx_%d", p.id)
		def := e.strings(p.w, `SELECT indexdef FROM pg_indexes WHERE indexname = $1`, name)
		want := fmt.Sprintf("CREATE INDEX %s ON %s USING btree (qty) WHERE (qty > 0)", name, p.qual)
		if !slices.Equal(def, []string{want}) {
			t.Errorf("%s: index %s is %v, want %q", p, name, def, want)
		}
	}

	// CONCURRENTLY on a reference table: both copies and the shell.
	snap = e.mustDDL(snap, "CREATE UNIQUE INDEX CONCURRENTLY kinds_label_key ON kinds (label)", "CREATE INDEX")
	for _, p := range kinds {
		if got := e.indexes(p.w, p.qual); !slices.Contains(got, fmt.Sprintf("kinds_label_key_%d", p.id)) {
			t.Errorf("%s has indexes %v, want kinds_label_key_%d", p, got, p.id)
		}
	}
	if got := e.indexes(0, "kinds"); !slices.Contains(got, "kinds_label_key") {
		t.Errorf("the shell has indexes %v, want kinds_label_key", got)
	}
	// The unique index is enforced on every copy.
	for _, p := range kinds {
		_, err := e.w[p.w].Exec(e.ctx, "INSERT INTO "+p.qual+" VALUES (9, 'one')")
		var pe interface{ SQLState() string }
		if !errors.As(err, &pe) || pe.SQLState() != "23505" {
			t.Errorf("%s: a duplicate label gave %v, want 23505", p, err)
		}
	}

	// A unique index on a distributed table must include its distribution
	// column.
	_, _, err := e.runDDL(snap, "CREATE UNIQUE INDEX items_name_key ON items (name)")
	wantCode(t, err, pgerr.FeatureNotSupported, "distribution column")
	e.mustDDL(snap, "CREATE UNIQUE INDEX items_id_name_key ON items (name, id)", "CREATE INDEX")

	// DROP INDEX: its table is found on the default node.
	e.exec(0, "CREATE TABLE plain (a int)")
	e.exec(0, "CREATE INDEX plain_a_idx ON plain (a)")
	if _, err := shards.DDLTables(e.ctx, nil, "DROP INDEX items_qty_idx", snap); !errors.Is(err, shards.ErrIndexLookup) {
		t.Errorf("DDLTables of DROP INDEX without a connection: %v, want ErrIndexLookup", err)
	}
	for sql, want := range map[string][]string{
		"DROP INDEX items_qty_idx, kinds_label_key": {"public.items", "public.kinds"},
		"DROP INDEX plain_a_idx":                    nil,
		"DROP INDEX IF EXISTS no_such_index":        nil,
	} {
		if got, err := shards.DDLTables(e.ctx, e.w[0], sql, snap); err != nil || !slices.Equal(got, want) {
			t.Errorf("DDLTables(%s) = %v, %v; want %v", sql, got, err, want)
		}
	}
	snap = e.mustDDL(snap, "DROP INDEX CONCURRENTLY items_qty_idx, kinds_label_key", "DROP INDEX")
	for _, p := range append(items, kinds...) {
		for _, ix := range e.indexes(p.w, p.qual) {
			if strings.HasPrefix(ix, "items_qty_idx") || strings.HasPrefix(ix, "kinds_label_key") {
				t.Errorf("%s still has index %s", p, ix)
			}
		}
	}
	if got := e.indexes(0, "items"); slices.Contains(got, "items_qty_idx") {
		t.Errorf("the shell still has items_qty_idx: %v", got)
	}
	if got := e.indexes(0, "kinds"); slices.Contains(got, "kinds_label_key") {
		t.Errorf("the shell still has kinds_label_key: %v", got)
	}

	// Renaming an index of a catalog table renames every shard's, each
	// under its suffix, and the shell's.
	snap = e.mustDDL(snap, "ALTER INDEX items_name_idx RENAME TO other", "ALTER INDEX")
	for _, p := range items {
		got := e.indexes(p.w, p.qual)
		if !slices.ContainsFunc(got, func(ix string) bool { return strings.HasPrefix(ix, "other_") }) ||
			slices.ContainsFunc(got, func(ix string) bool { return strings.HasPrefix(ix, "items_name_idx") }) {
			t.Errorf("%s: indexes %v, want other_<shard> and no items_name_idx", p, got)
		}
	}
	if got := e.indexes(0, "items"); !slices.Contains(got, "other") || slices.Contains(got, "items_name_idx") {
		t.Errorf("the shell's indexes: %v, want other", got)
	}
	e.noPreparedXacts()
}

func TestDDLAlterTable(t *testing.T) {
	e, snap := newDDLEnv(t)
	items := e.placements(snap, "public.items")
	kinds := e.placements(snap, "public.kinds")

	// ADD COLUMN with a default: every shard has it, filled in.
	snap = e.mustDDL(snap, "ALTER TABLE items ADD COLUMN note text NOT NULL DEFAULT 'none'", "ALTER TABLE")
	want := "text|true|'none'::text"
	for _, p := range items {
		if got := e.column(p.w, p.qual, "note"); got != want {
			t.Errorf("%s: column note is %q, want %q", p, got, want)
		}
		if n := e.int(p.w, "SELECT count(*) FROM "+p.qual+" WHERE note IS DISTINCT FROM 'none'"); n != 0 {
			t.Errorf("%s: %d rows without the default", p, n)
		}
	}
	if got := e.column(0, "public.items", "note"); got != want {
		t.Errorf("the shell's column note is %q, want %q", got, want)
	}

	// A named CHECK constraint, enforced on a shard.
	snap = e.mustDDL(snap, "ALTER TABLE items ADD CONSTRAINT qty_small CHECK (qty < 100)", "ALTER TABLE")
	for _, p := range items {
		if got := e.constraints(p.w, p.qual); !slices.Contains(got, fmt.Sprintf("qty_small_%d", p.id)) {
			t.Errorf("%s has constraints %v, want qty_small_%d", p, got, p.id)
		}
	}
	p := items[3]
	_, err := e.w[p.w].Exec(e.ctx, "INSERT INTO "+p.qual+" (id, name, qty) VALUES (100000, 'x', 500)")
	var pe interface{ SQLState() string }
	if !errors.As(err, &pe) || pe.SQLState() != "23514" || !strings.Contains(err.Error(), fmt.Sprintf("qty_small_%d", p.id)) {
		t.Errorf("%s: a row breaking the check gave %v, want 23514 naming qty_small_%d", p, err, p.id)
	}

	// An unnamed CHECK: the shards get the shell's name with their suffix,
	// so DROP CONSTRAINT of that name reaches them.
	snap = e.mustDDL(snap, "ALTER TABLE items ADD CHECK (qty >= 0), ADD COLUMN weight int CHECK (weight > 0)", "ALTER TABLE")
	shellCons := e.constraints(0, "public.items")
	for _, c := range []string{"items_qty_check", "items_weight_check"} {
		if !slices.Contains(shellCons, c) {
			t.Fatalf("the shell has constraints %v, want %s", shellCons, c)
		}
	}
	for _, p := range items {
		got := e.constraints(p.w, p.qual)
		for _, c := range []string{"items_qty_check", "items_weight_check"} {
			if !slices.Contains(got, fmt.Sprintf("%s_%d", c, p.id)) {
				t.Errorf("%s has constraints %v, want %s_%d", p, got, c, p.id)
			}
		}
	}
	snap = e.mustDDL(snap, "ALTER TABLE items DROP CONSTRAINT items_qty_check, DROP CONSTRAINT qty_small", "ALTER TABLE")
	for _, p := range items {
		for _, c := range e.constraints(p.w, p.qual) {
			if strings.HasPrefix(c, "items_qty_check") || strings.HasPrefix(c, "qty_small") {
				t.Errorf("%s still has constraint %s", p, c)
			}
		}
	}

	// ALTER COLUMN ... TYPE, SET/DROP DEFAULT, SET/DROP NOT NULL.
	snap = e.mustDDL(snap, "ALTER TABLE items ALTER COLUMN qty TYPE bigint, ALTER COLUMN qty SET DEFAULT 7, ALTER COLUMN name DROP NOT NULL", "ALTER TABLE")
	for _, p := range items {
		if got := e.column(p.w, p.qual, "qty"); got != "bigint|false|7" {
			t.Errorf("%s: column qty is %q", p, got)
		}
		if got := e.column(p.w, p.qual, "name"); got != "text|false|" {
			t.Errorf("%s: column name is %q", p, got)
		}
	}
	snap = e.mustDDL(snap, "ALTER TABLE items ALTER COLUMN qty DROP DEFAULT, ALTER COLUMN qty SET NOT NULL", "ALTER TABLE")
	for _, p := range items {
		if got := e.column(p.w, p.qual, "qty"); got != "bigint|true|" {
			t.Errorf("%s: column qty is %q", p, got)
		}
	}

	// A unique constraint that includes the distribution column; one that
	// does not is refused.
	snap = e.mustDDL(snap, "ALTER TABLE items ADD CONSTRAINT items_id_name_key UNIQUE (id, name)", "ALTER TABLE")
	for _, p := range items {
		if got := e.constraints(p.w, p.qual); !slices.Contains(got, fmt.Sprintf("items_id_name_key_%d", p.id)) {
			t.Errorf("%s has constraints %v, want items_id_name_key_%d", p, got, p.id)
		}
	}
	_, _, err = e.runDDL(snap, "ALTER TABLE items ADD CONSTRAINT items_name_key UNIQUE (name)")
	wantCode(t, err, pgerr.FeatureNotSupported, "distribution column", "public.items")

	// RENAME COLUMN, then DROP COLUMN.
	snap = e.mustDDL(snap, "ALTER TABLE items RENAME COLUMN note TO remark", "ALTER TABLE")
	for _, p := range items {
		if e.column(p.w, p.qual, "note") != "" || e.column(p.w, p.qual, "remark") == "" {
			t.Errorf("%s: column note was not renamed to remark", p)
		}
	}
	snap = e.mustDDL(snap, "ALTER TABLE items DROP COLUMN remark", "ALTER TABLE")
	for _, p := range items {
		if got := e.column(p.w, p.qual, "remark"); got != "" {
			t.Errorf("%s still has column remark: %s", p, got)
		}
	}
	if got := e.column(0, "public.items", "remark"); got != "" {
		t.Errorf("the shell still has column remark: %s", got)
	}

	// A reference table: both copies and the shell.
	snap = e.mustDDL(snap, "ALTER TABLE public.kinds ADD COLUMN weight int DEFAULT 1", "ALTER TABLE")
	for _, p := range kinds {
		if got := e.column(p.w, p.qual, "weight"); got != "integer|false|1" {
			t.Errorf("%s: column weight is %q", p, got)
		}
		if n := e.int(p.w, "SELECT count(*) FROM "+p.qual+" WHERE weight = 1"); n != 3 {
			t.Errorf("%s: %d rows with weight 1, want 3", p, n)
		}
	}
	if got := e.column(0, "public.kinds", "weight"); got != "integer|false|1" {
		t.Errorf("the shell's column weight is %q", got)
	}
	e.noPreparedXacts()
	e.unlocked("public.items")
}

// verifyNoChange checks that no shard of items and not the shell has an
// index or constraint whose name starts with prefix (the listed placement
// may keep the one the test made), and that no prepared transaction or
// lock is left.
func (e *env) verifyNoChange(items []placement, prefix string, except placement, keep string) {
	e.t.Helper()
	for _, p := range items {
		names := append(e.indexes(p.w, p.qual), e.constraints(p.w, p.qual)...)
		for _, n := range names {
			if strings.HasPrefix(n, prefix) && !(p == except && n == keep) {
				e.t.Errorf("%s has %s after the failure", p, n)
			}
		}
	}
	for _, n := range append(e.indexes(0, "items"), e.constraints(0, "public.items")...) {
		if strings.HasPrefix(n, prefix) {
			e.t.Errorf("the shell has %s after the failure", n)
		}
	}
	e.noPreparedXacts()
	e.unlocked("public.items")
}

func TestDDLFailureOnOneShard(t *testing.T) {
	e, snap := newDDLEnv(t)
	items := e.placements(snap, "public.items")
	// The last placement fails, after all others have changed.
	bad := items[len(items)-1]
	node := e.ids[bad.w]
	where := fmt.Sprintf("on shard %s on node %d (", bad.qual, node)

	// An index name that already exists on one shard.
	clash := fmt.Sprintf("items_qty_idx_%d", bad.id)
	e.exec(bad.w, fmt.Sprintf("CREATE INDEX %s ON %s (name)", clash, bad.qual))
	_, _, err := e.runDDL(snap, "CREATE INDEX items_qty_idx ON items (qty)")
	pe := wantCode(t, err, "42P07", where, "CREATE INDEX failed", clash)
	t.Logf("error: %s", pe.Message)
	e.verifyNoChange(items, "items_qty_idx", bad, clash)

	// A row on one shard that breaks a new CHECK constraint.
	e.exec(bad.w, "INSERT INTO "+bad.qual+" (id, name, qty) VALUES (100000, 'bad', -1)")
	_, _, err = e.runDDL(snap, "ALTER TABLE items ADD COLUMN note text DEFAULT 'x', ADD CONSTRAINT qty_nonneg CHECK (qty >= 0)")
	pe = wantCode(t, err, "23514", where, "ALTER TABLE failed")
	t.Logf("error: %s", pe.Message)
	e.verifyNoChange(items, "qty_nonneg", placement{}, "")
	for _, p := range items {
		if got := e.column(p.w, p.qual, "note"); got != "" {
			t.Errorf("%s has column note after the failure: %s", p, got)
		}
	}
	if got := e.column(0, "public.items", "note"); got != "" {
		t.Errorf("the shell has column note after the failure: %s", got)
	}

	// An error on the shell is PostgreSQL's own.
	_, _, err = e.runDDL(snap, "ALTER TABLE items ADD COLUMN qty int")
	wantCode(t, err, "42701", `column "qty" of relation "items" already exists`)
	e.noPreparedXacts()

	// A node that cannot be reached: nothing runs.
	conns := map[int32]*pgx.Conn{e.ids[0]: e.w[0]}
	_, _, err = shards.RunDDL(e.ctx, e.store, snap, conns, e.home, "ALTER TABLE items ADD COLUMN note text", nil)
	wantCode(t, err, pgerr.ConnectionFailure)
	if got := e.column(0, "public.items", "note"); got != "" {
		t.Errorf("the shell has column note: %s", got)
	}
	e.noPreparedXacts()
}

func TestDDLTruncate(t *testing.T) {
	e, snap := newDDLEnv(t)
	e.exec(0, "CREATE TABLE plain (a int)")
	e.exec(0, "INSERT INTO plain VALUES (1)")
	tables, err := shards.DDLTables(e.ctx, nil, "TRUNCATE plain, items, kinds", snap)
	if err != nil || !slices.Equal(tables, []string{"public.items", "public.kinds"}) {
		t.Errorf("DDLTables: %v, %v", tables, err)
	}
	e.mustDDL(snap, "TRUNCATE plain, items, kinds", "TRUNCATE TABLE")
	for _, p := range append(e.placements(snap, "public.items"), e.placements(snap, "public.kinds")...) {
		if n := e.int(p.w, "SELECT count(*) FROM "+p.qual); n != 0 {
			t.Errorf("%s has %d rows", p, n)
		}
	}
	if n := e.int(0, "SELECT count(*) FROM plain"); n != 0 {
		t.Errorf("plain has %d rows", n)
	}
}

func TestDDLDropTable(t *testing.T) {
	e, snap := newDDLEnv(t)
	// CASCADE runs as RESTRICT: with a view on the shell, PostgreSQL's
	// 2BP01 (the coordinator makes it 0A000) and nothing dropped.
	e.exec(0, "CREATE VIEW items_v AS SELECT id FROM items")
	_, _, err := e.runDDL(snap, "DROP TABLE items CASCADE")
	wantCode(t, err, "2BP01", "items")
	if !e.exists(0, "public.items") || !e.exists(0, "public.items_v") {
		t.Fatal("DROP TABLE ... CASCADE dropped the shell or its view")
	}
	e.exec(0, "DROP VIEW items_v")

	after := e.mustDDL(snap, "DROP TABLE IF EXISTS items, kinds CASCADE", "DROP TABLE")
	if len(after.Tables) != 0 || len(after.Shards) != 0 {
		t.Errorf("the snapshot still has %v %v", after.Tables, after.Shards)
	}
	loaded, err := e.store.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Tables) != 0 {
		t.Errorf("the catalog still has %v", loaded.Tables)
	}
	for i := range e.w {
		for _, prefix := range []string{"items", "kinds"} {
			if got := e.relations(i, "public", prefix); len(got) != 0 {
				t.Errorf("worker %d still has %v", i, got)
			}
		}
	}
}

func TestDDLUnsupported(t *testing.T) {
	e, snap := newDDLEnv(t)
	e.exec(0, `CREATE TABLE plain_kinds (id int PRIMARY KEY)`)
	for _, sql := range []string{
		"ALTER TABLE items RENAME TO things",
		"ALTER TABLE items ALTER COLUMN id TYPE int",
		"ALTER TABLE items DROP COLUMN id",
		"ALTER TABLE items RENAME COLUMN id TO key",
		"ALTER TABLE items ADD CONSTRAINT kind_fk FOREIGN KEY (qty) REFERENCES plain_kinds (id)",
		"ALTER TABLE items ADD CONSTRAINT kind_fk FOREIGN KEY (qty) REFERENCES public.plain_kinds",
		"ALTER TABLE items ADD COLUMN serial_col bigserial",
		"ALTER TABLE items SET (fillfactor = 50)",
		"ALTER TABLE kinds OWNER TO CURRENT_USER",
		"VACUUM items",
		"CREATE VIEW v AS SELECT * FROM items",
		"ALTER INDEX items_pkey SET (fillfactor = 50)",
	} {
		_, _, err := e.runDDL(snap, sql)
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.Code != pgerr.FeatureNotSupported {
			t.Errorf("%s: %v, want 0A000", sql, err)
			continue
		}
		if !strings.Contains(pe.Message, "public.items") && !strings.Contains(pe.Message, "public.kinds") {
			t.Errorf("%s: message %q names no table", sql, pe.Message)
		}
	}
	if !e.exists(0, "public.items") || !e.exists(0, "public.kinds") || e.exists(0, "public.v") {
		t.Error("an unsupported statement changed the default node")
	}
	if got := e.column(0, "public.items", "id"); got != "bigint|true|" {
		t.Errorf("the distribution column changed: %s", got)
	}
	e.noPreparedXacts()
}
