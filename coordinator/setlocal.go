package coordinator

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// A statement made of nothing but set_config(name, value, true) calls
//
//	SELECT set_config('search_path', $1, true), set_config('role', $2, true),
//	       set_config('request.jwt.claims', $3, true)
//
// (PostgREST's start of every request; the tenant of a row-level security
// policy) sets each name for the transaction, exactly as SET LOCAL name
// would, and the coordinator follows it so: each call becomes a SET LOCAL
// of the session's transaction (txLog), replayed as the same set_config
// call on the block's other workers and on the pooled connections of a
// multi-shard read, and gone at the block's end. Its names and values are
// literals or parameters, so they are known before it runs (the Bind's
// values for parameters); any other set_config still pins the session
// (classify), as does one whose name or value the coordinator would not
// follow as a SET LOCAL (localOp).

// localSet is one set_config(name, value, true) call: its name and value,
// each a literal or a parameter (1-based; 0 for the literal).
type localSet struct {
	name, value           string
	nameParam, valueParam int
}

// localSetsOf returns the calls of a statement that is only
// SELECT set_config(<name>, <value>, true)[, ...], each name and value a
// string literal or a parameter ($n, $n::text), nothing else in it;
// ok false for any other statement.
func localSetsOf(sql string) (sets []localSet, ok bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, false
	}
	s := tree.Stmts[0].Stmt.GetSelectStmt()
	if s == nil || s.Op != pg_query.SetOperation_SETOP_NONE || len(s.TargetList) == 0 ||
		len(s.FromClause) > 0 || s.WhereClause != nil || len(s.GroupClause) > 0 || s.HavingClause != nil ||
		len(s.WindowClause) > 0 || len(s.ValuesLists) > 0 || len(s.SortClause) > 0 || s.LimitOffset != nil ||
		s.LimitCount != nil || len(s.LockingClause) > 0 || s.WithClause != nil || s.IntoClause != nil || len(s.DistinctClause) > 0 {
		return nil, false
	}
	for _, t := range s.TargetList {
		rt := t.GetResTarget()
		if rt == nil || len(rt.Indirection) > 0 {
			return nil, false
		}
		f := rt.Val.GetFuncCall()
		if f == nil || !isSetConfig(f.Funcname) || len(f.Args) != 3 || len(f.AggOrder) > 0 || f.AggFilter != nil ||
			f.Over != nil || f.AggWithinGroup || f.AggStar || f.AggDistinct || f.FuncVariadic {
			return nil, false
		}
		var ls localSet
		var okName, okValue bool
		ls.name, ls.nameParam, okName = setArg(f.Args[0])
		ls.value, ls.valueParam, okValue = setArg(f.Args[1])
		local := f.Args[2].GetAConst()
		if !okName || !okValue || local == nil || local.GetBoolval() == nil || !local.GetBoolval().Boolval {
			return nil, false
		}
		if ls.nameParam == 0 && !followedName(ls.name) {
			return nil, false
		}
		sets = append(sets, ls)
	}
	return sets, true
}

// isSetConfig reports whether a function name is set_config or
// pg_catalog.set_config.
func isSetConfig(names []*pg_query.Node) bool {
	switch len(names) {
	case 1:
		return names[0].GetString_().GetSval() == "set_config"
	case 2:
		return names[0].GetString_().GetSval() == "pg_catalog" && names[1].GetString_().GetSval() == "set_config"
	}
	return false
}

// setArg reads a string literal, or a parameter, bare or cast to text.
func setArg(n *pg_query.Node) (lit string, param int, ok bool) {
	if tc := n.GetTypeCast(); tc != nil {
		if tc.TypeName == nil || len(tc.TypeName.Typmods) > 0 || len(tc.TypeName.ArrayBounds) > 0 || tc.Arg.GetParamRef() == nil {
			return "", 0, false
		}
		names := tc.TypeName.Names
		last := names[len(names)-1].GetString_().GetSval()
		if last != "text" || len(names) > 2 || len(names) == 2 && names[0].GetString_().GetSval() != "pg_catalog" {
			return "", 0, false
		}
		n = tc.Arg
	}
	if p := n.GetParamRef(); p != nil && p.Number > 0 {
		return "", int(p.Number), true
	}
	if c := n.GetAConst(); c != nil && !c.Isnull && c.GetSval() != nil && !strings.Contains(c.GetSval().Sval, `\`) {
		// (A backslash: with standard_conforming_strings off the
		// worker reads an escape where pg_query reads the character.)
		return c.GetSval().Sval, 0, true
	}
	return "", 0, false
}

// followedName reports whether set_config(name, v, true) is followed as
// SET LOCAL name: a custom setting, or a setting's name, in lower case
// (set_config takes a name as written, in any case: other spellings keep
// the old rule, which pins). Not those a SET LOCAL of which classify pins
// or takes for something else: seed (random()'s state, which outlives the
// transaction), session_authorization, and the transaction's
// characteristics (SET TRANSACTION, before its first query only); the old
// names of settings (sort_mem is work_mem: localsnap.go); and
// the idle timeouts, which the coordinator itself enforces for a block
// over several workers and reads again after a statement naming them
// (idletxn.go), which a name given as a parameter does not.
func followedName(name string) bool {
	if name == "" || strings.ToLower(name) != name {
		return false
	}
	if strings.Contains(name, ".") {
		return customName(name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	switch name {
	case "seed", "session_authorization", "transaction_isolation", "transaction_read_only", "transaction_deferrable",
		"idle_in_transaction_session_timeout", "idle_session_timeout", "sort_mem", "vacuum_mem":
		return false
	}
	return true
}

// localOps resolves a statement's calls into the SET LOCALs the session
// follows, with the Bind's parameter section (after the statement name)
// for those given as parameters, and the statement's declared parameter
// types (Statement.paramTail; nil for a simple query). ok false: a name
// or value not known or not followed (a NULL, a type whose value
// PostgreSQL would convert first, a search_path naming pg_temp, where a
// CREATE TABLE would make a temporary table that outlives the block).
func localOps(sets []localSet, bind, paramTail []byte) (ops []paramOp, ok bool) {
	ops = make([]paramOp, 0, len(sets))
	for _, s := range sets {
		name, value := s.name, s.value
		if s.nameParam > 0 {
			if name, ok = setParam(bind, paramTail, s.nameParam); !ok || !followedName(name) {
				return nil, false
			}
		}
		if s.valueParam > 0 {
			if value, ok = setParam(bind, paramTail, s.valueParam); !ok {
				return nil, false
			}
		}
		if name == "search_path" && namesTempSchema(value) {
			return nil, false
		}
		op := paramOp{kind: opNone, tagText: "SET", name: name, text: setLocalSQL(name, value)}
		if custom(name) {
			// (As SET LOCAL app.x: the placeholder stays defined on the
			// backend after the transaction.)
			op = paramOp{kind: opPlaceholder, name: name, text: op.text}
		}
		ops = append(ops, op)
	}
	return ops, true
}

// setParam returns parameter k (1-based) of a Bind as the text set_config
// receives: declared text, varchar or not at all (PostgreSQL then takes it
// as text), in the text or the binary format (a text value's binary form
// is its bytes), not NULL, with no zero byte.
func setParam(bind, paramTail []byte, k int) (string, bool) {
	if bind == nil {
		return "", false
	}
	switch paramType(paramTail, k-1) {
	case 0, 25, 705, 1043: // unspecified, text, unknown, varchar
	default:
		return "", false
	}
	v, format, isNull, ok := bindParam(bind, k-1)
	if !ok || isNull || format != 0 && format != 1 || strings.IndexByte(string(v), 0) >= 0 {
		return "", false
	}
	return string(v), true
}

// followLocalSets takes a statement of set_config(..., true) calls only
// for the SET LOCALs it makes, in place of the pin (or, for custom names,
// the state read) of any other set_config: when its literals are followed
// and its parameters may be.
func (c *class) followLocalSets(sql string) {
	sets, ok := localSetsOf(sql)
	if !ok {
		return
	}
	ops, known := localOps(sets, nil, nil)
	params := false
	for _, s := range sets {
		params = params || s.nameParam > 0 || s.valueParam > 0
	}
	if !known && !params {
		return // (a literal not followed: pinned, as before)
	}
	c.localSets, c.localOps = sets, ops
	c.pin, c.setsCustom, c.verify = "", false, false
}

// portalSets is a portal's SET LOCALs and the statement it was bound from.
type portalSets struct {
	st  *Statement
	ops []paramOp
}

// localSetsSent follows the sending of a statement of set_config(...,
// true) calls as that of a SET LOCAL (dispatch): the settings the
// connection runs under are then not its key's, and names may resolve
// otherwise.
func (ss *session) localSetsSent(ops []paramOp) {
	ss.settingsDirty = true
	if !customOnly(ops) {
		ss.setGen++
	}
	ss.pathTouched = ss.pathTouched || touchesPath(ops)
}
