package planner

import (
	"slices"
	"strings"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// TestFleetView: which statements read pg_prepared_xacts from every active
// worker, which the default node answers, which are refused, and the
// statement the merge runs over the gathered rows.
func TestFleetView(t *testing.T) {
	cat := testCatalog()
	cat.Nodes = []metadata.Node{{ID: 1, Active: true}, {ID: 3, Active: false}, {ID: 2, Active: true}}
	one := testCatalog()
	one.Nodes = []metadata.Node{{ID: 1, Active: true}, {ID: 2, Active: false}}
	// The view's columns, as the check reads them.
	types := []string{"xid", "text", "timestamptz", "name", "name"}
	names := []string{"transaction", "gid", "prepared", "owner", "database"}
	noColl := []map[string]string{nil}
	for _, c := range []struct {
		sql   string
		cat   *metadata.Snapshot
		merge string // the merge statement; "" for no fleet plan
		code  string // the refusal's SQLSTATE
	}{
		{sql: "SELECT gid FROM pg_prepared_xacts where database = current_database()", cat: cat,
			merge: "SELECT gid FROM unnest($1, $2, $3, $4, $5) pg_prepared_xacts(transaction, gid, prepared, owner, database) WHERE database = current_database()"},
		{sql: "SELECT p.gid FROM pg_catalog.pg_prepared_xacts AS p WHERE p.gid LIKE $1 ORDER BY 1", cat: cat,
			merge: "SELECT p.gid FROM unnest($1, $2, $3, $4, $5) p(transaction, gid, prepared, owner, database) WHERE p.gid LIKE $6 ORDER BY 1"},
		{sql: "WITH x AS (SELECT gid FROM pg_prepared_xacts) SELECT count(*) FROM x, pg_database d WHERE d.datname = 'a'", cat: cat,
			merge: "WITH x AS (SELECT gid FROM unnest($1, $2, $3, $4, $5) pg_prepared_xacts(transaction, gid, prepared, owner, database)) SELECT count(*) FROM x, pg_database d WHERE d.datname = 'a'"},
		{sql: `SELECT gid FROM pg_catalog.U&"pg\005fprepared_xacts"`, cat: cat,
			merge: "SELECT gid FROM unnest($1, $2, $3, $4, $5) pg_prepared_xacts(transaction, gid, prepared, owner, database)"},
		{sql: "SELECT pg_catalog.pg_prepared_xacts.gid, pg_catalog.pg_prepared_xacts.* FROM pg_catalog.pg_prepared_xacts", cat: cat,
			merge: "SELECT pg_prepared_xacts.gid, pg_prepared_xacts.* FROM unnest($1, $2, $3, $4, $5) pg_prepared_xacts(transaction, gid, prepared, owner, database)"},
		{sql: "SELECT 1 FROM t WHERE EXISTS (SELECT FROM pg_prepared_xacts)", cat: cat,
			merge: "SELECT 1 FROM t WHERE EXISTS (SELECT FROM unnest($1, $2, $3, $4, $5) pg_prepared_xacts(transaction, gid, prepared, owner, database))"},
		// Naming the view without reading it: the default node's.
		{sql: "GRANT SELECT ON pg_catalog.pg_prepared_xacts TO PUBLIC", cat: cat},
		{sql: "ALTER VIEW pg_catalog.pg_prepared_xacts OWNER TO postgres", cat: cat},
		{sql: "CREATE TEMP TABLE pg_prepared_xacts (gid text)", cat: cat},
		{sql: "INSERT INTO pg_prepared_xacts VALUES ('x')", cat: cat},
		{sql: "SELECT gid FROM postgres.pg_catalog.pg_prepared_xacts", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: `SELECT * FROM U&"pg_prepared_xac\0074"()`, cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "CREATE VIEW v AS SELECT gid FROM pg_prepared_xacts", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "UPDATE l SET a = 1 FROM pg_prepared_xacts p WHERE p.gid = l.b", cat: cat, code: pgerr.FeatureNotSupported},
		// A CTE of that name is the CTE.
		{sql: "WITH pg_prepared_xacts AS (SELECT 1) SELECT * FROM pg_prepared_xacts", cat: cat},
		// One active node: its view is the fleet's.
		{sql: "SELECT gid FROM pg_prepared_xacts", cat: one},
		{sql: "EXPLAIN SELECT gid FROM pg_prepared_xacts", cat: cat},
		{sql: "SELECT pg_prepared_xacts_count FROM t", cat: cat},
		{sql: "INSERT INTO l SELECT gid FROM pg_prepared_xacts", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "SELECT gid FROM pg_prepared_xacts; SELECT 1", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "SELECT * FROM pg_prepared_xact()", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "SELECT gid FROM pg_prepared_xacts FOR UPDATE", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "SELECT gid INTO x FROM pg_prepared_xacts", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "SELECT p.gid FROM pg_prepared_xacts p JOIN branches b ON true", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "SELECT p FROM pg_prepared_xacts p", cat: cat, code: pgerr.FeatureNotSupported},
		{sql: "DECLARE c CURSOR FOR SELECT gid FROM pg_prepared_xacts", cat: cat, code: pgerr.FeatureNotSupported},
	} {
		p, err := Build(c.sql, c.cat)
		switch {
		case c.code != "":
			if pgerr.Flatten(err).Code != c.code {
				t.Errorf("%s: %v, want %s", c.sql, err, c.code)
			}
		case err != nil:
			t.Errorf("%s: %v", c.sql, err)
		case c.merge == "":
			if x := p.Scatter(); x != nil && x.Fleet {
				t.Errorf("%s: planned over every worker", c.sql)
			}
		default:
			x := p.Scatter()
			if x == nil || !x.Fleet || !p.ReadOnly {
				t.Fatalf("%s: plan %s", c.sql, p.Root.Kind())
			}
			var nodes []int32
			for _, w := range x.Workers {
				nodes = append(nodes, w.Node)
				if w.SQL != fleetViewSQL {
					t.Errorf("%s: worker %d runs %s", c.sql, w.Node, w.SQL)
				}
			}
			if !slices.Equal(nodes, []int32{1, 2}) {
				t.Errorf("%s: workers %v, want the active ones", c.sql, nodes)
			}
			if len(x.First) != 1 || !strings.Contains(x.First[0], "pg_prepared_xacts") {
				t.Errorf("%s: first statement %v", c.sql, x.First)
			}
			got, err := x.Merge.RenderGather(types, names, noColl, nil, nil)
			if err != nil || got != c.merge {
				t.Errorf("%s:\n merge %s (%v)\n want  %s", c.sql, got, err, c.merge)
			}
		}
	}
}
