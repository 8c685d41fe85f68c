package planner

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// Primitive is one typed step of a plan: what runs where, fully decided
// when the plan is made. A plan's Root is one of the types below; a
// Scatter holds its workers' statements and its Merge, and may hold a
// gathering plan to fall back on. The session switches on the type (the
// Kind names it for metrics and for printing).
type Primitive interface {
	Kind() Kind
	// print writes the primitive as indented lines.
	print(w *printer)
}

// DefaultNode runs the statement unchanged on the default node: it names
// no table pgfleet distributes (or does not parse, and the node says why).
type DefaultNode struct {
	SyntaxError bool
}

// Route runs the statement on the one shard group its distribution value
// (Value, a constant or a parameter resolved at Bind) hashes to:
// ShardSQL[i] is the statement renamed to shard index i of Table.
type Route struct {
	Table    string
	DistType string
	Value    *Value
	ShardSQL []string
}

// ReferenceRead reads reference tables only; any copy can answer.
// ShardSQL holds one statement, renamed to the reference shards.
type ReferenceRead struct {
	ShardSQL []string
	// Local: the relations it also reads that are not in the catalog
	// (local tables, views, sequences): it reads the default node's
	// copies, where they are.
	Local []string `json:"local,omitempty"`
}

// AllCopiesWrite writes a reference table: every copy applies ShardSQL[0]
// in one distributed transaction, and their reports are compared.
// Mutability says what it calls and which defaults it takes.
type AllCopiesWrite struct {
	ShardSQL   []string
	Mutability *Mutability
}

// InsertSplit is a multi-row INSERT into a distributed table whose
// distribution values are constants or parameters (Rows, one per VALUES
// row); the coordinator groups the rows by shard (SplitInsert) and writes
// each group on its shard, in one distributed transaction when there are
// several.
type InsertSplit struct {
	Table     string
	DistType  string
	Rows      []*Value
	Returning bool
	// RowPerValue: RETURNING gives one row per VALUES row, in their order
	// (no ON CONFLICT DO NOTHING, no DO UPDATE ... WHERE), so the rows of
	// several shards' statements can be put back in order.
	RowPerValue bool
	Mutability  *Mutability

	stmt *pg_query.Node
	b    *builder
}

// CopyIn is COPY FROM STDIN into a distributed or reference table; the
// coordinator splits the rows by shard.
type CopyIn struct {
	Table string
	Copy  *CopyOptions
	// Mutability: for a reference table, the defaults every copy would
	// compute for itself.
	Mutability *Mutability
}

// MultiShardWrite is an UPDATE, DELETE or INSERT ... SELECT of a
// distributed table that no equality pins to one shard: ShardSQL[i] runs
// on shard index i, all in one distributed transaction.
type MultiShardWrite struct {
	Table      string
	DistType   string
	ShardSQL   []string
	Returning  bool
	Mutability *Mutability
	// TimeFrozen: the statement reads the transaction's time, frozen in
	// ShardSQL at TimePlaceholder (a prepared statement's plan, to
	// describe and bind it): the executor plans it again with the moment
	// it runs at (FreezeTime) and never runs these statements.
	TimeFrozen bool `json:"time_frozen,omitempty"`
}

// CopyOut is COPY of a distributed table (or of a query whose shards'
// rows are the result as they come) TO STDOUT: each worker in turn copies
// its shards' rows (Workers, the first with the header if one is asked
// for) and the coordinator relays them as one COPY.
//
// For COPY (query) TO STDOUT whose query needs the coordinator's merge
// (ORDER BY, aggregates, LIMIT, ...), Workers is empty: the coordinator
// runs Query as the SELECT it is and writes its rows as COPY does, in
// Format.
type CopyOut struct {
	Table    string
	DistType string
	Workers  []WorkerQuery
	Query    string      `json:",omitempty"`
	Format   *CopyFormat `json:",omitempty"`
	// InBlock: for a COPY the workers run (Workers), the SELECT whose rows
	// it copies, which a transaction block runs in its own transaction
	// and the coordinator writes in Format (the workers' COPY on other
	// connections would not see the block's writes); "" when the options
	// are not the coordinator's to write (ENCODING).
	InBlock string `json:",omitempty"`
	// FromTable: the statement is COPY t [(columns)] TO, not COPY (query) TO.
	FromTable bool `json:",omitempty"`
}

// CopyFormat is what COPY ... TO STDOUT's options ask of the text or CSV
// the coordinator writes itself (PostgreSQL's defaults filled in).
type CopyFormat struct {
	CSV        bool
	Delimiter  byte
	Null       string
	Header     bool
	Quote      byte
	Escape     byte
	ForceQuote []string // CSV: columns quoted even when they need not be
	ForceAll   bool     // FORCE_QUOTE *
}

// Function is a call of a catalog function (create_distributed_table,
// citus_add_node, ...) that the coordinator runs itself, with its
// positional and named constant arguments.
type Function struct {
	Name      string
	Args      []string
	NamedArgs map[string]string
}

func (*DefaultNode) Kind() Kind     { return KindDefault }
func (*Route) Kind() Kind           { return KindRouter }
func (*ReferenceRead) Kind() Kind   { return KindReferenceRead }
func (*AllCopiesWrite) Kind() Kind  { return KindReferenceWrite }
func (*InsertSplit) Kind() Kind     { return KindInsertSplit }
func (*CopyIn) Kind() Kind          { return KindCopyIn }
func (*Scatter) Kind() Kind         { return KindMultiShard }
func (*MultiShardWrite) Kind() Kind { return KindMultiShardWrite }
func (*CopyOut) Kind() Kind         { return KindCopyOut }
func (*Function) Kind() Kind        { return KindFunction }

// Kind is what the plan's root does.
func (p *Plan) Kind() Kind { return p.Root.Kind() }

// DistTable is the distributed table whose shards the plan's root chooses
// among ("" for the kinds that have none); DistType is the type of its
// distribution column.
func (p *Plan) DistTable() string { t, _ := p.dist(); return t }

func (p *Plan) DistType() string { _, t := p.dist(); return t }

func (p *Plan) dist() (table, typ string) {
	switch r := p.Root.(type) {
	case *Route:
		return r.Table, r.DistType
	case *InsertSplit:
		return r.Table, r.DistType
	case *Scatter:
		return r.Table, r.DistType
	case *MultiShardWrite:
		return r.Table, r.DistType
	case *CopyOut:
		return r.Table, r.DistType
	}
	return "", ""
}

// ShardSQL is the statement for each shard index (Route,
// MultiShardWrite), the one for the reference shards (ReferenceRead,
// AllCopiesWrite), or the first shard's, which describes a multi-shard
// query's result (Scatter); nil for the other kinds.
func (p *Plan) ShardSQL() []string {
	switch r := p.Root.(type) {
	case *Route:
		return r.ShardSQL
	case *ReferenceRead:
		return r.ShardSQL
	case *AllCopiesWrite:
		return r.ShardSQL
	case *MultiShardWrite:
		return r.ShardSQL
	case *Scatter:
		return r.First
	}
	return nil
}

// Mutability is what the root's write calls and which defaults it takes
// (nil when it writes nothing, or is of a kind that does not say).
func (p *Plan) Mutability() *Mutability {
	switch r := p.Root.(type) {
	case *AllCopiesWrite:
		return r.Mutability
	case *InsertSplit:
		return r.Mutability
	case *CopyIn:
		return r.Mutability
	case *MultiShardWrite:
		return r.Mutability
	}
	return nil
}

// Returning says whether the root's write (InsertSplit,
// MultiShardWrite) returns rows.
func (p *Plan) Returning() bool {
	switch r := p.Root.(type) {
	case *InsertSplit:
		return r.Returning
	case *MultiShardWrite:
		return r.Returning
	}
	return false
}

// Scatter is the root when it is a multi-shard query, else nil.
func (p *Plan) Scatter() *Scatter {
	if p == nil {
		return nil
	}
	s, _ := p.Root.(*Scatter)
	return s
}

// Format prints the plan as a tree, one primitive per line and its parts
// indented below it: what golden files and EXPLAIN show.
func Format(p *Plan) string {
	w := &printer{}
	if p.Explain != nil {
		what := "Explain"
		if p.Explain.Analyze {
			what += " (analyze)"
		}
		if !p.Explain.Text {
			what += " (not text)"
		}
		w.line("%s", what)
		w.depth++
	}
	p.Root.print(w)
	return strings.Join(w.lines, "\n")
}

type printer struct {
	lines []string
	depth int
}

func (w *printer) line(format string, args ...any) {
	w.lines = append(w.lines, strings.Repeat("  ", w.depth)+fmt.Sprintf(format, args...))
}

// shards prints a per-shard statement list: the first, and how many.
func (w *printer) shards(sql []string) {
	if len(sql) == 0 {
		return
	}
	w.depth++
	if len(sql) == 1 {
		w.line("statement: %s", sql[0])
	} else {
		w.line("shard 0 of %d: %s", len(sql), sql[0])
	}
	w.depth--
}

func (x *DefaultNode) print(w *printer) {
	if x.SyntaxError {
		w.line("DefaultNode (does not parse: the node says why)")
		return
	}
	w.line("DefaultNode")
}

func (x *Route) print(w *printer) {
	w.line("Route %s by %s = %s", x.Table, x.DistType, x.Value.describe())
	w.shards(x.ShardSQL)
}

func (x *ReferenceRead) print(w *printer) {
	w.line("ReferenceRead (any copy)")
	w.shards(x.ShardSQL)
}

func (x *AllCopiesWrite) print(w *printer) {
	w.line("AllCopiesWrite (every copy, two-phase commit)%s", x.Mutability.describe())
	w.shards(x.ShardSQL)
}

func (x *InsertSplit) print(w *printer) {
	w.line("InsertSplit %s: %d rows grouped by shard%s", x.Table, len(x.Rows), returning(x.Returning))
	w.depth++
	for i, v := range x.Rows {
		w.line("row %d: %s = %s", i, x.DistType, v.describe())
	}
	w.depth--
}

func (x *CopyIn) print(w *printer) {
	format := "text"
	switch {
	case x.Copy.Binary:
		format = "binary"
	case x.Copy.CSV:
		format = "csv"
	}
	w.line("CopyIn %s (%s), rows split by shard%s", x.Table, format, x.Mutability.describe())
}

func (x *MultiShardWrite) print(w *printer) {
	w.line("MultiShardWrite %s: one statement per shard, two-phase commit%s", x.Table, returning(x.Returning))
	w.shards(x.ShardSQL)
}

func (x *CopyOut) print(w *printer) {
	if x.Query != "" {
		w.line("CopyOut %s: the coordinator writes the rows of %s as COPY %+v", x.Table, x.Query, *x.Format)
		return
	}
	w.line("CopyOut %s: each worker's shards in turn", x.Table)
	w.depth++
	for _, q := range x.Workers {
		w.line("worker %d, shards %v: %s", q.Node, q.Shards, q.SQL)
	}
	w.depth--
}

func (x *Function) print(w *printer) {
	args := append([]string{}, x.Args...)
	for _, k := range slices.Sorted(maps.Keys(x.NamedArgs)) {
		args = append(args, k+" => "+x.NamedArgs[k])
	}
	w.line("Function %s(%s)", x.Name, strings.Join(args, ", "))
}

func (x *Scatter) print(w *printer) {
	w.line("Scatter %s over %d workers", x.Table, len(x.Workers))
	w.depth++
	for _, q := range x.Workers {
		w.line("worker %d, shards %v: %s", q.Node, q.Shards, q.SQL)
	}
	m := x.Merge
	switch {
	case m.Gather:
		w.line("Gather %s, then the statement over their rows: %s", strings.Join(m.Tables, ", "), m.SQL)
	case m.Kind == SQLMerge:
		w.line("Merge (sql): %s", m.SQL)
	default:
		what := "Concat"
		if m.Limit != nil {
			what += " limit " + m.Limit.describe()
		}
		if m.Offset != nil {
			what += " offset " + m.Offset.describe()
		}
		w.line("%s", what)
	}
	if x.Fallback != nil {
		w.line("Fallback:")
		w.depth++
		x.Fallback.Root.print(w)
		w.depth--
	}
	w.depth--
}

func (v *Value) describe() string {
	switch {
	case v == nil:
		return "?"
	case v.Null:
		return "NULL"
	case v.Computed || v.Cast != "":
		return v.Expr
	case v.Param > 0:
		return fmt.Sprintf("$%d", v.Param)
	}
	return v.Const
}

func (m *Mutability) describe() string {
	if m == nil {
		return ""
	}
	return " (checked for per-copy values)"
}

func returning(r bool) string {
	if r {
		return ", RETURNING"
	}
	return ""
}
