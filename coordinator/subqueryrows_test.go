package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSubqueriesFirst: an UPDATE or DELETE whose WHERE has IN/ANY/ALL
// subqueries over distributed tables that are not on its shard (Django's
// filter(fk__name=...).update(...): WHERE id IN (SELECT U0.id FROM ...
// INNER JOIN ...)) runs them first and then the statement with their rows:
// the tables end as plain PostgreSQL's do, with the same command tags and
// RETURNING rows, in and out of a transaction block. Before, every such
// statement was refused (0A000). One that reads the outer statement's rows
// stays refused.
func TestSubqueriesFirst(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP VIEW IF EXISTS sqf_v; DROP SEQUENCE IF EXISTS sqf_seq; DROP DOMAIN IF EXISTS sqf_dom", simple)
	exec(t, c, "CREATE SEQUENCE sqf_seq", simple)
	exec(t, c, "CREATE DOMAIN sqf_dom AS bigint CHECK (VALUE > -1000)", simple)
	exec(t, c, "CREATE VIEW sqf_v AS SELECT 1::bigint AS a", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "DROP VIEW IF EXISTS sqf_v; DROP SEQUENCE IF EXISTS sqf_seq; DROP DOMAIN IF EXISTS sqf_dom", simple)
	})
	testTable(t, c, "sqf_acct", "(id bigint PRIMARY KEY, name text)", "SELECT create_distributed_table('sqf_acct', 'id', shard_count => 4)")
	testTable(t, c, "sqf_ord", "(id bigint PRIMARY KEY, acct_id bigint, amount int)", "SELECT create_distributed_table('sqf_ord', 'id', shard_count => 3, colocate_with => 'none')")
	plainTables(t, c, "sqf_acct_o (id bigint PRIMARY KEY, name text)", "sqf_ord_o (id bigint PRIMARY KEY, acct_id bigint, amount int)")
	var accts, ords []string
	for i := 1; i <= 12; i++ {
		name := fmt.Sprintf("'n%d'", i%4)
		if i%5 == 0 {
			name = "NULL"
		}
		accts = append(accts, fmt.Sprintf("(%d, %s)", i, name))
	}
	for i := 1; i <= 40; i++ {
		acct := fmt.Sprint(i%13 + 1)
		if i%11 == 0 {
			acct = "NULL"
		}
		ords = append(ords, fmt.Sprintf("(%d, %s, %d)", i, acct, i*7%50))
	}
	for _, suffix := range []string{"", "_o"} {
		exec(t, c, "INSERT INTO sqf_acct"+suffix+" VALUES "+strings.Join(accts, ", "), simple)
		exec(t, c, "INSERT INTO sqf_ord"+suffix+" VALUES "+strings.Join(ords, ", "), simple)
	}
	fleet := strings.NewReplacer("{a}", "sqf_acct", "{o}", "sqf_ord")
	oracle := strings.NewReplacer("{a}", "sqf_acct_o", "{o}", "sqf_ord_o")
	state := func(r *strings.Replacer) []string {
		return queryStrings(t, c, r.Replace("SELECT concat_ws(',', id, acct_id, amount) FROM {o} ORDER BY id"))
	}
	both := func(q string) {
		t.Helper()
		got := gatherRun(t, c, fleet.Replace(q), simple)
		want := gatherRun(t, c, oracle.Replace(q), simple)
		for _, r := range []*oracleRun{&got, &want} { // RETURNING rows come in no set order
			slices.SortFunc(r.Rows, func(a, b []string) int { return slices.Compare(a, b) })
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v (plain PostgreSQL)", q, got, want)
		}
		if got.State == "0A000" {
			t.Errorf("%s: refused", q)
		}
		if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: the table is\n%v\nwant\n%v", q, g, w)
		}
	}
	for _, q := range []string{
		// Django's shape.
		`UPDATE "{o}" SET "amount" = ("{o}"."amount" + 1) WHERE "{o}"."id" IN (SELECT U0."id" FROM "{o}" U0 INNER JOIN "{a}" U1 ON (U0."acct_id" = U1."id") WHERE U1."name" = 'n1')`,
		"DELETE FROM {o} WHERE acct_id NOT IN (SELECT id FROM {a} WHERE name IS NOT NULL) RETURNING id, acct_id",
		"UPDATE {o} SET amount = 0 WHERE acct_id IN (SELECT id FROM {a} WHERE name = 'nobody') RETURNING *",
		"UPDATE {o} SET amount = amount * 2 WHERE (acct_id, amount % 2) IN (SELECT a.id, 1 FROM {a} a WHERE a.id < 8) RETURNING id, amount",
		"UPDATE {o} SET amount = amount - 1 WHERE amount >= ALL (SELECT amount FROM {o} WHERE acct_id = 2) AND acct_id IN (SELECT id FROM {a} WHERE name = 'n3')",
		"DELETE FROM {o} o WHERE o.amount = ANY (SELECT max(amount) FROM {o} GROUP BY acct_id) AND o.id > 30",
		"UPDATE {o} SET acct_id = NULL WHERE acct_id IN (SELECT DISTINCT x.acct_id FROM {o} x WHERE x.amount < 10 ORDER BY 1 LIMIT 2)",
		// Scalar and EXISTS subqueries, in WHERE and SET.
		"UPDATE {o} SET amount = amount + 1 WHERE amount > (SELECT avg(amount) FROM {o})",
		"UPDATE {o} SET amount = (SELECT max(amount) FROM {o} WHERE acct_id = 3) WHERE id < 5 RETURNING id, amount",
		"DELETE FROM {o} WHERE EXISTS (SELECT 1 FROM {a} WHERE name = 'nobody')",
		"UPDATE {o} SET amount = 1 WHERE id = 2 AND EXISTS (SELECT FROM {a} WHERE name = 'n1')",
		"UPDATE {o} SET amount = (SELECT amount FROM {o} WHERE acct_id = 2)",              // 21000, as PostgreSQL
		"UPDATE {o} SET amount = (SELECT amount FROM {o} WHERE acct_id = 2) WHERE id < 0", // not evaluated: UPDATE 0
		"UPDATE {o} SET amount = (SELECT amount FROM {o} WHERE acct_id = -1) WHERE id = 7 RETURNING amount",
		// PostgreSQL analyses an EXISTS subquery whole (adversary: these
		// wrote every row where PostgreSQL raised 42703 or 42P10).
		"UPDATE {o} SET amount = 100 WHERE EXISTS (SELECT nosuchcol FROM {a})",
		"UPDATE {o} SET amount = 100 WHERE EXISTS (SELECT 1 FROM {a} ORDER BY 5)",
		"UPDATE {o} SET amount = 100 WHERE EXISTS (SELECT DISTINCT name FROM {a} ORDER BY id)",
		"UPDATE {o} SET amount = amount + 1 WHERE id < 4 AND EXISTS (SELECT DISTINCT name FROM {a} ORDER BY name LIMIT 3)",
		// The outer statement's analysis error comes first, as on
		// PostgreSQL (adversary: the subquery's 42883 came first).
		"DELETE FROM {o} WHERE nosuch = 1 AND id IN (SELECT id FROM {a} WHERE length(5) > 0)",
		"DELETE FROM {o} WHERE nosuch = 1 AND EXISTS (SELECT 1 FROM {a} ORDER BY 5)",
	} {
		both(q)
	}
	// In a transaction block: the subquery sees the block's own writes,
	// and ROLLBACK takes the statement back.
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		for _, r := range []*strings.Replacer{fleet, oracle} {
			exec(t, c, "BEGIN", simple)
			exec(t, c, r.Replace("UPDATE {a} SET name = 'block' WHERE id = 3"), simple)
			exec(t, c, r.Replace("UPDATE {o} SET amount = 99 WHERE acct_id IN (SELECT id FROM {a} WHERE name = 'block')"), simple)
			exec(t, c, end, simple)
		}
		if g, w := state(fleet), state(oracle); !reflect.DeepEqual(g, w) {
			t.Fatalf("after %s: the table is\n%v\nwant\n%v", end, g, w)
		}
	}
	// Correlated: refused, qualified or not; a data error of a subquery
	// PostgreSQL need not evaluate (no row reaches it here: it answers
	// UPDATE 0) is a refusal, not the error; nothing changed.
	before := state(fleet)
	for _, q := range []string{
		"UPDATE sqf_ord o SET amount = 0 WHERE acct_id IN (SELECT id FROM sqf_acct a WHERE a.id = o.acct_id)",
		"UPDATE sqf_ord SET amount = 0 WHERE id IN (SELECT id FROM sqf_acct WHERE name = acct_id::text)",
		"DELETE FROM sqf_ord WHERE id > 1000 AND id IN (SELECT 1 / (id - id) FROM sqf_acct)",
		"UPDATE sqf_ord SET amount = 0 WHERE id < 0 AND id IN (SELECT name::bigint FROM sqf_acct)",
		"UPDATE sqf_ord SET amount = 0 WHERE id IN (SELECT id FROM sqf_acct); SELECT 1", // several statements
		// EXISTS whose select list PostgreSQL evaluates (adversary: the
		// write went through where PostgreSQL raised 22012).
		"UPDATE sqf_ord SET amount = 19 WHERE EXISTS (SELECT max(1 / (id - id)) FROM sqf_acct) AND id = 8",
		// A volatile function PostgreSQL need not call (adversary: a
		// sequence advanced under a refused statement).
		"UPDATE sqf_ord SET amount = 1 WHERE false AND id IN (SELECT id FROM sqf_acct WHERE nextval('sqf_seq') > 0)",
		// A cast to a user type: its function or a domain's CHECK may be
		// volatile (adversary: a domain CHECK advanced a sequence).
		"UPDATE sqf_ord SET amount = 1 WHERE false AND id IN (SELECT id::sqf_dom FROM sqf_acct)",
		// A view may call a volatile function (adversary: one advanced
		// a sequence).
		"UPDATE sqf_ord SET amount = 1 WHERE false AND id IN (SELECT id FROM sqf_acct WHERE id IN (SELECT a FROM sqf_v))",
		// A lookup that fails at run time, which PostgreSQL need not
		// reach (adversary: 42883 where PostgreSQL deleted nothing).
		"DELETE FROM sqf_ord WHERE false AND id IN (SELECT id FROM sqf_acct WHERE id < 3 OR name::regproc IS NOT NULL)",
	} {
		if _, err := c.Exec(ctx, q, simple); sqlState(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
	if after := state(fleet); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused statement changed the table:\n%v\nwas\n%v", after, before)
	}
	if v := queryString(t, c, "SELECT last_value::text || is_called::text FROM sqf_seq"); v != "1false" {
		t.Errorf("the sequence after a refused statement: %s, want untouched", v)
	}
}

// TestSubqueriesFirstValues: the rows of a subquery run first keep their
// values (quotes, backslashes, braces, the string NULL, arrays, time
// zones), NULLs, and collations: a case-insensitive (nondeterministic)
// column still matches 'alice' to 'Alice', and "C" orders as "C".
func TestSubqueriesFirstValues(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "DROP COLLATION IF EXISTS sqv_ci", simple)
	exec(t, c, "CREATE COLLATION sqv_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)", simple)
	const ncols = "(id int PRIMARY KEY, name text COLLATE sqv_ci, c text COLLATE \"C\", v text, arr int[], ts timestamptz, n numeric(6,2))"
	const mcols = "(id int PRIMARY KEY, name text, hits int DEFAULT 0)"
	testTable(t, c, "sqv_n", ncols, "SELECT create_distributed_table('sqv_n', 'id', shard_count => 4)")
	testTable(t, c, "sqv_m", mcols, "SELECT create_distributed_table('sqv_m', 'id', shard_count => 3, colocate_with => 'none')")
	plainTables(t, c, "sqv_no "+ncols, "sqv_mo "+mcols)
	t.Cleanup(func() { _, _ = c.Exec(ctx, "DROP COLLATION IF EXISTS sqv_ci", simple) })
	for _, suffix := range []string{"", "o"} {
		exec(t, c, "INSERT INTO sqv_n"+suffix+` VALUES (1, 'Alice', 'b', 'a"b\c', ARRAY[1, 2], '2024-01-01 10:00+00', 1.5),
			(2, 'BOB', 'B', 'x,{y} ', ARRAY[3], '2024-06-01 23:30+00', -2), (3, NULL, NULL, 'NULL', '{}', NULL, NULL), (4, 'é', 'É', '', NULL, '2024-03-01 00:00+05', 3.25)`, simple)
		exec(t, c, "INSERT INTO sqv_m"+suffix+` (id, name) VALUES (1, 'alice'), (2, 'bob'), (3, 'a"b\c'), (4, 'x,{y} '), (5, 'NULL'), (6, NULL), (7, 'b'), (8, ''), (9, 'É')`, simple)
	}
	exec(t, c, "SET TimeZone = 'Asia/Kathmandu'", simple)
	fleet := strings.NewReplacer("{n}", "sqv_n", "{m}", "sqv_m")
	oracle := strings.NewReplacer("{n}", "sqv_no", "{m}", "sqv_mo")
	for k, q := range []string{
		"UPDATE {m} SET hits = hits + %d WHERE name IN (SELECT name FROM {n})",
		"UPDATE {m} SET hits = hits + %d WHERE name IN (SELECT v FROM {n})",
		"UPDATE {m} SET hits = hits + %d WHERE name > ALL (SELECT c FROM {n} WHERE c IS NOT NULL)",
		"UPDATE {m} SET hits = hits + %d WHERE name NOT IN (SELECT c FROM {n} WHERE c IS NOT NULL)",
		"UPDATE {m} SET hits = hits + %d WHERE id IN (SELECT unnest(arr) FROM {n})",
		"UPDATE {m} SET hits = hits + %d WHERE ARRAY[id] IN (SELECT arr FROM {n})",
		"UPDATE {m} SET hits = hits + %d WHERE id = 1 AND '2024-06-02 05:15+05:45'::timestamptz = ANY (SELECT ts FROM {n})",
		"UPDATE {m} SET hits = hits + %d WHERE (id::numeric / 2) IN (SELECT n FROM {n}) OR -id * 1.0 IN (SELECT n FROM {n})",
		"UPDATE {m} SET name = (SELECT string_agg(v, '|' ORDER BY id) FROM {n}) WHERE id = 9 AND hits >= %d",
	} {
		q = fmt.Sprintf(q, 1<<k)
		for _, r := range []*strings.Replacer{fleet, oracle} {
			if _, err := c.Exec(ctx, r.Replace(q), simple); err != nil {
				t.Fatalf("%s: %v", r.Replace(q), err)
			}
		}
		got := queryStrings(t, c, fleet.Replace("SELECT concat_ws(':', id, name, hits) FROM {m} ORDER BY id"))
		want := queryStrings(t, c, oracle.Replace("SELECT concat_ws(':', id, name, hits) FROM {m} ORDER BY id"))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q (plain PostgreSQL)", q, got, want)
		}
	}
}
