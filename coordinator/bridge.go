package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Statements the coordinator runs itself, over the extended protocol.
// DDL on distributed and reference tables and on the objects every worker
// needs (types, functions, ...), the Citus functions, DECLARE of a cursor
// over distributed tables and FETCH, MOVE or CLOSE of such a cursor run
// through the simple query path, which does them on every worker. JDBC
// sends every statement over the extended protocol, as do postgres.js and
// psycopg's named cursors; they got 0A000 or a worker's error
// ("function create_distributed_table does not exist"). Such a statement
// (bridgeNow, decided at each Parse, Bind and Describe: a table may have
// been distributed since, a FETCH's cursor declared over one) is answered by the coordinator at
// Parse, Bind and Describe; its Execute runs the statement's text, the
// Bind's parameters written in as constants, through simpleQuery, and the
// simple answer becomes the extended one: no RowDescription (Describe
// gave it) and no ReadyForQuery (the Sync gives it), DataRows in the
// Bind's result formats. Outside a transaction block such a statement
// commits on its own, so it must be the pipeline's only one (0A000
// otherwise, before it runs).

// bridgeKind's values.
const (
	bridgeNone uint8 = iota
	bridgeDDL
	bridgeFunc
	bridgeDeclare
	bridgeCursor    // FETCH, MOVE or CLOSE of a coordinator's cursor
	bridgeSignal    // pg_cancel_backend or pg_terminate_backend (signal.go)
	bridgeRowsFirst // a write that runs a query first (rowsfirstext.go)
	bridgeTwoPhase  // a client's PREPARE TRANSACTION, COMMIT or ROLLBACK PREPARED (clienttwophase.go)
)

// bridgePortal is a Bind of a bridged statement.
type bridgePortal struct {
	st      *Statement
	kind    uint8
	text    string // the statement with the Bind's values as constants
	results []byte // the Bind's result formats (count and codes)
	// ran: executed; rows are the DataRow frames later Executes give
	// (a row limit), tag its CommandComplete body.
	ran  bool
	rows []byte
	tag  string
	// name is the portal's; returns: it gives rows (PostgreSQL runs it
	// again at each Execute, to its end), else it runs once (PostgreSQL's
	// 55000 for another Execute).
	name    string
	returns bool
	// inBlock: bound in a transaction block, whose end ends it (at the
	// client's Sync otherwise); depth: len(ss.savepoints) then (a
	// ROLLBACK TO an earlier savepoint ends it, as PostgreSQL's).
	inBlock bool
	depth   int
}

// endBlockPortals ends the bridged portals of a transaction block that
// ended (a COMMIT or ROLLBACK, maybe in the pipeline before their Execute).
func (ss *session) endBlockPortals() {
	for name, bp := range ss.bridged {
		if bp.inBlock {
			delete(ss.bridged, name)
		}
	}
}

// bridgeKind decides at Parse whether st runs through the simple query
// path (one of the bridge kinds) or as any statement (bridgeNone).
func (ss *session) bridgeKind(st *Statement) uint8 {
	snap := ss.srv.catalog.Load()
	if !ss.routes || snap == nil || st.cls.count != 1 {
		return bridgeNone
	}
	text := st.Query
	switch {
	case st.cls.twoPhase:
		// Run as a query where the coordinator has work to do
		// (clientTwoPhase): PREPARE TRANSACTION in a live block (its
		// checks), COMMIT and ROLLBACK PREPARED outside one (the worker
		// that holds the id). Elsewhere the worker answers as it is
		// (ROLLBACK in a failed block, 25P02 or 25001).
		kind, gid, ok := twoPhaseStmt(text)
		if !ok || strings.HasPrefix(gid, twophase.GIDPrefix) {
			return bridgeNone
		}
		if kind == pg_query.TransactionStmtKind_TRANS_STMT_PREPARE {
			// (Or may be: a BEGIN went out in this pipeline, the worker's
			// status not read back yet. Its Execute has the pipeline
			// answered first and runs it as PostgreSQL would then:
			// adversary rounds 4 and 5.)
			if ts := ss.txStatus(); ts == 'T' || ts == 'I' && (ss.txBegin != "" || ss.batchTxn) && !ss.implicitTxn {
				return bridgeTwoPhase
			}
		} else if ss.txStatus() == 'I' {
			return bridgeTwoPhase
		}
	case !st.cls.ddl && parseSignalCall(text) != nil:
		return bridgeSignal
	case st.cls.ddl && dropDatabase(text) != "":
		return bridgeDDL // the pools' idle connections to it close first
	case st.cls.maint && !st.cls.ddl && len(snap.Tables) > 0:
		if m, err := shards.PlanMaintenance(text, snap); m != nil || err != nil {
			return bridgeDDL // VACUUM, ANALYZE (runMaintenance)
		}
	case st.cls.ddl && !st.cls.temp:
		active := 0
		for _, n := range snap.Nodes {
			if n.Active {
				active++
			}
		}
		if active >= 2 {
			if other, err := shards.ClassifyObjectDDL(text, snap); other != "" || err != nil {
				return bridgeDDL
			}
		}
		if len(snap.Tables) > 0 {
			tables, err := shards.DDLTables(context.Background(), nil, text, snap)
			var exists *shards.TableExistsError
			if len(tables) > 0 || errors.Is(err, shards.ErrIndexLookup) || errors.As(err, &exists) {
				return bridgeDDL
			}
		}
	case startsWithWord(text, "declare"):
		if ss.pinned != "" {
			return bridgeNone
		}
		query := cursorQuery(text)
		if query == "" {
			return bridgeNone
		}
		p, _, err := ss.planSimple(query)
		if err != nil && pgerr.Flatten(err).Code == pgerr.FeatureNotSupported || err == nil && p.Kind() != planner.KindDefault {
			return bridgeDeclare
		}
	case len(ss.cursors) > 0 && (startsWithWord(text, "fetch") || startsWithWord(text, "move") || startsWithWord(text, "close")):
		// (CLOSE ALL closes the coordinator's cursors too.)
		if name := bridgeCursorName(text); ss.cursors[name] != nil || name == "" && startsWithWord(text, "close") {
			return bridgeCursor
		}
	case !st.cls.ddl && mayRunRowsFirst(text) && ss.plansRowsFirst(st):
		return bridgeRowsFirst
	case planner.MentionsFunction(text):
		tree, err := pg_query.Parse(text)
		if err != nil || len(tree.Stmts) != 1 {
			return bridgeNone
		}
		if name := catalogCall(tree.Stmts[0].Stmt); name != "" {
			return bridgeFunc
		}
	}
	return bridgeNone
}

// bridgeCursorName is the cursor a FETCH, MOVE or CLOSE names.
func bridgeCursorName(text string) string {
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) != 1 {
		return ""
	}
	n := tree.Stmts[0].Stmt
	if f := n.GetFetchStmt(); f != nil {
		return f.Portalname
	}
	if c := n.GetClosePortalStmt(); c != nil {
		return c.Portalname
	}
	return ""
}

// catalogCall is the Citus function a SELECT calls, or "".
func catalogCall(n *pg_query.Node) string {
	if fc := planner.CatalogCall(n); fc != nil {
		return fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()
	}
	return ""
}

// functionColumns are the result columns of a Citus function the
// coordinator runs (runFunction): their names and type OIDs.
func functionColumns(name string) ([]string, bool) {
	switch name {
	case "citus_get_active_worker_nodes", "master_get_active_worker_nodes":
		return []string{"node_name", "node_port"}, true
	case "citus_add_node", "citus_remove_node", "create_distributed_table", "create_reference_table", "undistribute_table",
		"citus_move_shard_placement", "master_move_shard_placement", "rebalance_table_shards", "citus_drain_node",
		"citus_set_node_property", "citus_split_shard_by_split_points":
		return []string{name}, true
	case "get_rebalance_table_shards_plan":
		return []string{"table_name", "shardid", "shard_size", "sourcename", "sourceport", "targetname", "targetport"}, true
	case "citus_rebalance_start", "citus_rebalance_stop", "citus_rebalance_wait":
		return []string{name}, true
	case "citus_rebalance_status":
		return []string{"job_id", "state", "job_type", "description", "started_at", "finished_at", "details"}, true
	}
	return nil, false
}

// functionTypes are functionColumns' types.
func functionTypes(name string) []uint32 {
	switch name {
	case "citus_get_active_worker_nodes", "master_get_active_worker_nodes":
		return []uint32{oidText, oidInt8}
	case "citus_add_node":
		return []uint32{oidInt4}
	case "get_rebalance_table_shards_plan":
		return []uint32{oidText, oidInt8, oidInt8, oidText, oidInt4, oidText, oidInt4}
	case "citus_rebalance_start":
		return []uint32{oidInt8}
	case "citus_rebalance_status":
		return []uint32{oidInt8, oidText, oidText, oidText, oidTimestamptz, oidTimestamptz, oidJSONB}
	}
	return []uint32{oidVoid}
}

// rowDescription is the RowDescription body writeRows sends.
func rowDescription(cols []string, oids []uint32) []byte {
	rd := pgproto3.RowDescription{}
	for i, c := range cols {
		rd.Fields = append(rd.Fields, pgproto3.FieldDescription{Name: []byte(c), DataTypeOID: oids[i],
			DataTypeSize: -1, TypeModifier: -1})
	}
	b, _ := rd.Encode(nil)
	return b[5:]
}

// bridgeRowDesc is the RowDescription body of a bridged statement's
// result, nil for none.
func (ss *session) bridgeRowDesc(st *Statement, kind uint8) []byte {
	switch kind {
	case bridgeFunc:
		tree, err := pg_query.Parse(st.Query)
		if err != nil || len(tree.Stmts) != 1 {
			return nil
		}
		name := catalogCall(tree.Stmts[0].Stmt)
		cols, _ := functionColumns(name)
		return rowDescription(cols, functionTypes(name))
	case bridgeSignal:
		if call := parseSignalCall(st.Query); call != nil {
			return signalRowDesc(call.column)
		}
	case bridgeCursor:
		if !startsWithWord(st.Query, "fetch") {
			return nil
		}
		if cur := ss.cursors[bridgeCursorName(st.Query)]; cur != nil {
			return cur.rowDesc
		}
	}
	return nil
}

// bridgeParams is the number of parameters a bridged statement takes (the
// highest $n, or the Parse's declared types if more) and their types
// (declared, or text).
func bridgeParams(st *Statement, kind uint8) []uint32 {
	oids := paramOIDs(st.paramTail)
	n := len(oids)
	for _, r := range paramRefs(st.Query) {
		n = max(n, r.n)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = oidText
		if i < len(oids) && oids[i] != 0 {
			out[i] = oids[i]
		}
	}
	undeclared := func(n int32) bool {
		return n >= 1 && int(n) <= len(out) && (int(n) > len(oids) || oids[n-1] == 0)
	}
	tree, err := pg_query.Parse(st.Query)
	if err != nil || len(tree.Stmts) != 1 {
		return out
	}
	// As PostgreSQL infers them: a parameter cast to a built-in type
	// ($1::int) is of that type; a function's arguments of its
	// parameters' types.
	planner.Walk(tree.Stmts[0].Stmt, func(m proto.Message) {
		tc, ok := m.(*pg_query.TypeCast)
		if !ok {
			return
		}
		if p := tc.Arg.GetParamRef(); p != nil && undeclared(p.Number) {
			if oid := castOID(tc.TypeName); oid != 0 {
				out[p.Number-1] = oid
			}
		}
	})
	var fc *pg_query.FuncCall
	if sel := tree.Stmts[0].Stmt.GetSelectStmt(); sel != nil && len(sel.TargetList) == 1 {
		fc = sel.TargetList[0].GetResTarget().GetVal().GetFuncCall()
	}
	if fc == nil {
		return out
	}
	name := fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()
	for i, a := range fc.Args {
		arg := ""
		if na := a.GetNamedArgExpr(); na != nil {
			arg, a = na.Name, na.Arg
		}
		if p := a.GetParamRef(); p != nil && undeclared(p.Number) {
			if oid := argOID(name, i, arg); oid != 0 {
				out[p.Number-1] = oid
			}
		}
	}
	return out
}

// castTypes are the built-in types a parameter's cast may name, by name.
var castTypes = map[string][2]uint32{ // the type, its array
	"int4": {23, 1007}, "integer": {23, 1007}, "int": {23, 1007}, "int8": {20, 1016}, "bigint": {20, 1016},
	"int2": {21, 1005}, "smallint": {21, 1005}, "text": {25, 1009}, "varchar": {1043, 1015}, "bool": {16, 1000},
	"boolean": {16, 1000}, "numeric": {1700, 1231}, "float8": {701, 1022}, "float4": {700, 1021}, "uuid": {2950, 2951},
	"date": {1082, 1182}, "timestamp": {1114, 1115}, "timestamptz": {1184, 1185}, "json": {114, 199}, "jsonb": {3802, 3807},
	"regclass": {2205, 2210}, "oid": {26, 1028}, "bytea": {17, 1001},
}

// castOID is the OID of a cast's built-in type, or 0.
func castOID(tn *pg_query.TypeName) uint32 {
	if tn == nil || len(tn.Names) == 0 || len(tn.ArrayBounds) > 1 {
		return 0
	}
	name := tn.Names[len(tn.Names)-1].GetString_().GetSval()
	if len(tn.Names) == 2 && tn.Names[0].GetString_().GetSval() != "pg_catalog" {
		return 0
	}
	t, ok := castTypes[name]
	if !ok {
		return 0
	}
	if len(tn.ArrayBounds) == 1 {
		return t[1]
	}
	return t[0]
}

// argOID is the type of argument i (or the one named name) of a function
// the coordinator runs itself: int4 for the numbers, text for the rest
// (names of tables and columns).
func argOID(fn string, i int, name string) uint32 {
	switch fn {
	case "pg_terminate_backend", "pg_cancel_backend":
		if t := signalTypes(fn); name == "" && i < len(t) {
			return t[i]
		}
		if name == "timeout" {
			return oidInt8
		}
		if name == "pid" {
			return oidInt4
		}
		return 0
	case "create_distributed_table":
		if name == "shard_count" {
			return oidInt4
		}
	case "citus_add_node", "citus_remove_node":
		if i == 1 && name == "" || name == "nodeport" {
			return oidInt4
		}
	}
	if _, ok := functionColumns(fn); ok {
		return oidText
	}
	return 0
}

// paramRef is a $n in a statement's text.
type paramRef struct{ n, at, end int }

// paramRefs are the parameter references of sql, in text order.
func paramRefs(sql string) []paramRef {
	sr, err := pg_query.Scan(sql)
	if err != nil {
		return nil
	}
	var refs []paramRef
	for _, t := range sr.Tokens {
		if t.Token == pg_query.Token_PARAM {
			n, err := strconv.Atoi(sql[t.Start+1 : t.End])
			if err == nil {
				refs = append(refs, paramRef{n: n, at: int(t.Start), end: int(t.End)})
			}
		}
	}
	return refs
}

// bridgeText writes the Bind's values into the statement as constants.
func bridgeText(st *Statement, name string, kind uint8, params []byte) (string, error) {
	formats, values, ok := bindValues(params)
	if !ok {
		return "", pgerr.New(pgerr.ProtocolViolation, "invalid Bind message")
	}
	types := bridgeParams(st, kind)
	if len(values) != len(types) {
		return "", pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d",
			len(values), name, len(types))
	}
	refs := paramRefs(st.Query)
	if len(refs) == 0 {
		return st.Query, nil
	}
	declared := paramOIDs(st.paramTail)
	var b strings.Builder
	last := 0
	for _, r := range refs {
		b.WriteString(st.Query[last:r.at])
		last = r.end
		i := r.n - 1
		if i < 0 || i >= len(values) {
			return "", pgerr.New("42P02", "there is no parameter $%d", r.n)
		}
		f := int16(0)
		if len(formats) == 1 {
			f = formats[0]
		} else if i < len(formats) {
			f = formats[i]
		}
		oid := uint32(0) // undeclared: inferred where it stands, as a parameter's type is
		if i < len(declared) {
			oid = declared[i]
		}
		lit, err := constant(values[i], f, oid, types[i])
		if err != nil {
			return "", err
		}
		b.WriteString(lit)
	}
	b.WriteString(st.Query[last:])
	return b.String(), nil
}

// builtinTypeNames name the types a constant can be cast to by OID.
var builtinTypeNames = map[uint32]string{
	16: "boolean", 20: "bigint", 21: "smallint", 23: "integer", 25: "text", 26: "oid", 700: "real",
	701: "double precision", 1043: "varchar", 1700: "numeric", 2205: "regclass", 18: "\"char\"", 19: "name",
	1082: "date", 1114: "timestamp", 1184: "timestamptz", 2950: "uuid", 114: "json", 3802: "jsonb",
}

// constant is a parameter's value as a SQL constant: quoted text, cast to
// its declared type when that is a built-in one (an undeclared type is
// inferred from where it stands, as PostgreSQL infers a parameter's).
func constant(v []byte, format int16, oid, described uint32) (string, error) {
	if v == nil {
		if name, ok := builtinTypeNames[oid]; ok {
			return "NULL::" + name, nil
		}
		return "NULL", nil
	}
	text := string(v)
	if format == 1 {
		var ok bool
		if text, ok = binaryText(v, described); !ok {
			return "", pgerr.New(pgerr.FeatureNotSupported,
				"a binary parameter of type %d for a statement the coordinator runs itself is not supported", described).
				WithHint("Send the parameter in text format.")
		}
	}
	q := quoteLiteral(text)
	if name, ok := builtinTypeNames[oid]; ok {
		return q + "::" + name, nil
	}
	return q, nil
}

// binaryText is a binary parameter's text, for the types it can tell.
func binaryText(v []byte, oid uint32) (string, bool) {
	switch oid {
	case 25, 1043, 19, 0:
		return string(v), oid != 0
	case 16:
		if len(v) == 1 {
			return strconv.FormatBool(v[0] != 0), true
		}
	case 21:
		if len(v) == 2 {
			return strconv.Itoa(int(int16(binary.BigEndian.Uint16(v)))), true
		}
	case 23:
		if len(v) == 4 {
			return strconv.Itoa(int(int32(binary.BigEndian.Uint32(v)))), true
		}
	case 20:
		if len(v) == 8 {
			return strconv.FormatInt(int64(binary.BigEndian.Uint64(v)), 10), true
		}
	case 26:
		if len(v) == 4 {
			return strconv.FormatUint(uint64(binary.BigEndian.Uint32(v)), 10), true
		}
	case 1007, 1016: // int4[], int8[] of one dimension (pgx's []int32 of process IDs)
		return intArrayText(v, oid)
	}
	return "", false
}

// intArrayText is a binary int4[] or int8[] of at most one dimension as
// text ('{1,2,NULL}').
func intArrayText(v []byte, oid uint32) (string, bool) {
	if len(v) < 12 {
		return "", false
	}
	ndim := int32(binary.BigEndian.Uint32(v))
	elem := binary.BigEndian.Uint32(v[8:])
	size := 4
	if oid == 1016 {
		size = 8
	}
	if ndim == 0 {
		return "{}", true
	}
	if ndim != 1 || len(v) < 20 || (size == 4 && elem != 23) || (size == 8 && elem != 20) {
		return "", false
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	v = v[20:]
	parts := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if len(v) < 4 {
			return "", false
		}
		l := int32(binary.BigEndian.Uint32(v))
		v = v[4:]
		switch {
		case l == -1:
			parts = append(parts, "NULL")
		case int(l) == size && len(v) >= size:
			if size == 4 {
				parts = append(parts, strconv.Itoa(int(int32(binary.BigEndian.Uint32(v)))))
			} else {
				parts = append(parts, strconv.FormatInt(int64(binary.BigEndian.Uint64(v)), 10))
			}
			v = v[size:]
		default:
			return "", false
		}
	}
	return "{" + strings.Join(parts, ",") + "}", true
}

// errPortalExists is PostgreSQL's answer to a Bind of a named portal that
// exists.
func errPortalExists(portal []byte) error {
	return pgerr.New("42P03", "cursor \"%s\" already exists", portal)
}

// bridgeBind answers Bind of a bridged statement (name: the client's).
func (ss *session) bridgeBind(portal, name string, st *Statement, kind uint8, params []byte) {
	_, results, ok := bindResults(params)
	if !ok {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "invalid Bind message"))
		return
	}
	if ss.txStatus() == 'E' && !st.cls.mayEndFailed() {
		ss.synthError(errFailedTxn)
		return
	}
	if portal != "" && (ss.portals[portal] != nil || ss.scatterPortals[portal] != nil || ss.cursors[portal] != nil) {
		// (One of the bridge's own is refused in bind.)
		ss.synthError(errPortalExists([]byte(portal)))
		return
	}
	var text string
	var err error
	var rowDesc []byte
	if kind == bridgeRowsFirst {
		var d *rowsDesc
		if d, err = ss.rowsFirstDesc(st); err == nil {
			rowDesc = d.rowDesc
			if err = ss.rowsFirstResults(d, results); err == nil {
				text, err = ss.rowsFirstText(st, name, d, params)
			}
		}
	} else {
		rowDesc = ss.bridgeRowDesc(st, kind)
		text, err = bridgeText(st, name, kind, params)
	}
	if err != nil {
		ss.synthError(err)
		return
	}
	if kind == bridgeCursor && binaryResults(results) {
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"FETCH in binary format from a cursor over distributed or reference tables is not supported").
			WithHint("Fetch in text format."))
		return
	}
	if ss.bridged == nil {
		ss.bridged = map[string]*bridgePortal{}
	}
	ss.bridged[portal] = &bridgePortal{st: st, kind: kind, text: text, results: append([]byte(nil), results...), name: portal,
		returns: rowDesc != nil || kind == bridgeCursor && startsWithWord(st.Query, "fetch"),
		inBlock: !ss.implicitTxn && (ss.inTxn() || ss.txBegin != "" || ss.pendingBegin != ""), depth: len(ss.savepoints)}
	delete(ss.portals, portal)
	ss.push(expect{kind: eSynth, synth: msgBindComplete})
}

// binaryResults reports whether result formats ask for binary.
func binaryResults(results []byte) bool {
	if len(results) < 2 {
		return false
	}
	n := int(binary.BigEndian.Uint16(results))
	for i := 0; i < n && 2+2*i+2 <= len(results); i++ {
		if binary.BigEndian.Uint16(results[2+2*i:]) != 0 {
			return true
		}
	}
	return false
}

// bridgeDescribe answers Describe of a bridged statement (params: with
// its ParameterDescription) or portal (results: the Bind's formats).
func (ss *session) bridgeDescribe(st *Statement, kind uint8, params bool, results []byte) {
	if ss.txStatus() == 'E' {
		ss.synthError(errFailedTxn) // (as PostgreSQL describes nothing there)
		return
	}
	var b []byte
	var paramTypes []uint32
	var rd []byte
	if kind == bridgeRowsFirst {
		d, err := ss.rowsFirstDesc(st)
		if err != nil {
			ss.synthError(err)
			return
		}
		paramTypes, rd = d.params, d.rowDesc
	} else {
		paramTypes, rd = bridgeParams(st, kind), ss.bridgeRowDesc(st, kind)
	}
	if params {
		pd := pgproto3.ParameterDescription{ParameterOIDs: paramTypes}
		b, _ = pd.Encode(b)
	}
	if rd != nil {
		if results != nil {
			rd = withFormats(rd, results)
		}
		b = wire.AppendFrame(b, 'T', rd)
	} else {
		b = append(b, msgNoData...)
	}
	ss.push(expect{kind: eSynth, synth: b})
}

var errBridgeMore = pgerr.New(pgerr.FeatureNotSupported,
	"this statement, which the coordinator runs on every worker and which commits on its own outside a transaction block, is not supported with other statements before the same Sync").
	WithHint("Send Sync right after it (or before it), or run it inside BEGIN ... COMMIT.")

// errBridgeSignalMore is errBridgeMore for a signal call of a session
// (signal.go), which the coordinator runs itself.
var errBridgeSignalMore = pgerr.New(pgerr.FeatureNotSupported,
	"pg_cancel_backend or pg_terminate_backend of a pgfleet session, which the coordinator runs itself, is not supported with other statements before the same Sync outside a transaction block").
	WithHint("Send Sync right after it (or before it), or run it inside BEGIN ... COMMIT.")

// bridgeMore is the refusal of bp among other statements before a Sync.
func bridgeMore(bp *bridgePortal) error {
	switch bp.kind {
	case bridgeSignal:
		return errBridgeSignalMore
	case bridgeRowsFirst:
		return errRowsFirstPipeline
	case bridgeTwoPhase:
		// PostgreSQL's answer after statements that ran in the pipeline.
		name := "COMMIT PREPARED"
		if kind, _, _ := twoPhaseStmt(bp.st.Query); kind == pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED {
			name = "ROLLBACK PREPARED"
		}
		return pgerr.New(pgerr.ActiveSQLTransaction, "%s cannot be executed within a pipeline", name)
	}
	return errBridgeMore
}

// bridgeExecute runs a bridged portal through the simple query path and
// answers as the extended protocol does.
func (ss *session) bridgeExecute(bp *bridgePortal, maxRows int) error {
	if bp.inBlock {
		// A COMMIT, ROLLBACK or ROLLBACK TO earlier in the pipeline
		// ended it: answered first, as PostgreSQL runs them in order.
		if skipped, err := ss.answerBefore(); skipped || err != nil {
			return err
		}
		if ss.bridged[bp.name] != bp {
			ss.synthError(pgerr.New("34000", "portal \"%s\" does not exist", bp.name))
			return nil
		}
	}
	if ss.txStatus() == 'E' {
		ss.synthError(errFailedTxn)
		return nil
	}
	if bp.ran {
		if !bp.returns {
			ss.synthError(pgerr.New("55000", "portal \"%s\" cannot be run", bp.name))
			return nil
		}
		ss.push(expect{kind: eSynth, synth: bp.next(maxRows, false)})
		return nil
	}
	// In a transaction block (its BEGIN maybe sent in this batch, the
	// worker's status not read back yet), or outside one.
	if !ss.inTxn() && (ss.txBegin == "" || ss.implicitTxn) && !bridgedPrepare(bp) {
		if ss.sc != nil && ss.needSync && ss.batchWork {
			ss.synthError(bridgeMore(bp)) // statements of this pipeline ran before it
			return nil
		}
		if bp.kind != bridgeTwoPhase { // (it commits at once on PostgreSQL too, the rest after it)
			more, err := ss.pipelineGoesOn()
			if err != nil {
				return err
			}
			if more {
				ss.synthError(bridgeMore(bp))
				return nil
			}
		}
	}
	if skipped, err := ss.answerBefore(); skipped || err != nil {
		return err
	}
	// Outside a block, a rows-first write whose RETURNING rows the
	// default node turns into binary runs in a block of its own, committed
	// once they are (adversary: a value whose text PostgreSQL cannot read
	// back failed the conversion after the write had committed).
	wrap := bp.kind == bridgeRowsFirst && !ss.inTxn() && ss.txBegin == "" && ss.serverFormatted(bp)
	if wrap {
		out, err := ss.bridgeQuery("BEGIN")
		if err != nil {
			return err
		}
		if e := errorFrame(out); e != nil {
			ss.out = append(ss.out, e...)
			ss.skipping = true
			return nil
		}
	}
	simple, err := ss.bridgeQuery(bp.text)
	if err != nil {
		return err
	}
	results := bp.results
	if bp.kind == bridgeRowsFirst {
		// Columns asked in binary that binaryRow cannot encode: the
		// default node's (checked at the Bind, rowsFirstResults).
		var conv []byte
		var ok bool
		var ferr error
		ran := errorFrame(simple) == nil
		if ran {
			conv, ok, ferr = ss.serverFormats(simple, results)
		}
		if wrap {
			end := "COMMIT"
			if !ran || ferr != nil {
				end = "ROLLBACK"
			}
			out, err := ss.bridgeQuery(end)
			if err != nil {
				return err
			}
			if e := errorFrame(out); e != nil && ran && ferr == nil {
				ss.out = append(ss.out, e...) // COMMIT's error (a deferred constraint) is the answer
				ss.skipping = true
				return nil
			}
			if ferr != nil {
				ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
					"the RETURNING rows of this statement, run as a query first, could not be given in binary (nothing was written): %s", pgerr.Flatten(ferr).Message).
					WithHint("Ask for the RETURNING columns in text format."))
				ss.skipping = true
				return nil
			}
		} else if ferr != nil {
			return ss.formatsLost(ferr)
		}
		if ok {
			simple, results = conv, []byte{0, 0}
		}
	}
	mark := len(ss.out)
	ss.out = append(ss.out, simple...)
	simple = ss.out[mark:]
	answer, failed, cerr := extendedAnswer(simple, results)
	ss.out = ss.out[:mark]
	if cerr != nil {
		ss.synthError(cerr)
		return nil
	}
	if failed {
		ss.out = append(ss.out, answer...)
		ss.skipping = true // the rest of the pipeline, to its Sync
		return nil
	}
	// The rows wait in the portal for Executes with a row limit.
	bp.ran = true
	for typ, body := range frames(answer) {
		switch typ {
		case 'D':
			bp.rows = wire.AppendFrame(bp.rows, typ, body)
		case 'C':
			bp.tag = strings.TrimRight(string(body), "\x00")
		default:
			ss.out = wire.AppendFrame(ss.out, typ, body)
		}
	}
	ss.out = append(ss.out, bp.next(maxRows, true)...)
	return nil
}

// bridgedPrepare: bp is a client's PREPARE TRANSACTION, which runs after
// the pipeline's answers whatever came before it (outside a block,
// PostgreSQL's warning and ROLLBACK, the statements before it kept).
func bridgedPrepare(bp *bridgePortal) bool {
	if bp.kind != bridgeTwoPhase {
		return false
	}
	kind, _, _ := twoPhaseStmt(bp.st.Query)
	return kind == pg_query.TransactionStmtKind_TRANS_STMT_PREPARE
}

// bridgeQuery runs sql through the simple query path for a bridged
// Execute and returns its answer (taken off the client's output).
func (ss *session) bridgeQuery(sql string) ([]byte, error) {
	unnamed, hadUnnamed := ss.stmts[""]
	mark := len(ss.out)
	ss.bridging = true
	err := ss.simpleQuery(append([]byte(sql), 0))
	ss.bridging = false
	if hadUnnamed {
		ss.stmts[""] = unnamed // a simple Query would have dropped it
	}
	if err != nil {
		return nil, err // (what it answered stays for the client)
	}
	out := append([]byte(nil), ss.out[mark:]...)
	ss.out = ss.out[:mark]
	return out, nil
}

// errorFrame is the first ErrorResponse frame of answer, nil if none.
func errorFrame(answer []byte) []byte {
	for typ, body := range frames(answer) {
		if typ == 'E' {
			return wire.AppendFrame(nil, typ, body)
		}
	}
	return nil
}

// answerBefore has the worker answer what the pipeline sent it before a
// bridged Execute. skipped: a message of it failed there, so the Execute
// is skipped with the rest, to the Sync, as PostgreSQL skips it
// (adversary finding: DDL, a holdable cursor's FETCH, pg_terminate_backend
// ran after the error).
func (ss *session) answerBefore() (skipped bool, err error) {
	errs := ss.workerErrs
	if err := ss.answerQueued(); err != nil {
		return false, err
	}
	if ss.workerErrs != errs {
		ss.skipping = true
		return true, nil
	}
	return false, nil
}

// next is a bridged portal's answer to an Execute with a row limit (0:
// none), as PostgreSQL answers one of a portal whose rows it holds: its
// next rows, then PortalSuspended when the limit was reached (whether rows
// are left or not), else CommandComplete: the statement's own tag when one
// Execute took it all, else the verb and this Execute's count (INSERT 0 n).
func (bp *bridgePortal) next(maxRows int, first bool) []byte {
	var out []byte
	n := 0
	for len(bp.rows) >= 5 && (maxRows <= 0 || n < maxRows) {
		l := 1 + int(binary.BigEndian.Uint32(bp.rows[1:5]))
		out = append(out, bp.rows[:l]...)
		bp.rows = bp.rows[l:]
		n++
	}
	if maxRows > 0 && n == maxRows {
		return append(out, 's', 0, 0, 0, 4)
	}
	tag := bp.tag
	if !first {
		switch verb, _, _ := strings.Cut(bp.tag, " "); verb {
		case "FETCH", "SELECT", "MOVE", "UPDATE", "DELETE", "MERGE":
			tag = verb + " " + strconv.Itoa(n)
		case "INSERT":
			tag = "INSERT 0 " + strconv.Itoa(n)
		}
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	out, _ = cc.Encode(out)
	return out
}

// rowDescOIDs are the column types of a RowDescription body (nil if it
// does not read).
func rowDescOIDs(body []byte) []uint32 {
	var rd pgproto3.RowDescription
	if rd.Decode(body) != nil {
		return nil
	}
	oids := make([]uint32, len(rd.Fields))
	for i, f := range rd.Fields {
		oids[i] = f.DataTypeOID
	}
	return oids
}

// extendedAnswer turns a simple query's answer into an Execute's: without
// RowDescription and ReadyForQuery, DataRows in the result formats asked
// for. failed: it holds an error.
func extendedAnswer(simple, results []byte) (out []byte, failed bool, err error) {
	var oids []uint32
	for typ, body := range frames(simple) {
		switch typ {
		case 'T':
			oids = rowDescOIDs(body)
		case 'Z':
		case 'D':
			if binaryResults(results) {
				b, cerr := binaryRow(body, oids, results)
				if cerr != nil {
					return nil, false, cerr
				}
				body = b
			}
			out = wire.AppendFrame(out, 'D', body)
		case 'E':
			failed = true
			out = wire.AppendFrame(out, typ, body)
		default:
			out = wire.AppendFrame(out, typ, body)
		}
	}
	return out, failed, nil
}

// binaryRow re-encodes a text DataRow of a Citus function's result in the
// binary formats asked for.
func binaryRow(body []byte, oids []uint32, results []byte) ([]byte, error) {
	var dr pgproto3.DataRow
	if err := dr.Decode(body); err != nil {
		return nil, err
	}
	for i, v := range dr.Values {
		if resultFormat(results, i) == 0 || v == nil || i >= len(oids) {
			continue
		}
		switch oids[i] {
		case oidVoid:
			dr.Values[i] = []byte{}
		case oidBool:
			dr.Values[i] = []byte{0}
			if string(v) == "t" {
				dr.Values[i] = []byte{1}
			}
		case oidText:
		case oidInt4, oidInt8:
			x, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return nil, err
			}
			if oids[i] == oidInt4 {
				dr.Values[i] = binary.BigEndian.AppendUint32(nil, uint32(x))
			} else {
				dr.Values[i] = binary.BigEndian.AppendUint64(nil, uint64(x))
			}
		default:
			return nil, pgerr.New(pgerr.FeatureNotSupported, "binary format for type %d in this result is not supported", oids[i]).
				WithHint("Ask for text format.")
		}
	}
	b, _ := dr.Encode(nil)
	return b[5:], nil
}

// bridgeClose forgets a bridged portal.
func (ss *session) bridgeClose(portal string) bool {
	if _, ok := ss.bridged[portal]; !ok {
		return false
	}
	delete(ss.bridged, portal)
	return true
}

// bridgeNow is st's bridge kind at a Bind or Describe: decided again for
// a statement that may be one (the catalog or the session's cursors may
// have changed since its Parse: a table distributed, a cursor declared
// over one), without cost for the others.
func (ss *session) bridgeNow(st *Statement) uint8 {
	switch st.bridgeable.Load() {
	case 1:
		return bridgeNone
	case 0:
		q := st.Query
		may := st.cls.ddl || st.cls.maint || st.cls.twoPhase || st.cls.fetch || startsWithWord(q, "declare") || startsWithWord(q, "move") ||
			startsWithWord(q, "close") || planner.MentionsFunction(q) || planner.ContainsFold(q, "_backend") || mayRunRowsFirst(q)
		v := int32(1)
		if may {
			v = 2
		}
		st.bridgeable.Store(v)
		if !may {
			return bridgeNone
		}
	}
	return ss.bridgeKind(st)
}

// dropDatabase is the database DROP DATABASE names, or "".
func dropDatabase(sql string) string {
	if !startsWithWord(sql, "drop") || !planner.ContainsFold(sql, "database") {
		return ""
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return ""
	}
	if d := tree.Stmts[0].Stmt.GetDropdbStmt(); d != nil {
		return d.Dbname
	}
	return ""
}

// closeIdle closes the pools' idle connections to database db, on every
// worker.
func (s *Server) closeIdle(db string) {
	s.mu.Lock()
	var pools []*pooling.Pool
	for k, p := range s.pools {
		if k.database == db {
			pools = append(pools, p)
		}
	}
	s.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
}

// executeMaxRows is an Execute message's row limit (0: none).
func executeMaxRows(body []byte) int {
	if _, rest, ok := wire.CBytes(body); ok && len(rest) >= 4 {
		return int(int32(binary.BigEndian.Uint32(rest)))
	}
	return 0
}
