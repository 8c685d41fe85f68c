package coordinator

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// A multi-row INSERT into a distributed table over the extended protocol
// (planner.InsertSplit), as ORMs' and drivers' bulk inserts send it: at
// Bind, each row's distribution value is read from the bound parameters.
// Rows of one shard group make a routed statement (the whole INSERT, on
// that shard), relayed as a router's. Rows of several become a multi-shard
// write portal (multiwrite.go), run at Execute: one statement per shard
// with only its rows, their parameters renumbered and bound from the
// client's values as sent (text or binary), all shards committed together.

// allRows is 0, 1, ..., n-1.
func allRows(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// insertShardStmt is the statement of all an InsertSplit's rows on shard
// idx, made once per plan and shard: the routed statement when every row
// belongs to that shard, and what Describe describes.
func (s *Server) insertShardStmt(sp *stmtPlan, idx int, st *Statement) (*Statement, error) {
	if idx < 0 || idx >= len(sp.shards) {
		return nil, errCatalogMoved
	}
	if x := sp.shards[idx].get(st); x != nil {
		return x, nil
	}
	sql, err := sp.plan.Root.(*planner.InsertSplit).SplitInsert(idx, allRows(len(sp.plan.Root.(*planner.InsertSplit).Rows)))
	if err != nil {
		return nil, err
	}
	tail, final := workerTail(st)
	x := s.stmts.derive(st, append(append([]byte(sql), 0), tail...))
	sp.shards[idx].set(x, final)
	return x, nil
}

// insertGroups groups an InsertSplit's rows by shard index for a Bind's
// parameters: the shard indexes in the order of their first row, and each
// one's rows in VALUES order.
func (ss *session) insertGroups(sp *stmtPlan, st *Statement, params []byte) (order []int, groups map[int][]int, err error) {
	all := ss.srv.catalog.Load().Shards[sp.plan.DistTable()]
	if len(all) != len(sp.shards) {
		return nil, nil, errCatalogMoved
	}
	return groupRows(sp.plan.Root.(*planner.InsertSplit), all, func(v *planner.Value) (int32, error) { return ss.valueHash(sp, st, v, params) })
}

// groupRows groups a multi-row INSERT's rows (planner.InsertSplit) by the
// index of the shard each one's distribution value (hashed by hash)
// belongs to: the indexes in the order of their first row, and each one's
// rows in VALUES order.
func groupRows(x *planner.InsertSplit, all []metadata.Shard, hash func(*planner.Value) (int32, error)) (order []int, groups map[int][]int, err error) {
	groups = map[int][]int{}
	for i, v := range x.Rows {
		h, err := hash(v)
		if err != nil {
			return nil, nil, err
		}
		idx := metadata.ShardIndex(all, h)
		if idx < 0 || len(all[idx].Nodes) == 0 {
			return nil, nil, pgerr.New(pgerr.Internal, "no shard of %s holds hash %d", x.Table, h)
		}
		if _, ok := groups[idx]; !ok {
			order = append(order, idx)
		}
		groups[idx] = append(groups[idx], i)
	}
	return order, groups, nil
}

// insertSplitBind is routeBind of an InsertSplit: the routed statement
// and its node when the rows belong to one shard, onShardWrites when they
// belong to several.
func (ss *session) insertSplitBind(sp *stmtPlan, st *Statement, params []byte) (*Statement, int32, []byte, where, error) {
	order, _, err := ss.insertGroups(sp, st, params)
	if err != nil {
		return nil, 0, params, onNode, err
	}
	if len(order) > 1 {
		return nil, 0, params, onShardWrites, nil
	}
	x, err := ss.srv.insertShardStmt(sp, order[0], st)
	if err != nil {
		return nil, 0, params, onNode, err
	}
	return x, ss.srv.catalog.Load().Shards[sp.plan.DistTable()][order[0]].Nodes[0], params, onNode, nil
}

// insertPart is one shard's statement of a multi-shard InsertSplit and
// what to bind it with.
type insertPart struct {
	rows   []int // its VALUES rows
	params *shards.Params
}

// messages are Parse, Bind, Execute and Sync of the part's statement sql,
// for the client's transaction block (writeInTxn).
func (p *insertPart) messages(sql string) []byte {
	b, _ := (&pgproto3.Parse{Query: sql, ParameterOIDs: p.params.OIDs}).Encode(nil)
	b, _ = (&pgproto3.Bind{ParameterFormatCodes: p.params.Formats, Parameters: p.params.Values,
		ResultFormatCodes: p.params.Results}).Encode(b)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	return b
}

// rowOrder is the VALUES row of each row a multi-row INSERT's statements
// return (RETURNING, one per row), in the order they run: by node, then
// as listed (writeInTxn, shards.ExecGroupsRows).
func rowOrder(byNode map[int32][]string, parts map[string]*insertPart) []int {
	var order []int
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		for _, sql := range byNode[node] {
			order = append(order, parts[sql].rows...)
		}
	}
	return order
}

// returningBind keeps a multi-shard write portal with RETURNING: a
// multi-row INSERT's rows come back one per VALUES row, in order, so the
// shards' can be put back in place (not so with ON CONFLICT DO NOTHING or
// DO UPDATE ... WHERE, refused as in the simple protocol); an UPDATE's or
// DELETE's in the order the shards run, as any order PostgreSQL may give;
// a reference-table write's (ref) as a copy gave them (the copies' rows
// are compared). Its RowDescription is the statement's as the default
// node describes it, in the Bind's result formats.
func (ss *session) returningBind(portal string, st *Statement, sp *stmtPlan, params []byte, ref bool) {
	p := sp.plan
	if x, ok := p.Root.(*planner.InsertSplit); ok && !x.RowPerValue {
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"RETURNING in a multi-row INSERT ... ON CONFLICT DO NOTHING (or DO UPDATE ... WHERE) into %s whose rows belong to several shards is not supported yet", p.DistTable()).
			WithHint("Insert the rows one distribution value per statement, or read them back with a SELECT."))
		return
	}
	_, results, ok := bindResults(params)
	if !ok {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "invalid Bind message"))
		return
	}
	d, err := ss.describeDefault(sp, st)
	if err != nil {
		ss.synthError(err)
		return
	}
	var rd pgproto3.RowDescription
	if d.rowDesc == nil || rd.Decode(d.rowDesc) != nil {
		ss.synthError(pgerr.New(pgerr.Internal, "no row description for a RETURNING of %s", p.DistTable()))
		return
	}
	if nr := int(binary.BigEndian.Uint16(results)); nr > 1 && nr != len(rd.Fields) {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "bind message has %d result formats but query has %d columns", nr, len(rd.Fields)))
		return
	}
	if ss.scatterPortals == nil {
		ss.scatterPortals = map[string]*scatterPortal{}
	}
	cp := append([]byte(nil), params[:len(params)-len(results)]...)
	ss.scatterPortals[portal] = &scatterPortal{st: st, sp: sp, params: cp, results: slices.Clone(results), ref: ref, write: !ref,
		desc: &scatterDesc{rowDesc: d.rowDesc, ncols: len(rd.Fields)}, depth: len(ss.savepoints)}
	delete(ss.portals, portal)
	ss.push(expect{kind: eSynth, synth: msgBindComplete})
}

// resultFormats are a Bind's result format codes (count and codes).
func resultFormats(results []byte) []int16 {
	if len(results) < 2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(results))
	f := make([]int16, 0, n)
	for i := 0; i < n && 2+2*i+2 <= len(results); i++ {
		f = append(f, int16(binary.BigEndian.Uint16(results[2+2*i:])))
	}
	return f
}

// insertParts is a multi-shard InsertSplit portal's statements by node,
// each shard's with only its rows, and the parameters of each: the
// client's values (oids, formats, values as its Bind gave them) that the
// statement uses, renumbered.
func (ss *session) insertParts(sp *stmtPlan, st *Statement, params []byte, oids []uint32, formats []int16,
	values [][]byte, results []int16) (map[int32][]string, map[string]*insertPart, error) {
	order, groups, err := ss.insertGroups(sp, st, params)
	if err != nil {
		return nil, nil, err
	}
	all := ss.srv.catalog.Load().Shards[sp.plan.DistTable()]
	// Each shard's statement has only some rows: a worker would infer a
	// parameter's type from them alone (a $3 cast to int8 in one row and
	// assigned to text in another), while the client encoded its value by
	// the type PostgreSQL fixed for the whole statement. So each part is
	// prepared with the whole statement's types: as the client was told
	// them, else as the default node describes the statement.
	var described []uint32
	if desc := st.paramDesc.Load(); desc != nil {
		described = *desc
	} else if slices.Contains(oids, 0) || len(oids) < len(values) {
		d, err := ss.describeDefault(sp, st)
		if err != nil {
			return nil, nil, err
		}
		described = d.params
	}
	types := fixedTypes(oids, described)
	x := sp.plan.Root.(*planner.InsertSplit)
	uses := x.ParamUses()
	byNode := map[int32][]string{}
	parts := map[string]*insertPart{}
	for _, idx := range order {
		sql, used, err := x.SplitInsertParams(idx, groups[idx])
		if err != nil {
			return nil, nil, err
		}
		ps := &shards.Params{Results: results}
		for _, k := range used {
			if k > len(values) {
				return nil, nil, pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but the statement uses $%d", len(values), k)
			}
			var oid uint32
			if k <= len(types) {
				oid = types[k-1]
			}
			if oid >= executor.FirstNormalOID && uses[k] > 1 {
				// A type not built in has another OID on each worker:
				// the worker must infer it, which it does from the part's
				// uses alone.
				return nil, nil, pgerr.New(pgerr.FeatureNotSupported,
					"parameter $%d of this multi-row INSERT, of a type that is not built in, is used in several places; its rows belong to several shards", k).
					WithHint("Use the parameter once (one placeholder per value), or cast it to a built-in type.")
			}
			var f int16
			switch {
			case len(formats) == 1:
				f = formats[0]
			case k <= len(formats):
				f = formats[k-1]
			}
			// A type not built in (used once, so its one use is in
			// the part) is left for the worker to infer.
			ps.OIDs = append(ps.OIDs, executor.WorkerParamOID(oid, true))
			ps.Formats = append(ps.Formats, f)
			ps.Values = append(ps.Values, values[k-1])
		}
		node := all[idx].Nodes[0]
		byNode[node] = append(byNode[node], sql)
		parts[sql] = &insertPart{rows: groups[idx], params: ps}
	}
	return byNode, parts, nil
}
