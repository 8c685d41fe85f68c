package shards_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// verifyDistributed checks a distributed table against the rows it had
// before ("key|row", as rowsOf gives them): every row is in exactly one
// shard, the shard exists only on the node its placement names, every row's
// hash lies in its shard's range by PostgreSQL's hash function on the
// worker and by metadata.HashValue with the snapshot's routing, the shell is
// empty and no prepared transaction is left.
func (e *env) verifyDistributed(snap *metadata.Snapshot, catalog, key, hashfn, typ string, want []string, wantShards int) []metadata.Shard {
	e.t.Helper()
	t := e.t
	tab := snap.Table(catalog)
	if tab == nil {
		t.Fatalf("%s is not in the snapshot", catalog)
	}
	if tab.Kind != metadata.Distributed || tab.DistColumn != key || tab.DistType != typ || tab.ShardCount != wantShards {
		t.Errorf("catalog entry %+v, want distributed by %s (%s) with %d shards", *tab, key, typ, wantShards)
	}
	_, rel, _ := strings.Cut(catalog, ".")
	schema := snap.Tables[catalog].ShardsIn()
	shardList := snap.Shards[catalog]
	if len(shardList) != wantShards {
		t.Fatalf("%d shards, want %d", len(shardList), wantShards)
	}
	var got []string
	owner := map[string]int64{}
	perNode := map[int32]int{}
	for _, sh := range shardList {
		if len(sh.Nodes) != 1 {
			t.Fatalf("shard %d has placements %v, want one", sh.ID, sh.Nodes)
		}
		perNode[sh.Nodes[0]]++
		name := schema + "." + metadata.ShardName(rel, sh.ID)
		for i := range e.w {
			if placed := e.ids[i] == sh.Nodes[0]; e.exists(i, name) != placed {
				t.Errorf("shard %s exists on worker %d: %v, placed there: %v", name, i, !placed, placed)
			}
		}
		i := e.worker(sh.Nodes[0])
		if bad := e.int(i, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s(%s) NOT BETWEEN %d AND %d",
			name, hashfn, key, sh.MinHash, sh.MaxHash)); bad != 0 {
			t.Errorf("shard %s has %d rows whose %s(%s) is outside [%d, %d]", name, bad, hashfn, key, sh.MinHash, sh.MaxHash)
		}
		for _, r := range e.rowsOf(i, name, key) {
			k, _, _ := strings.Cut(r, "|")
			if other, dup := owner[k]; dup && other != sh.ID {
				t.Errorf("key %s is in shards %d and %d", k, other, sh.ID)
			}
			owner[k] = sh.ID
			got = append(got, r)
		}
	}
	if len(e.ids) == 2 && wantShards >= 2 && (perNode[e.ids[0]] == 0 || perNode[e.ids[1]] == 0) {
		t.Errorf("shards per node %v: both nodes should have some", perNode)
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if len(got) != len(want) {
		t.Errorf("%d rows in the shards, want %d", len(got), len(want))
	} else if !slices.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("rows differ: got %q, want %q", got[i], want[i])
				break
			}
		}
	}
	for k, id := range owner {
		h, err := metadata.HashValue(typ, k)
		if err != nil {
			t.Fatalf("HashValue(%s, %q): %v", typ, k, err)
		}
		if sh := snap.ShardFor(catalog, h); sh == nil || sh.ID != id {
			t.Errorf("key %q is in shard %d but routing finds %v", k, id, sh)
			break
		}
	}
	if n := e.int(0, "SELECT count(*) FROM "+catalog); n != 0 {
		t.Errorf("the shell %s still has %d rows", catalog, n)
	}
	e.noPreparedXacts()
	return shardList
}

// verifyUntouched checks that a failed operation left a table as it was:
// not in the catalog, no shard tables (only the listed others, per worker),
// its rows in place, no prepared transactions and no lock.
func (e *env) verifyUntouched(catalog, key string, want []string, others [][]string) {
	e.t.Helper()
	t := e.t
	snap, err := e.store.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Table(catalog) != nil || len(snap.Shards[catalog]) != 0 {
		t.Errorf("%s is still in the catalog: %+v %v", catalog, snap.Table(catalog), snap.Shards[catalog])
	}
	schema, rel, _ := strings.Cut(catalog, ".")
	for i := range e.w {
		var allowed []string
		if others != nil {
			allowed = others[i]
		}
		got := append(e.relations(i, schema, rel+"_"), e.relations(i, metadata.ShardsSchema, rel+"_")...)
		if !slices.Equal(got, allowed) {
			t.Errorf("worker %d has tables %v, want %v", i, got, allowed)
		}
	}
	if got := e.rowsOf(0, catalog, key); !slices.Equal(got, want) {
		t.Errorf("%s has %d rows after the failure, want its %d rows unchanged", catalog, len(got), len(want))
	}
	e.noPreparedXacts()
	e.unlocked(catalog)
}

// nextShardID is the id the catalog will give the next shard.
func (e *env) nextShardID() int64 {
	e.t.Helper()
	return e.int(0, "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM pgfleet.shardid_seq")
}

func TestDistributeInt8(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE accounts (
		id bigint PRIMARY KEY,
		owner text NOT NULL,
		balance numeric(12,2) NOT NULL DEFAULT 0 CONSTRAINT balance_not_negative CHECK (balance >= 0),
		note varchar(20) COLLATE "C",
		twice bigint GENERATED ALWAYS AS (id * 2) STORED,
		created timestamptz NOT NULL DEFAULT now()
	)`)
	e.exec(0, `CREATE INDEX accounts_owner_idx ON accounts (owner) WHERE balance > 0`)
	e.exec(0, `INSERT INTO accounts (id, owner, balance, note)
		SELECT g, 'owner' || (g % 97), g % 1000, CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' || g END
		FROM generate_series(1, 10000) g`)
	want := e.rowsOf(0, "public.accounts", "id")

	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "accounts", "id", 8, "")
	if err != nil {
		t.Fatal(err)
	}
	list := e.verifyDistributed(snap, "public.accounts", "id", "hashint8", "int8", want, 8)
	if !e.exists(0, "public.accounts") {
		t.Fatal("the shell table is gone")
	}
	for i, sh := range list {
		if wantNode := e.ids[i%2]; sh.Nodes[0] != wantNode {
			t.Errorf("shard %d is on node %d, want %d", i, sh.Nodes[0], wantNode)
		}
	}

	// Every shard has the table's constraints and indexes under suffixed
	// names, its defaults, generated column and collation.
	for _, sh := range list {
		i := e.worker(sh.Nodes[0])
		name := metadata.ShardName("accounts", sh.ID)
		sfx := fmt.Sprintf("_%d", sh.ID)
		idx := e.strings(i, `SELECT indexname || ': ' || indexdef FROM pg_indexes
			WHERE schemaname = 'pgfleet_shards' AND tablename = $1 ORDER BY 1`, name)
		wantIdx := []string{
			"accounts_owner_idx" + sfx + ": CREATE INDEX accounts_owner_idx" + sfx + " ON pgfleet_shards." + name +
				" USING btree (owner) WHERE (balance > (0)::numeric)",
			"accounts_pkey" + sfx + ": CREATE UNIQUE INDEX accounts_pkey" + sfx + " ON pgfleet_shards." + name + " USING btree (id)",
		}
		if !slices.Equal(idx, wantIdx) {
			t.Errorf("indexes of %s:\n%v\nwant\n%v", name, strings.Join(idx, "\n"), strings.Join(wantIdx, "\n"))
		}
		cons := e.strings(i, `SELECT conname || ' ' || contype::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = $1::regclass ORDER BY 1`, "pgfleet_shards."+name)
		wantCons := []string{
			"accounts_pkey" + sfx + " p PRIMARY KEY (id)",
			"balance_not_negative" + sfx + " c CHECK ((balance >= (0)::numeric))",
		}
		if !slices.Equal(cons, wantCons) {
			t.Errorf("constraints of %s: %v, want %v", name, cons, wantCons)
		}
		coll := e.strings(i, `SELECT collname::text FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
			WHERE attrelid = $1::regclass AND attname = 'note'`, "pgfleet_shards."+name)
		if !slices.Equal(coll, []string{"C"}) {
			t.Errorf("collation of %s.note: %v", name, coll)
		}
	}
	sh := list[1]
	i := e.worker(sh.Nodes[0])
	tx, err := e.w[i].Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var balance string
	var twice int64
	var created bool
	if err := tx.QueryRow(e.ctx, fmt.Sprintf(`INSERT INTO pgfleet_shards.%s (id, owner) VALUES (123456, 'x')
		RETURNING balance::text, twice, created IS NOT NULL`, metadata.ShardName("accounts", sh.ID))).
		Scan(&balance, &twice, &created); err != nil {
		t.Fatal(err)
	}
	if balance != "0.00" || twice != 246912 || !created {
		t.Errorf("defaults on a shard: balance %s, twice %d, created set %v", balance, twice, created)
	}
	if _, err := tx.Exec(e.ctx, fmt.Sprintf(`INSERT INTO pgfleet_shards.%s (id, owner, balance) VALUES (1234567, 'x', -1)`,
		metadata.ShardName("accounts", sh.ID))); err == nil {
		t.Error("a shard accepted a row that violates the CHECK constraint")
	}
	_ = tx.Rollback(e.ctx)

	loaded, err := e.store.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Version != snap.Version || len(loaded.Shards["public.accounts"]) != 8 {
		t.Errorf("the store has version %d and %d shards, Distribute returned version %d",
			loaded.Version, len(loaded.Shards["public.accounts"]), snap.Version)
	}
	e.unlocked("public.accounts")
}

func TestDistributeTextAndUUID(t *testing.T) {
	e := newEnv(t)
	// A schema that exists only on the default node: the shards' nodes get it.
	e.exec(0, `CREATE SCHEMA app`)
	e.exec(0, `CREATE TABLE app.users (email text PRIMARY KEY, name varchar(50), score int2)`)
	e.exec(0, `INSERT INTO app.users SELECT 'user' || g || '@example.com', 'name ' || g, g % 100
		FROM generate_series(1, 3000) g`)
	e.exec(0, `CREATE TABLE events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), payload jsonb, n int)`)
	e.exec(0, `INSERT INTO events (payload, n) SELECT jsonb_build_object('g', g), g FROM generate_series(1, 3000) g`)
	e.exec(0, `CREATE TABLE "Mixed Case" (k varchar(40) NOT NULL, v int)`)
	e.exec(0, `INSERT INTO "Mixed Case" SELECT 'key ' || g, g FROM generate_series(1, 500) g`)
	wantUsers := e.rowsOf(0, "app.users", "email")
	wantEvents := e.rowsOf(0, "public.events", "id")
	wantMixed := e.rowsOf(0, `public."Mixed Case"`, "k")

	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "app.users", "email", 6, "")
	if err != nil {
		t.Fatal(err)
	}
	e.verifyDistributed(snap, "app.users", "email", "hashtext", "text", wantUsers, 6)
	if e.int(1, "SELECT count(*) FROM pg_namespace WHERE nspname = 'app'") != 1 {
		t.Error("schema app was not created on the second worker")
	}

	snap, err = shards.Distribute(e.ctx, e.store, e.conns, e.home, "events", "id", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	e.verifyDistributed(snap, "public.events", "id", "uuid_hash", "uuid", wantEvents, 4)

	snap, err = shards.Distribute(e.ctx, e.store, e.conns, e.home, `"Mixed Case"`, "k", 3, "")
	if err != nil {
		t.Fatal(err)
	}
	tab := snap.Table("public.Mixed Case")
	if tab == nil || tab.DistType != "varchar" {
		t.Fatalf("catalog entry of \"Mixed Case\": %+v", tab)
	}
	var keys []string
	for _, sh := range snap.Shards["public.Mixed Case"] {
		name := fmt.Sprintf(`pgfleet_shards."Mixed Case_%d"`, sh.ID)
		i := e.worker(sh.Nodes[0])
		if bad := e.int(i, fmt.Sprintf("SELECT count(*) FROM %s WHERE hashtext(k) NOT BETWEEN %d AND %d",
			name, sh.MinHash, sh.MaxHash)); bad != 0 {
			t.Errorf("%s has %d rows outside its range", name, bad)
		}
		keys = append(keys, e.rowsOf(i, name, "k")...)
	}
	if slices.Sort(keys); !slices.Equal(keys, wantMixed) {
		t.Errorf("the shards of \"Mixed Case\" have %d rows, want %d", len(keys), len(wantMixed))
	}
	e.noPreparedXacts()
}

func TestColocateWith(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE a (id bigint PRIMARY KEY, v text)`)
	e.exec(0, `INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 1000) g`)
	e.exec(0, `CREATE TABLE b (a_id bigint NOT NULL, x int)`)
	e.exec(0, `INSERT INTO b SELECT g % 500, g FROM generate_series(1, 1000) g`)
	e.exec(0, `CREATE TABLE c (id int PRIMARY KEY)`)
	e.exec(0, `INSERT INTO c SELECT generate_series(1, 100)`)
	wantB := e.rowsOf(0, "public.b", "a_id")
	wantC := e.rowsOf(0, "public.c", "id")

	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "a", "id", 8, "none")
	if err != nil {
		t.Fatal(err)
	}
	// colocate_with names the table as a regclass does, without schema.
	snap, err = shards.Distribute(e.ctx, e.store, e.conns, e.home, "b", "a_id", 0, "a")
	if err != nil {
		t.Fatal(err)
	}
	e.verifyDistributed(snap, "public.b", "a_id", "hashint8", "int8", wantB, 8)
	ta, tb := snap.Table("public.a"), snap.Table("public.b")
	if ta.ColocationID != tb.ColocationID {
		t.Errorf("colocation ids %d and %d differ", ta.ColocationID, tb.ColocationID)
	}
	sa, sb := snap.Shards["public.a"], snap.Shards["public.b"]
	for i := range sa {
		if sa[i].MinHash != sb[i].MinHash || sa[i].MaxHash != sb[i].MaxHash || !slices.Equal(sa[i].Nodes, sb[i].Nodes) {
			t.Errorf("shard %d: a %+v, b %+v are not colocated", i, sa[i], sb[i])
		}
	}
	// A join of colocated shards on one node sees matching rows.
	for i := range sa {
		w := e.worker(sa[i].Nodes[0])
		n := e.int(w, fmt.Sprintf("SELECT count(*) FROM pgfleet_shards.a_%d JOIN pgfleet_shards.b_%d ON b_%d.a_id = a_%d.id",
			sa[i].ID, sb[i].ID, sb[i].ID, sa[i].ID))
		m := e.int(w, fmt.Sprintf("SELECT count(*) FROM pgfleet_shards.b_%d WHERE a_id BETWEEN 1 AND 1000", sb[i].ID))
		if n != m {
			t.Errorf("shard pair %d: %d rows of b join a, want %d", i, n, m)
		}
	}

	// Distribution types differ: refused by the catalog, nothing is left.
	_, err = shards.Distribute(e.ctx, e.store, e.conns, e.home, "c", "id", 0, "a")
	wantCode(t, err, pgerr.InvalidParameterValue, "distribution column types differ")
	e.verifyUntouched("public.c", "id", wantC, nil)
}

func TestDistributeFailureCreatingShard(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL)`)
	e.exec(0, `INSERT INTO t SELECT g, repeat('v', g % 50) FROM generate_series(1, 2000) g`)
	want := e.rowsOf(0, "public.t", "id")

	// Shard 3 goes to the second worker; a table there has its name.
	blocker := metadata.ShardName("t", e.nextShardID()+3)
	e.exec(1, "CREATE SCHEMA pgfleet_shards; CREATE TABLE pgfleet_shards."+blocker+" (x int)")
	_, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "t", "id", 8, "")
	wantCode(t, err, "42P07", "pgfleet_shards."+blocker, fmt.Sprintf("node %d (%s)", e.ids[1], e.cl.Servers[1].Addr()))
	e.verifyUntouched("public.t", "id", want, [][]string{nil, {blocker}})

	// With the obstacle gone it works, and the connections are fine.
	e.exec(1, "DROP TABLE pgfleet_shards."+blocker)
	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "t", "id", 8, "")
	if err != nil {
		t.Fatal(err)
	}
	e.verifyDistributed(snap, "public.t", "id", "hashint8", "int8", want, 8)
}

func TestDistributeFailureCopyingRows(t *testing.T) {
	e := newEnv(t)
	// A domain whose check passes on the first worker and fails on the
	// second: the COPY into the second worker's first shard fails while the
	// first worker is still sending rows (about 1 MB of them).
	e.exec(0, `CREATE DOMAIN small AS int CHECK (VALUE < 1000000)`)
	e.exec(1, `CREATE DOMAIN small AS int CHECK (VALUE < 0)`)
	e.exec(0, `CREATE TABLE t (id bigint PRIMARY KEY, n small, pad text)`)
	e.exec(0, `INSERT INTO t SELECT g, g, repeat('x', 200) FROM generate_series(1, 5000) g`)
	want := e.rowsOf(0, "public.t", "id")

	_, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "t", "id", 4, "")
	pe := wantCode(t, err, "23514", "cannot fill shard pgfleet_shards.t_", fmt.Sprintf("node %d", e.ids[1]))
	t.Logf("error: %s", pe.Message)
	e.verifyUntouched("public.t", "id", want, nil)
	for i, c := range e.w {
		if err := c.Ping(e.ctx); err != nil {
			t.Errorf("connection to worker %d is broken: %v", i, err)
		}
	}
}

func TestDistributeFailureAddingConstraint(t *testing.T) {
	e := newEnv(t)
	// A CHECK constraint is added after a shard is filled; on the second
	// worker its function rejects every row.
	e.exec(0, `CREATE FUNCTION ok(bigint) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true'`)
	e.exec(1, `CREATE FUNCTION ok(bigint) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT false'`)
	e.exec(0, `CREATE TABLE t (id bigint PRIMARY KEY CHECK (ok(id)))`)
	e.exec(0, `INSERT INTO t SELECT generate_series(1, 1000)`)
	want := e.rowsOf(0, "public.t", "id")

	_, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "t", "id", 4, "")
	wantCode(t, err, "23514", "cannot create the constraints and indexes of shard pgfleet_shards.t_")
	e.verifyUntouched("public.t", "id", want, nil)
}

// TestDistributeNulls: rows with a NULL distribution value move to the
// shard of hash 0, where an INSERT's NULL goes; every row is moved once.
func TestDistributeNulls(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE t (k text, v int)`)
	e.exec(0, `INSERT INTO t VALUES ('a', 1), (NULL, 2), ('b', 3), (NULL, 4)`)
	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "t", "k", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	var total, nulls int64
	for _, sh := range snap.Shards["public.t"] {
		name := "pgfleet_shards." + metadata.ShardName("t", sh.ID)
		i := e.worker(sh.Nodes[0])
		total += e.int(i, "SELECT count(*) FROM "+name)
		n := e.int(i, "SELECT count(*) FROM "+name+" WHERE k IS NULL")
		nulls += n
		if zero := sh.MinHash <= 0 && 0 <= sh.MaxHash; n > 0 && !zero {
			t.Errorf("shard %s (hashes %d..%d) has %d NULL rows: they belong to the shard of hash 0", name, sh.MinHash, sh.MaxHash, n)
		}
	}
	if total != 4 || nulls != 2 {
		t.Errorf("the shards hold %d rows, %d of them NULL; want 4 and 2", total, nulls)
	}
	if n := e.int(0, "SELECT count(*) FROM public.t"); n != 0 {
		t.Errorf("the shell still has %d rows", n)
	}
	e.noPreparedXacts()
}

func TestDistributeRefusals(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE plain (id bigint PRIMARY KEY, amount numeric, email text UNIQUE)`)
	e.exec(0, `CREATE TABLE parent (id bigint PRIMARY KEY)`)
	e.exec(0, `CREATE TABLE child (id bigint PRIMARY KEY, parent_id bigint REFERENCES parent)`)
	e.exec(0, `INSERT INTO parent VALUES (1); INSERT INTO child VALUES (1, 1)`)
	e.exec(0, `CREATE SEQUENCE loose_seq`)
	e.exec(0, `CREATE TABLE loose_t (id bigint DEFAULT nextval('loose_seq') PRIMARY KEY)`)
	e.exec(0, `CREATE TABLE seqexpr_t (id bigserial PRIMARY KEY, code text DEFAULT 'c' || nextval('seqexpr_t_id_seq'))`)
	e.exec(0, `CREATE TABLE trig_t (id bigint)`)
	e.exec(0, `CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'`)
	e.exec(0, `CREATE TRIGGER noop BEFORE INSERT ON trig_t FOR EACH ROW EXECUTE FUNCTION noop()`)
	e.exec(0, `CREATE TABLE part_t (id bigint) PARTITION BY HASH (id)`)
	e.exec(0, `CREATE VIEW view_t AS SELECT 1 AS id`)
	e.exec(0, `CREATE TABLE done (id bigint)`)
	// (Adversary: an UPDATE of id moved k's hash, not the row.)
	e.exec(0, `CREATE TABLE gen_t (id int, k int GENERATED ALWAYS AS (id * 2) STORED, PRIMARY KEY (k))`)

	for _, tc := range []struct {
		table, column string
		code          string
		msg           string
	}{
		{"missing", "id", pgerr.UndefinedTable, `relation "missing" does not exist`},
		{"plain", "nope", pgerr.UndefinedColumn, `column "nope" of relation "public.plain" does not exist`},
		{"plain", "amount", pgerr.FeatureNotSupported, "distribution column type numeric is not supported yet"},
		{"plain", "id", pgerr.FeatureNotSupported, `constraint "plain_email_key" does not include the distribution column "id"`},
		{"child", "id", pgerr.FeatureNotSupported, `cannot distribute public.child: its foreign key "child_parent_id_fkey" references public.parent, which is neither`},
		{"parent", "id", pgerr.FeatureNotSupported, "cannot distribute public.parent: public.child references it by a foreign key and has rows"},
		{"loose_t", "id", pgerr.FeatureNotSupported, `column "id" of public.loose_t takes its default from a sequence (nextval('loose_seq'::regclass)) other than its own`},
		{"seqexpr_t", "id", pgerr.FeatureNotSupported, `column "code" of public.seqexpr_t takes its default from a sequence`},
		{"trig_t", "id", pgerr.FeatureNotSupported, "triggers on distributed tables are not supported yet"},
		{"part_t", "id", pgerr.FeatureNotSupported, "partitioned"},
		{"view_t", "id", pgerr.WrongObjectType, "is not a table"},
		{"gen_t", "k", pgerr.FeatureNotSupported, `distribution column "k" of public.gen_t is a generated column`},
	} {
		_, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, tc.table, tc.column, 4, "")
		wantCode(t, err, tc.code, tc.msg)
	}
	if _, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "done", "id", 4, ""); err != nil {
		t.Fatal(err)
	}
	_, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "done", "id", 4, "")
	wantCode(t, err, pgerr.DuplicateObject, "already distributed")
	_, err = shards.CreateReference(e.ctx, e.store, e.conns, e.home, "public.done")
	wantCode(t, err, pgerr.DuplicateObject, "already distributed")

	snap, err := e.store.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Tables) != 1 || snap.Table("public.done") == nil {
		t.Errorf("catalog has tables %v, want only public.done", snap.Tables)
	}
	for i := range e.w {
		if got := e.int(i, `SELECT count(*) FROM pg_class WHERE relname ~ '_[0-9]+$' AND relkind = 'r'
			AND relnamespace = 'public'::regnamespace AND relname NOT LIKE 'done\_%'`); got != 0 {
			t.Errorf("worker %d has %d stray shard tables", i, got)
		}
	}
	e.noPreparedXacts()
}

func TestReferenceTable(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE countries (code char(2) PRIMARY KEY, name text NOT NULL, population bigint DEFAULT 0)`)
	e.exec(0, `CREATE INDEX countries_name_idx ON countries (lower(name))`)
	e.exec(0, `INSERT INTO countries SELECT chr(65 + g / 26) || chr(65 + g % 26), 'Country ' || g, g * 1000
		FROM generate_series(0, 499) g`)
	want := e.rowsOf(0, "public.countries", "code")

	snap, err := shards.CreateReference(e.ctx, e.store, e.conns, e.home, "countries")
	if err != nil {
		t.Fatal(err)
	}
	tab := snap.Table("public.countries")
	if tab == nil || tab.Kind != metadata.Reference {
		t.Fatalf("catalog entry %+v, want a reference table", tab)
	}
	list := snap.Shards["public.countries"]
	if len(list) != 1 || !slices.Equal(list[0].Nodes, e.ids) {
		t.Fatalf("shards %+v, want one on nodes %v", list, e.ids)
	}
	name := "pgfleet_shards." + metadata.ShardName("countries", list[0].ID)
	for i := range e.w {
		if got := e.rowsOf(i, name, "code"); !slices.Equal(got, want) {
			t.Errorf("worker %d: %s has %d rows, want the %d of the table", i, name, len(got), len(want))
		}
		idx := e.strings(i, `SELECT indexname::text FROM pg_indexes WHERE schemaname = 'pgfleet_shards' AND tablename = $1 ORDER BY 1`,
			metadata.ShardName("countries", list[0].ID))
		wantIdx := []string{fmt.Sprintf("countries_name_idx_%d", list[0].ID), fmt.Sprintf("countries_pkey_%d", list[0].ID)}
		if !slices.Equal(idx, wantIdx) {
			t.Errorf("worker %d: indexes %v, want %v", i, idx, wantIdx)
		}
	}
	if n := e.int(0, "SELECT count(*) FROM countries"); n != 0 {
		t.Errorf("the shell still has %d rows", n)
	}
	e.noPreparedXacts()
	e.unlocked("public.countries")
}

func TestUndistribute(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, total numeric(10,2),
		doubled numeric GENERATED ALWAYS AS (total * 2) STORED)`)
	e.exec(0, `INSERT INTO orders (id, customer, total) SELECT g, g % 37, g / 7.0 FROM generate_series(1, 3000) g`)
	e.exec(0, `CREATE TABLE kinds (id int PRIMARY KEY, label text)`)
	e.exec(0, `INSERT INTO kinds SELECT g, 'kind ' || g FROM generate_series(1, 20) g`)
	wantOrders := e.rowsOf(0, "public.orders", "id")
	wantKinds := e.rowsOf(0, "public.kinds", "id")

	if _, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "orders", "id", 8, ""); err != nil {
		t.Fatal(err)
	}
	snap, err := shards.CreateReference(e.ctx, e.store, e.conns, e.home, "kinds")
	if err != nil {
		t.Fatal(err)
	}

	snap, err = shards.Undistribute(e.ctx, e.store, snap, e.conns, e.home, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Table("public.orders") != nil || snap.Table("public.kinds") == nil {
		t.Errorf("catalog after undistributing orders: %v", snap.Tables)
	}
	if got := e.rowsOf(0, "public.orders", "id"); !slices.Equal(got, wantOrders) {
		t.Errorf("orders has %d rows after undistribute_table, want its %d", len(got), len(wantOrders))
	}
	// A reference table's rows come back once, not once per copy.
	snap, err = shards.Undistribute(e.ctx, e.store, nil, e.conns, e.home, "public.kinds")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Tables) != 0 {
		t.Errorf("catalog still has %v", snap.Tables)
	}
	if got := e.rowsOf(0, "public.kinds", "id"); !slices.Equal(got, wantKinds) {
		t.Errorf("kinds has %d rows after undistribute_table, want its %d", len(got), len(wantKinds))
	}
	// The guard went with the distribution: the table takes writes again.
	e.exec(0, `DELETE FROM kinds WHERE id = -1`)
	for i := range e.w {
		if got := append(e.relations(i, "public", "orders_"), e.relations(i, "public", "kinds_")...); len(got) != 0 {
			t.Errorf("worker %d still has shards %v", i, got)
		}
	}
	e.noPreparedXacts()

	_, err = shards.Undistribute(e.ctx, e.store, snap, e.conns, e.home, "orders")
	wantCode(t, err, pgerr.UndefinedTable, "not distributed")

	// And it can be distributed again.
	snap, err = shards.Distribute(e.ctx, e.store, e.conns, e.home, "orders", "id", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	e.verifyDistributed(snap, "public.orders", "id", "hashint8", "int8", wantOrders, 4)
}

func TestUndistributeFailure(t *testing.T) {
	e := newEnv(t)
	e.exec(0, `CREATE TABLE t (id bigint PRIMARY KEY, v text)`)
	e.exec(0, `INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g`)
	want := e.rowsOf(0, "public.t", "id")
	snap, err := shards.Distribute(e.ctx, e.store, e.conns, e.home, "t", "id", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	// The shell refuses writes that are not pgfleet's own.
	if _, err := e.conns[e.home].Exec(e.ctx, `INSERT INTO t VALUES (1000, 'in the shell')`); err == nil {
		t.Error("a write into the shell of a distributed table was accepted")
	}
	// A row in the shell that collides with a shard's row: copying back fails.
	e.exec(0, `BEGIN; SET LOCAL pgfleet.internal = on; INSERT INTO t VALUES (1000, 'in the shell'); COMMIT`)
	_, err = shards.Undistribute(e.ctx, e.store, snap, e.conns, e.home, "t")
	wantCode(t, err, "23505", "shard pgfleet_shards.t_")
	e.exec(0, `BEGIN; SET LOCAL pgfleet.internal = on; DELETE FROM t; COMMIT`)
	// Still distributed, rows still in the shards.
	e.verifyDistributed(snap, "public.t", "id", "hashint8", "int8", want, 4)
	loaded, err := e.store.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Table("public.t") == nil {
		t.Error("the failed undistribute_table removed t from the catalog")
	}
}

func TestTableDef(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("l", 62)
	e.exec(0, `CREATE UNLOGGED TABLE things (
		id int NOT NULL,
		"Name" text COLLATE "C" DEFAULT 'x' || 'y',
		tags text[] NOT NULL DEFAULT '{}',
		area int GENERATED ALWAYS AS (id * id) STORED,
		dropped int,
		during tsrange,
		CONSTRAINT things_pk PRIMARY KEY (id) DEFERRABLE,
		CONSTRAINT no_overlap EXCLUDE USING gist (during WITH &&),
		CHECK (id > 0) NOT VALID
	) WITH (fillfactor = 70)`)
	e.exec(0, `ALTER TABLE things DROP COLUMN dropped`)
	e.exec(0, `CREATE UNIQUE INDEX `+long+` ON things (id, lower("Name")) INCLUDE (tags) WHERE id > 10`)
	e.exec(0, `CREATE INDEX things_tags ON things USING gin (tags)`)

	def, err := shards.TableDef(e.ctx, e.w[0], "things")
	if err != nil {
		t.Fatal(err)
	}
	if def.CatalogName() != "public.things" || !def.Unlogged || def.Options != "fillfactor=70" {
		t.Errorf("def %+v", def)
	}
	var cols []string
	for _, c := range def.Columns {
		cols = append(cols, fmt.Sprintf("%s %s/%s nn=%v def=%q gen=%q coll=%q", c.Name, c.Type, c.TypeName, c.NotNull,
			c.Default, c.Generated, c.Collation))
	}
	wantCols := []string{
		`id integer/int4 nn=true def="" gen="" coll=""`,
		`Name text/text nn=false def="('x'::text || 'y'::text)" gen="" coll="pg_catalog.\"C\""`,
		`tags text[]/_text nn=true def="'{}'::text[]" gen="" coll=""`,
		`area integer/int4 nn=false def="" gen="(id * id)" coll=""`,
		`during tsrange/tsrange nn=false def="" gen="" coll=""`,
	}
	if !slices.Equal(cols, wantCols) {
		t.Errorf("columns:\n%s\nwant\n%s", strings.Join(cols, "\n"), strings.Join(wantCols, "\n"))
	}
	if len(def.Constraints) != 3 || def.Constraints[0].Name != "things_pk" || def.Constraints[1].Name != "no_overlap" ||
		def.Constraints[2].Type != 'c' || len(def.Indexes) != 2 {
		t.Errorf("constraints %+v, indexes %+v", def.Constraints, def.Indexes)
	}

	// The statements make an equivalent table.
	for _, s := range def.CreateSQL("public", "things_7") {
		e.exec(0, s)
	}
	describe := func(rel string) []string {
		return e.strings(0, `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' ||
				coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attgenerated::text || ' ' || a.attcollation::text
			FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, rel)
	}
	if a, b := describe("things"), describe("things_7"); !slices.Equal(a, b) {
		t.Errorf("columns differ:\n%v\n%v", a, b)
	}
	defs := func(rel string) []string {
		return e.strings(0, `SELECT contype::text || ' ' || pg_get_constraintdef(oid) || ' ' || condeferrable || ' ' || convalidated
				FROM pg_constraint WHERE conrelid = $1::regclass
			UNION ALL SELECT regexp_replace(pg_get_indexdef(indexrelid), 'INDEX \S+ ON \S+ ', 'INDEX ON ')
				FROM pg_index WHERE indrelid = $1::regclass
			UNION ALL SELECT relpersistence::text || ' ' || array_to_string(reloptions, ',') FROM pg_class WHERE oid = $1::regclass
			ORDER BY 1`, rel)
	}
	if a, b := defs("things"), defs("things_7"); !slices.Equal(a, b) {
		t.Errorf("constraints and indexes differ:\n%s\n--\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	// Names get the shard's suffix; one that would be too long is cut and
	// given a hash of the original.
	names := e.strings(0, `SELECT conname::text FROM pg_constraint WHERE conrelid = 'things_7'::regclass
		UNION ALL SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'things_7'::regclass`)
	slices.Sort(names)
	wantNames := []string{"no_overlap_7", "no_overlap_7", "things_id_check_7", "things_pk_7", "things_pk_7", "things_tags_7"}
	if len(names) != 7 || !slices.Equal(names[1:], wantNames) {
		t.Errorf("names on the copy: %v, want a shortened one and %v", names, wantNames)
	} else if n := names[0]; len(n) != 63 || !strings.HasPrefix(n, long[:52]+"_") || !strings.HasSuffix(n, "_7") {
		t.Errorf("shortened index name %q", n)
	}

	_, err = shards.TableDef(e.ctx, e.w[0], "nothing")
	wantCode(t, err, pgerr.UndefinedTable)
}

// TestTableDefPrivileges: a shard made by Def.CreateSQL has its table's
// owner, its ACL and its columns' ACLs, whoever creates it (here the
// superuser, for a table another role owns); a table whose ACL has a grant
// option, or an item another role granted, is refused (0A000).
func TestTableDefPrivileges(t *testing.T) {
	e := newEnv(t)
	for _, r := range []string{"tdp_owner", "tdp_reader"} {
		e.exec(0, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '"+r+"') THEN CREATE ROLE "+r+"; END IF; END $$")
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP OWNED BY tdp_owner, tdp_reader", "DROP ROLE tdp_owner", "DROP ROLE tdp_reader"} {
			_, _ = e.w[0].Exec(e.ctx, q)
		}
	})
	e.exec(0, `CREATE TABLE acl_t (id int PRIMARY KEY, v text, "Secret" text)`)
	e.exec(0, `ALTER TABLE acl_t OWNER TO tdp_owner`)
	e.exec(0, `SET ROLE tdp_owner`)
	e.exec(0, `REVOKE TRUNCATE ON acl_t FROM tdp_owner`)
	e.exec(0, `GRANT SELECT, INSERT ON acl_t TO tdp_reader`)
	e.exec(0, `GRANT SELECT ON acl_t TO PUBLIC`)
	e.exec(0, `GRANT UPDATE ("Secret") ON acl_t TO tdp_reader`)
	e.exec(0, `RESET ROLE`)

	def, err := shards.TableDef(e.ctx, e.w[0], "acl_t")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range def.CreateSQL("public", "acl_t_7") {
		e.exec(0, s)
	}
	acl := func(rel string) []string {
		return e.strings(0, `SELECT 'owner ' || relowner::regrole::text FROM pg_class WHERE oid = $1::regclass
			UNION ALL SELECT 'table ' || a::text FROM pg_class, unnest(relacl) a WHERE oid = $1::regclass
			UNION ALL SELECT attname || ' ' || a::text FROM pg_attribute, unnest(attacl) a WHERE attrelid = $1::regclass
			ORDER BY 1`, rel)
	}
	a, b := acl("acl_t"), acl("acl_t_7")
	if !slices.Equal(a, b) || len(a) != 5 {
		t.Errorf("privileges differ:\n%s\n--\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}

	// A table with the default ACL: the shard keeps the default too.
	e.exec(0, `CREATE TABLE acl_d (id int)`)
	e.exec(0, `ALTER TABLE acl_d OWNER TO tdp_owner`)
	def, err = shards.TableDef(e.ctx, e.w[0], "acl_d")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range def.CreateSQL("public", "acl_d_7") {
		e.exec(0, s)
	}
	if got := e.strings(0, `SELECT relowner::regrole::text || ' ' || coalesce(relacl::text, 'default') FROM pg_class WHERE oid = 'acl_d_7'::regclass`); !slices.Equal(got, []string{"tdp_owner default"}) {
		t.Errorf("acl_d_7: %v", got)
	}

	// What the creator's default privileges give a new table is not the
	// shard's (an adversary read a table through them): a table with
	// its own ACL, and one with the default.
	e.exec(0, `ALTER DEFAULT PRIVILEGES GRANT SELECT, UPDATE ON TABLES TO tdp_reader`)
	e.exec(0, `CREATE TABLE acl_p (id int, v text)`)
	e.exec(0, `REVOKE ALL ON acl_p FROM tdp_reader`)
	e.exec(0, `ALTER TABLE acl_p OWNER TO tdp_owner`)
	effective := func(rel string) []string {
		return e.strings(0, `SELECT r || ' ' || p || ' ' || pg_catalog.has_table_privilege(r, $1, p)
				|| ' ' || pg_catalog.has_column_privilege(r, $1, 'id', CASE WHEN p IN ('SELECT', 'INSERT', 'UPDATE', 'REFERENCES') THEN p ELSE 'SELECT' END)
			FROM unnest(ARRAY['tdp_owner', 'tdp_reader', 'postgres']) r,
				unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p ORDER BY 1`, rel)
	}
	for _, tb := range []string{"acl_p", "acl_d", "acl_t"} {
		def, err := shards.TableDef(e.ctx, e.w[0], tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range def.CreateSQL("public", tb+"_8") {
			e.exec(0, s)
		}
		if a, b := effective(tb), effective(tb+"_8"); !slices.Equal(a, b) {
			t.Errorf("%s_8 made under default privileges: privileges differ:\n%s\n--\n%s", tb, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	}
	e.exec(0, `ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM tdp_reader`)

	// Grant options cannot be copied as they are.
	for _, tc := range []struct{ grant, table string }{
		{`GRANT SELECT ON acl_d TO tdp_reader WITH GRANT OPTION`, "acl_d"},
		{`GRANT UPDATE (id) ON acl_t TO tdp_reader WITH GRANT OPTION`, "acl_t"},
	} {
		e.exec(0, tc.grant)
		var pe *pgerr.Error
		if _, err := shards.TableDef(e.ctx, e.w[0], tc.table); !errors.As(err, &pe) || pe.Code != pgerr.FeatureNotSupported {
			t.Errorf("%s, then TableDef: %v, want 0A000", tc.grant, err)
		}
	}
}
