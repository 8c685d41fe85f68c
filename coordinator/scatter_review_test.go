package coordinator_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// reviewCase is one query shape: run through the coordinator and on
// unsharded copies of the tables, directly on a worker.
type reviewCase struct {
	sql     string
	args    []any
	ordered bool // ORDER BY fixes the order of every row
	refuse  bool // must fail with 0A000
	sameErr bool // must fail with the SQLSTATE PostgreSQL gives
	count   bool // only the number of rows is fixed (LIMIT without ORDER BY)
}

// reviewSetup makes the review's tables: rv_d (distributed, 6 shards over
// both workers), rv_d2 (colocated), rv_e (colocated, empty) and rv_r
// (reference), and unsharded copies rvp_* on the first worker.
func reviewSetup(t *testing.T) (c, direct *pgx.Conn, rename func(string) (string, string), addr, pgAddr string, workers []string) {
	cl := pgtest.Shared(t)
	for _, s := range cl.Servers {
		workers = append(workers, s.Addr())
	}
	srv := pgtest.Coordinator(t, cl, nil)
	addr, pgAddr = srv.Addr(), cl.Servers[0].Addr()
	c = connect(t, addr)
	direct = connect(t, pgAddr)
	const schema = `
CREATE TABLE %[1]s_d (id bigint PRIMARY KEY, g int, x int, big bigint, n numeric(12,3), nn numeric, f float8, t text, b bool,
	d date, "Mixed Col" int, "sp ace" text);
CREATE TABLE %[1]s_d2 (id bigint, y int);
CREATE TABLE %[1]s_e (id bigint PRIMARY KEY, g int, x int, t text, b bool, n numeric);
CREATE TABLE %[1]s_r (k int PRIMARY KEY, name text);
INSERT INTO %[1]s_d SELECT i, CASE WHEN i %% 17 = 0 THEN NULL ELSE i %% 6 END,
	CASE WHEN i %% 7 = 0 OR i %% 6 = 5 THEN NULL ELSE (i * 37) %% 101 - 40 END,
	CASE WHEN i %% 2 = 0 THEN 4000000000000000000 ELSE -3000000000000000000 END + i,
	CASE WHEN i %% 9 = 0 THEN NULL ELSE round(i / 7.0, 3) END,
	CASE i %% 4 WHEN 0 THEN 1.5 WHEN 1 THEN 2.25 WHEN 2 THEN 3.125 ELSE NULL END,
	i / 8.0, CASE WHEN i %% 13 = 0 THEN NULL ELSE (ARRAY['apple', 'Banana', 'cherry', 'apple pie', 'Äpfel', 'zeta', ''])[i %% 7 + 1] END,
	CASE WHEN i %% 5 = 0 THEN NULL ELSE i %% 3 <> 0 END, DATE '2024-02-27' + i %% 5, i %% 4, 's ' || i %% 3
	FROM generate_series(1, 300) i;
INSERT INTO %[1]s_d2 SELECT i, i %% 10 FROM generate_series(1, 300, 2) i;
INSERT INTO %[1]s_r SELECT i, 'name ' || i FROM generate_series(0, 4) i;`
	rename = twinTables(t, c, direct, "rv", schema, []string{"d", "d2", "e", "r"}, []string{
		"SELECT create_distributed_table('rv_d', 'id', shard_count => 6)",
		"SELECT create_distributed_table('rv_d2', 'id', colocate_with => 'rv_d')",
		"SELECT create_distributed_table('rv_e', 'id', colocate_with => 'rv_d')",
		"SELECT create_reference_table('rv_r')",
	})
	return c, direct, rename, addr, pgAddr, workers
}

// reviewRun checks cases in every protocol mode.
func reviewRun(t *testing.T, c, direct *pgx.Conn, rename func(string) (string, string), cases []reviewCase) {
	ctx := context.Background()
	for _, tc := range cases {
		sqlC, sqlD := rename(tc.sql)
		for _, mode := range scatterModes {
			got, err := scatterQuery(ctx, c, mode, sqlC, tc.args)
			if tc.refuse {
				if sqlState(err) != "0A000" {
					t.Errorf("%s (%v): %v (%d rows), want 0A000", tc.sql, mode, err, len(got.rows))
				}
				continue
			}
			want, werr := scatterQuery(ctx, direct, mode, sqlD, tc.args)
			if tc.sameErr {
				if werr == nil || sqlState(err) != sqlState(werr) {
					t.Errorf("%s (%v): %v, want %v", tc.sql, mode, err, werr)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s (%v): %v", tc.sql, mode, err)
				continue
			}
			if werr != nil {
				t.Fatalf("%s on PostgreSQL (%v): %v", tc.sql, mode, werr)
			}
			if tc.count {
				if len(got.rows) != len(want.rows) {
					t.Errorf("%s (%v): %d rows, want %d", tc.sql, mode, len(got.rows), len(want.rows))
				}
				continue
			}
			sameResult(t, fmt.Sprintf("%s (%v)", tc.sql, mode), got, want, tc.ordered)
		}
	}
	if got := queryString(t, c, "SELECT 'still usable'"); got != "still usable" {
		t.Error(got)
	}
}

// TestScatterReview runs adversarial multi-shard query shapes.
func TestScatterReview(t *testing.T) {
	c, direct, rename, addr, pgAddr, workers := reviewSetup(t)
	cases := []reviewCase{
		// Aggregates inside expressions.
		{sql: "SELECT sum(x) + 1, count(*) * 2, coalesce(max(x), 0), CASE WHEN count(*) > 10 THEN 'many' ELSE 'few' END FROM {d}"},
		{sql: "SELECT g, sum(x) + count(*), max(x) - min(x), coalesce(sum(x), -1) FROM {d} GROUP BY g"},
		{sql: "SELECT g, CASE WHEN bool_and(b) THEN avg(x) ELSE sum(n) END FROM {d} GROUP BY g ORDER BY g NULLS FIRST", ordered: true},
		{sql: "SELECT round(avg(x), 2), sum(x)::float8 / count(x), count(*) FILTER (WHERE x > 0) FROM {d}"},
		// Aggregates in ORDER BY / HAVING that are not in the select list.
		{sql: "SELECT g FROM {d} GROUP BY g HAVING max(x) > 50 ORDER BY min(x), g NULLS FIRST", ordered: true},
		{sql: "SELECT g, count(*) FROM {d} GROUP BY g ORDER BY sum(x) DESC NULLS LAST, g", ordered: true},
		{sql: "SELECT 1 FROM {d} ORDER BY count(*)"},
		// GROUP BY expressions, ORDER BY expressions, aliases, positions.
		{sql: "SELECT g % 3, count(*) FROM {d} GROUP BY g % 3"},
		{sql: "SELECT g % 3 AS m, count(*) AS c FROM {d} GROUP BY 1 ORDER BY m NULLS FIRST", ordered: true},
		{sql: "SELECT g % 3 AS m, count(*) AS c FROM {d} GROUP BY 1 ORDER BY c, 1", ordered: true},
		{sql: "SELECT (g % 3) * 10 + 1, count(*) FROM {d} GROUP BY g % 3"},
		{sql: "SELECT lower(t), count(*) FROM {d} GROUP BY lower(t) ORDER BY 1 NULLS FIRST", ordered: true},
		{sql: "SELECT t, count(*) FROM {d} GROUP BY t ORDER BY t DESC", ordered: true},
		{sql: "SELECT id * 2 AS x FROM {d} ORDER BY x + 1 DESC NULLS LAST, 1 LIMIT 4", ordered: true},
		{sql: "SELECT id AS x, x AS id FROM {d} ORDER BY id NULLS FIRST, 1 LIMIT 6", ordered: true},
		{sql: "SELECT id FROM {d} ORDER BY g NULLS FIRST, x DESC, id LIMIT 9 OFFSET 3", ordered: true},
		// A collated ORDER BY name is an input column, not the output one.
		{sql: "SELECT id, (10 - id)::text AS t FROM {d} ORDER BY t COLLATE \"C\" NULLS FIRST, id LIMIT 5", ordered: true},
		{sql: "SELECT t AS g2, g AS t, count(*) FROM {d} GROUP BY {d}.t, g ORDER BY t COLLATE \"C\", 2", ordered: true},
		{sql: "SELECT t, id FROM {d} ORDER BY t COLLATE \"C\" DESC, id LIMIT 5", ordered: true},
		// DISTINCT, DISTINCT ON.
		{sql: "SELECT DISTINCT g FROM {d} ORDER BY g DESC NULLS LAST", ordered: true},
		{sql: "SELECT DISTINCT g, b FROM {d} ORDER BY 2, 1 LIMIT 5", ordered: true},
		{sql: "SELECT DISTINCT ON (g) g, id, x FROM {d} ORDER BY g, x DESC NULLS LAST, id", ordered: true},
		{sql: "SELECT DISTINCT ON (g) g, id FROM {d} ORDER BY g, id DESC LIMIT 3 OFFSET 1", ordered: true},
		{sql: "SELECT DISTINCT ON (b) b, t FROM {d} ORDER BY b, t NULLS FIRST", ordered: true},
		{sql: "SELECT DISTINCT 1 FROM {d}"},
		{sql: "SELECT DISTINCT 'a', 2 FROM {d}"},
		// LIMIT ALL, OFFSET without LIMIT, LIMIT 0.
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT ALL", ordered: true},
		{sql: "SELECT id FROM {d} ORDER BY id OFFSET 290", ordered: true},
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT 0"},
		{sql: "SELECT id FROM {d} LIMIT 0"},
		{sql: "SELECT count(*) FROM {d} LIMIT 0"},
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT NULL OFFSET NULL", ordered: true},
		{sql: "SELECT id FROM {d} ORDER BY id DESC FETCH FIRST 3 ROWS WITH TIES", ordered: true},
		{sql: "SELECT g FROM {d} ORDER BY g FETCH FIRST 3 ROWS WITH TIES"},
		{sql: "SELECT g FROM {d} ORDER BY g OFFSET 40 ROWS FETCH FIRST 2 ROWS WITH TIES"},
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT 2.5", ordered: true},
		// NULLs, empty tables, empty groups.
		{sql: "SELECT min(x), max(x), sum(x), avg(x), count(x), bool_and(b), bit_or(x) FROM {d} WHERE x IS NULL"},
		{sql: "SELECT count(*), sum(x), avg(x), min(t), max(n), bool_and(b), bool_or(b), every(b), count(n) FROM {e}"},
		{sql: "SELECT g, count(*) FROM {e} GROUP BY g"},
		{sql: "SELECT count(*) FROM {e} GROUP BY g"},
		{sql: "SELECT DISTINCT g FROM {e}"},
		{sql: "SELECT id FROM {e} ORDER BY id LIMIT 3"},
		{sql: "SELECT 1 FROM {e} HAVING count(*) = 0"},
		{sql: "SELECT g, avg(x), sum(x), min(x) FROM {d} GROUP BY g"},
		// Big sums, numeric scale, bool_and with NULLs.
		{sql: "SELECT sum(big), avg(big), min(big), max(big), sum(big) / count(*) FROM {d}"},
		{sql: "SELECT g, sum(big), avg(big) FROM {d} GROUP BY g"},
		{sql: "SELECT sum(n), avg(n), min(n), max(n), sum(nn), avg(nn), avg(nn * 3), sum(n) / 7 FROM {d}"},
		{sql: "SELECT g, avg(nn), sum(nn), avg(n) FROM {d} GROUP BY g"},
		{sql: "SELECT b, bool_and(b), bool_or(b), every(x > 0), bool_and(x > -100), count(*) FROM {d} GROUP BY b"},
		{sql: "SELECT avg(x::int2), sum(x::int2), avg(f), sum(g::float8) FROM {d}"},
		{sql: "SELECT sum(d - DATE '2024-01-01'), max(d), min(d), avg(d - DATE '2024-01-01') FROM {d}"},
		// HAVING without GROUP BY; GROUP BY without aggregates; constants.
		{sql: "SELECT count(*) FROM {d} HAVING count(*) > 10"},
		{sql: "SELECT count(*) FROM {d} HAVING count(*) > 1000"},
		{sql: "SELECT 'x' FROM {d} HAVING min(x) < 0"},
		{sql: "SELECT 1 FROM {d} HAVING true"},
		{sql: "SELECT g FROM {d} GROUP BY g"},
		{sql: "SELECT g, b FROM {d} GROUP BY g, b ORDER BY 1, 2", ordered: true},
		{sql: "SELECT g, g FROM {d} GROUP BY g, g"},
		{sql: "SELECT 1 FROM {d}"},
		{sql: "SELECT 1, 'a' FROM {d} ORDER BY 1 LIMIT 3"},
		{sql: "SELECT 2 FROM {d} GROUP BY g"},
		{sql: "SELECT now() - now(), count(*) FROM {d} WHERE d < now()"},
		// Set-returning functions in the select list.
		{sql: "SELECT generate_series(1, 3), count(*) FROM {d}"},
		{sql: "SELECT id, generate_series(1, 2) FROM {d} WHERE id < 5"},
		{sql: "SELECT generate_series(1, 3) AS s FROM {d} WHERE id < 4 ORDER BY s", ordered: true},
		{sql: "SELECT DISTINCT generate_series(1, 3) FROM {d}"},
		{sql: "SELECT g, generate_series(1, 2) FROM {d} GROUP BY g"},
		// Subqueries over reference tables; CTEs; VALUES; LATERAL.
		{sql: "SELECT id, (SELECT name FROM {r} WHERE {r}.k = {d}.g) FROM {d}"},
		{sql: "SELECT id, (SELECT name FROM {r} WHERE k = g) AS nm FROM {d} ORDER BY nm NULLS FIRST, id LIMIT 12", ordered: true},
		{sql: "SELECT id FROM {d} WHERE g IN (SELECT k FROM {r} WHERE name <> 'name 1') ORDER BY id LIMIT 7", ordered: true},
		{sql: "SELECT count(*) FROM {d} WHERE EXISTS (SELECT 1 FROM {r} WHERE k = {d}.g)"},
		{sql: "SELECT id FROM {d} ORDER BY (SELECT name FROM {r} WHERE k = g) DESC NULLS LAST, id LIMIT 5", ordered: true},
		{sql: "WITH c AS (SELECT * FROM {r}) SELECT c.name, count(*) FROM {d} d JOIN c ON c.k = d.g GROUP BY c.name"},
		{sql: "WITH c AS MATERIALIZED (SELECT k, name FROM {r} WHERE k > 1) SELECT d.id, c.name FROM {d} d JOIN c ON c.k = d.g WHERE d.id < 40"},
		{sql: "SELECT d.id, v.y FROM {d} d JOIN (VALUES (1, 'a'), (2, 'b')) v(k, y) ON v.k = d.g WHERE d.id < 50"},
		{sql: "SELECT v.y, count(*) FROM {d} d JOIN (VALUES (1, 'a'), (2, 'b')) v(k, y) ON v.k = d.g GROUP BY v.y"},
		{sql: "SELECT d.id, l.name FROM {d} d, LATERAL (SELECT name FROM {r} WHERE k = d.g) l WHERE d.id < 30"},
		{sql: "SELECT d.id, s FROM {d} d, LATERAL generate_series(1, d.g) s WHERE d.id < 20"},
		{sql: "SELECT sum(s) FROM {d} d, LATERAL generate_series(1, d.g) s"},
		{sql: "SELECT d.id, r.name FROM {d} d LEFT JOIN {r} r ON r.k = d.g ORDER BY d.id LIMIT 20", ordered: true},
		{sql: "SELECT r.name, count(d.id) FROM {d} d LEFT JOIN {r} r ON r.k = d.g GROUP BY r.name"},
		// Colocated joins, self-joins on the distribution column.
		{sql: "SELECT a.id, b.x FROM {d} a JOIN {d} b ON a.id = b.id WHERE a.id < 20"},
		{sql: "SELECT count(*), sum(b.y) FROM {d} a JOIN {d2} b ON a.id = b.id"},
		{sql: "SELECT a.g, count(*) FROM {d} a, {d2} b WHERE a.id = b.id GROUP BY a.g"},
		{sql: "SELECT a.id, b.x FROM {d} a LEFT JOIN {d} b ON a.id = b.id AND b.x > 0 WHERE a.id < 20"},
		{sql: "SELECT count(*), count(b.id) FROM {d} a LEFT JOIN {d} b ON b.id = a.id AND b.x > 0"},
		// Grouped by the distribution column of an outer join's nullable
		// side: its NULL group spans the shards.
		{sql: "SELECT b.id IS NULL, count(*) FROM {d} a LEFT JOIN {d} b ON a.id = b.id AND b.x > 0 GROUP BY b.id HAVING b.id IS NULL"},
		{sql: "SELECT b.id, count(*) FROM {d} a FULL JOIN {d} b ON a.id = b.id AND b.x > 0 AND a.x > 0 GROUP BY b.id ORDER BY 1 NULLS FIRST LIMIT 5", ordered: true},
		{sql: "SELECT a.id, count(*) FROM {d} a LEFT JOIN {d} b ON a.id = b.id AND b.x > 0 GROUP BY a.id ORDER BY 1 LIMIT 5", ordered: true},
		// LIMIT and OFFSET as quoted or fractional constants.
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT '4' OFFSET '2'", ordered: true},
		{sql: "SELECT id FROM {d} LIMIT '4' OFFSET '2'", count: true},
		{sql: "SELECT DISTINCT g FROM {d} LIMIT 3", count: true},
		{sql: "SELECT g, count(*) FROM {d} GROUP BY g LIMIT 2 OFFSET 1", count: true},
		{sql: "SELECT id FROM {d} LIMIT $1 OFFSET $2", args: []any{5, 297}, count: true},
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT 2.5 OFFSET 1.5", ordered: true},
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT 9223372036854775807 OFFSET 298", ordered: true},
		// Text ordering, mixed-case and spaced names, schema-qualified.
		{sql: "SELECT t FROM {d} ORDER BY t NULLS FIRST LIMIT 30", ordered: true},
		{sql: "SELECT min(t), max(t), min(\"sp ace\"), max(lower(t)) FROM {d}"},
		{sql: "SELECT \"Mixed Col\", count(*) AS \"Count Me\" FROM {d} GROUP BY \"Mixed Col\" ORDER BY \"Count Me\", 1", ordered: true},
		{sql: "SELECT \"sp ace\", \"Mixed Col\" FROM public.{d} ORDER BY \"sp ace\", \"Mixed Col\" DESC LIMIT 5", ordered: true},
		{sql: "SELECT DISTINCT \"sp ace\" FROM public.{d} AS \"Dd\" ORDER BY 1", ordered: true},
		// A Unicode-escaped string is not lifted apart from its U&.
		{sql: "SELECT id FROM {d} WHERE t = U&'appl\\0065' ORDER BY id LIMIT 5", ordered: true},
		{sql: "SELECT count(*) FROM {d} WHERE t = u&'appl\\0065'"},
		// Duplicate output names, SELECT * with joins.
		{sql: "SELECT id AS a, x AS a FROM {d} ORDER BY 1 LIMIT 5", ordered: true},
		{sql: "SELECT * FROM {d} d JOIN {r} r ON r.k = d.g ORDER BY d.id LIMIT 5", ordered: true},
		{sql: "SELECT * FROM {d} d JOIN {d2} e ON e.id = d.id ORDER BY d.id DESC LIMIT 5", ordered: true},
		{sql: "SELECT DISTINCT * FROM {r} r JOIN {d} d ON r.k = d.g WHERE d.id < 30"},
		{sql: "SELECT r.*, d.id FROM {r} r JOIN {d} d ON r.k = d.g WHERE d.id < 30"},
		// Parameters in the select list, HAVING, LIMIT.
		{sql: "SELECT g, count(*) + $1::int FROM {d} GROUP BY g HAVING sum(x) > $2::int", args: []any{5, 10}},
		{sql: "SELECT $1::text, count(*) FROM {d}", args: []any{"hello"}},
		{sql: "SELECT id, $1::int FROM {d} ORDER BY id LIMIT $2 OFFSET $3", args: []any{7, 4, 2}, ordered: true},
		{sql: "SELECT g FROM {d} GROUP BY g HAVING count(*) > $1 ORDER BY g LIMIT $2", args: []any{40, 3}, ordered: true},
		{sql: "SELECT count(*) FROM {d} WHERE x > $1 OR $1 IS NULL", args: []any{nil}},
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT $1", args: []any{nil}, ordered: true},
		{sql: "SELECT id FROM {d} WHERE t = $1 ORDER BY id", args: []any{"apple"}, ordered: true},
		// Grouped by the distribution column: the whole query on the shards.
		{sql: "SELECT id, count(*), string_agg(t, ',') FROM {d} GROUP BY id ORDER BY id LIMIT 5", ordered: true},
		{sql: "SELECT id, count(DISTINCT x) FROM {d} GROUP BY id HAVING count(*) > 0 ORDER BY sum(x) DESC NULLS LAST, id LIMIT 5", ordered: true},
		// Errors in one shard only.
		{sql: "SELECT id / (id - 150) FROM {d}", sameErr: true},
		{sql: "SELECT sum(1 / (id - 150)) FROM {d}", sameErr: true},
		{sql: "SELECT id FROM {d} ORDER BY 1 / (id - 7) LIMIT 3", sameErr: true},
		{sql: "SELECT 1 / (count(*) - 300) FROM {d}", sameErr: true},
		// Gathered: the statement runs once over the table's rows.
		{sql: "SELECT count(DISTINCT g) FROM {d}"},
		{sql: "WITH c AS (SELECT * FROM {d}) SELECT count(*) FROM c"},
		{sql: "SELECT g, (SELECT name FROM {r} WHERE k = g) FROM {d} GROUP BY g"},
		{sql: "SELECT * FROM {r} r LEFT JOIN {d} d ON d.g = r.k"},
		// Two distributed tables not joined on their distribution
		// columns: gathered.
		{sql: "SELECT id FROM {d} UNION SELECT id FROM {d2}"},
		{sql: "SELECT count(*) FROM {d} JOIN {d2} USING (id)"},
		{sql: "SELECT count(*) FROM {d} NATURAL JOIN {d2}"},
		{sql: "SELECT d.id FROM {d} d, LATERAL (SELECT * FROM {d2} e WHERE e.id = d.id) l"},
		// PostgreSQL rejects these itself (42803): its answer, not 0A000.
		{sql: "SELECT g, x, count(*) FROM {d} GROUP BY g", sameErr: true},
		{sql: "SELECT x AS g, count(*) FROM {d} GROUP BY g", sameErr: true},
		{sql: "SELECT g, count(*) OVER () FROM {d}"},
		{sql: "SELECT string_agg(t, ',' ORDER BY id) FROM {d}"},
		// A collation from FROM or WITH that a merge's arrays would lose:
		// gathered, the statement keeps it.
		{sql: "SELECT v.c, count(*) FROM {d} JOIN (VALUES ('a' COLLATE \"en-x-icu\", 1), ('B', 2), ('b', 3), ('A', 4)) v(c, k) ON v.k = {d}.g GROUP BY v.c ORDER BY v.c", ordered: true},
		{sql: "WITH c AS (SELECT name COLLATE \"C\" AS n, k FROM {r}) SELECT c.n FROM {d} JOIN c ON c.k = {d}.g ORDER BY c.n LIMIT 3", ordered: true},
		// Anonymous records: the merge cannot unnest them; gathering (the
		// plan's fallback) answers.
		{sql: "SELECT (g, id) FROM {d} ORDER BY (g, id) LIMIT 5", ordered: true},
		{sql: "SELECT DISTINCT (g, b) FROM {d}"},
		{sql: "SELECT (g, b), count(*) FROM {d} GROUP BY (g, b)"},
		// Outer joins of colocated tables on the distribution column stay
		// on each shard: concatenation is exact.
		{sql: "SELECT a.id, b.y FROM {d} a LEFT JOIN {d2} b ON a.id = b.id WHERE a.id < 10"},
		{sql: "SELECT a.id, b.y FROM {d} a FULL JOIN {d2} b ON a.id = b.id ORDER BY a.id, b.y LIMIT 20"},
		{sql: "SELECT count(*), count(b.id) FROM {d} a LEFT JOIN {d} b ON b.id = a.id AND b.g > 2"},
		// Router: a self-join pinned on one side must not be routed when
		// the other side is joined off the distribution column.
		{sql: "SELECT count(*) FROM {d} a JOIN {d} b ON a.g = b.g WHERE a.id = 5"},
		{sql: "SELECT a.id, b.id FROM {d} a LEFT JOIN {d} b ON b.id = a.id WHERE a.id = 5"},
		{sql: "SELECT count(*) FROM {d} a LEFT JOIN {d2} b ON b.id = 5"},
		// Self-joins not on the distribution column: gathered.
		{sql: "SELECT count(*) FROM {d} a JOIN {d} b ON a.g = b.g"},
		{sql: "SELECT count(*) FROM {d} a, {d} b WHERE a.id = b.x"},
		{sql: "SELECT count(*) FROM {d} a JOIN {d2} b ON a.id = b.id JOIN {d} c ON c.g = b.y"},
		{sql: "SELECT count(*) FROM {d} a LEFT JOIN {d} b ON a.id = b.g"},
		// A subquery in LIMIT would run in the merge, without the tables:
		// gathered.
		{sql: "SELECT id FROM {d} ORDER BY id LIMIT (SELECT count(*) FROM {r})", ordered: true},
		{sql: "SELECT id FROM {d} LIMIT (SELECT count(*) FROM {r})", count: true},
		{sql: "SELECT g, count(*) FROM {d} GROUP BY g ORDER BY g OFFSET (SELECT min(k) FROM {r})", ordered: true},
		// Each worker has its own now(): gathered, one worker computes it
		// once (TestGatherNow checks the values).
		{sql: "SELECT DISTINCT now() FROM {d}", count: true},
		{sql: "SELECT now(), count(*) FROM {d} GROUP BY 1", count: true},
		{sql: "SELECT id, current_timestamp FROM {d}", count: true},
		{sql: "SELECT max(statement_timestamp()) FROM {d}", count: true},
	}
	reviewRun(t, c, direct, rename, cases)
	reviewProtocol(t, rename, addr, pgAddr)
	reviewResultChange(t, c, addr, workers)
	reviewCancel(t, c)
}

// reviewRecord sends msgs and records the answers, up to the syncs-th
// ReadyForQuery.
func reviewRecord(t *testing.T, c *protoClient, syncs int, msgs ...pgproto3.FrontendMessage) []string {
	t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
	}
	_ = c.conn.SetDeadline(time.Now().Add(protoReceiveTimeout))
	if err := c.fe.Flush(); err != nil {
		t.Fatalf("%s: send: %v", c.name, err)
	}
	var out []string
	for syncs > 0 {
		msg, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("%s: receive: %v (answers so far: %q)", c.name, protoErrText(err), out)
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription:
			var f []string
			for _, fd := range m.Fields {
				f = append(f, fmt.Sprintf("%s:%d:%d:%d", fd.Name, fd.DataTypeOID, fd.TypeModifier, fd.Format))
			}
			out = append(out, "T "+strings.Join(f, ","))
		case *pgproto3.ParameterDescription:
			out = append(out, fmt.Sprint("t ", m.ParameterOIDs))
		case *pgproto3.DataRow:
			var v []string
			for _, x := range m.Values {
				if x == nil {
					v = append(v, "NULL")
				} else {
					v = append(v, hex.EncodeToString(x))
				}
			}
			out = append(out, "D "+strings.Join(v, "|"))
		case *pgproto3.CommandComplete:
			out = append(out, "C "+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			out = append(out, "E "+m.Code)
		case *pgproto3.ReadyForQuery:
			out = append(out, "Z "+string(m.TxStatus))
			syncs--
		case *pgproto3.ParseComplete:
			out = append(out, "1")
		case *pgproto3.BindComplete:
			out = append(out, "2")
		case *pgproto3.CloseComplete:
			out = append(out, "3")
		case *pgproto3.NoData:
			out = append(out, "n")
		case *pgproto3.PortalSuspended:
			out = append(out, "s")
		case *pgproto3.NoticeResponse, *pgproto3.ParameterStatus:
		default:
			out = append(out, fmt.Sprintf("%T", m))
		}
	}
	return out
}

func int8Param(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// reviewProtocol runs message sequences through the coordinator and on
// PostgreSQL and compares every answer (row order is fixed by ORDER BY or
// by a single row); some must be refused with 0A000 instead.
func reviewProtocol(t *testing.T, rename func(string) (string, string), addr, pgAddr string) {
	cc, pc := protoDial(t, addr, "coordinator"), protoDial(t, pgAddr, "postgres")
	P := func(name, q string, oids ...uint32) *pgproto3.Parse {
		return &pgproto3.Parse{Name: name, Query: q, ParameterOIDs: oids}
	}
	S := &pgproto3.Sync{}
	type msgs = []pgproto3.FrontendMessage
	scenarios := []struct {
		name   string
		syncs  int
		refuse bool
		msgs   func(tb func(string) string) msgs
	}{
		{"Describe before Bind", 1, false, func(tb func(string) string) msgs {
			return msgs{P("s1", tb("SELECT g, count(*), $1::int AS p FROM {d} GROUP BY g ORDER BY g")), &pgproto3.Describe{ObjectType: 'S', Name: "s1"}, S}
		}},
		{"portal described, executed twice", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("7")}, ResultFormatCodes: []int16{1}},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Execute{}, &pgproto3.Describe{ObjectType: 'P'}, S}
		}},
		{"named portal executed twice, closed", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "s1", Parameters: [][]byte{[]byte("7")}},
				&pgproto3.Execute{Portal: "p1"}, &pgproto3.Execute{Portal: "p1"}, &pgproto3.Close{ObjectType: 'P', Name: "p1"}, S}
		}},
		{"Execute with a row limit", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("7")}}, &pgproto3.Execute{MaxRows: 2},
				&pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{}, &pgproto3.Execute{MaxRows: 2}, S}
		}},
		{"after the Execute in parts", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("8")}}, &pgproto3.Execute{}, S}
		}},
		{"binary parameters and results", 1, false, func(tb func(string) string) msgs {
			return msgs{P("s2", tb("SELECT id, x, t FROM {d} WHERE id > $1 ORDER BY id LIMIT $2 OFFSET $3")),
				&pgproto3.Bind{PreparedStatement: "s2", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{int8Param(100), int8Param(3), int8Param(2)},
					ResultFormatCodes: []int16{1, 0, 1}},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, S}
		}},
		{"NULL LIMIT and OFFSET", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Bind{PreparedStatement: "s2", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{int8Param(295), nil, nil}},
				&pgproto3.Execute{}, S}
		}},
		{"int4 LIMIT in binary", 1, false, func(tb func(string) string) msgs {
			return msgs{P("s3", tb("SELECT id FROM {d} ORDER BY id LIMIT $1"), 23),
				&pgproto3.Bind{PreparedStatement: "s3", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{{0, 0, 0, 2}}}, &pgproto3.Execute{}, S}
		}},
		{"parameters in the select list and HAVING", 1, false, func(tb func(string) string) msgs {
			return msgs{P("s5", tb("SELECT $1 || g, count(*) FROM {d} GROUP BY g HAVING count(*) > $2 ORDER BY 1")),
				&pgproto3.Describe{ObjectType: 'S', Name: "s5"},
				&pgproto3.Bind{PreparedStatement: "s5", ParameterFormatCodes: []int16{0, 1}, Parameters: [][]byte{[]byte("g="), int8Param(40)}},
				&pgproto3.Execute{}, S}
		}},
		{"two multi-shard statements in one batch", 1, false, func(tb func(string) string) msgs {
			return msgs{P("", tb("SELECT count(*) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{},
				P("", tb("SELECT max(id) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{}, S}
		}},
		{"a multi-shard then a routed statement", 1, false, func(tb func(string) string) msgs {
			return msgs{P("", tb("SELECT count(*) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{},
				P("", tb("SELECT t FROM {d} WHERE id = 5")), &pgproto3.Bind{}, &pgproto3.Execute{}, S}
		}},
		{"a routed then a multi-shard statement", 1, false, func(tb func(string) string) msgs {
			return msgs{P("", tb("SELECT t FROM {d} WHERE id = 5")), &pgproto3.Bind{}, &pgproto3.Execute{},
				P("", tb("SELECT count(*) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{}, S}
		}},
		{"an error on one shard, then more", 2, false, func(tb func(string) string) msgs {
			return msgs{P("", tb("SELECT sum(id / (id - 150)) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{},
				P("", tb("SELECT count(*) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{}, S,
				P("", tb("SELECT count(*) FROM {d}")), &pgproto3.Bind{}, &pgproto3.Execute{}, S}
		}},
		{"concatenated rows described", 1, false, func(tb func(string) string) msgs {
			return msgs{P("", tb("SELECT id, t FROM {d} WHERE id < $1")), &pgproto3.Bind{Parameters: [][]byte{[]byte("2")}, ResultFormatCodes: []int16{1}},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, S}
		}},
		{"Bind without the parameters", 1, false, func(tb func(string) string) msgs {
			return msgs{P("", tb("SELECT id, t FROM {d} WHERE id < $1")), &pgproto3.Bind{}, &pgproto3.Execute{}, S}
		}},
		{"the portal is gone after Sync", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Execute{Portal: "p1"}, S}
		}},
		{"empty result of a grouped query (simple)", 1, false, func(tb func(string) string) msgs {
			return msgs{&pgproto3.Query{String: tb("SELECT g, count(*) FROM {e} GROUP BY g")}}
		}},
	}
	tbC := func(s string) string { c, _ := rename(s); return c }
	tbD := func(s string) string { _, d := rename(s); return d }
	for _, sc := range scenarios {
		got := reviewRecord(t, cc, sc.syncs, sc.msgs(tbC)...)
		if sc.refuse {
			if !strings.Contains(strings.Join(got, "\n"), "E 0A000") {
				t.Errorf("%s: %q, want 0A000", sc.name, got)
			}
			continue
		}
		want := reviewRecord(t, pc, sc.syncs, sc.msgs(tbD)...)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", sc.name, got, want)
		}
	}
}

// reviewResultChange: after ALTER TABLE changes a multi-shard statement's
// result, a client's statement prepared before fails with 0A000 as on
// PostgreSQL (never rows of another shape than it was told); a statement
// prepared afterwards gets the new description and rows.
func reviewResultChange(t *testing.T, c *pgx.Conn, addr string, workers []string) {
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	S := &pgproto3.Sync{}
	// alter changes rv_d2 through the coordinator, or (direct) on its
	// shards behind the coordinator's back.
	alter := func(sql string, direct bool) {
		if !direct {
			exec(t, c, "ALTER TABLE rv_d2 "+sql, simple)
			return
		}
		for _, a := range workers {
			w := connect(t, a)
			rows, err := w.Query(ctx, "SELECT oid::regclass::text FROM pg_class WHERE relname LIKE 'rv_d2_%' AND relkind = 'r'", simple)
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				exec(t, w, "ALTER TABLE "+n+" "+sql, simple)
			}
		}
	}
	for i, q := range []string{"SELECT * FROM rv_d2 WHERE id < 4", "SELECT * FROM rv_d2 ORDER BY id LIMIT 2",
		"SELECT y, count(*) FROM rv_d2 WHERE id < 4 GROUP BY y ORDER BY y", "SELECT * FROM rv_d2 WHERE id < 4"} {
		direct := i == 3
		prepare := func(pc *protoClient) []string {
			return reviewRecord(t, pc, 1, &pgproto3.Close{ObjectType: 'S', Name: "a"}, &pgproto3.Parse{Name: "a", Query: q},
				&pgproto3.Describe{ObjectType: 'S', Name: "a"}, &pgproto3.Bind{PreparedStatement: "a", ResultFormatCodes: []int16{1}}, &pgproto3.Execute{}, S)
		}
		run := func(pc *protoClient) []string {
			return reviewRecord(t, pc, 1, &pgproto3.Bind{PreparedStatement: "a", ResultFormatCodes: []int16{1}}, &pgproto3.Execute{}, S)
		}
		old := protoDial(t, addr, "old")
		before := prepare(old)
		alter("ADD COLUMN z int DEFAULT 5", direct)
		alter("ALTER COLUMN y TYPE bigint", direct)
		// (Changed on the shards behind the coordinator's back, the
		// change shows at Execute, after BindComplete: still no rows.)
		if got := strings.Join(run(old), " "); got != "E 0A000 Z I" && !(direct && got == "2 E 0A000 Z I") {
			t.Errorf("%s prepared before ALTER TABLE: %q (before: %q)", q, got, before)
		}
		// The first Describe after the change may tell the client to
		// prepare again; then it works.
		fresh := protoDial(t, addr, "fresh")
		got := prepare(fresh)
		if strings.Contains(strings.Join(got, " "), "E 0A000") {
			got = prepare(fresh)
		}
		if g := strings.Join(got, " "); strings.Contains(g, " E ") || !strings.Contains(g, "y:20:-1:0") || !strings.Contains(g, " C SELECT") {
			t.Errorf("%s prepared after ALTER TABLE: %q", q, got)
		}
		if got := prepare(old); strings.Contains(strings.Join(got, " "), " E ") {
			t.Errorf("%s prepared again by the old client: %q", q, got)
		}
		alter("DROP COLUMN z", direct)
		alter("ALTER COLUMN y TYPE int", direct)
	}
}

// reviewCancel cancels a long multi-shard query of the extended protocol.
func reviewCancel(t *testing.T, c *pgx.Conn) {
	cancelStops(t, c, func() error {
		_, err := scatterQuery(context.Background(), c, pgx.QueryExecModeCacheStatement,
			"SELECT id FROM rv_d WHERE pg_sleep(0.05) IS NOT NULL ORDER BY x LIMIT 3", nil)
		return err
	}, "SELECT count(*)::text FROM rv_d", "300")
}
