package difftest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// column of a generated table. The first column, k, is the distribution
// column of a distributed table and the primary key of every table.
type column struct {
	name    string
	typ     colType
	notNull bool
}

// table is a generated table.
type table struct {
	name       string // relation name in schema public
	reference  bool
	cols       []column
	shardCount int
	colocate   string // colocate_with target, "" for default
	keys       []value
	// group is the colocation group: tables with equal group are colocated
	// (same dist type and shard count, created with colocate_with).
	group int
	// views: the view and SQL function of viewSQL exist on both sides
	// (the coordinator may refuse them, with 0A000).
	views bool
}

func (t *table) key() column { return t.cols[0] }

// valueCols are the columns other than the key.
func (t *table) valueCols() []column { return t.cols[1:] }

func (t *table) col(name string) column {
	for _, c := range t.cols {
		if c.name == name {
			return c
		}
	}
	panic("no column " + name)
}

// schema is the generated set of tables.
type schema struct {
	tables []*table
}

func (s *schema) distributed() []*table {
	var out []*table
	for _, t := range s.tables {
		if !t.reference {
			out = append(out, t)
		}
	}
	return out
}

func (s *schema) references() []*table {
	var out []*table
	for _, t := range s.tables {
		if t.reference {
			out = append(out, t)
		}
	}
	return out
}

// valueKinds are the types of non-key columns.
var valueKinds = []colType{{k: kInt4}, {k: kInt8}, {k: kInt2}, {k: kNumeric}, {k: kFloat8}, {k: kText},
	{k: kVarchar, n: 10}, {k: kBPChar, n: 5}, {k: kBool}, {k: kDate}, {k: kTimestamp}, {k: kTimestamptz},
	{k: kInterval}, {k: kUUID}}

// genSchema makes one distributed table per distribution type (every
// supported type is covered in every run), colocated partners for some,
// and two reference tables. Every table has an int4 column "g" (small
// values, for grouping and reference joins) and a text column "t".
func genSchema(r *rand.Rand) *schema {
	s := &schema{}
	group := 0
	for i, k := range distKinds {
		kt := colType{k: k}
		switch k {
		case kVarchar:
			if r.IntN(2) == 0 {
				kt.n = 4 + r.IntN(4)
			}
		case kBPChar:
			kt.n = 3 + r.IntN(4)
		}
		group++
		shards := []int{2, 3, 4, 6, 8}[r.IntN(5)]
		base := &table{name: fmt.Sprintf("d%d_%s", i, strings.Map(alnum, kt.sql())), cols: genCols(r, kt),
			shardCount: shards, group: group}
		s.tables = append(s.tables, base)
		if r.IntN(2) == 0 {
			s.tables = append(s.tables, &table{name: base.name + "_co", cols: genCols(r, kt),
				shardCount: shards, colocate: base.name, group: group})
		}
	}
	for i := range 2 {
		kt := colType{k: []kind{kInt4, kText, kInt8}[r.IntN(3)]}
		if i == 0 {
			kt = colType{k: kInt4} // joins d*.g = r0.k
		}
		s.tables = append(s.tables, &table{name: fmt.Sprintf("r%d", i), reference: true, cols: genCols(r, kt)})
	}
	for _, t := range s.tables {
		t.keys = genKeys(r, t.key().typ, t.reference)
	}
	return s
}

func alnum(c rune) rune {
	if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
		return c
	}
	return -1
}

func genCols(r *rand.Rand, kt colType) []column {
	cols := []column{{name: "k", typ: kt, notNull: true}, {name: "g", typ: colType{k: kInt4}}, {name: "t", typ: colType{k: kText}}}
	for i, vt := range valueKinds {
		if r.IntN(3) == 0 {
			cols = append(cols, column{name: fmt.Sprintf("c%d", i), typ: vt})
		}
	}
	return cols
}

// genKeys is the pool of key values statements draw from, so that reads
// and writes hit rows that exist. Reference keys for r0 are the small
// values of the "g" columns.
func genKeys(r *rand.Rand, t colType, reference bool) []value {
	seen := map[string]bool{}
	var keys []value
	add := func(v value) {
		if !seen[v.s] {
			seen[v.s] = true
			keys = append(keys, v)
		}
	}
	if reference && t.k == kInt4 {
		for i := -1; i <= 12; i++ {
			add(value{s: fmt.Sprint(i)})
		}
		return keys
	}
	for range 40 {
		add(genValue(r, t, false))
	}
	return keys
}

// createSQL is the table's CREATE TABLE statement.
func (t *table) createSQL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (", t.name)
	for i, c := range t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", c.name, c.typ.sql())
		if i == 0 {
			b.WriteString(" PRIMARY KEY")
		} else if c.notNull {
			b.WriteString(" NOT NULL")
		}
	}
	b.WriteString(")")
	return b.String()
}

// distributeSQL is the Citus call that distributes the table.
func (t *table) distributeSQL() string {
	if t.reference {
		return fmt.Sprintf("SELECT create_reference_table('%s')", t.name)
	}
	if t.colocate != "" {
		return fmt.Sprintf("SELECT create_distributed_table('%s', 'k', colocate_with => '%s')", t.name, t.colocate)
	}
	return fmt.Sprintf("SELECT create_distributed_table('%s', 'k', shard_count => %d)", t.name, t.shardCount)
}

// colNames lists the column names, comma separated.
func colNames(cols []column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// row draws a row: a key from the pool and random values.
func (t *table) row(r *rand.Rand) []value {
	vals := make([]value, len(t.cols))
	vals[0] = t.keys[r.IntN(len(t.keys))]
	for i, c := range t.cols[1:] {
		if c.name == "g" {
			if r.IntN(10) == 0 {
				vals[i+1] = value{null: true}
			} else {
				vals[i+1] = value{s: fmt.Sprint(r.IntN(12))}
			}
			continue
		}
		vals[i+1] = genValue(r, c.typ, !c.notNull)
	}
	return vals
}
