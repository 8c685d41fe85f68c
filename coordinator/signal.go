package coordinator

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// pg_cancel_backend and pg_terminate_backend of a client's own backend
// process ID. A client is told its session's process ID in BackendKeyData
// (pgx's PgConn().PID(), libpq's PQbackendPID); every such ID is at least
// minSessionPID, above any process ID a worker can have (Linux's largest
// pid_max is 2^22), so a call with such an ID names a coordinator session,
// never a worker's backend. `SELECT pg_terminate_backend(ID)` and
// `SELECT pg_cancel_backend(ID)`, the ID a constant or a parameter (also
// over the extended protocol: bridge.go), run on the coordinator as
// PostgreSQL runs them on its backends: the caller needs the privileges
// of the session's role or of pg_signal_backend (a superuser's session, a
// superuser's), cancel cancels the session's statement (the caller's own
// session: the calling statement fails with 57014), terminate ends the
// session with FATAL 57P01 (its transaction rolled back) and, with a
// timeout, waits for it to end. An ID of no session gets PostgreSQL's
// WARNING and false. A query string of several statements with such a
// call runs statement by statement (multistmt.go), each call answered as
// if sent alone. Another form (an ID computed in the query, read
// from a table) runs on a worker, where such an ID names no process.

// minSessionPID is the lowest process ID a session is given.
const minSessionPID = 1 << 22

// signalCall is a recognised call: the function, the result's column
// name, and its arguments (constants or, at Parse, parameters).
type signalCall struct {
	fn, column string
	args       []*pg_query.Node
	// over: for SELECT f(n) FROM unnest(array) n, the array (a constant
	// or a parameter); the call's first argument is n.
	over *pg_query.Node
}

// parseSignalCall recognises SELECT pg_cancel_backend(x) or SELECT
// pg_terminate_backend(x[, timeout]) with x and timeout constants or
// parameters (with casts), nothing else in the statement.
func parseSignalCall(sql string) *signalCall {
	if !planner.ContainsFold(sql, "_backend") {
		return nil
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || len(sel.FromClause) > 1 || sel.WhereClause != nil ||
		sel.GroupClause != nil || sel.HavingClause != nil || sel.WithClause != nil || len(sel.DistinctClause) > 0 ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.ValuesLists) > 0 ||
		sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.LockingClause) > 0 {
		return nil
	}
	rt := sel.TargetList[0].GetResTarget()
	fc := rt.GetVal().GetFuncCall()
	if fc == nil || fc.AggStar || fc.AggDistinct || fc.Over != nil || len(fc.AggOrder) > 0 || fc.AggFilter != nil {
		return nil
	}
	var parts []string
	for _, n := range fc.Funcname {
		parts = append(parts, n.GetString_().GetSval())
	}
	if len(parts) == 2 && parts[0] != "pg_catalog" || len(parts) > 2 {
		return nil
	}
	fn := parts[len(parts)-1]
	switch {
	case fn == "pg_cancel_backend" && len(fc.Args) == 1:
	case fn == "pg_terminate_backend" && (len(fc.Args) == 1 || len(fc.Args) == 2):
	default:
		return nil
	}
	var over *pg_query.Node
	if len(sel.FromClause) == 1 {
		// SELECT f(n) FROM unnest(array) n: a signal per element.
		rf := sel.FromClause[0].GetRangeFunction()
		if rf == nil || rf.Lateral || rf.Ordinality || rf.IsRowsfrom || len(rf.Functions) != 1 || rf.Alias == nil ||
			len(rf.Alias.Colnames) > 0 || len(rf.Coldeflist) > 0 {
			return nil
		}
		items := rf.Functions[0].GetList().GetItems()
		uf := items[0].GetFuncCall()
		if uf == nil || len(uf.Args) != 1 || len(uf.Funcname) > 2 || constOrParam(uf.Args[0]) == nil && constArray(uf.Args[0]) == nil {
			return nil
		}
		if n := uf.Funcname[len(uf.Funcname)-1].GetString_().GetSval(); n != "unnest" ||
			len(uf.Funcname) == 2 && uf.Funcname[0].GetString_().GetSval() != "pg_catalog" {
			return nil
		}
		cr := fc.Args[0].GetColumnRef()
		if cr == nil || len(cr.Fields) != 1 || cr.Fields[0].GetString_().GetSval() != rf.Alias.Aliasname {
			return nil
		}
		over = uf.Args[0]
	}
	for i, a := range fc.Args {
		if a.GetNamedArgExpr() != nil || constOrParam(a) == nil && !(i == 0 && over != nil) {
			return nil
		}
	}
	col := rt.Name
	if col == "" {
		col = fn
	}
	return &signalCall{fn: fn, column: col, args: fc.Args, over: over}
}

// constArray is n, or the node a cast of n is of, when it is an ARRAY[...]
// of constants.
func constArray(n *pg_query.Node) *pg_query.A_ArrayExpr {
	for tc := n.GetTypeCast(); tc != nil; tc = n.GetTypeCast() {
		n = tc.Arg
	}
	a := n.GetAArrayExpr()
	if a == nil {
		return nil
	}
	for _, e := range a.Elements {
		if constOrParam(e).GetAConst() == nil {
			return nil
		}
	}
	return a
}

// intArray is a constant array argument's elements ('{1,2,3}' or
// ARRAY[1, 2, 3]), ok false for anything else (a NULL element too).
func intArray(n *pg_query.Node) ([]int64, bool) {
	if a := constArray(n); a != nil {
		out := make([]int64, 0, len(a.Elements))
		for _, e := range a.Elements {
			v, null, ok := intArg(e)
			if !ok || null {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	}
	c := constOrParam(n).GetAConst()
	if c == nil || c.GetSval() == nil {
		return nil, false
	}
	v := strings.TrimSpace(c.GetSval().Sval)
	if len(v) < 2 || v[0] != '{' || v[len(v)-1] != '}' {
		return nil, false
	}
	var out []int64
	if inner := strings.TrimSpace(v[1 : len(v)-1]); inner != "" {
		for _, f := range strings.Split(inner, ",") {
			x, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return nil, false
			}
			out = append(out, x)
		}
	}
	return out, true
}

// constOrParam is n, or the node a cast of n is of, when it is a constant
// or a parameter.
func constOrParam(n *pg_query.Node) *pg_query.Node {
	for tc := n.GetTypeCast(); tc != nil; tc = n.GetTypeCast() {
		n = tc.Arg
	}
	if n.GetAConst() != nil || n.GetParamRef() != nil {
		return n
	}
	return nil
}

// intArg is a constant argument's value.
func intArg(n *pg_query.Node) (int64, bool, bool) {
	c := constOrParam(n).GetAConst()
	if c == nil {
		return 0, false, false
	}
	if c.Isnull {
		return 0, true, true
	}
	if i := c.GetIval(); i != nil {
		return int64(i.Ival), false, true
	}
	if s := c.GetSval(); s != nil {
		v, err := strconv.ParseInt(strings.TrimSpace(s.Sval), 10, 64)
		return v, false, err == nil
	}
	return 0, false, false
}

// signalTypes are the parameter types of a call's arguments.
func signalTypes(fn string) []uint32 {
	if fn == "pg_terminate_backend" {
		return []uint32{oidInt4, oidInt8}
	}
	return []uint32{oidInt4}
}

const oidBool = 16

// signalRowDesc is the call's RowDescription body.
func signalRowDesc(col string) []byte {
	rd := pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte(col), DataTypeOID: oidBool,
		DataTypeSize: 1, TypeModifier: -1}}}
	b, _ := rd.Encode(nil)
	return b[5:]
}

// signalSession runs a simple query's signal call of a session's process
// ID; handled is false for any other statement (or another process ID).
func (ss *session) signalSession(sql string) (handled bool, err error) {
	call := parseSignalCall(sql)
	if call == nil {
		// Another form runs on a worker: one that writes a pooled
		// backend's ID is refused as the forms above are (adversary:
		// FROM pg_cancel_backend(ID), ID+0, pid => ID).
		if err := ss.srv.pooledPIDIn(sql); err != nil {
			return true, ss.queryError(err)
		}
		return false, nil
	}
	var pids []int64
	if call.over != nil {
		var ok bool
		if pids, ok = intArray(call.over); !ok {
			return false, nil
		}
	} else {
		pid, null, ok := intArg(call.args[0])
		if !ok || null {
			return false, nil
		}
		pids = []int64{pid}
	}
	workers := 0
	for _, pid := range pids {
		if pid < minSessionPID || pid > 1<<31-1 {
			workers++
		}
	}
	switch {
	case workers == len(pids) && len(pids) > 0:
		pooled, err := ss.srv.pooledPIDs()
		if err != nil {
			return true, ss.queryError(err)
		}
		for _, pid := range pids {
			if pid > 0 && pid < minSessionPID && slices.Contains(pooled, uint32(pid)) {
				// (Adversary: a client's own pg_backend_pid(), signalled
				// later, cancelled or ended another client's statement on
				// that connection.)
				return true, ss.queryError(errPooledPID(pid))
			}
		}
		return false, nil // workers' processes: the worker answers
	case workers > 0:
		return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"%s of both pgfleet sessions' process IDs and workers' backends in one statement is not supported", call.fn).
			WithHint("Signal the sessions (the IDs clients were told, 4194304 and above) and the workers' backends in separate statements."))
	}
	var timeout int64
	if len(call.args) == 2 {
		t, tnull, ok := intArg(call.args[1])
		if !ok || tnull {
			return false, nil
		}
		if t < 0 {
			return true, ss.queryError(pgerr.New(pgerr.NumericValueOutOfRange, "\"timeout\" must not be negative")) // as PostgreSQL 15
		}
		timeout = t
	}
	terminate := call.fn == "pg_terminate_backend"
	var notices []byte
	results := make([]bool, len(pids))
	for i, pid := range pids {
		v, notice, err := ss.signalOne(uint32(pid), terminate, timeout)
		if err != nil {
			return true, ss.queryError(err)
		}
		if notice != "" {
			n := pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: "01000", Message: notice}
			notices, _ = n.Encode(notices)
		}
		results[i] = v
	}
	ss.out = append(ss.out, notices...)
	if ss.terminated.Load() {
		return true, adminShutdown() // its own: PostgreSQL's backend ends before it answers
	}
	ss.out = boolRows(ss.out, signalRowDesc(call.column), results)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return true, nil
}

// errPooledPID refuses to signal a pooled worker backend.
func errPooledPID(pid int64) error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"process %d is a worker backend of pgfleet's connection pool, which runs other clients' statements in turn: pgfleet does not signal it", pid).
		WithHint("To cancel or end a session, use the process ID its driver was given at connection (libpq's PQbackendPID, pgx's PgConn().PID()) or the driver's cancel: pg_backend_pid() names the worker connection of the moment.")
}

// pooledPIDIn refuses a statement that signals and whose text writes the
// process ID of a pooled worker backend anywhere (a number in it), for the
// forms of a call the coordinator does not read (signalSession).
func (s *Server) pooledPIDIn(sql string) error {
	pooled, err := s.pooledPIDs()
	if err != nil {
		return err
	}
	for i := 0; i < len(sql); {
		if sql[i] < '0' || sql[i] > '9' {
			i++
			continue
		}
		j := i
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		if pid, err := strconv.ParseInt(strings.TrimLeft(sql[i:j], "0"), 10, 64); err == nil && pid > 0 && pid < minSessionPID && slices.Contains(pooled, uint32(pid)) {
			return errPooledPID(pid)
		}
		i = j
	}
	return nil
}

// pooledPIDs is the process IDs of the worker backends the coordinator's
// pools keep open, and those every coordinator sharing its metadata
// database recorded there (read once per signalling statement): a
// client's pg_backend_pid() through another coordinator names one of
// those (adversary). An error reading them refuses the statement.
func (s *Server) pooledPIDs() ([]uint32, error) {
	s.mu.Lock()
	pools := make([]*pooling.Pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	var pids []uint32
	for _, p := range pools {
		pids = p.PIDs(pids)
	}
	if s.cfg.LeaseTTL < 0 || s.leases == nil {
		return pids, nil // (no budget: the others' backends are not recorded)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	others, err := s.leases.RecordedBackends(ctx)
	if err != nil {
		return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "cannot read the fleet's pooled worker backends, which pg_cancel_backend and pg_terminate_backend must not signal: %v", err).
			WithHint("Retry when the metadata database answers.")
	}
	for _, p := range others {
		pids = append(pids, uint32(p))
	}
	return pids, nil
}

// signalOne signals the session with process ID pid: its result, a
// warning for the client, or an error (privileges; a session of another
// coordinator). Terminating its own session is left to the caller.
func (ss *session) signalOne(pid uint32, terminate bool, timeout int64) (bool, string, error) {
	s := ss.srv
	if f := s.fleet.Load(); f != nil && tagOf(pid) != f.Tag() {
		return false, "", pgerr.New(pgerr.FeatureNotSupported,
			"process %d is a session of another coordinator of the fleet", pid).
			WithHint("Run pg_cancel_backend or pg_terminate_backend through the coordinator the session is connected to.")
	}
	target := s.lookup(pid)
	if target == nil {
		return false, "PID " + strconv.FormatUint(uint64(pid), 10) + " is not a PostgreSQL backend process", nil
	}
	if err := ss.maySignal(target, terminate); err != nil {
		return false, "", err
	}
	if !terminate {
		if target == ss {
			// PostgreSQL's backend takes its own cancel while the
			// statement runs: the statement fails.
			return false, "", pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")
		}
		s.cancelHere(target.pid, target.secret)
		return true, "", nil
	}
	if target == ss {
		ss.terminated.Store(true) // PostgreSQL's backend ends itself before it answers
		return true, "", nil
	}
	s.terminateSession(target)
	if timeout > 0 {
		for deadline := time.Now().Add(time.Duration(timeout) * time.Millisecond); s.lookup(pid) == target; {
			if time.Now().After(deadline) {
				return false, "backend with PID " + strconv.FormatUint(uint64(pid), 10) + " did not terminate within " +
					strconv.FormatInt(timeout, 10) + " milliseconds", nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return true, "", nil
}

// maySignal checks the caller's privileges over the target session as
// PostgreSQL checks them over a backend (asked of the default node).
func (ss *session) maySignal(target *session, terminate bool) error {
	if target.user == ss.user {
		return nil
	}
	var callerSuper, targetSuper, member bool
	if ss.srv.metaPool == nil {
		return pgerr.New(pgerr.InsufficientPrivilege, "cannot check the privileges to signal process %d", target.pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := ss.srv.askMeta(ctx, func() error {
		return ss.srv.metaPool.QueryRow(ctx, `SELECT coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1), false),
	       coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $2), false),
	       coalesce(pg_catalog.pg_has_role($1, $2, 'USAGE') OR pg_catalog.pg_has_role($1, 'pg_signal_backend', 'USAGE'), false)`,
			ss.user, target.user).Scan(&callerSuper, &targetSuper, &member)
	})
	if err != nil {
		return err
	}
	what, whose := "cancel superuser query", "whose query is being canceled"
	if terminate {
		what, whose = "terminate superuser process", "whose process is being terminated"
	}
	switch {
	case callerSuper:
		return nil
	case targetSuper:
		return pgerr.New(pgerr.InsufficientPrivilege, "must be a superuser to %s", what)
	case !member:
		return pgerr.New(pgerr.InsufficientPrivilege, "must be a member of the role %s or member of pg_signal_backend", whose)
	}
	return nil
}

// terminateSession ends a session as pg_terminate_backend ends a backend:
// waiting for its client, it is told FATAL 57P01 at once; running a
// statement, the statement is cancelled and the session ends with that
// FATAL instead of the statement's answer.
func (s *Server) terminateSession(target *session) {
	target.terminated.Store(true)
	if ok, asleep := target.killWaiting(true); ok {
		s.wakeWaiting(target, asleep) // it tells its client
		return
	}
	s.cancelHere(target.pid, target.secret)
	// A session reading its client mid-statement (COPY FROM STDIN, the
	// next message of a pipeline) is woken to see it ended.
	_ = target.conn.SetReadDeadline(time.Now())
}

// boolRows appends a one-column boolean result: RowDescription, the
// rows, CommandComplete.
func boolRows(out, rowDesc []byte, vs []bool) []byte {
	out = wire.AppendFrame(out, 'T', rowDesc)
	for _, v := range vs {
		val := []byte("f")
		if v {
			val = []byte("t")
		}
		dr := pgproto3.DataRow{Values: [][]byte{val}}
		out, _ = dr.Encode(out)
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte("SELECT " + strconv.Itoa(len(vs)))}
	out, _ = cc.Encode(out)
	return out
}
