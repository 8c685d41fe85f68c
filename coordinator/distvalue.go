package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
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
		"a parameter %s compared with the distribution column of %s (%s) can match rows of several shards", src, p.DistTable(), p.DistType()).
		WithHint("Send the parameter with the column's type %s, or with its type unspecified.", p.DistType())
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
	col := p.DistType()
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
			// PostgreSQL reports it at Bind, after any error of Parse
			// (a constant the column rejects): it decides which.
			return 0, true, nil
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
			return 0, true, nil // as for integers
		}
		return metadata.HashUUID(u), false, nil
	}
	return 0, false, pgerr.New(pgerr.FeatureNotSupported, "pgfleet cannot hash values of type %s", col).
		WithHint("Distribute the table by a column of a built-in scalar type (integer, text, uuid, date, ...).")
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
		if !metadata.Comparable(p.DistType(), in.src) || in.src == "" {
			return 0, errNotComparable(p, in.src, in.oid)
		}
	}
	return ss.askHash(p, v, in)
}

// askHash has PostgreSQL compute the value and its hash, on a connection
// in the session's true settings (askConn).
func (ss *session) askHash(p *planner.Plan, v *planner.Value, in distInput) (int32, error) {
	if err := clockFree(p, v, in); err != nil {
		return 0, err
	}
	if err := ss.srv.stableCasts(p, v); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ac, err := ss.askConn(ctx, p, v)
	if err != nil || ac.sc == nil {
		return anyShard, err
	}
	sc := ac.sc
	typ := p.DistType()
	if v.Assign {
		// An INSERT stores the value with the column's type modifier.
		if typ, err = ss.srv.columnType(sc, p.DistTable()); err != nil {
			var e *pgerr.Error
			if errors.As(err, &e) && e.Code == pgerr.ConnectionFailure {
				ac.abort()
				return 0, err
			}
			if derr := ac.done(); derr != nil {
				return 0, derr
			}
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
	parse.Query = "SELECT pg_catalog." + metadata.HashFunction(p.DistType()) + "(CAST((" + expr + ") AS " + typ + "))"
	b := sc.Buf()
	b, _ = parse.Encode(b)
	b, _ = bind.Encode(b)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		ac.abort()
		return 0, executor.LostWorker(sc.Addr, err)
	}
	h, failed, dataErr := anyShard, false, false
	for {
		f, err := sc.Next()
		if err != nil {
			ac.abort()
			return 0, executor.LostWorker(sc.Addr, err)
		}
		switch f.Type {
		case 'D':
			var dr pgproto3.DataRow
			if dr.Decode(f.Body) == nil && len(dr.Values) == 1 && len(dr.Values[0]) == 4 {
				h = int32(binary.BigEndian.Uint32(dr.Values[0]))
			}
		case 'E':
			failed = true
			var e pgproto3.ErrorResponse
			dataErr = e.Decode(f.Body) == nil && strings.HasPrefix(e.Code, "22")
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			if err := ac.done(); err != nil {
				return 0, err
			}
			if failed {
				// Outside the client's transaction a failure proves
				// nothing, unless it is a built-in type's input or cast
				// rejecting the value (22003 for -32769 as int2): then
				// the worker rejects it too, after any error PostgreSQL
				// reports first (a constant the column refuses, 22008).
				if ac.strict && !(dataErr && !v.Computed && in.src != "") {
					return 0, errAskElsewhere(p, v)
				}
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
// ("character varying(4)"), read once per catalog version from sc's worker:
// from the table there (the default node) or one of its shards (the
// others; a session may hold a connection to any worker). It never guesses:
// without the column it refuses.
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
	dot := strings.IndexByte(table, '.')
	if tb == nil || dot < 0 {
		return "", errCatalogMoved
	}
	rel := table[len(tb.Schema())+1:]
	// The table (on the default node) or any of its shards.
	names := []string{"(" + quoteLiteral(tb.Schema()) + ", " + quoteLiteral(rel) + ")"}
	for _, sh := range snap.Shards[table] {
		names = append(names, "("+quoteLiteral(tb.ShardsIn())+", "+quoteLiteral(metadata.ShardName(rel, sh.ID))+")")
	}
	rows, err := executor.QueryText(sc, "SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a"+
		" JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"+
		" WHERE (n.nspname::text, c.relname::text) IN ("+strings.Join(names, ", ")+")"+
		" AND a.attname = "+quoteLiteral(tb.DistColumn)+" AND NOT a.attisdropped LIMIT 1")
	if err != nil {
		return "", err
	}
	if len(rows) != 1 || rows[0][0] == nil {
		return "", pgerr.New(pgerr.FeatureNotSupported,
			"pgfleet cannot read the type of %s.%s on worker %s to compute the distribution value", table, tb.DistColumn, sc.Addr).
			WithHint("Write the distribution value as a constant of the column's type %s without trailing spaces.", tb.DistType)
	}
	t = *rows[0][0]
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

// valueHash is bindHash of one of the plan's distribution values (a
// router's, or a row's of a multi-row INSERT).
func (ss *session) valueHash(sp *stmtPlan, st *Statement, v *planner.Value, params []byte) (int32, error) {
	p := sp.plan
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
// st (describeDefault).
func (ss *session) inferredType(sp *stmtPlan, st *Statement, k int) (uint32, error) {
	d, err := ss.describeDefault(sp, st)
	if err != nil {
		return 0, err
	}
	if k < len(d.params) {
		return d.params[k], nil
	}
	return 0, nil
}

// stmtDescribed is a statement as PostgreSQL describes it: its parameter
// types and its RowDescription body (nil: NoData).
type stmtDescribed struct {
	params  []uint32
	rowDesc []byte
}

// describeDefault describes st once per plan with Parse and Describe on a
// pooled connection to the default node in the session's settings: the
// default node holds every catalog table's (empty) table with its
// columns, so the statement as the client wrote it is analysed there as
// it would be on one PostgreSQL.
func (ss *session) describeDefault(sp *stmtPlan, st *Statement) (*stmtDescribed, error) {
	if d := sp.described.Load(); d != nil {
		return d, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return nil, err
	}
	sc, err := ss.sideCheckout(ctx, pool)
	if err != nil {
		return nil, err
	}
	b := sc.Buf()
	b, _ = (&pgproto3.Parse{Query: st.Query, ParameterOIDs: paramOIDs(st.paramTail)}).Encode(b)
	b, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		ss.sideRelease(pool, sc)
		return nil, executor.LostWorker(sc.Addr, err)
	}
	d := &stmtDescribed{}
	var werr error
	for {
		f, err := sc.Next()
		if err != nil {
			ss.sideRelease(pool, sc)
			return nil, executor.LostWorker(sc.Addr, err)
		}
		switch f.Type {
		case 't':
			var pd pgproto3.ParameterDescription
			if pd.Decode(f.Body) == nil {
				d.params = pd.ParameterOIDs
			}
		case 'T':
			d.rowDesc = slices.Clone(f.Body)
		case 'E':
			werr = executor.NewWorkerError(f.Body)
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			ss.sideRelease(pool, sc)
			if werr != nil {
				return nil, werr // the statement fails as PostgreSQL fails it
			}
			sp.described.Store(d)
			return d, nil
		}
	}
}

// clockFreeTypes are types whose input and casts never read the clock:
// 'now' means "now" only to the date/time types (and domains over them).
var clockFreeTypes = map[string]bool{
	"text": true, "varchar": true, "bpchar": true, "char": true, "name": true,
	"int2": true, "int4": true, "int8": true, "numeric": true, "float4": true, "float8": true,
	"uuid": true, "bool": true, "bytea": true, "oid": true, "json": true, "jsonb": true,
	"money": true, "inet": true, "cidr": true, "macaddr": true, "bit": true, "varbit": true,
}

// timeWords are the date/time inputs read as the current moment: a value
// of them is the transaction's start (or the day) on the connection that
// reads it, which is not the worker's transaction.
var timeWords = []string{"now", "today", "tomorrow", "yesterday"}

// clockFree refuses a distribution value that PostgreSQL would read as
// the current moment ('now'::timestamptz::text): evaluated on another
// connection it would be another moment, and the row another shard's.
// Any cast to a type outside clockFreeTypes (a date/time type, a domain,
// a user type) with a time word anywhere in the value's text is refused.
func clockFree(p *planner.Plan, v *planner.Value, in distInput) error {
	risky := in.src == "" && in.oid != 0
	for _, t := range append([]string{in.src, v.Cast}, v.Casts...) {
		t = strings.TrimPrefix(t, "pg_catalog.")
		if t != "" && t != "unknown" && t != "unspecified" && !clockFreeTypes[t] {
			risky = true
		}
	}
	if !risky {
		return nil
	}
	for _, s := range []string{string(in.val), v.Expr} {
		for _, w := range timeWords {
			if planner.ContainsFold(s, w) {
				return pgerr.New(pgerr.FeatureNotSupported,
					"the distribution value %s of %s may be read as the current time ('%s'), which each connection reads differently", v.Expr, p.DistTable(), w).
					WithHint("Compute the value first (SELECT it) and send it as a constant or parameter of the column's type %s.", p.DistType())
			}
		}
	}
	return nil
}

// errAskElsewhere refuses a value PostgreSQL could not compute on a
// connection outside the session's transaction: the transaction may see
// what that connection does not (a type it created).
func errAskElsewhere(p *planner.Plan, v *planner.Value) error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"the distribution value %s of %s cannot be computed outside this transaction", v.Expr, p.DistTable()).
		WithHint("Send the statement on its own (after Sync), or write the value as a constant or parameter of the column's type %s.", p.DistType())
}

// askConnection is where askHash evaluates a value: the session's own
// server connection when it holds one between round trips (its settings
// are the session's true ones, set_config() included, and its transaction
// sees what the client's does), else a pooled connection brought to the
// session's settings. strict: the evaluation runs outside the client's
// transaction, so a failure proves nothing and is refused.
type askConnection struct {
	ss        *session
	sc        *pooling.ServerConn
	pool      *pooling.Pool // nil: the session's held connection
	savepoint bool
	strict    bool
}

const askSavepoint = "pgfleet_distribution_value"

// askConn picks the connection (see askConnection). A zero askConnection
// with no error means: route anywhere, the worker fails the statement
// itself (the transaction is aborted).
func (ss *session) askConn(ctx context.Context, p *planner.Plan, v *planner.Value) (askConnection, error) {
	if sc := ss.sc; sc != nil {
		if sc.TxStatus == 'E' {
			return askConnection{}, nil // 25P02 from the worker
		}
		if ss.qhead == len(ss.queue) && !ss.needSync && ss.pendingBegin == "" {
			ac := askConnection{ss: ss, sc: sc, savepoint: sc.TxStatus == 'T'}
			if ac.savepoint {
				// A failure must not abort the client's transaction.
				if err := sc.Exec("SAVEPOINT "+askSavepoint, time.Now().Add(10*time.Second), nil); err != nil {
					return askConnection{}, ss.askLost(sc, err)
				}
			}
			return ac, nil
		}
		// Messages of an extended batch are in flight on it: a pooled
		// connection has the session's settings only if nothing changed
		// them on the held one.
		if ss.settingsUnknown || ss.settingsDirty || ss.txSet || len(ss.pending) > 0 || sc.ParamsKey != ss.params.key {
			return askConnection{}, pgerr.New(pgerr.FeatureNotSupported,
				"the distribution value %s of %s needs PostgreSQL to compute it, which is not supported in an extended-protocol batch after the session's settings changed", v.Expr, p.DistTable()).
				WithHint("Send Sync before the statement, or write the value as a constant or parameter of the column's type %s.", p.DistType())
		}
		for _, t := range v.Casts {
			if strings.HasPrefix(strings.TrimPrefix(t, "pg_catalog."), "reg") {
				return askConnection{}, errAskElsewhere(p, v)
			}
		}
	} else if ss.settingsUnknown {
		return askConnection{}, pgerr.New(pgerr.FeatureNotSupported,
			"the distribution value %s needs PostgreSQL to compute it, which is not supported after a function changed the session's settings", v.Expr).
			WithHint("Change settings with SET, or write the value as a plain constant or parameter of the column's type %s.", p.DistType())
	} else if ss.inTxn() && (ss.txSet || len(ss.pending) > 0) {
		return askConnection{}, pgerr.New(pgerr.FeatureNotSupported,
			"the distribution value %s needs PostgreSQL to compute it, which is not supported after SET in a transaction block", v.Expr).
			WithHint("Write the value as a plain constant or parameter of the column's type %s.", p.DistType())
	}
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return askConnection{}, err
	}
	sc, err := ss.sideCheckout(ctx, pool)
	if err != nil {
		return askConnection{}, err
	}
	return askConnection{ss: ss, sc: sc, pool: pool, strict: ss.sc != nil && ss.inTxn()}, nil
}

// done ends the evaluation: the savepoint is rolled back and released, or
// the pooled connection goes back.
func (ac askConnection) done() error {
	if ac.pool != nil {
		ac.ss.sideRelease(ac.pool, ac.sc)
		return nil
	}
	if ac.savepoint {
		if err := ac.sc.Exec("ROLLBACK TO SAVEPOINT "+askSavepoint+"; RELEASE SAVEPOINT "+askSavepoint,
			time.Now().Add(10*time.Second), nil); err != nil || ac.sc.TxStatus != 'T' {
			return ac.ss.askLost(ac.sc, err)
		}
	}
	return nil
}

// abort gives up after a lost connection.
func (ac askConnection) abort() {
	if ac.pool != nil {
		ac.ss.sideRelease(ac.pool, ac.sc)
		return
	}
	ac.sc.MarkBroken()
}

// askLost: the session's own connection failed during an evaluation; the
// session's transaction cannot go on.
func (ss *session) askLost(sc *pooling.ServerConn, err error) error {
	sc.MarkBroken()
	if err == nil {
		err = errors.New("unexpected transaction state")
	}
	return executor.LostWorker(sc.Addr, err)
}

// builtinCast reports whether a cast type is a built-in one, whose input,
// output and cast functions are immutable or read only the session's
// settings.
func builtinCast(t string) bool {
	t = strings.TrimSuffix(strings.TrimPrefix(t, "pg_catalog."), "[]")
	if clockFreeTypes[t] {
		return true
	}
	switch t {
	case "date", "time", "timetz", "timestamp", "timestamptz", "interval":
		return true
	}
	return false
}

// stableCasts refuses a computed distribution value whose casts involve a
// type outside the built-in ones with a volatile input, output or cast
// function: evaluated on another connection than the worker's it could
// give another value. Checked once per plan value, catalog version and
// DDL epoch, against the metadata node's catalog.
func (s *Server) stableCasts(p *planner.Plan, v *planner.Value) error {
	var other []string
	for _, t := range v.Casts {
		if !builtinCast(t) {
			other = append(other, t)
		}
	}
	if len(other) == 0 {
		return nil
	}
	stamp := [2]int64{s.catalog.Load().Version, s.ddlEpoch.Load()}
	s.castsMu.Lock()
	known := s.castsOK[v] == stamp
	s.castsMu.Unlock()
	if known {
		return nil
	}
	refuse := pgerr.New(pgerr.FeatureNotSupported,
		"the distribution value %s of %s casts to a type whose functions pgfleet cannot show to be stable", v.Expr, p.DistTable()).
		WithHint("Compute the value first (SELECT it) and send it as a constant or parameter of the column's type %s.", p.DistType())
	if s.metaPool == nil {
		return refuse
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var volatile bool
	err := s.askMeta(ctx, func() error {
		return s.metaPool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) n
			JOIN pg_catalog.pg_type t ON t.oid = pg_catalog.to_regtype(n)
			JOIN pg_catalog.pg_proc f ON f.oid IN (t.typinput, t.typoutput) WHERE f.provolatile = 'v')
		OR EXISTS (SELECT 1 FROM unnest($1::text[]) n
			JOIN pg_catalog.pg_cast c ON pg_catalog.to_regtype(n) IN (c.casttarget, c.castsource)
			JOIN pg_catalog.pg_proc f ON f.oid = c.castfunc WHERE f.provolatile = 'v')`, other).Scan(&volatile)
	})
	if err != nil || volatile {
		return refuse
	}
	s.castsMu.Lock()
	if s.castsOK == nil || len(s.castsOK) > 10000 {
		s.castsOK = map[*planner.Value][2]int64{}
	}
	s.castsOK[v] = stamp
	s.castsMu.Unlock()
	return nil
}
