package planner

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/pgfleet/pgfleet/metadata"
)

func catalogOf(names ...string) *metadata.Snapshot {
	s := &metadata.Snapshot{Tables: map[string]*metadata.Table{}}
	for _, n := range names {
		s.Tables["public."+n] = &metadata.Table{Name: "public." + n}
	}
	return s
}

// TestMentionsTable: a statement that may name a catalog table is planned
// (true); one that cannot, in the cases a word scan can tell, is not.
func TestMentionsTable(t *testing.T) {
	cat := catalogOf("accounts", "order_items", "t")
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{"SELECT * FROM accounts WHERE aid = 1", true},
		{"select * from ACCOUNTS", true},
		{`SELECT * FROM "accounts"`, true},
		{"SELECT * FROM public.accounts", true},
		{"SELECT * FROM s.Accounts", true},
		{"SELECT order_items.x FROM order_items", true},
		{"SELECT 1 FROM t", true},
		{"SELECT t.a FROM x t", true}, // an alias of that name: planned, errs towards true
		{"SELECT 'accounts'::regclass", true},
		{"SELECT $$accounts$$::regclass", true},
		{"SELECT * FROM x$accounts", true}, // PostgreSQL's one identifier: true all the same
		{"SELECT * FROM éaccounts", true},  // likewise
		{`SELECT * FROM U&"\0061ccounts"`, true},
		{"SELECT * FROM accounts_2", false},
		{"SELECT * FROM t1, tt, t_", false},
		{"SELECT * FROM orderitems", false},
		{"SELECT 1", false},
		{"", false},
	} {
		if got := MentionsTable(c.sql, cat); got != c.want {
			t.Errorf("%q: %v, want %v", c.sql, got, c.want)
		}
	}
	// PostgreSQL cuts a longer identifier to the name's 63 bytes.
	long := strings.Repeat("l", 63)
	if !MentionsTable("SELECT * FROM "+long+"_and_more", catalogOf(long)) || MentionsTable("SELECT * FROM "+long[1:]+"_", catalogOf(long)) {
		t.Error("a 63-byte name and identifiers cut to it")
	}
	// Names a word cannot spell: every statement plans.
	for _, n := range []string{"my-table", "Mixed", "tëst", "a b"} {
		if !MentionsTable("SELECT 1", catalogOf("accounts", n)) {
			t.Errorf("catalog with %q: SELECT 1 not planned", n)
		}
	}
	if MentionsTable("SELECT * FROM accounts", catalogOf()) {
		t.Error("empty catalog: planned")
	}
	// Snapshots asked about in turn each get their own names.
	a, b := catalogOf("alpha"), catalogOf("beta")
	for range 3 {
		if !MentionsTable("FROM alpha", a) || MentionsTable("FROM alpha", b) || !MentionsTable("FROM beta", b) || MentionsTable("FROM beta", a) {
			t.Fatal("answers crossed between snapshots")
		}
	}
}

// TestMentionsTableRandom: on random texts of names, their pieces, other
// words, separators, $ and bytes past ASCII, MentionsTable says true
// exactly when a name occurs (ignoring ASCII case) not run into other
// letters, digits or underscores, or a U& occurs.
func TestMentionsTableRandom(t *testing.T) {
	names := []string{"accounts", "t", "order_items", "x1"}
	cat := catalogOf(names...)
	parts := []string{"accounts", "ACCOUNTS", "Acc", "ounts", "t", "T", "order_", "items", "x1", "x", "1", "_", "$", "$$", " ", ".", ",", "'", `"`,
		"(", "\xc3\xa9", "\xff", "u", "&", "U&", "select", "from", "\n", "--", "/*", "*/"}
	word := func(c byte) bool { return wordByte(c) }
	oracle := func(s string) bool {
		if ContainsFold(s, "u&") {
			return true
		}
		for _, n := range names {
			for i := 0; i+len(n) <= len(s); i++ {
				if IndexFold(s[i:i+len(n)], n) == 0 && (i == 0 || !word(s[i-1])) && (i+len(n) == len(s) || !word(s[i+len(n)])) {
					return true
				}
			}
		}
		return false
	}
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 200000; n++ {
		var b strings.Builder
		for k := rng.Intn(8); k >= 0; k-- {
			b.WriteString(parts[rng.Intn(len(parts))])
		}
		s := b.String()
		if got, want := MentionsTable(s, cat), oracle(s); got != want {
			t.Fatalf("%q: %v, want %v", s, got, want)
		}
	}
}

// BenchmarkMentionsTable: the cost per simple-protocol statement by the
// catalog's number of tables (one word scan of the text: flat).
func BenchmarkMentionsTable(b *testing.B) {
	for _, n := range []int{4, 100, 1000} {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("table_number_%d", i))
		}
		cat := catalogOf(names...)
		sql := "SELECT abalance FROM pgbench_accounts WHERE aid = 12345"
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				MentionsTable(sql, cat)
			}
		})
	}
}

// TestMentionsFunctionRandom: MentionsFunction's one pass says what
// searching the text for each of its words says.
func TestMentionsFunctionRandom(t *testing.T) {
	words := []string{"citus_", "distribute", "reference_table", "master_get", "master_move", "rebalance_table_shards"}
	oracle := func(s string) bool {
		for _, w := range words {
			if ContainsFold(s, w) {
				return true
			}
		}
		return false
	}
	parts := []string{"citus", "CITUS_", "_", "distribut", "e", "E", "reference_", "TABLE", "table", "master_", "get", "MOVE",
		"rebalance_table_", "shards", "c", "m", "r", "d", " ", "\x03", "\xe3", "(", "'"}
	rng := rand.New(rand.NewSource(2))
	for n := 0; n < 200000; n++ {
		var b strings.Builder
		for k := rng.Intn(8); k >= 0; k-- {
			b.WriteString(parts[rng.Intn(len(parts))])
		}
		s := b.String()
		if got, want := MentionsFunction(s), oracle(s); got != want {
			t.Fatalf("%q: %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"SELECT create_distributed_table('t', 'k')", "select * from CITUS_TABLES", "SELECT rebalance_table_shards()"} {
		if !MentionsFunction(s) {
			t.Errorf("%q: not found", s)
		}
	}
	if MentionsFunction("SELECT abalance FROM pgbench_accounts WHERE aid = 1") {
		t.Error("a point read mentions a catalog function")
	}
}

// BenchmarkMentionsFunction: the cost per simple-protocol statement.
func BenchmarkMentionsFunction(b *testing.B) {
	sql := "SELECT abalance FROM pgbench_accounts WHERE aid = 12345"
	for b.Loop() {
		MentionsFunction(sql)
	}
}
