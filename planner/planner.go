package planner

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Kind is what a plan does. Each kind's preconditions are stated beside it.
type Kind string

const (
	// Default: the statement names no table pgfleet distributes; it runs
	// unchanged on the default node.
	KindDefault Kind = "default-node"
	// Router: every distributed table is pinned to one shard group by
	// equality of its distribution column to one value (a constant, or a
	// parameter resolved at Bind); reference tables may join in. It runs on
	// the node holding that shard group.
	KindRouter Kind = "router"
	// ReferenceRead: reads reference tables only; any node can answer.
	KindReferenceRead Kind = "reference-read"
	// ReferenceWrite: writes a reference table; every node must apply it.
	KindReferenceWrite Kind = "reference-write"
	// InsertSplit: a multi-row INSERT into a distributed table whose
	// distribution values are constants or parameters (Rows); the
	// coordinator groups the rows by shard (SplitInsert).
	KindInsertSplit Kind = "insert-split"
	// CopyIn: COPY FROM STDIN into a distributed or reference table; the
	// coordinator splits the rows by shard.
	KindCopyIn Kind = "copy-in"
	// MultiShard: a read-only SELECT over distributed tables (colocated and
	// joined on their distribution columns, reference tables joining in)
	// that no equality pins to one shard group. Every shard runs a partial
	// query and the coordinator merges the results (Scatter).
	KindMultiShard Kind = "multi-shard"
	// MultiShardWrite: an UPDATE or DELETE of a distributed table that no
	// equality pins to one shard, reading no other distributed table: it
	// runs on every shard (ShardSQL), all of them in one distributed
	// transaction.
	KindMultiShardWrite Kind = "multi-shard-write"
	// CopyOut: COPY a distributed table TO STDOUT: each worker in turn
	// copies its shards' rows (Scatter.Workers, the first with the header
	// if one is asked for) and the coordinator relays them as one COPY.
	KindCopyOut Kind = "copy-out"
	// Function: a call of a catalog function (create_distributed_table,
	// citus_add_node, ...) that the coordinator runs itself. Requires a
	// plain SELECT fn(args) whose arguments are constants.
	KindFunction Kind = "function"
)

// catalogFunctions are the Citus-compatible functions the coordinator runs.
var catalogFunctions = map[string]bool{
	"create_distributed_table": true, "create_reference_table": true, "undistribute_table": true,
	"citus_add_node": true, "citus_remove_node": true, "citus_get_active_worker_nodes": true,
	"master_get_active_worker_nodes": true, "citus_move_shard_placement": true, "master_move_shard_placement": true,
	"rebalance_table_shards": true, "get_rebalance_table_shards_plan": true, "citus_drain_node": true,
	"citus_set_node_property": true, "citus_rebalance_start": true, "citus_rebalance_status": true,
	"citus_rebalance_stop": true, "citus_rebalance_wait": true, "citus_split_shard_by_split_points": true,
}

// MentionsFunction reports whether sql may call a catalog function, a cheap
// test that spares parsing for every other statement: a text that contains
// citus_, distribute, reference_table, master_get, master_move or
// rebalance_table_shards, ignoring case, in one pass over it (it runs for
// every simple-protocol statement).
func MentionsFunction(sql string) bool {
	for i := 0; i < len(sql); i++ {
		var found bool
		switch sql[i] | 0x20 { // ASCII letters in lower case
		case 'c':
			found = hasPrefixFold(sql[i:], "citus_")
		case 'd':
			found = hasPrefixFold(sql[i:], "distribute")
		case 'r':
			found = hasPrefixFold(sql[i:], "reference_table") || hasPrefixFold(sql[i:], "rebalance_table_shards")
		case 'm':
			found = hasPrefixFold(sql[i:], "master_get") || hasPrefixFold(sql[i:], "master_move")
		}
		if found {
			return true
		}
	}
	return false
}

// hasPrefixFold: s starts with prefix (ASCII, lower case) ignoring ASCII
// case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && IndexFold(s[:len(prefix)], prefix) == 0
}

// ContainsFold is a case-insensitive strings.Contains for an ASCII,
// lower-case needle, without allocating.
func ContainsFold(s, needle string) bool { return IndexFold(s, needle) >= 0 }

// IndexFold is ContainsFold's index of the first match, or -1.
func IndexFold(s, needle string) int {
	n := len(needle)
outer:
	for i := 0; i+n <= len(s); i++ {
		for j := 0; j < n; j++ {
			c := s[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != needle[j] {
				continue outer
			}
		}
		return i
	}
	return -1
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// Value is where a router plan's distribution value comes from (see
// distvalue.go).
type Value struct {
	Param int    `json:"param,omitempty"` // 1-based parameter number (bare, cast, or in Expr)
	Const string `json:"const,omitempty"` // the constant, in PostgreSQL text form
	Lit   string `json:"lit,omitempty"`   // Const's literal kind: LitString, LitInteger, LitNumeric
	Null  bool   `json:"null,omitempty"`
	// Cast: the constant or parameter is cast once, without a type
	// modifier, to this type of the column's family (int2, int4, int8,
	// text, varchar, bpchar, uuid).
	Cast string `json:"cast,omitempty"`
	// Computed: only PostgreSQL computes the value (more casts, casts to
	// other types or with a type modifier, ...): the router evaluates Expr.
	Computed bool `json:"computed,omitempty"`
	// Casts are the types a Computed value's expression casts to, as
	// written ("pg_catalog.date", "public.d", "int4[]"): the coordinator
	// refuses to evaluate it elsewhere when a cast may read the clock
	// ('now'::date).
	Casts []string `json:"casts,omitempty"`
	// Expr is the value's expression as SQL, its parameter (if any)
	// renumbered $1.
	Expr string `json:"expr,omitempty"`
	// Shared: the parameter is also used elsewhere in the statement, so
	// its type, when the client leaves it unspecified, is what PostgreSQL
	// infers from all its uses, not necessarily the column's.
	Shared bool `json:"shared,omitempty"`
	// Assign: the value is stored (INSERT), so the column's type modifier
	// applies (varchar(4) cuts trailing spaces); else it is compared with =.
	Assign bool `json:"assign,omitempty"`
}

// Plan is a distributed plan: data, printable, no closures. Root is what
// runs (a typed primitive, primitive.go); the rest is what every kind
// shares.
type Plan struct {
	Root     Primitive
	Tables   []string // pgfleet tables named, sorted
	ReadOnly bool
	// Explain: the statement is EXPLAIN of Root's statement (nil when it
	// is not). For a routed or reference statement Root's statements hold
	// the EXPLAIN, rewritten.
	Explain *Explain
	// Unqualified: the names, as written, of catalog tables named without
	// their schema and taken as public's; sessions with another
	// search_path must not use the plan.
	Unqualified []string
}

// Explain is how a statement is explained.
type Explain struct {
	// Analyze: it runs the statement. Text: its output is text, one plan
	// line per row.
	Analyze bool
	Text    bool
	// Prefix: for a multi-shard statement, the EXPLAIN and its options to
	// put before the first worker's statement.
	Prefix string
}

// SyntaxError: the text did not parse; the default node will say why.
func (p *Plan) SyntaxError() bool {
	d, ok := p.Root.(*DefaultNode)
	return ok && d.SyntaxError
}

// CopyOptions are the column list and format options of a COPY.
type CopyOptions struct {
	Columns   []string `json:"columns,omitempty"`
	CSV       bool     `json:"csv,omitempty"`
	Binary    bool     `json:"binary,omitempty"`
	Header    bool     `json:"header,omitempty"`
	Delimiter string   `json:"delimiter,omitempty"`
	Null      *string  `json:"null,omitempty"`
	Quote     string   `json:"quote,omitempty"`
	Escape    string   `json:"escape,omitempty"`
	// Encoding is the ENCODING option: the encoding of the client's data.
	Encoding string `json:"encoding,omitempty"`
	// Where is the COPY's WHERE condition, deparsed, which the shards'
	// COPY statements apply ("" when none).
	Where string `json:"where,omitempty"`
	// WhereNode is the WHERE condition's parse tree, for checks that need
	// its function calls.
	WhereNode *pg_query.Node `json:"-"`
	// Fill are the sequence columns the column list leaves out: the
	// coordinator draws their values and adds them to every row.
	Fill []SeqNeed `json:"fill,omitempty"`
}

// unsupported is the error for SQL pgfleet cannot run correctly yet.
func unsupported(format string, args ...any) *pgerr.Error {
	return pgerr.New(pgerr.FeatureNotSupported, format, args...)
}

// Build plans one statement text against a catalog snapshot. It parses the
// text once; callers cache the result by text.
func Build(sql string, cat *metadata.Snapshot) (*Plan, error) {
	p, err := build(sql, cat)
	if err != nil {
		return p, err
	}
	if sql := p.ShardSQL(); len(sql) > 0 {
		// pg_query's deparser is not perfect ((0).a came out as 0.a): a
		// shard statement that does not parse is never sent. The refusal
		// lets the session ask the default node, which gives PostgreSQL's
		// own error when the statement is wrong anyway.
		if _, perr := pg_query.Parse(sql[0]); perr != nil {
			return nil, unsupported("this statement cannot be rewritten for its shards").
				WithHint("Write it another way, and report it to pgfleet's developers with the statement.")
		}
	}
	return p, err
}

func build(sql string, cat *metadata.Snapshot) (*Plan, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		// Let the worker report the syntax error, with its position.
		return &Plan{Root: &DefaultNode{SyntaxError: true}}, nil
	}
	if pg16Number(sql, tree) || zeroParam(sql, tree) {
		// 0x64 or 1_000: PostgreSQL 15 says "trailing junk after numeric
		// literal"; $0: "there is no parameter $0" (deparsed, it would be
		// a "?"). The worker is sent the text as is, to say so.
		return &Plan{Root: &DefaultNode{SyntaxError: true}}, nil
	}
	if len(tree.Stmts) == 1 {
		if p, err := functionCall(tree.Stmts[0].Stmt); p != nil || err != nil {
			return p, err
		}
		if MentionsFunction(sql) {
			if name := catalogFunctionIn(tree.Stmts[0].Stmt); name != "" {
				return nil, &CoordinatorOnly{unsupported("%s is run by the coordinator only as SELECT %s(...) or SELECT * FROM %s(...)", name, name, name).
					WithHint("Select all its columns, on its own, and filter the rows in the client.")}
			}
		}
	}
	if MentionsFleetView(sql) {
		if p, err, ok := fleetView(tree, cat); ok {
			return p, err
		}
	}
	if len(cat.Tables) == 0 {
		return &Plan{Root: &DefaultNode{}}, nil
	}
	var named []string
	for _, raw := range tree.Stmts {
		named = append(named, catalogTables(raw.Stmt, cat)...)
	}
	if len(named) == 0 {
		p := &Plan{Root: &DefaultNode{}}
		for _, raw := range tree.Stmts {
			p.Unqualified = append(p.Unqualified, unqualified(raw.Stmt, cat)...)
		}
		return p, nil
	}
	if len(tree.Stmts) != 1 {
		return nil, unsupported("a query string with several statements cannot use distributed or reference tables").
			WithHint("Send the statements one at a time.")
	}
	if err := unqualifyColumns(tree.Stmts[0].Stmt, cat); err != nil {
		return nil, err
	}
	if err := refuseShardNames(tree.Stmts[0].Stmt, cat); err != nil {
		return nil, err
	}
	if err := refuseSeqCalls(tree.Version, tree.Stmts[0].Stmt); err != nil {
		return nil, err
	}
	b := &builder{cat: cat, tree: tree, ctes: cteNames(tree.Stmts[0].Stmt)}
	p, err := b.plan(tree.Stmts[0].Stmt)
	if p != nil {
		p.Unqualified = unqualified(tree.Stmts[0].Stmt, cat)
	}
	if err == nil && len(p.Tables) > 0 || err != nil {
		if lerr := localBeside(cat, tree.Stmts[0].Stmt, b.ctes); lerr != nil {
			if err == nil {
				if rr, ok := p.Root.(*ReferenceRead); ok {
					// Beside reference tables only: read on the default
					// node's copies, where the local relations are.
					rr.Local = localNames(cat, tree.Stmts[0].Stmt, b.ctes)
					return p, nil
				}
			}
			// A read of local relations beside distributed tables:
			// gathered to the default node, where they are.
			cause := err
			if cause == nil {
				cause = lerr
			}
			lb := &builder{cat: cat, tree: tree, ctes: b.ctes, local: true}
			if p, err = lb.gather(tree.Stmts[0].Stmt, cause); err != nil {
				return nil, err
			}
			p.Unqualified = unqualified(tree.Stmts[0].Stmt, cat)
		}
	}
	return p, err
}

// unqualified lists the names stmt gives without a schema that are the
// name of a catalog table of any schema (the planner takes each as
// public's, or as no catalog table when public has none of that name).
// UnqualifiedIn is unqualified for a statement string (DDL, which is not
// planned), DROP TABLE's names too; nil if it does not parse.
func UnqualifiedIn(sql string, cat *metadata.Snapshot) []string {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil
	}
	var found []string
	for _, raw := range tree.Stmts {
		for _, n := range unqualified(raw.Stmt, cat) {
			if !slices.Contains(found, n) {
				found = append(found, n)
			}
		}
		if d := raw.Stmt.GetDropStmt(); d != nil && d.RemoveType == pg_query.ObjectType_OBJECT_TABLE {
			for _, o := range d.Objects {
				if l := o.GetList(); l != nil && len(l.Items) == 1 {
					n := l.Items[0].GetString_().GetSval()
					if cat.Table("public."+n) != nil && !slices.Contains(found, n) {
						found = append(found, n)
					}
				}
			}
		}
	}
	return found
}

func unqualified(stmt *pg_query.Node, cat *metadata.Snapshot) []string {
	ctes := cteNames(stmt)
	var found []string
	Walk(stmt, func(m proto.Message) {
		rv, ok := m.(*pg_query.RangeVar)
		if !ok || rv.Schemaname != "" || ctes.refs[rv] || slices.Contains(found, rv.Relname) {
			return
		}
		for name := range cat.Tables {
			if name[strings.IndexByte(name, '.')+1:] == rv.Relname {
				found = append(found, rv.Relname)
				return
			}
		}
	})
	return found
}

// catalogTables lists the pgfleet tables a statement names.
func catalogTables(stmt *pg_query.Node, cat *metadata.Snapshot) []string {
	ctes := cteNames(stmt)
	var out []string
	Walk(stmt, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok {
			if t := lookup(cat, rv, ctes); t != nil {
				out = append(out, t.Name)
			}
		}
	})
	if d := stmt.GetDropStmt(); d != nil && d.RemoveType == pg_query.ObjectType_OBJECT_TABLE {
		for _, o := range d.Objects {
			if t := cat.Table(qualified(ListNames(o.GetList()))); t != nil {
				out = append(out, t.Name)
			}
		}
	}
	return out
}

// ListNames returns the strings of a name list (schema, relation).
func ListNames(l *pg_query.List) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, n := range l.Items {
		out = append(out, n.GetString_().GetSval())
	}
	return out
}

func qualified(parts []string) string {
	switch len(parts) {
	case 1:
		return "public." + parts[0]
	case 2:
		return parts[0] + "." + parts[1]
	}
	return ""
}

// readsDistributed reports whether stmt names a distributed table
// anywhere.
func (b *builder) readsDistributed(stmt *pg_query.Node) bool {
	return slices.ContainsFunc(catalogTables(stmt, b.cat), func(name string) bool {
		return b.cat.Table(name).Kind == metadata.Distributed
	})
}

// tableNames are the catalog tables stmt names, each once, sorted (a
// plan's Tables).
func tableNames(stmt *pg_query.Node, cat *metadata.Snapshot) []string {
	return slices.Compact(slices.Sorted(slices.Values(catalogTables(stmt, cat))))
}

func lookup(cat *metadata.Snapshot, rv *pg_query.RangeVar, ctes *CTEs) *metadata.Table {
	if rv.Schemaname == "" {
		if ctes != nil && ctes.refs[rv] {
			return nil
		}
		return cat.Table("public." + rv.Relname)
	}
	return cat.Table(rv.Schemaname + "." + rv.Relname)
}

// CTEs is what a statement's WITH clauses name: the range variables
// that refer to one of its CTEs (refs) and every CTE name (names).
type CTEs struct {
	refs  map[*pg_query.RangeVar]bool
	names map[string]bool
}

// cteNames finds stmt's CTEs and the range variables that refer to them,
// as PostgreSQL scopes them: a CTE is visible in its WITH's statement
// (subqueries included) and in the CTEs after it, in itself and all the
// others only under WITH RECURSIVE, nowhere outside that statement; the
// target of INSERT, UPDATE, DELETE or MERGE is always a table. So in
// WITH t AS (SELECT * FROM t) SELECT * FROM t, the inner t is the table.
func cteNames(stmt *pg_query.Node) *CTEs {
	return CTEScope(stmt)
}

// localBeside refuses a statement on distributed or reference tables that
// also reads a relation that is not one (a local or temporary table, a
// view, a system catalog): it exists on the default node only, or differs
// on each worker, and the statement runs where the shards are.
func localBeside(cat *metadata.Snapshot, stmt *pg_query.Node, ctes *CTEs) error {
	if names := localNames(cat, stmt, ctes); len(names) > 0 {
		return unsupported("%s reads %s, which is not a distributed or reference table, beside distributed or reference tables", StatementName(stmt), names[0]).
			WithHint("Read %s in a statement of its own, or make it a distributed or reference table (create_distributed_table, create_reference_table).", names[0])
	}
	return nil
}

// localNames are the relations stmt reads that are not in the catalog, in
// the order of first use.
func localNames(cat *metadata.Snapshot, stmt *pg_query.Node, ctes *CTEs) []string {
	var names []string
	locked := map[*pg_query.RangeVar]bool{} // FOR UPDATE OF a: a name in the FROM, not a relation
	Walk(stmt, func(m proto.Message) {
		if lc, ok := m.(*pg_query.LockingClause); ok {
			for _, r := range lc.LockedRels {
				locked[r.GetRangeVar()] = true
			}
		}
		if rv, ok := m.(*pg_query.RangeVar); ok && !locked[rv] && !ctes.refs[rv] && lookup(cat, rv, ctes) == nil && !slices.Contains(names, rv.Relname) {
			names = append(names, rv.Relname)
		}
	})
	return names
}

// CTEScope is cteNames for other packages (DDL checks).
func CTEScope(stmt proto.Message) *CTEs {
	c := &CTEs{refs: map[*pg_query.RangeVar]bool{}, names: map[string]bool{}}
	if stmt == nil {
		return c
	}
	var visit func(m protoreflect.Message, visible []string)
	visit = func(m protoreflect.Message, visible []string) {
		if !m.IsValid() {
			return
		}
		var with *pg_query.WithClause
		var target *pg_query.RangeVar
		switch x := m.Interface().(type) {
		case *pg_query.RangeVar:
			if x.Schemaname == "" && slices.Contains(visible, x.Relname) {
				c.refs[x] = true
			}
			return
		case *pg_query.SelectStmt:
			with = x.WithClause
		case *pg_query.InsertStmt:
			with, target = x.WithClause, x.Relation
		case *pg_query.UpdateStmt:
			with, target = x.WithClause, x.Relation
		case *pg_query.DeleteStmt:
			with, target = x.WithClause, x.Relation
		case *pg_query.MergeStmt:
			with, target = x.WithClause, x.Relation
		}
		if with != nil {
			all := slices.Clone(visible)
			for _, n := range with.Ctes {
				name := n.GetCommonTableExpr().GetCtename()
				all = append(all, name)
				c.names[name] = true
			}
			for i, n := range with.Ctes {
				sees := all
				if !with.Recursive {
					sees = all[:len(visible)+i]
				}
				if q := n.GetCommonTableExpr().GetCtequery(); q != nil {
					visit(q.ProtoReflect(), sees)
				}
			}
			visible = all
		}
		eachChild(m, func(cm protoreflect.Message) {
			if i := cm.Interface(); (with == nil || i != proto.Message(with)) && (target == nil || i != proto.Message(target)) {
				visit(cm, visible)
			}
		})
	}
	visit(stmt.ProtoReflect(), nil)
	return c
}

// Refers reports whether rv names one of the statement's CTEs.
func (c *CTEs) Refers(rv *pg_query.RangeVar) bool { return c != nil && c.refs[rv] }

// Walk calls fn for every message in a pg_query parse tree, parents first,
// children in the order of their fields' declaration (FROM before WHERE).
// protoreflect's Range has no fixed order (protobuf-go swaps fields by the
// binary's hash), and the planner's decisions follow the order of first
// use, so Walk keeps its own.
func Walk(n proto.Message, fn func(proto.Message)) {
	if n == nil {
		return
	}
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		if !m.IsValid() {
			return
		}
		fn(m.Interface())
		eachChild(m, visit)
	}
	visit(n.ProtoReflect())
}

// eachChild calls fn for each message m holds (oneofs, then the other
// message fields, lists element by element), in declaration order.
func eachChild(m protoreflect.Message, fn func(protoreflect.Message)) {
	w := walkInfoOf(m.Descriptor())
	for _, od := range w.oneofs {
		if fd := m.WhichOneof(od); fd != nil && fd.Kind() == protoreflect.MessageKind {
			fn(m.Get(fd).Message())
		}
	}
	for _, fd := range w.fields {
		if !m.Has(fd) {
			continue
		}
		if fd.IsList() {
			l := m.Get(fd).List()
			for i := 0; i < l.Len(); i++ {
				fn(l.Get(i).Message())
			}
		} else {
			fn(m.Get(fd).Message())
		}
	}
}

// walkInfo is what Walk visits of a message type: its oneofs and its other
// message fields (lists included, maps not), in declaration order.
type walkInfo struct {
	oneofs []protoreflect.OneofDescriptor
	fields []protoreflect.FieldDescriptor
}

// walkInfos holds the walkInfo of every message of pg_query's parse tree
// by its index in the file, made once: a walk looks one up per message it
// visits.
var walkInfos = func() []*walkInfo {
	msgs := (&pg_query.Node{}).ProtoReflect().Descriptor().ParentFile().Messages()
	out := make([]*walkInfo, msgs.Len())
	for i := range out {
		out[i] = newWalkInfo(msgs.Get(i))
	}
	return out
}()

// otherWalkInfos: messages outside pg_query's file (none in a parse tree).
var otherWalkInfos sync.Map // protoreflect.MessageDescriptor -> *walkInfo

func walkInfoOf(md protoreflect.MessageDescriptor) *walkInfo {
	if md.Parent() == nodeFile {
		return walkInfos[md.Index()]
	}
	if w, ok := otherWalkInfos.Load(md); ok {
		return w.(*walkInfo)
	}
	w := newWalkInfo(md)
	otherWalkInfos.Store(md, w)
	return w
}

var nodeFile protoreflect.Descriptor = (&pg_query.Node{}).ProtoReflect().Descriptor().ParentFile()

func newWalkInfo(md protoreflect.MessageDescriptor) *walkInfo {
	w := &walkInfo{}
	for i := 0; i < md.Oneofs().Len(); i++ {
		w.oneofs = append(w.oneofs, md.Oneofs().Get(i))
	}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		if fd.ContainingOneof() == nil && fd.Kind() == protoreflect.MessageKind && !fd.IsMap() {
			w.fields = append(w.fields, fd)
		}
	}
	return w
}

type builder struct {
	cat *metadata.Snapshot
	// shardAt, when set, is the shard index rewrite takes for a table
	// (by catalog name) instead of its idx: a gathering's first statement
	// reads each table's shard on one node.
	shardAt map[string]int
	tree    *pg_query.ParseResult
	// ctes: which range variables of the statement name its CTEs.
	ctes *CTEs
	// scope: range variables of the top level, by the name columns use.
	scope map[string]*metadata.Table
	// topLevel marks the RangeVars in the top-level FROM (or target).
	topLevel map[*pg_query.RangeVar]bool
	// outerQuals are the ON conditions of outer joins: their equalities of
	// distribution columns keep both sides on one shard group, but their
	// constants restrict nothing.
	outerQuals []*pg_query.Node
	// renamed: scope names whose range variable renames the table's
	// columns (orders AS o(a, b)): which of them is the distribution
	// column is not known here, so none is taken for it.
	renamed map[string]bool
	// local: gather may read relations that are not in the catalog (they
	// are the default node's, where the gathered statement then runs).
	local bool
}

// colAliases reports whether rv renames its table's columns.
func colAliases(rv *pg_query.RangeVar) bool {
	return rv.Alias != nil && len(rv.Alias.Colnames) > 0
}

func (b *builder) plan(stmt *pg_query.Node) (*Plan, error) {
	b.scope = map[string]*metadata.Table{}
	b.topLevel = map[*pg_query.RangeVar]bool{}
	b.outerQuals = nil
	b.renamed = nil
	var quals []*pg_query.Node
	readOnly := false
	var insert *pg_query.InsertStmt
	var target *metadata.Table
	switch {
	case stmt.GetSelectStmt() != nil:
		s := stmt.GetSelectStmt()
		if s.Op != pg_query.SetOperation_SETOP_NONE && b.readsDistributed(stmt) {
			return b.gather(stmt, unsupported("UNION, INTERSECT and EXCEPT over distributed tables are not supported here").
				WithHint("Run each side in a statement of its own."))
		}
		if s.IntoClause != nil {
			return nil, unsupported("SELECT INTO from distributed or reference tables is not supported yet").
				WithHint("Create the table and distribute it colocated with the source (create_distributed_table(..., colocate_with => ...)), then INSERT INTO it ... SELECT.")
		}
		readOnly = len(s.LockingClause) == 0
		for _, f := range s.FromClause {
			quals = b.addFrom(f, quals)
		}
		quals = append(quals, s.WhereClause)
	case stmt.GetInsertStmt() != nil:
		insert = stmt.GetInsertStmt()
		target = b.addRangeVar(insert.Relation)
		if sel := insert.SelectStmt.GetSelectStmt(); sel != nil && len(sel.ValuesLists) > 0 &&
			(len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || sel.WithClause != nil) {
			// VALUES sorted or cut: a query whose rows come first.
			return nil, b.selectFirst(insert, target, unsupported("INSERT ... VALUES with ORDER BY, LIMIT, OFFSET or WITH on %s is not supported here", insert.Relation.Relname).
				WithHint("Write the rows in the order and number to insert, without ORDER BY, LIMIT or OFFSET."))
		}
		if insert.SelectStmt != nil && insert.SelectStmt.GetSelectStmt() != nil &&
			len(insert.SelectStmt.GetSelectStmt().ValuesLists) == 0 {
			err := seqCheck(stmt, target)
			var p *Plan
			if err == nil {
				p, err = b.insertSelect(stmt, insert, target)
			}
			if isUnsupported(err) {
				return nil, b.selectFirst(insert, target, err)
			}
			return p, err
		}
		if err := seqCheck(stmt, target); err != nil {
			return nil, err
		}
		if err := conflictMovesRow(insert, target); err != nil {
			return nil, err
		}
	case stmt.GetUpdateStmt() != nil:
		u := stmt.GetUpdateStmt()
		target = b.addRangeVar(u.Relation)
		if err := seqCheck(stmt, target); err != nil {
			return nil, err
		}
		for _, f := range u.FromClause {
			quals = b.addFrom(f, quals)
		}
		quals = append(quals, u.WhereClause)
		if target != nil && target.Kind == metadata.Distributed {
			for _, rt := range u.TargetList {
				if r := rt.GetResTarget(); r.GetName() == target.DistColumn && !b.keepsDistValue(u, r) {
					return nil, unsupported("modifying the distribution column %q of %s is not supported", target.DistColumn, target.Name).
						WithHint("A row's distribution column decides its shard and cannot change: DELETE the row and INSERT it with the new value.")
				}
			}
		}
	case stmt.GetDeleteStmt() != nil:
		d := stmt.GetDeleteStmt()
		target = b.addRangeVar(d.Relation)
		for _, f := range d.UsingClause {
			quals = b.addFrom(f, quals)
		}
		quals = append(quals, d.WhereClause)
	case stmt.GetCopyStmt() != nil:
		return b.copyPlan(stmt)
	case stmt.GetExplainStmt() != nil:
		return b.explainPlan(stmt)
	default:
		e := unsupported("%s on distributed or reference tables is not supported yet", StatementName(stmt)).
			WithHint("Send the SELECT, INSERT, UPDATE or DELETE itself.")
		switch {
		case stmt.GetPrepareStmt() != nil:
			e = e.WithHint("Use the protocol's prepared statements (Parse/Bind, as drivers and pgbench -M prepared do); they are routed at Bind.")
		case stmt.GetDeclareCursorStmt() != nil:
			e = e.WithHint("Declare it with a simple query inside BEGIN ... COMMIT, WITHOUT HOLD, in a session not pinned to one connection (as psql's FETCH_COUNT does); or run the query itself.")
		}
		return nil, e
	}

	// Every pgfleet table must be in the top-level FROM: tables inside
	// subqueries and CTEs are not analysed yet.
	ctes := cteNames(stmt)
	var nested error
	var nestedRefs []string // reference tables read in subqueries and CTEs
	Walk(stmt, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok && !b.topLevel[rv] && nested == nil {
			t := lookup(b.cat, rv, ctes)
			switch {
			case t == nil:
			case t.Kind == metadata.Distributed:
				nested = unsupported("distributed table %s in a subquery or CTE is not supported yet", t.Name).
					WithHint("Move the distributed table to the top-level FROM, joined on its distribution column, or run the subquery first.")
			case !slices.Contains(nestedRefs, t.Name):
				nestedRefs = append(nestedRefs, t.Name)
			}
		}
	})
	var nestedVal *Value
	var nestedDist []*metadata.Table
	if nested != nil {
		var ok bool
		if nestedVal, nestedDist, ok = b.nestedPinned(stmt, ctes); !ok {
			if nestedDist, ok = b.nestedCorrelated(stmt, ctes); ok {
				nestedVal = nil
			} else if stmt.GetUpdateStmt() != nil || stmt.GetDeleteStmt() != nil {
				return nil, b.subqueryFirst(stmt, nested)
			} else {
				return b.gather(stmt, nested)
			}
		}
	}
	// A data-modifying WITH that writes a reference table would run on
	// the one copy the statement is routed to.
	if err := modifyingCTEWrites(b.cat, stmt, ctes); err != nil {
		return nil, err
	}

	p := &Plan{ReadOnly: readOnly}
	var dist []*metadata.Table
	seen := map[string]bool{}
	topDist := false // the statement's own level reads a distributed table
	add := func(t *metadata.Table) {
		if !seen[t.Name] {
			seen[t.Name] = true
			p.Tables = append(p.Tables, t.Name)
			if t.Kind == metadata.Distributed {
				dist = append(dist, t)
			}
		}
	}
	for _, t := range b.scope {
		add(t)
		topDist = topDist || t.Kind == metadata.Distributed
	}
	for _, t := range nestedDist {
		add(t)
	}
	if len(p.Tables) == 0 {
		// Only reference tables, all in subqueries or CTEs
		// (SELECT (SELECT count(*) FROM r1), (SELECT count(*) FROM r2)):
		// they say where the statement can run.
		p.Tables = nestedRefs
	}
	sort.Strings(p.Tables)
	sort.Slice(dist, func(i, j int) bool { return dist[i].Name < dist[j].Name })

	if len(dist) == 0 {
		sql, err := b.rewrite(stmt, -1)
		if err != nil {
			return nil, err
		}
		// A write, or SELECT ... FOR UPDATE, which locks rows on every
		// copy.
		if target == nil || target.Kind != metadata.Reference {
			if readOnly {
				p.Root = &ReferenceRead{ShardSQL: []string{sql}}
				return p, nil
			}
		}
		w := &AllCopiesWrite{}
		if stmt.GetSelectStmt() == nil {
			if w.Mutability = mutability(stmt); w.Mutability == nil {
				w.Mutability = &Mutability{} // a write, whose literals are still to check
			} else if w.Mutability.Defaults && target != nil {
				w.Mutability.Table = target.Name
			}
		}
		if target != nil {
			if sh := b.cat.Shards[target.Name]; len(sh) > 0 {
				sql += metadata.CopiesMarker(len(sh[0].Nodes))
			}
		}
		w.ShardSQL = []string{sql}
		p.Root = w
		return p, nil
	}
	if target != nil && target.Kind == metadata.Reference {
		return nil, unsupported("writing reference table %s with distributed tables in the same statement is not supported", target.Name).
			WithHint("Read the distributed rows first, then write the reference table with their values.")
	}
	for _, t := range dist[1:] {
		if t.ColocationID != dist[0].ColocationID {
			return b.gather(stmt, unsupported("joining %s and %s, which are not colocated, is not supported yet", dist[0].Name, t.Name).
				WithHint("Distribute them with the same shard count and colocate_with."))
		}
	}
	var val *Value
	var err error
	if insert != nil {
		var vals []*Value
		if vals, err = insertValues(b.tree.Version, insert, target); err != nil {
			return nil, err
		}
		if len(vals) > 1 {
			x := &InsertSplit{Table: target.Name, DistType: target.DistType, Rows: vals, stmt: stmt, b: b}
			x.Returning = len(insert.ReturningList) > 0
			oc := insert.OnConflictClause
			x.RowPerValue = x.Returning && (oc == nil || oc.Action == pg_query.OnConflictAction_ONCONFLICT_UPDATE && oc.WhereClause == nil)
			// Rows on several workers: what each would compute for itself
			// (now(), a STABLE default) is checked as for multi-shard
			// writes.
			x.Mutability = perRowMutability(stmt, target.Name)
			p.Root = x
			return p, nil
		}
		val = vals[0]
	} else if nestedVal != nil && !topDist {
		// Distributed tables in subqueries only, all pinned to one value.
		val = nestedVal
	} else {
		val, err = b.pinnedValue(quals, dist)
		if err == nil && nestedVal != nil && !sameValue(val, nestedVal) {
			return b.gather(stmt, nested)
		}
		var up *unpinned
		if errors.As(err, &up) && nestedVal != nil {
			return b.gather(stmt, nested)
		}
		if errors.As(err, &up) {
			if stmt.GetSelectStmt() != nil {
				plan, err := b.multiShard(stmt, p, dist)
				if isUnsupported(err) {
					return b.gather(stmt, err)
				}
				if err != nil {
					return nil, err
				}
				if x := plan.Scatter(); x != nil && !x.Merge.Gather &&
					(x.Merge.Kind == SQLMerge || len(x.LimitFuncs) > 0) {
					if fb, ferr := b.gather(stmt, errNoFallback); ferr == nil {
						x.Fallback = fb
					}
				}
				return plan, err
			}
			if insert == nil && target != nil && target.Kind == metadata.Distributed {
				// (Every distributed table read is in the target's
				// class, with no value: the target is unpinned too.)
				return b.multiShardWrite(stmt, p, dist)
			}
			err = unsupported("the %s on %s has no equality on its distribution column %q, so it would need every shard; multi-shard %ss are not supported yet",
				StatementName(stmt), up.table.Name, up.table.DistColumn, StatementName(stmt)).
				WithHint("Add WHERE %s = <value>.", up.table.DistColumn)
		}
	}
	if err != nil {
		if stmt.GetSelectStmt() != nil && isUnsupported(err) {
			return b.gather(stmt, err) // a self-join not on the distribution column
		}
		return nil, err
	}
	if val.Param > 0 {
		// Where the parameter is used other than as the bare value of a
		// distribution column, PostgreSQL may infer another type for it.
		bare := 0
		if insert != nil {
			bare = 1
		} else {
			bare = b.bareParamUses(quals, val.Param)
		}
		uses := countParam(stmt, val.Param)
		val.Shared = uses > 1 && uses > bare
	}
	x := &Route{Table: dist[0].Name, DistType: dist[0].DistType, Value: val}
	n := len(b.cat.Shards[dist[0].Name])
	x.ShardSQL = make([]string, n)
	for i := 0; i < n; i++ {
		if x.ShardSQL[i], err = b.rewrite(stmt, i); err != nil {
			return nil, err
		}
	}
	p.Root = x
	return p, nil
}

// nestedPinned reports whether every query level of stmt below its own
// (subqueries, CTEs, derived tables) that reads distributed tables pins
// each of them, through equalities ANDed in that level's WHERE and join
// conditions, to one and the same constant or parameter; it returns that
// value and the tables. Each such level then reads only rows of the one
// shard of its tables that holds the value, and with the statement's own
// tables pinned to it too (and all colocated), the statement runs on that
// shard alone as it would over the whole tables. Levels that correlate
// with an outer one, or pin another value, are not taken (ok is false).
func (b *builder) nestedPinned(stmt *pg_query.Node, ctes *CTEs) (val *Value, tables []*metadata.Table, ok bool) {
	top := stmt.GetSelectStmt()
	covered := map[*pg_query.RangeVar]bool{}
	ok = true
	Walk(stmt, func(m proto.Message) {
		s, isSel := m.(*pg_query.SelectStmt)
		if !isSel || s == top || !ok {
			return
		}
		sub := &builder{cat: b.cat, tree: b.tree, ctes: b.ctes, scope: map[string]*metadata.Table{}, topLevel: map[*pg_query.RangeVar]bool{}}
		var quals []*pg_query.Node
		for _, f := range s.FromClause {
			quals = sub.addFrom(f, quals)
		}
		quals = append(quals, s.WhereClause)
		var dist []*metadata.Table
		for _, t := range sub.scope {
			if t.Kind == metadata.Distributed {
				dist = append(dist, t)
			}
		}
		for rv := range sub.topLevel {
			covered[rv] = true
		}
		if len(dist) == 0 {
			return
		}
		v, err := sub.pinnedValue(quals, dist)
		if err != nil || v == nil || v.Computed || v.Null || (val != nil && !sameValue(val, v)) {
			ok = false
			return
		}
		val = v
		tables = append(tables, dist...)
	})
	if !ok || val == nil {
		return nil, nil, false
	}
	// Every distributed table read anywhere is in a level taken above or
	// in the statement's own.
	Walk(stmt, func(m proto.Message) {
		if rv, isRV := m.(*pg_query.RangeVar); isRV && !covered[rv] && !b.topLevel[rv] {
			if t := lookup(b.cat, rv, ctes); t != nil && t.Kind == metadata.Distributed {
				ok = false
			}
		}
	})
	return val, tables, ok
}

// nestedCorrelated reports whether an UPDATE's or DELETE's distributed
// tables below its own level are each in a subquery whose WHERE restricts
// them, by an equality ANDed at its top, to the distribution column of a
// distributed table of the statement's own level, colocated with it
// (UPDATE t SET n = (SELECT count(*) FROM o WHERE o.k = t.k), DELETE ...
// WHERE NOT EXISTS (SELECT FROM o WHERE o.k = t.k): an ORM's correlated
// subquery): a row's partners are then in the shards of its own index,
// which each shard's statement reads. Only equalities of the subquery's
// WHERE count (one in a LEFT JOIN's ON would leave the preserved side's
// rows unrestricted), and the outer column is named with its table, which
// the subquery does not name again; a subquery below another, or in a
// WITH, is not taken.
func (b *builder) nestedCorrelated(stmt *pg_query.Node, ctes *CTEs) (tables []*metadata.Table, ok bool) {
	switch {
	case stmt.GetUpdateStmt() != nil:
		if stmt.GetUpdateStmt().WithClause != nil {
			return nil, false
		}
	case stmt.GetDeleteStmt() != nil:
		if stmt.GetDeleteStmt().WithClause != nil {
			return nil, false
		}
	default:
		return nil, false
	}
	covered := map[*pg_query.RangeVar]bool{}
	ok = true
	Walk(stmt, func(m proto.Message) {
		s, isSel := m.(*pg_query.SelectStmt)
		if !isSel || !ok {
			return
		}
		sub := &builder{cat: b.cat, tree: b.tree, ctes: b.ctes, scope: map[string]*metadata.Table{}, topLevel: map[*pg_query.RangeVar]bool{}}
		for _, f := range s.FromClause {
			sub.addFrom(f, nil)
		}
		for rv := range sub.topLevel {
			covered[rv] = true
		}
		for occ, t := range sub.scope {
			if t.Kind != metadata.Distributed {
				continue
			}
			if !b.correlated(sub, occ, t, s.WhereClause) {
				ok = false
				return
			}
			tables = append(tables, t)
		}
	})
	if !ok || len(tables) == 0 {
		return nil, false
	}
	Walk(stmt, func(m proto.Message) {
		if rv, isRV := m.(*pg_query.RangeVar); isRV && !covered[rv] && !b.topLevel[rv] {
			if t := lookup(b.cat, rv, ctes); t != nil && t.Kind == metadata.Distributed {
				ok = false
			}
		}
	})
	return tables, ok
}

// correlated reports whether where, a subquery's (sub's) WHERE, has ANDed
// at its top an equality of occurrence occ's distribution column (table t)
// and the distribution column of a distributed table of b's own level of
// t's colocation and type, named with its occurrence, which sub does not
// name.
func (b *builder) correlated(sub *builder, occ string, t *metadata.Table, where *pg_query.Node) bool {
	own := occ + "." + t.DistColumn
	return anyEquality(where, func(inner, outerCol *pg_query.Node) bool {
		if c, ok := sub.distColumn(inner); !ok || c != own {
			return false
		}
		cr := outerCol.GetColumnRef()
		if cr == nil || len(cr.Fields) < 2 {
			return false
		}
		outer := cr.Fields[len(cr.Fields)-2].GetString_().GetSval()
		if _, shadowed := sub.scope[outer]; shadowed {
			return false
		}
		if _, ok := b.distColumn(outerCol); !ok {
			return false
		}
		o := b.scope[outer]
		return o != nil && o.Kind == metadata.Distributed && o.ColocationID == t.ColocationID && o.DistType == t.DistType
	})
}

// sameValue reports whether two pinned values are written alike (the same
// parameter, or the same constant of the same kind and cast), so that
// they hash alike.
func sameValue(a, c *Value) bool {
	return a.Param == c.Param && a.Const == c.Const && a.Lit == c.Lit && a.Cast == c.Cast &&
		!a.Computed && !c.Computed && a.Null == c.Null && a.Expr == c.Expr
}

// errNoFallback: a multi-shard query cannot also be planned by gathering.
var errNoFallback = errors.New("no gathering plan")

// isUnsupported reports whether err is a refusal (0A000).
func isUnsupported(err error) bool {
	var pe *pgerr.Error
	return err != nil && errors.As(err, &pe) && pe.Code == pgerr.FeatureNotSupported
}

// StatementName names a statement for messages: "alter_table_stmt"
// becomes "ALTER TABLE", "vacuum_stmt" "VACUUM or ANALYZE".
func StatementName(n *pg_query.Node) string {
	var name string
	n.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		name = string(fd.Name())
		return false
	})
	if k, ok := statementNames[name]; ok {
		return k
	}
	switch s := n.Node.(type) {
	case *pg_query.Node_AlterObjectSchemaStmt:
		return "ALTER " + objectName(s.AlterObjectSchemaStmt.ObjectType) + " ... SET SCHEMA"
	case *pg_query.Node_AlterOwnerStmt:
		return "ALTER " + objectName(s.AlterOwnerStmt.ObjectType) + " ... OWNER TO"
	}
	return strings.ToUpper(strings.ReplaceAll(strings.TrimSuffix(name, "_stmt"), "_", " "))
}

var statementNames = map[string]string{
	"index_stmt":           "CREATE INDEX",
	"copy_stmt":            "COPY",
	"create_stmt":          "CREATE TABLE",
	"create_table_as_stmt": "CREATE TABLE AS",
	"vacuum_stmt":          "VACUUM or ANALYZE",
	"view_stmt":            "CREATE VIEW",
	"create_trig_stmt":     "CREATE TRIGGER",
	"create_policy_stmt":   "CREATE POLICY",
	"create_stats_stmt":    "CREATE STATISTICS",
	"grant_stmt":           "GRANT or REVOKE",
	"lock_stmt":            "LOCK TABLE",
	"rule_stmt":            "CREATE RULE",
}

func objectName(t pg_query.ObjectType) string {
	return strings.ReplaceAll(strings.TrimPrefix(t.String(), "OBJECT_"), "_", " ")
}

// addFrom records the tables of a FROM item and returns quals with its
// join conditions added.
func (b *builder) addFrom(n *pg_query.Node, quals []*pg_query.Node) []*pg_query.Node {
	switch {
	case n.GetRangeVar() != nil:
		b.addRangeVar(n.GetRangeVar())
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		quals = b.addFrom(j.Larg, quals)
		quals = b.addFrom(j.Rarg, quals)
		on := []*pg_query.Node{j.Quals}
		on = append(on, b.usingEqualities(j)...)
		if j.Jointype == pg_query.JoinType_JOIN_INNER {
			quals = append(quals, on...)
		} else {
			b.outerQuals = append(b.outerQuals, on...)
		}
	}
	return quals
}

// usingEqualities spells out what a join's USING (x, ...) says of the
// distribution columns it names: l.x = r.x for each distributed table
// occurrence l on the left whose distribution column is x and each r on
// the right. (The merged column equals each side's column in the joined
// rows; when one side is itself a join, its merged x equals each of its
// tables' x there too.)
func (b *builder) usingEqualities(j *pg_query.JoinExpr) []*pg_query.Node {
	var out []*pg_query.Node
	for _, u := range j.UsingClause {
		x := u.GetString_().GetSval()
		left, right := b.distOccurrences(j.Larg, x), b.distOccurrences(j.Rarg, x)
		for _, l := range left {
			for _, r := range right {
				out = append(out, &pg_query.Node{Node: &pg_query.Node_AExpr{AExpr: &pg_query.A_Expr{
					Kind: pg_query.A_Expr_Kind_AEXPR_OP, Name: []*pg_query.Node{pg_query.MakeStrNode("=")},
					Lexpr: pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(l), pg_query.MakeStrNode(x)}, -1),
					Rexpr: pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(r), pg_query.MakeStrNode(x)}, -1),
				}}})
			}
		}
	}
	return out
}

// distOccurrences names the occurrences (alias or relation name) of
// distributed tables in a FROM item whose distribution column is col.
func (b *builder) distOccurrences(n *pg_query.Node, col string) []string {
	if j := n.GetJoinExpr(); j != nil {
		return append(b.distOccurrences(j.Larg, col), b.distOccurrences(j.Rarg, col)...)
	}
	rv := n.GetRangeVar()
	if rv == nil {
		return nil
	}
	name := rv.Relname
	if rv.Alias != nil && rv.Alias.Aliasname != "" {
		name = rv.Alias.Aliasname
	}
	if t := b.scope[name]; t != nil && t.Kind == metadata.Distributed && t.DistColumn == col && !b.renamed[name] {
		return []string{name}
	}
	return nil
}

func (b *builder) addRangeVar(rv *pg_query.RangeVar) *metadata.Table {
	if rv == nil {
		return nil
	}
	b.topLevel[rv] = true
	t := lookup(b.cat, rv, b.ctes)
	if t == nil {
		return nil
	}
	name := rv.Relname
	if rv.Alias != nil && rv.Alias.Aliasname != "" {
		name = rv.Alias.Aliasname
	}
	b.scope[name] = t
	if colAliases(rv) {
		if b.renamed == nil {
			b.renamed = map[string]bool{}
		}
		b.renamed[name] = true
	}
	return t
}

// pinnedValue finds the one value all distributed tables' distribution
// columns equal, through equalities ANDed at the top of the quals.
func (b *builder) pinnedValue(quals []*pg_query.Node, dist []*metadata.Table) (*Value, error) {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if p, ok := parent[x]; ok && p != x {
			r := find(p)
			parent[x] = r
			return r
		}
		return x
	}
	union := func(a, c string) { parent[find(a)] = find(c) }
	values := map[string]*Value{}
	var conj []*pg_query.Node
	for _, q := range quals {
		conj = flattenAnd(q, conj)
	}
	outer := len(conj)
	for _, q := range b.outerQuals {
		conj = flattenAnd(q, conj)
	}
	for i, c := range conj {
		e := c.GetAExpr()
		if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 || e.Name[0].GetString_().GetSval() != "=" {
			continue
		}
		l, lok := b.distColumn(e.Lexpr)
		r, rok := b.distColumn(e.Rexpr)
		switch {
		case lok && rok:
			union(l, r)
		case i >= outer:
			// An outer join's constant does not restrict its rows.
		case lok:
			if v := distValue(b.tree.Version, e.Rexpr, b.colType(l), false); v != nil {
				values[l] = v
			}
		case rok:
			if v := distValue(b.tree.Version, e.Lexpr, b.colType(r), false); v != nil {
				values[r] = v
			}
		}
	}
	// Two constants for one class (a.k = 81 AND b.k = 2 with a.k = b.k)
	// select no row anywhere, unless they are equal and hash alike: either
	// routes correctly. The first column by name decides, so that planning
	// is deterministic.
	cols := make([]string, 0, len(values))
	for col := range values {
		cols = append(cols, col)
	}
	sort.Strings(cols)
	classValue := map[string]*Value{}
	for _, col := range cols {
		if _, ok := classValue[find(col)]; !ok {
			classValue[find(col)] = values[col]
		}
	}
	// Every occurrence of a distributed table (a self-join has two) must be
	// in the pinned class, not just every table.
	var occ []string
	for name, t := range b.scope {
		if t.Kind == metadata.Distributed {
			occ = append(occ, name)
		}
	}
	sort.Strings(occ)
	root := find(occ[0] + "." + b.scope[occ[0]].DistColumn)
	for _, o := range occ[1:] {
		if t := b.scope[o]; find(o+"."+t.DistColumn) != root {
			return nil, unsupported("distributed tables %s are not joined on their distribution columns", strings.Join(b.occurrenceNames(occ), ", ")).
				WithHint("Join them with equalities on their distribution columns (a.%s = b.%s).", b.scope[occ[0]].DistColumn, t.DistColumn)
		}
	}
	if v := classValue[root]; v != nil {
		return v, nil
	}
	return nil, &unpinned{table: dist[0]}
}

// colType is the type of an occurrence's distribution column
// ("occurrence.column", from distColumn).
func (b *builder) colType(occCol string) string {
	return b.scope[occCol[:strings.LastIndexByte(occCol, '.')]].DistType
}

// conflictMovesRow refuses INSERT ... ON CONFLICT DO UPDATE that assigns
// the distribution column: the row would keep its shard under a new key.
// SET col = EXCLUDED.col is allowed where the conflict target names the
// column, so that the conflicting row already has that value.
func conflictMovesRow(ins *pg_query.InsertStmt, t *metadata.Table) error {
	oc := ins.OnConflictClause
	if t == nil || t.Kind != metadata.Distributed || oc == nil || oc.Action != pg_query.OnConflictAction_ONCONFLICT_UPDATE {
		return nil
	}
	for _, n := range oc.TargetList {
		rt := n.GetResTarget()
		if rt.GetName() != t.DistColumn {
			continue
		}
		if excludedColumn(rt.Val, t.DistColumn) && oc.Infer != nil {
			for _, e := range oc.Infer.IndexElems {
				if e.GetIndexElem().GetName() == t.DistColumn {
					return nil
				}
			}
		}
		return unsupported("ON CONFLICT DO UPDATE may not assign the distribution column %q of %s", t.DistColumn, t.Name).
			WithHint("A row's distribution column decides its shard and cannot change; leave %s out of DO UPDATE SET (or DELETE the row and INSERT it with the new value).", t.DistColumn)
	}
	return nil
}

// keepsDistValue reports whether an UPDATE's assignment r to its table's
// distribution column leaves every row's value where it is, as Citus
// allows: the column itself (SET k = k), or the constant or parameter an
// equality ANDed at the top of the WHERE clause sets the column to, each
// written without a cast (SET k = 34 ... WHERE k = 34 AND ..., as an ORM
// writes every column of a row it saves). Equal values hash alike, so the
// row keeps its shard.
func (b *builder) keepsDistValue(u *pg_query.UpdateStmt, r *pg_query.ResTarget) bool {
	if len(r.Indirection) > 0 || r.Val == nil || u.Relation == nil {
		return false
	}
	occ := u.Relation.Relname
	if u.Relation.Alias != nil && u.Relation.Alias.Aliasname != "" {
		occ = u.Relation.Alias.Aliasname
	}
	own := occ + "." + r.Name
	if c, ok := b.distColumn(r.Val); ok {
		return c == own
	}
	// Constants and parameters as written, no cast: a cast may change
	// the value ('01'::int4::text is '1', adversary 155).
	// The same kind of literal too: SET k = 1e2 WHERE k = '1e2' stores
	// '100' in a text column.
	bare := func(n *pg_query.Node) (*Value, string) {
		if n.GetTypeCast() != nil {
			return nil, ""
		}
		lit := n
		if e := n.GetAExpr(); e != nil {
			if e.Rexpr == nil || e.Rexpr.GetTypeCast() != nil {
				return nil, ""
			}
			lit = e.Rexpr
		}
		kind := "param"
		if c := lit.GetAConst(); c != nil {
			kind = fmt.Sprintf("%T", c.Val)
		}
		return valueOf(n), kind
	}
	v, vk := bare(r.Val)
	if v == nil || v.Null {
		return false
	}
	return anyEquality(u.WhereClause, func(col, other *pg_query.Node) bool {
		if c, ok := b.distColumn(col); ok && c == own {
			w, wk := bare(other)
			return w != nil && !w.Null && wk == vk && w.Param == v.Param && w.Const == v.Const
		}
		return false
	})
}

// anyEquality reports whether an equality (a = b, the plain operator)
// ANDed at the top of where satisfies match, given its sides either way.
func anyEquality(where *pg_query.Node, match func(a, b *pg_query.Node) bool) bool {
	for _, q := range flattenAnd(where, nil) {
		e := q.GetAExpr()
		if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 || e.Name[0].GetString_().GetSval() != "=" ||
			e.Lexpr == nil || e.Rexpr == nil {
			continue
		}
		if match(e.Lexpr, e.Rexpr) || match(e.Rexpr, e.Lexpr) {
			return true
		}
	}
	return false
}

// excludedColumn reports whether n is EXCLUDED.col.
func excludedColumn(n *pg_query.Node, col string) bool {
	cr := n.GetColumnRef()
	if cr == nil || len(cr.Fields) != 2 {
		return false
	}
	return cr.Fields[0].GetString_().GetSval() == "excluded" && cr.Fields[1].GetString_().GetSval() == col
}

// occurrenceNames names FROM-clause occurrences for a message: the table,
// and its alias when it has one.
func (b *builder) occurrenceNames(occ []string) []string {
	var out []string
	for _, o := range occ {
		t := b.scope[o]
		if o == t.Name || strings.HasSuffix(t.Name, "."+o) {
			out = append(out, t.Name)
		} else {
			out = append(out, t.Name+" AS "+o)
		}
	}
	return out
}

// unpinned: the distributed tables are joined on their distribution
// columns, and nothing pins them to one value: the statement needs every
// shard.
type unpinned struct{ table *metadata.Table }

func (u *unpinned) Error() string { return "no equality on the distribution column of " + u.table.Name }

func flattenAnd(n *pg_query.Node, out []*pg_query.Node) []*pg_query.Node {
	if n == nil {
		return out
	}
	if be := n.GetBoolExpr(); be != nil {
		if be.Boolop == pg_query.BoolExprType_AND_EXPR {
			for _, a := range be.Args {
				out = flattenAnd(a, out)
			}
		}
		return out
	}
	return append(out, n)
}

// distColumn reports whether n is a reference to a distributed table's
// distribution column, as "occurrence.column": the occurrence is the table's
// name in the FROM clause (its alias, if any), so the two sides of a
// self-join are told apart.
func (b *builder) distColumn(n *pg_query.Node) (string, bool) {
	cr := n.GetColumnRef()
	if cr == nil {
		return "", false
	}
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return "", false
		}
		parts = append(parts, s.Sval)
	}
	col := parts[len(parts)-1]
	var t *metadata.Table
	occ := ""
	switch len(parts) {
	case 1:
		if len(b.renamed) > 0 {
			return "", false // the name may be a renamed column's
		}
		for name, cand := range b.scope {
			if cand.Kind == metadata.Distributed && cand.DistColumn == col {
				if t != nil {
					return "", false // ambiguous; the worker will say so
				}
				t, occ = cand, name
			}
		}
	default:
		occ = parts[len(parts)-2]
		t = b.scope[occ]
	}
	if t == nil || t.Kind != metadata.Distributed || t.DistColumn != col || b.renamed[occ] {
		return "", false
	}
	return occ + "." + col, true
}

// valueOf returns a constant or parameter, looking through casts.
func valueOf(n *pg_query.Node) *Value {
	if tc := n.GetTypeCast(); tc != nil {
		// Only casts that keep the value as it is: char(2) would cut 'abc'
		// to 'ab' and send the statement to the wrong shard.
		tn := tc.TypeName
		if tn == nil || len(tn.Typmods) > 0 || len(tn.ArrayBounds) > 0 || len(tn.Names) == 0 ||
			!valueKeepingCasts[tn.Names[len(tn.Names)-1].GetString_().GetSval()] {
			return nil
		}
		return valueOf(tc.Arg)
	}
	if e := n.GetAExpr(); e != nil && e.Lexpr == nil && e.Kind == pg_query.A_Expr_Kind_AEXPR_OP &&
		len(e.Name) == 1 && e.Name[0].GetString_().GetSval() == "-" {
		// A negative number: -7 parses as the operator minus on 7.
		if v := valueOf(e.Rexpr); v != nil && v.Param == 0 && !v.Null && v.Const != "" && v.Const[0] != '-' {
			return &Value{Const: "-" + v.Const}
		}
		return nil
	}
	if p := n.GetParamRef(); p != nil {
		return &Value{Param: int(p.Number)}
	}
	c := n.GetAConst()
	if c == nil {
		return nil
	}
	if c.Isnull {
		return &Value{Null: true}
	}
	switch v := c.Val.(type) {
	case *pg_query.A_Const_Ival:
		return &Value{Const: fmt.Sprint(v.Ival.Ival)}
	case *pg_query.A_Const_Sval:
		return &Value{Const: v.Sval.Sval}
	case *pg_query.A_Const_Fval:
		return &Value{Const: v.Fval.Fval}
	}
	return nil
}

// insertValue finds the distribution value of a single-row INSERT.
func insertValues(version int32, ins *pg_query.InsertStmt, t *metadata.Table) ([]*Value, error) {
	sel := ins.SelectStmt.GetSelectStmt()
	if sel == nil || len(sel.ValuesLists) == 0 {
		return nil, unsupported("INSERT into %s without VALUES is not supported yet", t.Name).
			WithHint("Use INSERT ... VALUES, or INSERT ... SELECT from a table colocated with it.")
	}
	pos := -1
	for i, c := range ins.Cols {
		if c.GetResTarget().GetName() == t.DistColumn {
			pos = i
		}
	}
	if len(ins.Cols) == 0 {
		return nil, &ColumnsNeeded{Table: t.Name, err: unsupported("INSERT into distributed table %s needs a column list here", t.Name).
			WithHint("Write INSERT INTO %s (%s, ...) VALUES (...).", t.Name, t.DistColumn)}
	}
	if pos < 0 {
		// PostgreSQL stores its default there, or NULL, or fails with 23502
		// (NOT NULL): only the column's definition says which.
		return nil, &DefaultNeeded{Table: t.Name, Column: t.DistColumn, Rows: len(sel.ValuesLists),
			err: unsupported("INSERT into %s leaving its distribution column %q to its default is not supported here", t.Name, t.DistColumn).
				WithHint("Give %s a value in the INSERT.", t.DistColumn)}
	}
	var vals []*Value
	for _, l := range sel.ValuesLists {
		row := l.GetList().GetItems()
		if pos >= len(row) {
			return nil, pgerr.New("42601", "INSERT has more target columns than expressions")
		}
		v := distValue(version, row[pos], t.DistType, true)
		if v == nil {
			return nil, &ValuesNeeded{err: unsupported("the distribution column %q of %s must be a constant or a parameter in INSERT here", t.DistColumn, t.Name).
				WithHint("Constants, parameters and casts of them are supported; other expressions only in the simple query protocol, outside a transaction block when they read the time.")}
		}
		// A NULL goes to the shard of hash 0 (anyShard), whose worker
		// stores it, as PostgreSQL does, or fails it with 23502 under NOT
		// NULL. No equality matches it, so only queries over every shard
		// see the row, as on PostgreSQL.
		vals = append(vals, v)
	}
	return vals, nil
}

// ColumnsNeeded is Build's answer to an INSERT into a distributed table
// without a column list: which value is the distribution column's depends
// on the table's columns, which the catalog does not hold. The caller
// reads them from PostgreSQL (in order, dropped ones left out) and plans
// WithColumns(sql, columns) instead; as an error, it is a refusal.
type ColumnsNeeded struct {
	Table string
	// Copy: a COPY TO without a column list, which copies every column
	// but the generated ones (an INSERT's list has those too).
	Copy bool
	err  *pgerr.Error
}

func (e *ColumnsNeeded) Error() string { return e.err.Error() }
func (e *ColumnsNeeded) Unwrap() error { return e.err }

// WithColumns is an INSERT without a column list (ColumnsNeeded) with the
// list PostgreSQL would take: the table's first columns, as many as the
// VALUES rows have (all of them if a row has more, for PostgreSQL's own
// error); or a COPY TO without one with the columns given.
func WithColumns(sql string, columns []string) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err == nil && len(tree.Stmts) == 1 && tree.Stmts[0].Stmt.GetCopyStmt() != nil {
		c := tree.Stmts[0].Stmt.GetCopyStmt()
		if len(c.Attlist) > 0 || c.Relation == nil {
			return "", pgerr.New(pgerr.Internal, "not a COPY of a table without a column list")
		}
		for _, col := range columns {
			c.Attlist = append(c.Attlist, pg_query.MakeStrNode(col))
		}
		return deparse(tree.Version, tree.Stmts[0].Stmt)
	}
	if err != nil || len(tree.Stmts) != 1 {
		return "", pgerr.New(pgerr.Internal, "not one INSERT statement")
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	if ex := tree.Stmts[0].Stmt.GetExplainStmt(); ex != nil {
		ins = ex.Query.GetInsertStmt() // EXPLAIN of the INSERT
	}
	if ins == nil {
		return "", pgerr.New(pgerr.Internal, "not one INSERT statement")
	}
	sel := ins.SelectStmt.GetSelectStmt()
	if len(ins.Cols) > 0 || sel == nil || len(sel.ValuesLists) == 0 {
		return "", pgerr.New(pgerr.Internal, "not an INSERT ... VALUES without a column list")
	}
	n := 0
	for _, l := range sel.ValuesLists {
		n = max(n, len(l.GetList().GetItems()))
	}
	for _, c := range columns[:min(n, len(columns))] {
		ins.Cols = append(ins.Cols, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Name: c, Location: -1}}})
	}
	return deparse(tree.Version, tree.Stmts[0].Stmt)
}

// SplitInsert is a multi-row INSERT (InsertSplit) cut down to the given
// rows (0-based, in VALUES order) and renamed to shard index idx.
func (p *InsertSplit) SplitInsert(idx int, rows []int) (string, error) {
	return p.b.rewrite(p.insertPart(rows), idx)
}

// insertPart is a new statement of the plan's parts with only the given
// rows (the plan is shared, and a copy of all its rows per shard would
// cost rows times shards); rewrite copies it as it renames.
func (p *InsertSplit) insertPart(rows []int) *pg_query.Node {
	ins := p.stmt.GetInsertStmt()
	all := ins.SelectStmt.GetSelectStmt().ValuesLists
	keep := make([]*pg_query.Node, 0, len(rows))
	for _, r := range rows {
		keep = append(keep, all[r])
	}
	part := &pg_query.InsertStmt{Relation: ins.Relation, Cols: ins.Cols, OnConflictClause: ins.OnConflictClause,
		ReturningList: ins.ReturningList, WithClause: ins.WithClause, Override: ins.Override,
		SelectStmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			ValuesLists: keep, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}}
	return &pg_query.Node{Node: &pg_query.Node_InsertStmt{InsertStmt: part}}
}

// SplitInsertParams is SplitInsert for the extended protocol: the
// statement's parameters renumbered $1, $2, ... in the order of their
// numbers, and params lists the client's number (1-based) of each, for a
// Bind of only the ones these rows (and the rest of the statement) use.
func (p *InsertSplit) SplitInsertParams(idx int, rows []int) (sql string, params []int, err error) {
	clone, err := p.b.rewriteTree(p.insertPart(rows), idx)
	if err != nil {
		return "", nil, err
	}
	used := map[int32]int32{}
	var refs []*pg_query.ParamRef
	Walk(clone, func(m proto.Message) {
		if r, ok := m.(*pg_query.ParamRef); ok {
			used[r.Number] = 0
			refs = append(refs, r)
		}
	})
	for _, k := range slices.Sorted(maps.Keys(used)) {
		params = append(params, int(k))
		used[k] = int32(len(params))
	}
	for _, r := range refs {
		r.Number = used[r.Number]
	}
	sql, err = deparse(p.b.tree.Version, clone)
	return sql, params, err
}

// ParamUses counts the uses of each parameter ($k, by number) in the
// statement.
func (p *InsertSplit) ParamUses() map[int]int {
	uses := map[int]int{}
	if p.stmt == nil {
		return uses
	}
	Walk(p.stmt, func(m proto.Message) {
		if r, ok := m.(*pg_query.ParamRef); ok {
			uses[int(r.Number)]++
		}
	})
	return uses
}

// rewrite deparses stmt with pgfleet tables renamed to their shards: shard
// index idx of distributed tables, and each reference table's one shard.
func (b *builder) rewrite(stmt *pg_query.Node, idx int) (string, error) {
	clone, err := b.rewriteTree(stmt, idx)
	if err != nil {
		return "", err
	}
	return deparse(b.tree.Version, clone)
}

// rewriteTree is rewrite's renamed copy of the parse tree.
func (b *builder) rewriteTree(stmt *pg_query.Node, idx int) (*pg_query.Node, error) {
	clone := proto.Clone(stmt).(*pg_query.Node)
	ctes := cteNames(clone)
	aliases := clone.GetCopyStmt() == nil || clone.GetCopyStmt().Query != nil // COPY t takes no alias
	var err error
	Walk(clone, func(m proto.Message) {
		rv, ok := m.(*pg_query.RangeVar)
		if !ok || err != nil {
			return
		}
		t := lookup(b.cat, rv, ctes)
		if t == nil {
			return
		}
		shards := b.cat.Shards[t.Name]
		i := idx
		if at, ok := b.shardAt[t.Name]; ok {
			i = at
		}
		if t.Kind == metadata.Reference {
			i = 0
		}
		if i < 0 || i >= len(shards) {
			err = pgerr.New(pgerr.Internal, "no shard %d for table %s", i, t.Name)
			return
		}
		if rv.Alias == nil && aliases {
			rv.Alias = &pg_query.Alias{Aliasname: rv.Relname}
		}
		if ins := clone.GetInsertStmt(); ins != nil && ins.Relation == rv {
			shardConstraint(ins, shards[i].ID)
		}
		toShard(rv, t, rv.Relname, shards[i].ID)
	})
	return clone, err
}

// toShard makes rv name shard id of table t (relation name rel): the
// shard's name, in the shards' schema when they have their own (a table
// distributed before they had keeps the user's qualification, and its
// shards are found where its name is).
func toShard(rv *pg_query.RangeVar, t *metadata.Table, rel string, id int64) {
	rv.Relname = metadata.ShardName(rel, id)
	if t.ShardSchema != "" {
		rv.Catalogname, rv.Schemaname = "", t.ShardSchema
	}
}

// shardConstraint renames the constraint of an INSERT's ON CONFLICT ON
// CONSTRAINT to its name on the target's shard, which has the shard id
// appended as the shard's table has.
func shardConstraint(ins *pg_query.InsertStmt, shardID int64) {
	if inf := ins.GetOnConflictClause().GetInfer(); inf != nil && inf.Conname != "" {
		inf.Conname = metadata.ShardObjectName(inf.Conname, shardID)
	}
}

// CatalogCall is the call of SELECT fn(args) or SELECT * FROM fn(args)
// when fn is a catalog function the coordinator runs, or nil.
func CatalogCall(stmt *pg_query.Node) *pg_query.FuncCall {
	sel := stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || sel.WhereClause != nil || len(sel.FromClause) > 1 {
		return nil
	}
	var fc *pg_query.FuncCall
	if len(sel.FromClause) == 1 { // SELECT * FROM fn(...)
		rf := sel.FromClause[0].GetRangeFunction()
		cr := sel.TargetList[0].GetResTarget().GetVal().GetColumnRef()
		if rf == nil || len(rf.Functions) != 1 || cr == nil || len(cr.Fields) != 1 || cr.Fields[0].GetAStar() == nil ||
			rf.Alias != nil || rf.Ordinality || len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil ||
			len(sel.DistinctClause) > 0 || len(sel.GroupClause) > 0 || sel.HavingClause != nil {
			// Only SELECT * FROM fn(...): the coordinator answers with
			// the function's columns as they are.
			return nil
		}
		fc = rf.Functions[0].GetList().GetItems()[0].GetFuncCall()
	} else {
		fc = sel.TargetList[0].GetResTarget().GetVal().GetFuncCall()
	}
	if fc == nil || !catalogFunctions[fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()] {
		return nil
	}
	return fc
}

// CoordinatorOnly is a refusal of a statement that calls a function only
// the coordinator has: the workers, which do not know it, cannot say more.
type CoordinatorOnly struct{ Err *pgerr.Error }

func (e *CoordinatorOnly) Error() string { return e.Err.Error() }
func (e *CoordinatorOnly) Unwrap() error { return e.Err }

// catalogFunctionIn names a catalog function that stmt calls anywhere, or
// is "": PostgreSQL would find none of them (they are the coordinator's).
func catalogFunctionIn(stmt *pg_query.Node) string {
	name := ""
	Walk(stmt, func(m proto.Message) {
		if fc, ok := m.(*pg_query.FuncCall); ok && name == "" && len(fc.Funcname) > 0 {
			if n := fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval(); catalogFunctions[n] {
				name = n
			}
		}
	})
	return name
}

// functionCall recognises SELECT fn(args) of a catalog function.
func functionCall(stmt *pg_query.Node) (*Plan, error) {
	fc := CatalogCall(stmt)
	if fc == nil {
		return nil, nil
	}
	name := fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()
	x := &Function{Name: name}
	p := &Plan{Root: x}
	for _, a := range fc.Args {
		key := ""
		if na := a.GetNamedArgExpr(); na != nil {
			key, a = na.Name, na.Arg
		}
		v := valueOf(a)
		if b := a.GetAConst().GetBoolval(); b != nil && !a.GetAConst().Isnull {
			v = &Value{Const: strconv.FormatBool(b.Boolval)} // true, false
		}
		if ae := a.GetAArrayExpr(); ae != nil {
			// ARRAY[constants], as an array's text ('{1,2}'): elements
			// that need no quoting only.
			var elems []string
			for _, e := range ae.Elements {
				ev := valueOf(e)
				if ev == nil || ev.Param > 0 || ev.Null || ev.Const == "" || strings.ContainsAny(ev.Const, "{},\\\" \t\n") {
					elems = nil
					break
				}
				elems = append(elems, ev.Const)
			}
			if elems != nil {
				v = &Value{Const: "{" + strings.Join(elems, ",") + "}"}
			}
		}
		if v == nil || v.Param > 0 || v.Null {
			return nil, &CoordinatorOnly{unsupported("the arguments of %s must be constants", name).
				WithHint("Write the arguments as literals in the statement's text (simple query protocol).")}
		}
		if key == "" {
			x.Args = append(x.Args, v.Const)
		} else {
			if x.NamedArgs == nil {
				x.NamedArgs = map[string]string{}
			}
			x.NamedArgs[key] = v.Const
		}
	}
	return p, nil
}

// copyPlan plans COPY on a catalog table: FROM STDIN is split by the
// coordinator; TO STDOUT of a reference table reads one copy.
func (b *builder) copyPlan(stmt *pg_query.Node) (*Plan, error) {
	c := stmt.GetCopyStmt()
	if c.Relation == nil {
		return b.copyQuery(stmt, c)
	}
	t := b.addRangeVar(c.Relation)
	if c.Filename != "" || c.IsProgram {
		return nil, unsupported("COPY with a server-side file or program on %s is not supported", t.Name).
			WithHint("Use COPY ... FROM STDIN or TO STDOUT (psql: \\copy).")
	}
	if !c.IsFrom {
		if t.Kind != metadata.Reference {
			return b.copyOut(c, t)
		}
		sql, err := b.rewrite(stmt, -1)
		if err != nil {
			return nil, err
		}
		return &Plan{Root: &ReferenceRead{ShardSQL: []string{sql}}, Tables: []string{t.Name}, ReadOnly: true}, nil
	}
	o := &CopyOptions{}
	for _, a := range c.Attlist {
		o.Columns = append(o.Columns, a.GetString_().GetSval())
	}
	for _, sc := range t.Sequences {
		if len(o.Columns) > 0 && !slices.Contains(o.Columns, sc.Column) {
			o.Fill = append(o.Fill, SeqNeed{Column: sc.Column, Sequence: sc.Sequence})
		}
	}
	for _, opt := range c.Options {
		d := opt.GetDefElem()
		if d == nil {
			continue
		}
		val := defElemValue(d)
		switch d.Defname {
		case "format":
			switch strings.ToLower(val) {
			case "csv":
				o.CSV = true
			case "binary":
				o.Binary = true
			case "text":
			default:
				return nil, unsupported("COPY FORMAT %s into %s is not supported yet", val, t.Name).
					WithHint("Use FORMAT text, csv or binary.")
			}
		case "header":
			o.Header = d.Arg == nil || val == "true" || val == "1" || strings.EqualFold(val, "on")
			if strings.EqualFold(val, "match") {
				return nil, unsupported("COPY HEADER MATCH into %s is not supported yet", t.Name).
					WithHint("Use HEADER true (the header line is skipped).")
			}
		case "delimiter":
			o.Delimiter = val
		case "null":
			v := val
			o.Null = &v
		case "quote":
			o.Quote = val
		case "escape":
			o.Escape = val
		case "encoding":
			o.Encoding = val
		case "freeze":
			if d.Arg == nil || val == "true" || val == "1" || strings.EqualFold(val, "on") {
				// PostgreSQL refuses it unless the table was made or
				// truncated in the same subtransaction, which its shards
				// were not.
				return nil, unsupported("COPY FREEZE into %s is not supported", t.Name).
					WithHint("Leave FREEZE out.")
			}
		default:
			return nil, unsupported("COPY option %s into %s is not supported yet", d.Defname, t.Name).
				WithHint("Leave the option out: FORMAT, HEADER, DELIMITER, NULL, QUOTE, ESCAPE and ENCODING are supported.")
		}
	}
	if c.WhereClause != nil {
		sel := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{WhereClause: c.WhereClause}}}
		text, err := deparse(b.tree.Version, sel)
		if err != nil {
			return nil, err
		}
		where, ok := strings.CutPrefix(text, "SELECT WHERE ")
		if !ok {
			return nil, pgerr.New(pgerr.Internal, "cannot deparse the WHERE of COPY into %s: %q", t.Name, text)
		}
		o.Where, o.WhereNode = where, c.WhereClause
	}
	x := &CopyIn{Table: t.Name, Copy: o}
	p := &Plan{Root: x, Tables: []string{t.Name}}
	if t.Kind == metadata.Reference {
		var m Mutability
		if o.WhereNode != nil {
			if w := mutability(o.WhereNode); w != nil {
				m = *w
			}
		}
		if len(o.Columns) > 0 {
			m.Defaults, m.Listed, m.Table = true, o.Columns, t.Name
		}
		x.Mutability = &m
	}
	return p, nil
}

// multiShardWrite plans an UPDATE or DELETE of a distributed table on
// every shard: each shard's statement does to its rows what the statement
// does to them on one table, provided it reads no other distributed table
// (a subquery over one is refused before this), no value PostgreSQL fixes
// for the statement or transaction (each worker would read its own).
// RETURNING gives every shard's rows.
func (b *builder) multiShardWrite(stmt *pg_query.Node, p *Plan, dist []*metadata.Table) (*Plan, error) {
	// Other distributed tables it reads (UPDATE ... FROM, DELETE ...
	// USING) are colocated with it and joined on their distribution
	// columns (pinnedValue found them in one class): each shard's
	// statement reads their shards of the same index, where a row's
	// partners are.
	t := b.scope[b.targetName(stmt)]
	if t == nil || t.Kind != metadata.Distributed {
		return nil, pgerr.New(pgerr.Internal, "no distributed target for a multi-shard write")
	}
	what := StatementName(stmt)
	var returning, with bool
	switch {
	case stmt.GetUpdateStmt() != nil:
		u := stmt.GetUpdateStmt()
		returning, with = len(u.ReturningList) > 0, u.WithClause != nil
	case stmt.GetDeleteStmt() != nil:
		d := stmt.GetDeleteStmt()
		returning, with = len(d.ReturningList) > 0, d.WithClause != nil
	}
	if with {
		return nil, unsupported("WITH in a multi-shard %s of %s is not supported yet", what, t.Name).
			WithHint("Add WHERE %s = <value>, or write the WITH query into the statement.", t.DistColumn)
	}
	if name := writeTime(stmt); name != "" {
		return nil, &TimeRead{unsupported("a multi-shard %s of %s reading %s is not supported: each worker would give its own value", what, t.Name, name).
			WithHint("Pass the value as a constant or a parameter, or add WHERE %s = <value>.", t.DistColumn)}
	}
	if err := b.shardLocal(stmt, what, t); err != nil {
		return nil, err
	}
	x := &MultiShardWrite{Table: t.Name, DistType: t.DistType, Returning: returning, Mutability: perRowMutability(stmt, t.Name)}
	n := len(b.cat.Shards[t.Name])
	x.ShardSQL = make([]string, n)
	var err error
	for i := range n {
		if x.ShardSQL[i], err = b.rewrite(stmt, i); err != nil {
			return nil, err
		}
	}
	p.Root = x
	return p, nil
}

// targetName is the scope name of an UPDATE's or DELETE's target.
func (b *builder) targetName(stmt *pg_query.Node) string {
	var rv *pg_query.RangeVar
	if u := stmt.GetUpdateStmt(); u != nil {
		rv = u.Relation
	} else if d := stmt.GetDeleteStmt(); d != nil {
		rv = d.Relation
	}
	if rv == nil {
		return ""
	}
	if rv.Alias != nil && rv.Alias.Aliasname != "" {
		return rv.Alias.Aliasname
	}
	return rv.Relname
}

// shardLocal refuses, in a statement run on every shard of t, what each
// shard would answer for itself rather than for the table: a system
// column (each shard has its own ctid (0,1)) and a table that is neither
// distributed nor reference (only the default node has it).
func (b *builder) shardLocal(stmt *pg_query.Node, what string, t *metadata.Table) error {
	ctes := cteNames(stmt)
	var err error
	Walk(stmt, func(m proto.Message) {
		if err != nil {
			return
		}
		switch x := m.(type) {
		case *pg_query.ColumnRef:
			if last := x.Fields[len(x.Fields)-1].GetString_().GetSval(); systemColumn[last] {
				err = unsupported("system column %s in a multi-shard %s of %s is not supported: each shard has its own", last, what, t.Name).
					WithHint("Name rows by their columns, or add WHERE %s = <value>.", t.DistColumn)
			}
		case *pg_query.RangeVar:
			if lookup(b.cat, x, ctes) == nil && !ctes.refs[x] {
				err = unsupported("a multi-shard %s of %s reading %s, which is not a distributed or reference table, is not supported", what, t.Name, x.Relname).
					WithHint("Read %s first and pass its values as constants, make it a reference table, or add WHERE %s = <value>.", x.Relname, t.DistColumn)
			}
		}
	})
	return err
}

// perRowFuncs are volatile functions PostgreSQL evaluates for each row
// anyway: every shard computing its own is what PostgreSQL does.
var perRowFuncs = map[string]bool{"random": true, "random_normal": true, "gen_random_uuid": true, "clock_timestamp": true, "timeofday": true}

// DropPerRow takes out of m the calls of functions PostgreSQL evaluates
// for each row anyway (perRowFuncs), from Calls too, which the
// coordinator checks.
// A name also called with another schema (evil.gen_random_uuid(), a
// function of the user's: adversary 156) stays.
func (m *Mutability) DropPerRow() {
	perRow := func(name string) bool { return perRowFuncs[name] && !slices.Contains(m.Qualified, name) }
	m.Funcs = slices.DeleteFunc(m.Funcs, perRow)
	m.Calls = slices.DeleteFunc(m.Calls, func(c string) bool {
		name, _, _ := strings.Cut(c, "/")
		return perRow(name)
	})
}

// perRowMutability is what the coordinator checks in a write run on every
// shard (as for a reference table's copies: the functions and defaults it
// calls must be IMMUTABLE, the worker's catalog says), less the functions
// that differ from row to row on PostgreSQL too.
func perRowMutability(stmt *pg_query.Node, table string) *Mutability {
	m := mutability(stmt)
	if m == nil {
		return nil
	}
	m.DropPerRow()
	if m.Defaults {
		m.Table = table
	}
	if len(m.Funcs) == 0 && len(m.Ops) == 0 && m.Fixed == "" && !m.Defaults {
		return nil
	}
	return m
}

// writeTime names a value the statement reads that PostgreSQL fixes for
// the whole statement or transaction (txTime, statement_timestamp()), ""
// if none.
func writeTime(n proto.Message) string {
	if name := txTime(n); name != "" {
		return name
	}
	name := ""
	Walk(n, func(m proto.Message) {
		if f, ok := m.(*pg_query.FuncCall); ok && name == "" {
			if fn, builtin := funcName(f); builtin && fn == "statement_timestamp" {
				name = fn + "()"
			}
		}
	})
	return name
}

// explainPlan plans EXPLAIN of a statement as that statement, with the
// EXPLAIN kept around it on every shard.
func (b *builder) explainPlan(stmt *pg_query.Node) (*Plan, error) {
	ex := stmt.GetExplainStmt()
	p, err := b.plan(ex.Query)
	var cn *ColumnsNeeded
	var vn *ValuesNeeded
	var sn *SequencesNeeded
	var sf *SelectFirst
	var qf *SubqueryFirst
	switch {
	case errors.As(err, &sf):
		return nil, sf.err
	case errors.As(err, &qf):
		return nil, qf.err
	case errors.As(err, &cn) && !cn.Copy:
		// The session completes the INSERT's column list from PostgreSQL
		// (WithColumns reaches into the EXPLAIN) and plans it again.
		return nil, cn
	case errors.As(err, &vn):
		return nil, vn.err
	case errors.As(err, &sn):
		return nil, sn.err
	case err != nil:
		return nil, err
	}
	switch p.Root.(type) {
	case *Route, *ReferenceRead, *AllCopiesWrite, *Scatter, *MultiShardWrite, *InsertSplit:
	default:
		return nil, unsupported("EXPLAIN of this statement is not supported yet").
			WithHint("EXPLAIN it with WHERE <distribution column> = <value> to see one shard's plan.")
	}
	p.Explain = &Explain{Text: true}
	for _, o := range ex.Options {
		d := o.GetDefElem()
		if d == nil {
			continue
		}
		val := defElemValue(d)
		switch d.Defname {
		case "analyze":
			p.Explain.Analyze = d.Arg == nil || val == "true" || strings.EqualFold(val, "on")
		case "format":
			p.Explain.Text = strings.EqualFold(val, "text")
		}
	}
	var sql []string // the statements to rewrite as the EXPLAIN
	idx := -1        // -1: the reference shards
	switch r := p.Root.(type) {
	case *Route:
		x := *r
		x.ShardSQL = make([]string, len(r.ShardSQL))
		p.Root, sql, idx = &x, x.ShardSQL, 0
	case *ReferenceRead:
		x := &ReferenceRead{ShardSQL: make([]string, 1)}
		p.Root, sql = x, x.ShardSQL
	case *AllCopiesWrite:
		x := *r
		x.ShardSQL = make([]string, 1)
		p.Root, sql = &x, x.ShardSQL
	}
	if sql == nil {
		// The coordinator describes the merge (or the write) and the
		// workers, and the first worker explains its statement
		// (ExplainPrefix before it; a multi-row INSERT's, with its rows
		// of the first shard, SplitInsert).
		if p.Explain.Analyze || !p.Explain.Text {
			return nil, unsupported("EXPLAIN ANALYZE, or EXPLAIN in a format other than text, of a multi-shard statement is not supported yet").
				WithHint("Use EXPLAIN without ANALYZE in text format, or run the statement itself.")
		}
		one := proto.Clone(ex).(*pg_query.ExplainStmt)
		one.Query = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			TargetList: []*pg_query.Node{resTarget(pg_query.MakeAConstIntNode(1, -1))}, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
		text, err := deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_ExplainStmt{ExplainStmt: one}})
		if err != nil {
			return nil, err
		}
		prefix, ok := strings.CutSuffix(text, "SELECT 1")
		if !ok {
			return nil, unsupported("this EXPLAIN cannot be rewritten for the workers").
				WithHint("Use plain EXPLAIN or EXPLAIN (FORMAT TEXT).")
		}
		p.Explain.Prefix = prefix
		return p, nil
	}
	for i := range sql {
		at := idx
		if idx >= 0 {
			at = i
		}
		if sql[i], err = b.rewrite(stmt, at); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// defElemValue is an option's value as text: a string, a number or a
// boolean ("" when the option has no value).
func defElemValue(d *pg_query.DefElem) string {
	switch {
	case d.Arg == nil:
		return ""
	case d.Arg.GetString_() != nil:
		return d.Arg.GetString_().Sval
	case d.Arg.GetBoolean() != nil:
		return fmt.Sprint(d.Arg.GetBoolean().Boolval)
	}
	if v := valueOf(d.Arg); v != nil {
		return v.Const
	}
	return ""
}

// valueKeepingCasts are the types a distribution value may be cast to in a
// routed statement (pg_query spells int as int4, bigint as int8).
var valueKeepingCasts = map[string]bool{
	"int2": true, "int4": true, "int8": true, "text": true, "varchar": true, "uuid": true,
	"unknown": true,
}

// modifyingCTEWrites refuses a statement whose WITH clause holds an
// INSERT, UPDATE, DELETE or MERGE of a pgfleet table.
func modifyingCTEWrites(cat *metadata.Snapshot, stmt *pg_query.Node, ctes *CTEs) error {
	var with *pg_query.WithClause
	switch {
	case stmt.GetSelectStmt() != nil:
		with = stmt.GetSelectStmt().WithClause
	case stmt.GetInsertStmt() != nil:
		with = stmt.GetInsertStmt().WithClause
	case stmt.GetUpdateStmt() != nil:
		with = stmt.GetUpdateStmt().WithClause
	case stmt.GetDeleteStmt() != nil:
		with = stmt.GetDeleteStmt().WithClause
	}
	if with == nil {
		return nil
	}
	for _, c := range with.Ctes {
		q := c.GetCommonTableExpr().GetCtequery()
		if q == nil || q.GetSelectStmt() != nil {
			continue
		}
		var found *metadata.Table
		Walk(q, func(m proto.Message) {
			if rv, ok := m.(*pg_query.RangeVar); ok && found == nil {
				found = lookup(cat, rv, ctes)
			}
		})
		if found != nil {
			return unsupported("a data-modifying WITH on %s is not supported yet", found.Name).
				WithHint("Write the table in a statement of its own.")
		}
	}
	return nil
}
