package coordinator

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Hashing a distribution value as PostgreSQL stores it (see
// planner/distvalue.go). The router hashes the forms it reads exactly as
// PostgreSQL's input and cast functions do; for every other form it asks
// PostgreSQL: SELECT hashfn(CAST((expr) AS column type)) on a pooled
// connection in the session's settings, one round trip on a rare path.
// When PostgreSQL cannot compute the value (the cast fails), any shard
// gives PostgreSQL's answer: the statement matches no row, or fails the
// same way on the worker.

// distInput is a distribution value as it reaches the router: a Bind
// parameter (oid, format, bytes), a lifted literal of a simple query, or
// the plan's constant.
type distInput struct {
	src    string // the value's type: metadata.TypeOfOID, or a literal's
	val    []byte
	binary bool
	isNull bool
	// A literal of a simple query: spliced into the plan's Expr to ask.
	lit *literal
	// A Bind parameter: bound to the asking statement's $1.
	oid    uint32
	format int16
}

// anyShard is the hash routed to when no row can match or the worker
// will fail the statement itself.
const anyShard int32 = 0

// errNotComparable: a parameter's declared type compares with the column
// by an equality that several shards' rows can satisfy.
func errNotComparable(p *planner.Plan, src string, oid uint32) error {
	if src == "" {
		src = "with type OID " + strconv.FormatUint(uint64(oid), 10)
	} else {
		src = "of type " + src
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"a parameter %s compared with the distribution column of %s (%s) can match rows of several shards", src, p.DistTable, p.DistType).
		WithHint("Send the parameter with the column's type %s, or with its type unspecified.", p.DistType)
}

// litSource is the type PostgreSQL gives a literal of a simple query.
func litSource(token string) string {
	if strings.HasPrefix(token, "'") {
		return "unknown"
	}
	return numberSource(token)
}

func numberSource(s string) string {
	if strings.ContainsAny(s, ".eE") {
		return "numeric"
	}
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return "numeric"
	}
	return "int8"
}

// constInput is the input for a plan's constant value.
func constInput(v *planner.Value) distInput {
	src := "unknown"
	switch v.Lit {
	case planner.LitInteger:
		src = numberSource(v.Const)
	case planner.LitNumeric:
		src = "numeric"
	}
	return distInput{src: src, val: []byte(v.Const)}
}

// paramType is parameter k's (0-based) declared type OID, from a Parse
// message's tail (count, OIDs); 0 when not declared.
func paramType(tail []byte, k int) uint32 {
	if len(tail) < 2 || k >= int(binary.BigEndian.Uint16(tail)) || len(tail) < 2+4*(k+1) {
		return 0
	}
	return binary.BigEndian.Uint32(tail[2+4*k:])
}

// fastHash hashes the value where the router reads it as PostgreSQL does.
// ask is true when PostgreSQL must compute it.
func fastHash(p *planner.Plan, v *planner.Value, in distInput, foreignEnc bool) (h int32, ask bool, err error) {
	if in.isNull {
		return anyShard, false, nil // matches no row; an INSERT fails on the worker
	}
	col := p.DistType
	if v.Computed {
		return 0, true, nil
	}
	s := in.src
	if s == "unspecified" || s == "unknown" {
		s = col
		if v.Cast != "" {
			s = v.Cast
		}
	}
	switch {
	case metadata.IsInteger(col):
		if !metadata.IsInteger(s) {
			return 0, true, nil
		}
		var x int64
		if in.binary {
			switch {
			case s == "int2" || s == "smallint":
				if len(in.val) != 2 {
					return anyShard, false, nil // the worker reports 22P03
				}
				x = int64(int16(binary.BigEndian.Uint16(in.val)))
			case s == "int4" || s == "integer" || s == "int":
				if len(in.val) != 4 {
					return anyShard, false, nil
				}
				x = int64(int32(binary.BigEndian.Uint32(in.val)))
			default:
				if len(in.val) != 8 {
					return anyShard, false, nil
				}
				x = int64(binary.BigEndian.Uint64(in.val))
			}
		} else if x, err = metadata.ParseInt(s, in.val); err != nil {
			return 0, false, err
		}
		if v.Cast != "" {
			if lo, hi := metadata.IntRange(v.Cast); x < lo || x > hi {
				return anyShard, false, nil // the cast fails on the worker
			}
		}
		if lo, hi := metadata.IntRange(col); x < lo || x > hi {
			return anyShard, false, nil // no row matches, or the INSERT fails
		}
		return metadata.HashInt8(x), false, nil
	case metadata.IsText(col) || metadata.IsBPChar(col):
		if !metadata.IsText(s) && !metadata.IsBPChar(s) {
			return 0, true, nil
		}
		if foreignEnc && !ascii(in.val) {
			return 0, true, nil // the worker converts it to its encoding
		}
		bp := metadata.IsBPChar(s) || metadata.IsBPChar(v.Cast)
		if bp && !v.Assign && !metadata.Comparable(col, "bpchar") {
			return 0, false, errNotComparable(p, "bpchar", in.oid)
		}
		if bp || metadata.IsBPChar(col) {
			return metadata.HashBPChar(in.val), false, nil
		}
		if v.Assign && col == "varchar" && len(in.val) > 0 && in.val[len(in.val)-1] == ' ' {
			return 0, true, nil // varchar(n) may cut trailing spaces
		}
		return metadata.HashText(in.val), false, nil
	case metadata.IsUUID(col):
		if !metadata.IsUUID(s) {
			return 0, true, nil
		}
		if in.binary {
			if len(in.val) != 16 {
				return anyShard, false, nil
			}
			return metadata.HashUUID([16]byte(in.val)), false, nil
		}
		u, err := metadata.ParseUUID(string(in.val))
		if err != nil {
			return 0, false, err
		}
		return metadata.HashUUID(u), false, nil
	}
	return 0, false, pgerr.New(pgerr.FeatureNotSupported, "pgfleet cannot hash values of type %s", col)
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// distHash hashes a router plan's distribution value (or one InsertSplit
// row's), asking PostgreSQL where it must.
func (ss *session) distHash(p *planner.Plan, v *planner.Value, in distInput) (int32, error) {
	h, ask, err := fastHash(p, v, in, ss.foreignEnc)
	if !ask {
		return h, err
	}
	if !v.Assign && !v.Computed && v.Cast == "" && in.lit == nil && in.src != "unspecified" && in.src != "unknown" {
		// A parameter of another declared type compared with the column
		// as it is: the equality must still be the column's (numeric for
		// integers, text for text, ...). A cast decides the type itself,
		// and the planner checked it.
		if !metadata.Comparable(p.DistType, in.src) || in.src == "" {
			return 0, errNotComparable(p, in.src, in.oid)
		}
	}
	return ss.askHash(p, v, in)
}

// askHash has PostgreSQL compute the value and its hash.
func (ss *session) askHash(p *planner.Plan, v *planner.Value, in distInput) (int32, error) {
	if ss.inTxn() && (ss.txSet || len(ss.pending) > 0) {
		return 0, pgerr.New(pgerr.FeatureNotSupported,
			"the distribution value %s needs PostgreSQL to compute it, which is not supported after SET in a transaction block", v.Expr).
			WithHint("Write the value as a plain constant or parameter of the column's type %s.", p.DistType)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	def := ss.srv.defaultNode.Load()
	var sc *pooling.ServerConn
	release := func(*pooling.ServerConn) {}
	if ss.settingsUnknown {
		// User code changed settings pgfleet cannot follow
		// (set_config() in a function or DO block): only the session's
		// own connection computes the value as PostgreSQL would.
		if ss.sc == nil || ss.node != def || ss.sc.TxStatus != 'I' || ss.needSync || ss.qhead < len(ss.queue) {
			return 0, pgerr.New(pgerr.FeatureNotSupported,
				"the distribution value %s needs PostgreSQL to compute it, which is not supported after a function changed the session's settings", v.Expr).
				WithHint("Change settings with SET, or write the value as a plain constant or parameter of the column's type %s.", p.DistType)
		}
		sc = ss.sc
	} else {
		pool, err := ss.poolFor(def)
		if err != nil {
			return 0, err
		}
		if sc, err = ss.checkout(ctx, pool); err != nil {
			return 0, err
		}
		release = pool.Release
	}
	var err error
	typ := p.DistType
	if v.Assign {
		// An INSERT stores the value with the column's type modifier.
		if typ, err = ss.srv.columnType(sc, p.DistTable); err != nil {
			release(sc)
			return 0, err
		}
	}
	expr := v.Expr
	parse := pgproto3.Parse{}
	bind := pgproto3.Bind{ResultFormatCodes: []int16{1}}
	switch {
	case in.lit != nil:
		expr, _ = spliceFrom(expr, []literal{*in.lit}, 1)
	case v.Param > 0:
		parse.ParameterOIDs = []uint32{in.oid}
		bind.ParameterFormatCodes = []int16{in.format}
		if in.isNull {
			bind.Parameters = [][]byte{nil}
		} else {
			bind.Parameters = [][]byte{in.val}
		}
	}
	parse.Query = "SELECT pg_catalog." + metadata.HashFunction(p.DistType) + "(CAST((" + expr + ") AS " + typ + "))"
	b := sc.Buf()
	b, _ = parse.Encode(b)
	b, _ = bind.Encode(b)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		release(sc)
		return 0, lostWorker(sc.Addr, err)
	}
	h, failed := anyShard, false
	for {
		f, err := sc.Next()
		if err != nil {
			release(sc)
			return 0, lostWorker(sc.Addr, err)
		}
		switch f.Type {
		case 'D':
			var dr pgproto3.DataRow
			if dr.Decode(f.Body) == nil && len(dr.Values) == 1 && len(dr.Values[0]) == 4 {
				h = int32(binary.BigEndian.Uint32(dr.Values[0]))
			}
		case 'E':
			failed = true
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			release(sc)
			if failed {
				return anyShard, nil // the worker gives PostgreSQL's answer
			}
			return h, nil
		}
	}
}

// columnTypes caches each distribution column's type with its modifier
// (format_type), by table, for the catalog version it was read under.
type columnTypes struct {
	mu sync.Mutex
	m  map[string]string
}

// columnType is the distribution column's type as an INSERT stores it
// ("character varying(4)"), read from the worker once per catalog version.
func (s *Server) columnType(sc *pooling.ServerConn, table string) (string, error) {
	snap := s.catalog.Load()
	key := strconv.FormatInt(snap.Version, 10) + "\x00" + table
	s.colTypes.mu.Lock()
	t, ok := s.colTypes.m[key]
	s.colTypes.mu.Unlock()
	if ok {
		return t, nil
	}
	tb := snap.Table(table)
	if tb == nil {
		return "", errCatalogMoved
	}
	rows, err := queryText(sc, "SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute WHERE attrelid = pg_catalog.to_regclass("+
		quoteLiteral(table)+") AND attname = "+quoteLiteral(tb.DistColumn)+" AND NOT attisdropped")
	if err != nil {
		return "", err
	}
	t = tb.DistType
	if len(rows) == 1 && rows[0][0] != nil {
		t = *rows[0][0]
	}
	s.colTypes.mu.Lock()
	if s.colTypes.m == nil || len(s.colTypes.m) > 1000 {
		s.colTypes.m = map[string]string{}
	}
	s.colTypes.m[key] = t
	s.colTypes.mu.Unlock()
	return t, nil
}

// literalHash hashes a simple query's distribution value: a literal lifted
// into $n, or the plan's constant.
func (ss *session) literalHash(p *planner.Plan, v *planner.Value, lits []literal) (int32, error) {
	if v.Null {
		return anyShard, nil // "= NULL" matches no row
	}
	if v.Param > 0 {
		if v.Param > len(lits) {
			return 0, pgerr.New(pgerr.ProtocolViolation, "there is no parameter $%d", v.Param)
		}
		l := lits[v.Param-1]
		return ss.distHash(p, v, distInput{src: litSource(l.token), val: []byte(l.value), lit: &l})
	}
	return ss.distHash(p, v, constInput(v))
}

// bindHash hashes a Bind's distribution value: parameter v.Param as bound
// (text or binary) with the type st declared for it, or the constant.
func (ss *session) bindHash(sp *stmtPlan, st *Statement, params []byte) (int32, error) {
	p := sp.plan
	v := p.Value
	if v.Null {
		return anyShard, nil
	}
	if v.Param == 0 {
		return ss.distHash(p, v, constInput(v))
	}
	val, format, isNull, ok := bindParam(params, v.Param-1)
	if !ok {
		return 0, pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	oid := paramType(st.paramTail, v.Param-1)
	if oid == 0 && v.Shared {
		var err error
		if oid, err = ss.inferredType(sp, st, v.Param-1); err != nil {
			return 0, err
		}
	}
	return ss.distHash(p, v, distInput{src: metadata.TypeOfOID(oid), val: val, binary: format == 1, isNull: isNull,
		oid: oid, format: format})
}

// inferredType is the type PostgreSQL infers for parameter k (0-based) of
// st, read once per plan with Parse and Describe of the statement on a
// pooled connection to the default node in the session's settings.
func (ss *session) inferredType(sp *stmtPlan, st *Statement, k int) (uint32, error) {
	if t := sp.paramTypes.Load(); t != nil {
		if k < len(*t) {
			return (*t)[k], nil
		}
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return 0, err
	}
	sc, err := ss.checkout(ctx, pool)
	if err != nil {
		return 0, err
	}
	var oids []uint32
	for i := 0; i < 1<<16; i++ {
		o := paramType(st.paramTail, i)
		if len(st.paramTail) < 2 || i >= int(binary.BigEndian.Uint16(st.paramTail)) {
			break
		}
		oids = append(oids, o)
	}
	b := sc.Buf()
	// The default node holds every catalog table's (empty) table with its
	// columns, so the statement as the client wrote it parses there.
	b, _ = (&pgproto3.Parse{Query: st.Query, ParameterOIDs: oids}).Encode(b)
	b, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		pool.Release(sc)
		return 0, lostWorker(sc.Addr, err)
	}
	var types []uint32
	var werr error
	for {
		f, err := sc.Next()
		if err != nil {
			pool.Release(sc)
			return 0, lostWorker(sc.Addr, err)
		}
		switch f.Type {
		case 't':
			var pd pgproto3.ParameterDescription
			if pd.Decode(f.Body) == nil {
				types = pd.ParameterOIDs
			}
		case 'E':
			werr = newWorkerError(f.Body)
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			pool.Release(sc)
			if werr != nil {
				return 0, werr // the statement fails as PostgreSQL fails it
			}
			sp.paramTypes.Store(&types)
			if k < len(types) {
				return types[k], nil
			}
			return 0, nil
		}
	}
}
