package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestScatterAfterAlterElsewhere: an ALTER TABLE through one coordinator
// changes a column's type; another coordinator's multi-shard statements of
// the extended protocol then answer as PostgreSQL does: one the client
// prepared before fails with 0A000, one it prepares after answers in the
// new types. Found while testing DDL through a second coordinator:
//   - "alone": the first execution of each statement after the ALTER
//     failed with 0A000, the reading coordinator not told of the DDL;
//   - "catalog": after a catalog change as well, a statement prepared
//     before was bound with the parameter types of the new description,
//     not the ones its client encodes its values by (08P01 "insufficient
//     data left in message"), or answered in types it was not told of;
//   - "deaf": a coordinator that never hears of the DDL (no gossip, no
//     poll) may fail a statement prepared after it once with 0A000, never
//     answers in types it did not describe, and answers the next time.
func TestScatterAfterAlterElsewhere(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	srv2 := pgtest.Coordinator(t, cl, nil)
	for _, tc := range []struct {
		name                string
		catalogChange, deaf bool
	}{{"alone", false, false}, {"catalog", true, false}, {"deaf", false, true}} {
		t.Run(tc.name, func(t *testing.T) { alterElsewhere(t, cl, srv.Addr(), srv2.Addr(), tc.name, tc.catalogChange, tc.deaf) })
	}
}

// alterElsewhere runs the ALTER through addr2 (addr itself for the same
// coordinator) and compares statements on addr with PostgreSQL's.
func alterElsewhere(t *testing.T, cl *pgcluster.Cluster, addr, addr2, p string, catalogChange, deaf bool) {
	ctx := context.Background()
	c2 := connect(t, addr2)
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	rename := twinTables(t, connect(t, addr), direct, p, `
CREATE TABLE %[1]s_t (id int PRIMARY KEY, k int);
INSERT INTO %[1]s_t SELECT g, g * 7 FROM generate_series(1, 100) g;
CREATE TABLE %[1]s_u (id int PRIMARY KEY, k int);`, []string{"t", "u"}, []string{
		"SELECT create_distributed_table('" + p + "_t', 'id', shard_count => 8)",
	})
	if deaf {
		addr = pgtest.Coordinator(t, cl, func(cfg *coordinator.Config) { cfg.CatalogPoll = time.Hour }).Addr()
	}
	c := connect(t, addr)
	queries := []string{
		"SELECT id, k FROM {t} WHERE k > $1 ORDER BY id LIMIT 3",
		"SELECT k % 3, sum(k), max(k) FROM {t} WHERE id > $1 GROUP BY 1 ORDER BY 1",
	}
	cBefore := connect(t, addr)
	dBefore := connect(t, cl.Servers[0].Addr())
	run := func(conn *pgx.Conn, mode pgx.QueryExecMode, sql string) (scatterResult, error) {
		return scatterQuery(ctx, conn, mode, sql, []any{int64(5)})
	}
	for _, q := range queries {
		qC, qD := rename(q)
		for i := 0; i < 3; i++ {
			if _, err := run(c, pgx.QueryExecModeExec, qC); err != nil {
				t.Fatalf("%s before the ALTER: %v", q, err)
			}
		}
		if _, err := run(cBefore, pgx.QueryExecModeCacheStatement, qC); err != nil {
			t.Fatal(err)
		}
		if _, err := run(dBefore, pgx.QueryExecModeCacheStatement, qD); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere := addr2 != addr
	if elsewhere {
		exec(t, c2, "SELECT 1", simple)
		time.Sleep(time.Second) // the second coordinator's poll has the distribution
	}
	aC, aD := rename("ALTER TABLE {t} ALTER COLUMN k TYPE int8")
	exec(t, c2, aC, simple)
	exec(t, direct, aD, simple)
	if catalogChange {
		uC, _ := rename("SELECT create_distributed_table('{u}', 'id', shard_count => 4)")
		exec(t, c2, uC, simple)
	}
	if elsewhere && !deaf {
		time.Sleep(1500 * time.Millisecond) // the first coordinator's poll
	}

	fresh := connect(t, addr)
	for _, q := range queries {
		qC, qD := rename(q)
		for _, tc := range []struct {
			conn *pgx.Conn
			mode pgx.QueryExecMode
			what string
		}{
			{c, pgx.QueryExecModeExec, "unnamed, the same connection"},
			{c, pgx.QueryExecModeExec, "unnamed, the same connection again"},
			{fresh, pgx.QueryExecModeCacheStatement, "named, a new connection"},
			{fresh, pgx.QueryExecModeExec, "unnamed, a new connection"},
		} {
			want, err := run(direct, tc.mode, qD)
			if err != nil {
				t.Fatal(err)
			}
			got, err := run(tc.conn, tc.mode, qC)
			if err != nil && deaf && sqlState(err) == "0A000" {
				// Not told of the DDL, the coordinator described the
				// statement as before it; the worker said otherwise.
				tc.conn.DeallocateAll(ctx)
				got, err = run(tc.conn, tc.mode, qC)
			}
			if err != nil {
				t.Errorf("%s after the ALTER (%s): %v", q, tc.what, err)
				continue
			}
			sameResult(t, fmt.Sprintf("%s (%s)", q, tc.what), got, want, true)
		}
		_, errC := run(cBefore, pgx.QueryExecModeCacheStatement, qC)
		_, errD := run(dBefore, pgx.QueryExecModeCacheStatement, qD)
		if sqlState(errC) != sqlState(errD) {
			t.Errorf("%s prepared before the ALTER: %v, want %v", q, errC, errD)
		}
	}
}

// TestDDLTellsTheFleet: a transaction that changed a table moves the
// durable catalog version, which the fleet watches, once it ends; DDL of
// a temporary object, which no other session sees, does not.
func TestDDLTellsTheFleet(t *testing.T) {
	cl := pgtest.Start(t, 1)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	meta := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	version := func() int64 {
		var v int64
		if err := meta.QueryRow(context.Background(), "SELECT version FROM pgfleet.catalog_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	exec(t, c, "CREATE TABLE tf_t (id int)", simple)
	v := version()
	exec(t, c, "CREATE TEMP TABLE tf_tmp (id int)", simple)
	exec(t, c, "ALTER TABLE pg_temp.tf_tmp ADD COLUMN k int", simple)
	if got := version(); got != v {
		t.Errorf("temporary object's DDL moved the catalog version from %d to %d", v, got)
	}
	exec(t, c, "BEGIN", simple)
	exec(t, c, "ALTER TABLE tf_t ADD COLUMN k int", simple)
	if got := version(); got != v {
		t.Errorf("the version moved to %d before the transaction ended", got)
	}
	exec(t, c, "COMMIT", simple)
	if got := version(); got != v+1 {
		t.Errorf("after ALTER TABLE: version %d, want %d", got, v+1)
	}
	if got := srv.CatalogVersion(); got != v+1 {
		t.Errorf("the coordinator holds version %d, want %d", got, v+1)
	}
}

// TestSelectStarWaitsOnAlterElsewhere: a multi-shard SELECT * of the simple
// protocol whose constants are bound waits on an ALTER TABLE ... ADD COLUMN
// made through another coordinator, which this one never hears of; it
// then answers with the new column, as PostgreSQL (found while testing DDL
// through a second coordinator: the run again after the shards' statement
// changed kept the description from before, two columns for rows of three).
func TestSelectStarWaitsOnAlterElsewhere(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) { selectStarWaits(t, workers) })
	}
}

func selectStarWaits(t *testing.T, workers int) {
	cl := pgtest.Start(t, workers)
	ctx := context.Background()
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE sw_t (id int PRIMARY KEY, a int)", simple)
	exec(t, c, "SELECT create_distributed_table('sw_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO sw_t SELECT g, g FROM generate_series(1, 8) g", simple)
	deafAddr := pgtest.Coordinator(t, cl, func(cfg *coordinator.Config) { cfg.CatalogPoll = time.Hour }).Addr()
	deaf := connect(t, deafAddr)
	width := func() (int, error) {
		res, err := deaf.PgConn().Exec(ctx, "SELECT * FROM sw_t ORDER BY id LIMIT 2").ReadAll()
		if err != nil {
			return 0, err
		}
		for _, row := range res[0].Rows {
			if len(row) != len(res[0].FieldDescriptions) {
				return 0, fmt.Errorf("a row of %d values under a description of %d columns", len(row), len(res[0].FieldDescriptions))
			}
		}
		return len(res[0].FieldDescriptions), nil
	}
	for i := 0; i < 3; i++ {
		if n, err := width(); err != nil || n != 2 {
			t.Fatalf("before the ALTER: %d columns, %v", n, err)
		}
	}
	// A temporary table's DDL through the reading coordinator: its
	// connections prepare their statements again (and wait on the
	// ALTER's lock at the Parse, not at the Bind).
	exec(t, connect(t, deafAddr), "CREATE TEMP TABLE sw_tmp (x int)", simple)
	exec(t, c, "BEGIN", simple)
	exec(t, c, "ALTER TABLE sw_t ADD COLUMN x int DEFAULT 7", simple)
	type answer struct {
		n   int
		err error
	}
	done := make(chan answer, 1)
	go func() {
		n, err := width()
		done <- answer{n, err}
	}()
	waitForLock(t, cl)
	exec(t, c, "COMMIT", simple)
	select {
	case got := <-done:
		if got.err != nil || got.n != 3 {
			t.Errorf("SELECT * that waited on the ALTER: %d columns, %v; want 3", got.n, got.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("SELECT * still waits after the COMMIT")
	}
}

// waitForLock waits (5 s at most) until a backend of a worker of cl waits
// for a lock.
func waitForLock(t *testing.T, cl *pgcluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	var watch []*pgx.Conn
	for _, s := range cl.Servers {
		watch = append(watch, connect(t, s.Addr()))
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, w := range watch {
			var n int
			if w.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&n) == nil && n > 0 {
				return
			}
		}
	}
	t.Fatal("no worker backend waits for a lock")
}

// TestParseAfterAlterTypes: a statement a client prepares after an ALTER
// TABLE that changed a column's type is analysed with the new type, its
// parameters' included, as on PostgreSQL, though another client prepared
// the same text before; on the coordinator the DDL went through and on
// another (found by an adversary round: a new Parse was given the
// statement interned before, with its old parameter types, so that
// `k = $1` compared as date with k a timestamp, and an INSERT stored the
// date of a timestamp).
func TestParseAfterAlterTypes(t *testing.T) {
	cl := pgtest.Start(t, 2)
	ctx := context.Background()
	srv := pgtest.Coordinator(t, cl, nil)
	srv2 := pgtest.Coordinator(t, cl, nil)
	direct := connect(t, cl.Servers[0].Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	for _, through := range []string{"same", "other"} {
		t.Run(through, func(t *testing.T) {
			p := "pa_" + through
			ddl := connect(t, srv.Addr())
			if through == "other" {
				ddl = connect(t, srv2.Addr())
			}
			rename := twinTables(t, connect(t, srv.Addr()), direct, p, `
CREATE TABLE %[1]s_t (id int PRIMARY KEY, k date);
INSERT INTO %[1]s_t VALUES (1, '2024-01-01'), (2, '2024-01-02');`, []string{"t"}, []string{
				"SELECT create_distributed_table('" + p + "_t', 'id', shard_count => 4)",
			})
			texts := []string{
				"SELECT id FROM {t} WHERE k = $1 ORDER BY id",
				"INSERT INTO {t} (id, k) VALUES ($1, $2)",
				"UPDATE {t} SET k = $2 WHERE id = $1",
			}
			// Another client prepares and runs each text before the ALTER.
			before := connect(t, srv.Addr())
			for _, q := range texts {
				qC, _ := rename(q)
				sd, err := before.Prepare(ctx, "", qC)
				if err != nil {
					t.Fatal(err)
				}
				if sd.ParamOIDs[len(sd.ParamOIDs)-1] != pgtype.DateOID {
					t.Fatalf("%s before the ALTER: parameter types %v", q, sd.ParamOIDs)
				}
			}
			if _, err := before.Exec(ctx, rename2(rename, texts[0]), "2024-01-01"); err != nil {
				t.Fatal(err)
			}
			aC, aD := rename("ALTER TABLE {t} ALTER COLUMN k TYPE timestamp")
			exec(t, ddl, aC, simple)
			exec(t, direct, aD, simple)
			if through == "other" {
				time.Sleep(1500 * time.Millisecond) // the poll (no gossip here)
			}
			after := connect(t, srv.Addr())
			for _, q := range texts {
				qC, _ := rename(q)
				sd, err := after.Prepare(ctx, "", qC)
				if err != nil {
					t.Fatalf("%s after the ALTER: %v", q, err)
				}
				if got := sd.ParamOIDs[len(sd.ParamOIDs)-1]; got != pgtype.TimestampOID {
					t.Errorf("%s after the ALTER: last parameter of type %d, want timestamp (%d)", q, got, pgtype.TimestampOID)
				}
			}
			iC, iD := rename(texts[1])
			uC, uD := rename(texts[2])
			for _, step := range []struct {
				c   *pgx.Conn
				sql string
			}{{after, iC}, {direct, iD}} {
				if _, err := step.c.Exec(ctx, step.sql, 3, "2024-01-01 12:34"); err != nil {
					t.Fatal(err)
				}
			}
			for _, step := range []struct {
				c   *pgx.Conn
				sql string
			}{{after, uC}, {direct, uD}} {
				if _, err := step.c.Exec(ctx, step.sql, 2, "2024-01-02 08:00"); err != nil {
					t.Fatal(err)
				}
			}
			sC, sD := rename("SELECT id || ' ' || k::text FROM {t} ORDER BY id")
			if got, want := queryStrings(t, after, sC), queryStrings(t, direct, sD); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rows after the writes: %v, want %v", got, want)
			}
			qC, qD := rename(texts[0])
			var got, want []int32
			for _, step := range []struct {
				c   *pgx.Conn
				sql string
				out *[]int32
			}{{after, qC, &got}, {direct, qD, &want}} {
				rows, err := step.c.Query(ctx, step.sql, "2024-01-01 12:34")
				if err != nil {
					t.Fatal(err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
				if err != nil {
					t.Fatal(err)
				}
				*step.out = ids
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || len(want) != 1 {
				t.Errorf("k = '2024-01-01 12:34': ids %v, want %v", got, want)
			}
		})
	}
}

func rename2(rename func(string) (string, string), q string) string {
	c, _ := rename(q)
	return c
}

// TestParseAfterAlterInBlock: in the transaction block that changed a
// column's type, a statement the client prepares next has the new type,
// though the text was prepared before by another client.
func TestParseAfterAlterInBlock(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	for _, distributed := range []bool{true, false} {
		t.Run(fmt.Sprint("distributed ", distributed), func(t *testing.T) { parseInBlock(t, srv.Addr(), distributed) })
	}
}

func parseInBlock(t *testing.T, addr string, distributed bool) {
	ctx := context.Background()
	c := connect(t, addr)
	simple := pgx.QueryExecModeSimpleProtocol
	tbl := "pb_plain"
	if distributed {
		tbl = "pb_t"
	}
	exec(t, c, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, k date)", simple)
	if distributed {
		exec(t, c, "SELECT create_distributed_table('pb_t', 'id', shard_count => 4)", simple)
	}
	exec(t, c, "INSERT INTO "+tbl+" VALUES (1, '2024-01-01')", simple)
	ins := "INSERT INTO " + tbl + " (id, k) VALUES ($1, $2)"
	if _, err := connect(t, addr).Exec(ctx, ins, 2, "2024-01-02"); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "BEGIN", simple)
	exec(t, c, "ALTER TABLE "+tbl+" ALTER COLUMN k TYPE timestamp", simple)
	sd, err := c.Prepare(ctx, "", ins)
	if err != nil {
		t.Fatal(err)
	}
	if got := sd.ParamOIDs[1]; got != pgtype.TimestampOID {
		t.Errorf("prepared in the block after the ALTER: parameter of type %d, want timestamp", got)
	}
	if _, err := c.Exec(ctx, ins, 1001, "2024-01-03 12:34"); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "COMMIT", simple)
	if got := queryString(t, c, "SELECT k::text FROM "+tbl+" WHERE id = 1001"); got != "2024-01-03 12:34:00" {
		t.Errorf("the row written in the block: k = %s, want 2024-01-03 12:34:00", got)
	}
}

// TestFailedParseLeavesNoName: a multi-shard statement whose Parse fails
// (an operator that does not exist) defines no name, as on PostgreSQL: the
// name can be prepared again, and the unnamed statement is gone (found by
// an adversary round: 42P05 "already exists", and a Bind ran the failed
// statement again).
func TestFailedParseLeavesNoName(t *testing.T) {
	cl := pgtest.Start(t, 2)
	ctx := context.Background()
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE fp_t (id int PRIMARY KEY, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('fp_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO fp_t VALUES (1, 'a'), (2, 'b')", simple)
	exec(t, c, "CREATE TABLE fp_plain (id int PRIMARY KEY, v text)", simple)
	pc := connect(t, srv.Addr()).PgConn()
	for _, name := range []string{"x", ""} {
		for _, failing := range []string{"SELECT sum(v) FROM fp_t", "SELECT sum(v) FROM fp_plain"} {
			if name == "" {
				// An unnamed statement that answers, then a failed Parse
				// of the unnamed statement, which drops it first (found
				// by an adversary round: the Bind ran the one before).
				if _, err := pc.Prepare(ctx, "", "SELECT id FROM fp_t ORDER BY id LIMIT 1", nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pc.Prepare(ctx, name, failing, nil); sqlState(err) != "42883" {
				t.Fatalf("Parse %q of %s: %v, want 42883", name, failing, err)
			}
			if name == "" {
				res := pc.ExecPrepared(ctx, "", nil, nil, nil).Read()
				if sqlState(res.Err) != "26000" {
					t.Errorf("Bind of the unnamed statement after its failed Parse (%s): %v %v, want 26000", failing, res.Rows, res.Err)
				}
			}
		}
		if name == "" {
			continue
		}
		if _, err := pc.Prepare(ctx, name, "SELECT count(*) FROM fp_t", nil); err != nil {
			t.Fatalf("Parse %q again: %v", name, err)
		}
		res := pc.ExecPrepared(ctx, name, nil, nil, nil).Read()
		if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != "2" {
			t.Errorf("count(*) prepared under the name again: %v %v", res.Rows, res.Err)
		}
	}
}

// TestRoutedParseRefused: a routed statement PostgreSQL refuses at Parse
// is refused at a Parse sent alone (libpq's PQprepare) and defines no
// name (found by an adversary round: ParseComplete, then 42P05 for the
// name's next Parse).
func TestRoutedParseRefused(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE rp_t (id int PRIMARY KEY, k int, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('rp_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO rp_t VALUES (3, 3, 'c')", simple)
	r := rawConnect(t, srv.Addr())
	for _, tc := range []struct{ sql, code string }{
		{"SELECT sum(v) FROM rp_t WHERE id = 3", "E42883"},
		{"INSERT INTO rp_t (id, k) VALUES ($1, 'x')", "E22P02"},
	} {
		r.expect(tc.sql, r.round(&pgproto3.Parse{Name: "z", Query: tc.sql}), tc.code+",ZI")
	}
	r.expect("Parse z again", r.round(&pgproto3.Parse{Name: "z", Query: "SELECT k FROM rp_t WHERE id = 3"}), "ZI")
	r.expect("Bind z", r.round(&pgproto3.Bind{PreparedStatement: "z"}, &pgproto3.Execute{}), "3,C SELECT 1,ZI")
}

// TestRoutedParseRefusedInTransaction: a routed statement's Parse that
// PostgreSQL refuses fails the transaction block it comes in, whether the
// session's transaction holds a connection on the statement's worker or
// not, so that COMMIT rolls back; and a pinned session's refused Parse
// defines no name (adversary rounds: ParseComplete, and a COMMIT that
// committed what PostgreSQL rolls back).
func TestRoutedParseRefusedInTransaction(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "CREATE TABLE rpt_t (id int PRIMARY KEY, k int, v text)", simple)
	exec(t, c, "SELECT create_distributed_table('rpt_t', 'id', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO rpt_t SELECT g, g, 'x' FROM generate_series(1, 8) g", simple)
	r := rawConnect(t, srv.Addr())
	for i, bad := range []string{
		"SELECT nosuch FROM rpt_t WHERE id = $1",
		"SELECT nosuch FROM rpt_t WHERE id = 1",
		"SELECT nosuch FROM rpt_t WHERE id = 2",
		"UPDATE rpt_t SET k = 'x' WHERE id = $1",
	} {
		for _, write := range []int{1, 2, 5, 6} {
			r.expect("BEGIN", r.round(&pgproto3.Query{String: "BEGIN"}), "C BEGIN,ZT")
			w := fmt.Sprintf("UPDATE rpt_t SET v = 'y' WHERE id = %d", write)
			r.expect(w, r.round(&pgproto3.Query{String: w}), "C UPDATE 1,ZT")
			name := fmt.Sprintf("b%d_%d", i, write)
			got := strings.Join(r.round(&pgproto3.Parse{Name: name, Query: bad}), ",")
			if !strings.HasPrefix(got, "E42703,") && !strings.HasPrefix(got, "E22P02,") || !strings.HasSuffix(got, ",ZE") {
				t.Errorf("%s after a write to %d in a transaction: %s, want its error and ZE", bad, write, got)
			}
			r.expect("COMMIT", r.round(&pgproto3.Query{String: "COMMIT"}), "C ROLLBACK,ZI")
			r.expect("Describe "+name, r.round(&pgproto3.Describe{ObjectType: 'S', Name: name}), "E26000,ZI")
		}
	}
	if n := queryString(t, c, "SELECT count(*)::text FROM rpt_t WHERE v = 'y'"); n != "0" {
		t.Errorf("%s rows of rolled-back transactions committed", n)
	}
	// In a pipeline, before its Sync: after a write outside a block (its
	// implicit transaction rolls back) and in one (COMMIT rolls back),
	// wherever the write and the refused statement's rows are.
	for _, block := range []bool{false, true} {
		for w := 40; w < 44; w++ {
			for bad := 1; bad <= 4; bad++ {
				if block {
					r.expect("BEGIN", r.round(&pgproto3.Query{String: "BEGIN"}), "C BEGIN,ZT")
				}
				name := fmt.Sprintf("pipe%v_%d_%d", block, w, bad)
				got := strings.Join(r.round(
					&pgproto3.Parse{Query: fmt.Sprintf("INSERT INTO rpt_t VALUES (%d, 0, 'pipe')", w)}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Name: name, Query: fmt.Sprintf("SELECT nosuch FROM rpt_t WHERE id = %d", bad)}), ",")
				want := "C INSERT 0 1,E42703,ZI"
				if block {
					want = "C INSERT 0 1,E42703,ZE"
				}
				if got != want {
					t.Errorf("pipeline (block %v), a write to %d, then a refused Parse of row %d: %s, want %s", block, w, bad, got, want)
				}
				if block {
					r.expect("COMMIT", r.round(&pgproto3.Query{String: "COMMIT"}), "C ROLLBACK,ZI")
				}
				r.expect("Parse "+name+" again", r.round(&pgproto3.Parse{Name: name, Query: "SELECT 1"}), "ZI")
			}
		}
	}
	if n := queryString(t, c, "SELECT count(*)::text FROM rpt_t WHERE v = 'pipe'"); n != "0" {
		t.Errorf("%s rows of rolled-back pipelines committed", n)
	}
	// A pinned session (a temporary table): the refused Parse defines no
	// name, which a valid Parse then defines.
	r.expect("CREATE TEMP TABLE", r.round(&pgproto3.Query{String: "CREATE TEMP TABLE rpt_tmp (x int)"}), "C CREATE TABLE,ZI")
	for i, bad := range []string{"SELECT nosuch FROM rpt_t WHERE id = $1", "SELECT nosuch FROM rpt_t WHERE id = 2"} {
		name := fmt.Sprintf("p%d", i)
		got := strings.Join(r.round(&pgproto3.Parse{Name: name, Query: bad}), ",")
		if !strings.HasPrefix(got, "E42703,") {
			t.Errorf("pinned: %s: %s, want 42703", bad, got)
		}
		r.expect("Parse "+name+" again", r.round(&pgproto3.Parse{Name: name, Query: "SELECT k FROM rpt_t WHERE id = 3"}), "ZI")
		r.expect("Describe "+name, r.round(&pgproto3.Describe{ObjectType: 'S', Name: name}), "ZI")
	}
}
