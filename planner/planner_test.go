package planner

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files with the planner's current output")

// testCatalog: accounts and history colocated (int8 aid, 4 shards), orders
// on its own (text id), branches and tellers as reference tables.
func testCatalog() *metadata.Snapshot {
	s := &metadata.Snapshot{Version: 1, Tables: map[string]*metadata.Table{}, Shards: map[string][]metadata.Shard{}}
	id := int64(102008)
	dist := func(name, col, typ string, coloc int32) {
		s.Tables[name] = &metadata.Table{Name: name, Kind: metadata.Distributed, DistColumn: col, DistType: typ, ColocationID: coloc, ShardCount: 4}
		for i, r := range metadata.HashRanges(4) {
			s.Shards[name] = append(s.Shards[name], metadata.Shard{ID: id, Table: name, MinHash: r[0], MaxHash: r[1], Nodes: []int32{int32(i%2 + 1)}})
			id++
		}
	}
	ref := func(name string) {
		s.Tables[name] = &metadata.Table{Name: name, Kind: metadata.Reference}
		s.Shards[name] = []metadata.Shard{{ID: id, Table: name, MinHash: -1 << 31, MaxHash: 1<<31 - 1, Nodes: []int32{1, 2}}}
		id++
	}
	dist("public.accounts", "aid", "int8", 1)
	dist("public.history", "aid", "int8", 1)
	dist("public.orders", "id", "text", 2)
	ref("public.branches")
	ref("public.tellers")
	return s
}

type goldenCase struct {
	Comment string          `json:"comment,omitempty"`
	Query   string          `json:"query"`
	Plan    json.RawMessage `json:"plan"`
}

// printed is a plan as the golden files hold it: flat, every primitive's
// fields beside its kind.
type printed struct {
	Kind           Kind              `json:"kind"`
	Tables         []string          `json:"tables,omitempty"`
	DistTable      string            `json:"dist_table,omitempty"`
	DistType       string            `json:"dist_type,omitempty"`
	Value          *Value            `json:"value,omitempty"`
	ReadOnly       bool              `json:"read_only"`
	Explain        bool              `json:"explain,omitempty"`
	ExplainAnalyze bool              `json:"explain_analyze,omitempty"`
	ExplainText    bool              `json:"explain_text,omitempty"`
	ExplainPrefix  string            `json:"explain_prefix,omitempty"`
	Rows           []*Value          `json:"rows,omitempty"`
	Returning      bool              `json:"returning,omitempty"`
	RowPerValue    bool              `json:"row_per_value,omitempty"`
	GatherFallback bool              `json:"gather_fallback,omitempty"`
	Copy           *CopyOptions      `json:"copy,omitempty"`
	Unqualified    bool              `json:"unqualified,omitempty"`
	SyntaxError    bool              `json:"syntax_error,omitempty"`
	Func           string            `json:"func,omitempty"`
	Args           []string          `json:"args,omitempty"`
	NamedArgs      map[string]string `json:"named_args,omitempty"`
	Mutability     *Mutability       `json:"mutability,omitempty"`
	Scatter        *Scatter          `json:"scatter,omitempty"`
	Shards         int               `json:"shards,omitempty"`
	First          string            `json:"first_shard_sql,omitempty"`
	CopyQuery      string            `json:"copy_query,omitempty"`
	CopyFormat     *CopyFormat       `json:"copy_format,omitempty"`
	CopyInBlock    string            `json:"copy_in_block,omitempty"`
	Local          []string          `json:"local,omitempty"`
}

func flatten(p *Plan) printed {
	pr := printed{Kind: p.Kind(), Tables: p.Tables, DistTable: p.DistTable(), DistType: p.DistType(), ReadOnly: p.ReadOnly,
		Unqualified: len(p.Unqualified) > 0, SyntaxError: p.SyntaxError(), Mutability: p.Mutability(), Shards: len(p.ShardSQL())}
	if e := p.Explain; e != nil {
		pr.Explain, pr.ExplainAnalyze, pr.ExplainText, pr.ExplainPrefix = true, e.Analyze, e.Text, e.Prefix
	}
	switch r := p.Root.(type) {
	case *Route:
		pr.Value = r.Value
	case *InsertSplit:
		pr.Rows, pr.Returning, pr.RowPerValue = r.Rows, r.Returning, r.RowPerValue
	case *MultiShardWrite:
		pr.Returning = r.Returning
	case *CopyIn:
		pr.Copy = r.Copy
	case *Function:
		pr.Func, pr.Args, pr.NamedArgs = r.Name, r.Args, r.NamedArgs
	case *Scatter:
		pr.Scatter, pr.GatherFallback = r, r.Fallback != nil
	case *ReferenceRead:
		pr.Local = r.Local
	case *CopyOut:
		pr.Scatter = &Scatter{Table: r.Table, Workers: r.Workers}
		pr.CopyQuery, pr.CopyInBlock = r.Query, r.InBlock
		if r.Query != "" {
			pr.CopyFormat = r.Format
		}
	}
	if pr.Scatter != nil {
		pr.Shards = 0
		for _, w := range pr.Scatter.Workers {
			pr.Shards += len(w.Shards)
		}
	}
	if sql := p.ShardSQL(); len(sql) > 0 {
		pr.First = sql[0]
	}
	return pr
}

func TestGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) == 0 {
		t.Fatal("no golden files in testdata")
	}
	cat := testCatalog()
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cases []goldenCase
		if err := json.Unmarshal(raw, &cases); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i := range cases {
			c := &cases[i]
			var got []byte
			p, err := Build(c.Query, cat)
			if err != nil {
				got, _ = json.Marshal(err.Error())
			} else {
				got, _ = json.Marshal(flatten(p))
			}
			if *rewrite {
				c.Plan = got
				continue
			}
			if !jsonEqual(got, c.Plan) {
				t.Errorf("%s: %s\nquery: %s\n got: %s\nwant: %s", file, c.Comment, c.Query, got, c.Plan)
			}
		}
		if *rewrite {
			out, _ := json.MarshalIndent(cases, "", "  ")
			if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestExplainInsertNull: an INSERT with a NULL distribution value is
// routed to the shard of hash 0, whose worker stores the row or fails it
// under NOT NULL, as PostgreSQL does; EXPLAIN shows that shard. One that
// leaves the column out (its default, NULL or 23502: the column's
// definition says) is refused with a hint.
func TestExplainInsertNull(t *testing.T) {
	cat := testCatalog()
	for _, tc := range []struct{ sql, code string }{
		{"INSERT INTO accounts (aid, abalance) VALUES (1001, 1), (NULL, 2)", ""},
		{"EXPLAIN INSERT INTO accounts (aid, abalance) VALUES (1001, 1), (NULL, 2)", ""},
		{"EXPLAIN INSERT INTO accounts (aid) VALUES (NULL)", ""},
		{"INSERT INTO accounts (abalance) VALUES (1)", pgerr.FeatureNotSupported},
		{"EXPLAIN INSERT INTO accounts (abalance) VALUES (1)", pgerr.FeatureNotSupported},
		{"EXPLAIN INSERT INTO accounts (aid, abalance) VALUES (1, 1)", ""},
	} {
		_, err := Build(tc.sql, cat)
		got := ""
		if err != nil {
			got = pgerr.Flatten(err).Code
		}
		if got != tc.code {
			t.Errorf("%s: %v, want SQLSTATE %q", tc.sql, err, tc.code)
		}
		if tc.code == pgerr.FeatureNotSupported && pgerr.Flatten(err).Hint == "" {
			t.Errorf("%s: no hint", tc.sql)
		}
	}
}
