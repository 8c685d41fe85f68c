package planner

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/metadata"
)

// copyOut plans COPY t [(columns)] TO STDOUT [WITH (options)] of a
// distributed table: each worker runs COPY (SELECT columns FROM shard
// UNION ALL ...) TO STDOUT with the same options, the first worker alone
// with HEADER, and the coordinator relays the rows as one COPY (in no
// particular order, as PostgreSQL's own COPY TO). The binary format, whose
// stream has a header and a trailer of its own, is refused.
func (b *builder) copyOut(c *pg_query.CopyStmt, t *metadata.Table) (*Plan, error) {
	header := -1 // the HEADER option's index
	for i, opt := range c.Options {
		d := opt.GetDefElem()
		if d == nil {
			continue
		}
		val := strings.ToLower(defElemValue(d))
		switch d.Defname {
		case "format":
			if val != "text" && val != "csv" {
				return nil, unsupported("COPY %s TO STDOUT in format %s is not supported yet", t.Name, val).
					WithHint("Use FORMAT text or csv.")
			}
		case "header":
			header = i
		case "delimiter", "null", "quote", "escape", "force_quote", "encoding":
		default:
			return nil, unsupported("COPY option %s from distributed table %s is not supported yet", d.Defname, t.Name).
				WithHint("Use FORMAT, HEADER, DELIMITER, NULL, QUOTE, ESCAPE, FORCE_QUOTE or ENCODING.")
		}
	}
	if len(c.Attlist) == 0 {
		// Every column but the generated ones: the caller reads which.
		return nil, &ColumnsNeeded{Table: t.Name, Copy: true, err: unsupported("COPY %s TO STDOUT needs a column list here", t.Name).
			WithHint("Write COPY %s (column, ...) TO STDOUT.", t.Name)}
	}
	// SELECT columns FROM t: renamed per shard by workerQueries.
	sel := &pg_query.SelectStmt{LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: proto.Clone(c.Relation).(*pg_query.RangeVar)}}}}
	for _, a := range c.Attlist {
		sel.TargetList = append(sel.TargetList, resTarget(&pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
			Fields: []*pg_query.Node{pg_query.MakeStrNode(a.GetString_().GetSval())}}}}))
	}
	selects, err := b.workerQueries(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}, b.cat.Shards[t.Name], t.Name)
	if err != nil {
		return nil, err
	}
	x := &CopyOut{Table: t.Name, DistType: t.DistType, FromTable: true}
	x.InBlock, x.Format = b.copyInBlock(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}, c.Options)
	p := &Plan{Root: x, Tables: []string{t.Name}, ReadOnly: true}
	base := proto.Clone(c).(*pg_query.CopyStmt)
	base.Relation, base.Attlist = nil, nil
	x.Workers, err = b.copyWorkers(base, header, selects, unsupported("COPY %s TO STDOUT cannot be rewritten for its shards", t.Name).
		WithHint("Use COPY (SELECT ...) TO STDOUT with psql, or SELECT the rows."))
	if err != nil {
		return nil, err
	}
	return p, nil
}

// copyWorkers is, for each worker's query, COPY (query) with c's options
// (HEADER, the option at index header, on the first worker only); refuse
// when a worker's query does not parse back.
func (b *builder) copyWorkers(c *pg_query.CopyStmt, header int, workers []WorkerQuery, refuse error) ([]WorkerQuery, error) {
	var out []WorkerQuery
	for i, w := range workers {
		tree, err := pg_query.Parse(w.SQL)
		if err != nil || len(tree.Stmts) != 1 {
			return nil, refuse
		}
		cp := proto.Clone(c).(*pg_query.CopyStmt)
		cp.Query = tree.Stmts[0].Stmt
		if header >= 0 && i > 0 {
			cp.Options = append(cp.Options[:header:header], cp.Options[header+1:]...)
		}
		sql, err := deparse(b.tree.Version, &pg_query.Node{Node: &pg_query.Node_CopyStmt{CopyStmt: cp}})
		if err != nil {
			return nil, err
		}
		out = append(out, WorkerQuery{Node: w.Node, Shards: w.Shards, SQL: sql})
	}
	return out, nil
}

// copyQuery plans COPY (query) TO STDOUT over distributed or reference
// tables as its query is planned: routed to one shard, or one copy of
// reference tables, COPY runs there with the query rewritten for it; a
// multi-shard query whose rows are the shards' rows as they come (no
// ORDER BY, LIMIT, DISTINCT, aggregate or gathering) runs as COPY of
// each worker's query in turn, as COPY t TO STDOUT does. Anything else
// is refused.
func (b *builder) copyQuery(stmt *pg_query.Node, c *pg_query.CopyStmt) (*Plan, error) {
	refuse := unsupported("COPY (query) TO STDOUT is supported over distributed tables when the query is answered by one shard, or by the shards' rows as they come").
		WithHint("Pin the query to one shard with WHERE <distribution column> = <value>, drop ORDER BY/LIMIT/DISTINCT/aggregates from it, or SELECT the rows.")
	if c.IsFrom || c.Filename != "" || c.IsProgram || c.Query == nil {
		return nil, unsupported("COPY (query) over distributed or reference tables is supported only TO STDOUT").
			WithHint("Use COPY (query) TO STDOUT (psql: \\copy (query) to 'file').")
	}
	header := -1
	var format error // a format the shards' streams cannot be joined in
	for i, opt := range c.Options {
		d := opt.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "format":
			if v := strings.ToLower(defElemValue(d)); v != "text" && v != "csv" {
				format = unsupported("COPY (query) TO STDOUT in format %s over several shards is not supported yet", v).
					WithHint("Use FORMAT text or csv, or pin the query to one shard with WHERE <distribution column> = <value>.")
			}
		case "header":
			header = i
		}
	}
	inner, err := b.plan(c.Query)
	if err != nil {
		return nil, err
	}
	if !inner.ReadOnly {
		return nil, refuse
	}
	switch r := inner.Root.(type) {
	case *Route:
		x := *r
		x.ShardSQL = make([]string, len(r.ShardSQL))
		for i := range x.ShardSQL {
			if x.ShardSQL[i], err = b.rewrite(stmt, i); err != nil {
				return nil, err
			}
		}
		p := *inner
		p.Root = &x
		return &p, nil
	case *ReferenceRead:
		sql, err := b.rewrite(stmt, -1)
		if err != nil {
			return nil, err
		}
		p := *inner
		p.Root = &ReferenceRead{ShardSQL: []string{sql}}
		return &p, nil
	case *Scatter:
		m := r.Merge
		if m.Kind != Concat || m.Limit != nil || m.Offset != nil || m.Hidden > 0 {
			// The coordinator runs the query and writes its rows as COPY.
			if format != nil {
				return nil, format
			}
			f, err := copyFormat(c.Options)
			if err != nil {
				return nil, err
			}
			q, err := deparse(b.tree.Version, c.Query)
			if err != nil {
				return nil, refuse
			}
			return &Plan{Root: &CopyOut{Table: r.Table, DistType: r.DistType, Query: q, Format: f},
				Tables: inner.Tables, ReadOnly: true}, nil
		}
		if format != nil {
			return nil, format // one worker's COPY runs whole (Route, ReferenceRead)
		}
		x := &CopyOut{Table: r.Table, DistType: r.DistType}
		if x.Workers, err = b.copyWorkers(c, header, r.Workers, refuse); err != nil {
			return nil, err
		}
		x.InBlock, x.Format = b.copyInBlock(c.Query, c.Options)
		return &Plan{Root: x, Tables: inner.Tables, ReadOnly: true}, nil
	}
	return nil, refuse
}

// copyInBlock is CopyOut.InBlock and its format for the SELECT query and
// COPY's options; "" and nil when the coordinator cannot write them.
func (b *builder) copyInBlock(query *pg_query.Node, opts []*pg_query.Node) (string, *CopyFormat) {
	f, err := copyFormat(opts)
	if err != nil {
		return "", nil
	}
	q, err := deparse(b.tree.Version, query)
	if err != nil {
		return "", nil
	}
	return q, f
}

// copyFormat reads COPY ... TO's options (text or CSV) into the format the
// coordinator writes rows in; PostgreSQL checks them (the coordinator's
// verdict) before any row goes out.
func copyFormat(opts []*pg_query.Node) (*CopyFormat, error) {
	f := &CopyFormat{}
	set := map[string]string{}
	for _, opt := range opts {
		d := opt.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "format", "delimiter", "null", "header", "quote", "escape":
			set[d.Defname] = defElemValue(d)
		case "force_quote":
			if d.Arg.GetAStar() != nil {
				f.ForceAll = true
			}
			for _, n := range d.Arg.GetList().GetItems() {
				f.ForceQuote = append(f.ForceQuote, n.GetString_().GetSval())
			}
		default:
			return nil, unsupported("COPY (query) TO STDOUT with option %s over several shards is not supported", d.Defname).
				WithHint("Leave it out, or pin the query to one shard with WHERE <distribution column> = <value>.")
		}
	}
	f.CSV = strings.EqualFold(set["format"], "csv")
	f.Delimiter, f.Null = '\t', `\N`
	if f.CSV {
		f.Delimiter, f.Null, f.Quote = ',', "", '"'
	}
	if v, ok := set["delimiter"]; ok && len(v) == 1 {
		f.Delimiter = v[0]
	}
	if v, ok := set["null"]; ok {
		f.Null = v
	}
	if v, ok := set["quote"]; ok && len(v) == 1 {
		f.Quote = v[0]
	}
	f.Escape = f.Quote
	if v, ok := set["escape"]; ok && len(v) == 1 {
		f.Escape = v[0]
	}
	if v, ok := set["header"]; ok {
		f.Header, _ = ParseBool(v) // PostgreSQL refuses any other (the coordinator's verdict)
	}
	return f, nil
}

// ParseBool reads a boolean option as PostgreSQL's parse_bool does (no
// value: true).
func ParseBool(v string) (value, ok bool) {
	v = strings.ToLower(v)
	switch {
	case v == "" || v == "1" || v == "on":
		return true, true
	case v == "0" || v == "of" || v == "off":
		return false, true
	case strings.HasPrefix("true", v) || strings.HasPrefix("yes", v):
		return true, true
	case strings.HasPrefix("false", v) || strings.HasPrefix("no", v):
		return false, true
	}
	return false, false
}
