package planner

import (
	"errors"
	"slices"
	"strconv"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Sequence columns (serial, identity) of distributed and reference tables.
// A table's sequences live once, on the default node, with the table's
// shell; its shards have the columns without a default. So the coordinator
// draws the values an INSERT leaves to the sequence itself, nextval() on
// the default node (values unique fleet-wide, as one PostgreSQL's), and
// gives them to the shards as the statement's own: the statement is
// planned again with them in place (WithSequenceValues, constants in a
// simple query; WithSequenceParams, parameters bound at each execution in
// the extended protocol; added to each row of a COPY that leaves them out,
// CopyOptions.Fill). Where it cannot, the statement is refused: ON
// CONFLICT and UPDATE setting a sequence column to its default.

// SequencesNeeded is Build's answer to an INSERT that leaves sequence
// columns to their default. Need says how many values each column takes
// (a column with none is left out), Rows which rows take one (in VALUES
// order); as an error, it is a refusal.
type SequencesNeeded struct {
	Table string
	Need  []SeqNeed
	err   *pgerr.Error
}

// SeqNeed is a sequence column's share of an INSERT: the VALUES rows
// (0-based) whose value is the sequence's next one.
type SeqNeed struct {
	Column   string
	Sequence uint32 // the sequence's OID on the default node
	// Name is the sequence as a nextval('name') the INSERT calls as a
	// row's value names it (Sequence is 0 then), resolved by the
	// session's search_path on the default node.
	Name string
	Rows []int
	// Random: not a sequence; the column's default makes a random UUID
	// (gen_random_uuid()), which the coordinator makes (DefaultNeeded).
	Random bool
}

// DefaultNeeded: an INSERT leaves the distribution column to its default,
// which only the column's definition says: a random UUID
// (gen_random_uuid(), uuid-ossp's uuid_generate_v4()) the coordinator
// makes for each row as PostgreSQL would, else the refusal it is as an
// error. Rows is the number of VALUES rows.
type DefaultNeeded struct {
	Table, Column string
	Rows          int
	err           *pgerr.Error
}

func (e *DefaultNeeded) Error() string { return e.err.Error() }
func (e *DefaultNeeded) Unwrap() error { return e.err }

// Sequences is e as the SequencesNeeded that fills it.
func (e *DefaultNeeded) Sequences() *SequencesNeeded {
	return &SequencesNeeded{Table: e.Table, Need: e.Need(), err: e.err}
}

// Need is e as a share of the INSERT, every row's value made.
func (e *DefaultNeeded) Need() []SeqNeed {
	rows := make([]int, e.Rows)
	for i := range rows {
		rows[i] = i
	}
	return []SeqNeed{{Column: e.Column, Rows: rows, Random: true}}
}

func (e *SequencesNeeded) Error() string { return e.err.Error() }
func (e *SequencesNeeded) Unwrap() error { return e.err }

// seqCheck is what a write on t does with its sequence columns: nil when
// it gives them all, a *ColumnsNeeded for an INSERT ... VALUES without a
// column list (whose length decides which columns it gives), a
// *SequencesNeeded for an INSERT ... VALUES that leaves some to their
// sequence, PostgreSQL's 428C9 for a value given to a GENERATED ALWAYS
// column, and a refusal where the coordinator cannot draw the values.
func seqCheck(stmt *pg_query.Node, t *metadata.Table) error {
	err := columnSeqCheck(stmt, t)
	if t == nil || err != nil && !errors.As(err, new(*SequencesNeeded)) {
		return err
	}
	named, err2 := namedSeqNeeds(stmt.GetInsertStmt(), t)
	if err2 != nil || len(named) == 0 {
		if err2 != nil {
			return err2
		}
		return err
	}
	var sn *SequencesNeeded
	if !errors.As(err, &sn) {
		sn = &SequencesNeeded{Table: t.Name, err: unsupported("INSERT into %s calling nextval() for a value is not supported here", t.Name).
			WithHint("Use the simple query protocol, or draw the value first (SELECT nextval(...)) and pass it as a parameter.")}
	}
	sn.Need = append(sn.Need, named...)
	return sn
}

// seqFuncs are PostgreSQL's sequence functions. A sequence that is not a
// sequence column's lives on the default node only, and currval's and
// lastval's state on one connection: in a statement on distributed or
// reference tables they are refused (refuseSeqCalls), but a nextval('name')
// that is a row's whole value in INSERT ... VALUES, which the coordinator
// draws as it draws a sequence column's (namedSeqNeeds).
var seqFuncs = map[string]bool{"nextval": true, "currval": true, "setval": true, "lastval": true}

// namedNextval returns name for an expression that is nextval('name')
// (its argument a string constant, cast to regclass or text or not).
func namedNextval(e *pg_query.Node) (string, bool) {
	fc := e.GetFuncCall()
	if fc == nil || len(fc.Args) != 1 || fc.AggStar || fc.AggDistinct || fc.Over != nil || fc.AggFilter != nil || len(fc.AggOrder) > 0 {
		return "", false
	}
	if name, builtin := funcName(fc); !builtin || name != "nextval" {
		return "", false
	}
	a := fc.Args[0]
	if tc := a.GetTypeCast(); tc != nil {
		names := ListNames(&pg_query.List{Items: tc.TypeName.GetNames()})
		if len(names) == 0 || len(tc.TypeName.GetArrayBounds()) > 0 {
			return "", false
		}
		if n := names[len(names)-1]; n != "regclass" && n != "text" || len(names) > 1 && names[0] != "pg_catalog" {
			return "", false
		}
		a = tc.Arg
	}
	sv := a.GetAConst().GetSval()
	if sv == nil {
		return "", false
	}
	return sv.Sval, true
}

// namedSeqNeeds lists the nextval('name') calls that are whole values of
// an INSERT ... VALUES into t, by column and sequence, rows in order. An
// INSERT without a column list has its list completed first.
func namedSeqNeeds(ins *pg_query.InsertStmt, t *metadata.Table) ([]SeqNeed, error) {
	sel := ins.GetSelectStmt().GetSelectStmt()
	if sel == nil || len(sel.ValuesLists) == 0 {
		return nil, nil
	}
	var need []SeqNeed
	for r, l := range sel.ValuesLists {
		for i, it := range l.GetList().GetItems() {
			name, ok := namedNextval(it)
			if !ok {
				continue
			}
			if len(ins.Cols) == 0 {
				return nil, &ColumnsNeeded{Table: t.Name, err: unsupported("INSERT into %s calling nextval() needs a column list here", t.Name).
					WithHint("Write INSERT INTO %s (...) VALUES (...).", t.Name)}
			}
			if i >= len(ins.Cols) {
				return nil, pgerr.New(pgerr.SyntaxError, "INSERT has more expressions than target columns")
			}
			col := ins.Cols[i].GetResTarget().GetName()
			k := slices.IndexFunc(need, func(n SeqNeed) bool { return n.Column == col && n.Name == name })
			if k < 0 {
				need = append(need, SeqNeed{Column: col, Name: name})
				k = len(need) - 1
			}
			need[k].Rows = append(need[k].Rows, r)
		}
	}
	return need, nil
}

// refuseSeqCalls refuses a sequence function in a statement on distributed
// or reference tables (see seqFuncs), but the nextval('name') calls
// namedSeqNeeds takes.
func refuseSeqCalls(version int32, stmt *pg_query.Node) error {
	switch {
	case stmt.GetSelectStmt() != nil, stmt.GetInsertStmt() != nil, stmt.GetUpdateStmt() != nil, stmt.GetDeleteStmt() != nil:
	default:
		return nil
	}
	drawn := map[*pg_query.FuncCall]bool{}
	if sel := stmt.GetInsertStmt().GetSelectStmt().GetSelectStmt(); sel != nil {
		for _, l := range sel.ValuesLists {
			for _, it := range l.GetList().GetItems() {
				if _, ok := namedNextval(it); ok {
					drawn[it.GetFuncCall()] = true
				}
			}
		}
	}
	bad := ""
	Walk(stmt, func(m proto.Message) {
		if fc, ok := m.(*pg_query.FuncCall); ok && !drawn[fc] {
			if name, builtin := funcName(fc); builtin && seqFuncs[name] && bad == "" {
				bad = name
			}
		}
	})
	if bad == "" {
		return nil
	}
	why := unsupported("%s() in a statement on distributed or reference tables is not supported", bad).
		WithHint("Draw the value in a statement of its own (SELECT %s(...)) and pass it as a constant or parameter; a sequence column left to its default, or nextval('name') as a value of INSERT ... VALUES, is drawn by pgfleet.", bad)
	if bad == "setval" {
		if sf := setvalFirst(version, stmt, why); sf != nil {
			return sf
		}
	}
	return why
}

// columnSeqCheck is seqCheck for t's sequence columns.
func columnSeqCheck(stmt *pg_query.Node, t *metadata.Table) error {
	if t == nil || len(t.Sequences) == 0 {
		return nil
	}
	if u := stmt.GetUpdateStmt(); u != nil {
		return seqSet(u.TargetList, t)
	}
	ins := stmt.GetInsertStmt()
	if ins == nil {
		return nil
	}
	if oc := ins.OnConflictClause; oc != nil && oc.Action == pg_query.OnConflictAction_ONCONFLICT_UPDATE {
		if err := seqSet(oc.TargetList, t); err != nil {
			return err
		}
	}
	sel := ins.SelectStmt.GetSelectStmt()
	values := sel != nil && len(sel.ValuesLists) > 0
	if len(ins.Cols) == 0 && values {
		return &ColumnsNeeded{Table: t.Name, err: unsupported("INSERT into %s, which has sequence columns, needs a column list here", t.Name).
			WithHint("Write INSERT INTO %s (...) VALUES (...).", t.Name)}
	}
	pos := map[string]int{}
	for i, c := range ins.Cols {
		pos[c.GetResTarget().GetName()] = i
	}
	override := ins.Override
	var need []SeqNeed
	for _, sc := range t.Sequences {
		i, listed := pos[sc.Column]
		if ins.SelectStmt == nil { // DEFAULT VALUES
			need = append(need, SeqNeed{Column: sc.Column, Sequence: sc.Sequence, Rows: []int{0}})
			continue
		}
		if !values {
			if listed && sc.Identity != 0 && override == pg_query.OverridingKind_OVERRIDING_USER_VALUE {
				return unsupported("INSERT ... SELECT into %s with OVERRIDING USER VALUE is not supported here", t.Name).
					WithHint("Give the identity column its values in the SELECT and leave OVERRIDING USER VALUE out.")
			}
			if !listed && len(ins.Cols) > 0 {
				return unsupported("INSERT ... SELECT into %s leaving its column %q to its sequence is not supported yet", t.Name, sc.Column).
					WithHint("Insert the rows with INSERT ... VALUES, or give %q its values in the SELECT.", sc.Column)
			}
			if len(ins.Cols) == 0 {
				return unsupported("INSERT ... SELECT into %s, which has sequence columns, needs a column list", t.Name).
					WithHint("Write INSERT INTO %s (...) SELECT ..., with the sequence columns' values in the SELECT.", t.Name)
			}
			if sc.Identity == 'a' && override != pg_query.OverridingKind_OVERRIDING_SYSTEM_VALUE {
				return errIdentityAlways(sc.Column, false)
			}
			continue
		}
		n := SeqNeed{Column: sc.Column, Sequence: sc.Sequence}
		for r, l := range sel.ValuesLists {
			items := l.GetList().GetItems()
			switch {
			case len(items) < len(ins.Cols):
				return pgerr.New(pgerr.SyntaxError, "INSERT has more target columns than expressions")
			case len(items) > len(ins.Cols):
				return pgerr.New(pgerr.SyntaxError, "INSERT has more expressions than target columns")
			case !listed:
				n.Rows = append(n.Rows, r)
			case items[i].GetSetToDefault() != nil:
				n.Rows = append(n.Rows, r)
			case sc.Identity != 0 && override == pg_query.OverridingKind_OVERRIDING_USER_VALUE:
				n.Rows = append(n.Rows, r) // the value given is ignored
			case sc.Identity == 'a' && override != pg_query.OverridingKind_OVERRIDING_SYSTEM_VALUE:
				return errIdentityAlways(sc.Column, false)
			}
		}
		if len(n.Rows) > 0 {
			need = append(need, n)
		}
	}
	if len(need) == 0 {
		return nil
	}
	return &SequencesNeeded{Table: t.Name, Need: need,
		err: unsupported("INSERT into %s leaving a column to its sequence is not supported here", t.Name).
			WithHint("Give the sequence column its value (SELECT nextval(pg_get_serial_sequence('%s', '%s'))), or use a plain INSERT ... VALUES outside EXPLAIN.", t.Name, need[0].Column)}
}

// seqSet checks the SET list of an UPDATE or ON CONFLICT DO UPDATE.
func seqSet(targets []*pg_query.Node, t *metadata.Table) error {
	for _, n := range targets {
		rt := n.GetResTarget()
		sc := t.Sequence(rt.GetName())
		if sc == nil {
			continue
		}
		val := rt.Val
		if ma := val.GetMultiAssignRef(); ma != nil {
			// SET (a, b) = (DEFAULT, ...): this column's element.
			val = nil
			if row := ma.Source.GetRowExpr(); row != nil && int(ma.Colno) >= 1 && int(ma.Colno) <= len(row.Args) {
				val = row.Args[ma.Colno-1]
			}
		}
		if val.GetSetToDefault() != nil {
			return unsupported("setting column %q of %s, whose values come from a sequence, to DEFAULT is not supported yet", sc.Column, t.Name).
				WithHint("Set it to nextval(pg_get_serial_sequence('%s', '%s')) read first, as a value.", t.Name, sc.Column)
		}
		if sc.Identity == 'a' {
			return errIdentityAlways(sc.Column, true)
		}
	}
	return nil
}

// errIdentityAlways is PostgreSQL's error for a value given to a
// GENERATED ALWAYS identity column.
func errIdentityAlways(col string, update bool) error {
	var e *pgerr.Error
	if update {
		e = pgerr.New("428C9", "column %q can only be updated to DEFAULT", col)
	} else {
		e = pgerr.New("428C9", "cannot insert a non-DEFAULT value into column %q", col).
			WithHint("Use OVERRIDING SYSTEM VALUE to override.")
	}
	e.Detail = "Column \"" + col + "\" is an identity column defined as GENERATED ALWAYS."
	return e
}

// WithSequenceValues is an INSERT that left sequence columns to their
// default (SequencesNeeded) with the values drawn in their place: vals[k]
// are SQL expressions for need[k]'s rows, in order.
func WithSequenceValues(sql string, need []SeqNeed, vals [][]string) (string, error) {
	return withSequences(sql, need, vals, false)
}

// withSequences is WithSequenceValues; params: the values are parameters,
// and a value they replace may not have one (PostgreSQL would still type
// it from the column).
func withSequences(sql string, need []SeqNeed, vals [][]string, params bool) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetInsertStmt() == nil {
		return "", pgerr.New(pgerr.Internal, "not one INSERT statement")
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	if ins.SelectStmt == nil {
		// DEFAULT VALUES: one row of the sequence columns.
		ins.SelectStmt = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			ValuesLists: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{}}}}, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}}}
	}
	rows := ins.SelectStmt.GetSelectStmt().GetValuesLists()
	if len(need) != len(vals) {
		return "", pgerr.New(pgerr.Internal, "%d sequence values for %d columns", len(vals), len(need))
	}
	for k, n := range need {
		if len(vals[k]) != len(n.Rows) {
			return "", pgerr.New(pgerr.Internal, "%d values for %d rows of %s", len(vals[k]), len(n.Rows), n.Column)
		}
		pos := -1
		for i, c := range ins.Cols {
			if c.GetResTarget().GetName() == n.Column {
				pos = i
			}
		}
		if pos < 0 {
			// Left out of the column list: every row takes a value.
			ins.Cols = append(ins.Cols, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Name: n.Column, Location: -1}}})
			pos = len(ins.Cols) - 1
			for _, l := range rows {
				l.GetList().Items = append(l.GetList().Items, &pg_query.Node{Node: &pg_query.Node_SetToDefault{SetToDefault: &pg_query.SetToDefault{}}})
			}
		}
		for j, r := range n.Rows {
			if r >= len(rows) || pos >= len(rows[r].GetList().GetItems()) {
				return "", pgerr.New(pgerr.Internal, "no row %d for %s", r, n.Column)
			}
			e, err := parseExpr(vals[k][j])
			if err != nil {
				return "", err
			}
			if params && hasParam(rows[r].GetList().Items[pos]) {
				return "", unsupported("a parameter given to an identity column with OVERRIDING USER VALUE is not supported in a prepared statement").
					WithHint("Leave the column out of the INSERT, or use the simple query protocol.")
			}
			rows[r].GetList().Items[pos] = e
		}
	}
	// The identity columns now have the sequence's values (OVERRIDING
	// USER VALUE ignored the ones given) or values PostgreSQL took: the
	// statement is planned again as overriding them, and the shards'
	// plain columns ignore the clause.
	ins.Override = pg_query.OverridingKind_OVERRIDING_SYSTEM_VALUE
	return deparse(tree.Version, tree.Stmts[0].Stmt)
}

// WithSequenceParams is WithSequenceValues for a prepared statement: each
// value is a parameter after the statement's own (the first is $base+1),
// bound by the coordinator at each execution.
func WithSequenceParams(sql string, need []SeqNeed, base int) (string, error) {
	vals := make([][]string, len(need))
	k := base
	for i, n := range need {
		for range n.Rows {
			k++
			vals[i] = append(vals[i], "$"+strconv.Itoa(k))
		}
	}
	return withSequences(sql, need, vals, true)
}

// hasParam reports whether n refers to a parameter.
func hasParam(n *pg_query.Node) bool {
	found := false
	Walk(n, func(m proto.Message) {
		if _, ok := m.(*pg_query.ParamRef); ok {
			found = true
		}
	})
	return found
}

// MaxParam is the highest parameter number sql refers to ($n), 0 if none.
func MaxParam(sql string) int {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return 0
	}
	n := 0
	Walk(tree, func(m proto.Message) {
		if p, ok := m.(*pg_query.ParamRef); ok {
			n = max(n, int(p.Number))
		}
	})
	return n
}

// parseExpr parses one SQL expression.
func parseExpr(sql string) (*pg_query.Node, error) {
	tree, err := pg_query.Parse("SELECT " + sql)
	if err != nil || len(tree.Stmts) != 1 || len(tree.Stmts[0].Stmt.GetSelectStmt().GetTargetList()) != 1 {
		return nil, pgerr.New(pgerr.Internal, "unreadable value %s", sql)
	}
	return tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val, nil
}
