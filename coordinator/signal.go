package coordinator

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
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
// superuser's), cancel cancels the session's statement, terminate ends the
// session with FATAL 57P01 (its transaction rolled back) and, with a
// timeout, waits for it to end. An ID of no session gets PostgreSQL's
// WARNING and false. Another form (an ID computed in the query, read
// from a table) runs on a worker, where such an ID names no process.

// minSessionPID is the lowest process ID a session is given.
const minSessionPID = 1 << 22

// signalCall is a recognised call: the function, the result's column
// name, and its arguments (constants or, at Parse, parameters).
type signalCall struct {
	fn, column string
	args       []*pg_query.Node
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
	if sel == nil || len(sel.TargetList) != 1 || len(sel.FromClause) > 0 || sel.WhereClause != nil ||
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
	for _, a := range fc.Args {
		if a.GetNamedArgExpr() != nil || constOrParam(a) == nil {
			return nil
		}
	}
	col := rt.Name
	if col == "" {
		col = fn
	}
	return &signalCall{fn: fn, column: col, args: fc.Args}
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
		return false, nil
	}
	pid, null, ok := intArg(call.args[0])
	if !ok || null || pid < minSessionPID || pid > 1<<31-1 {
		return false, nil // a worker's process, or NULL: the worker answers
	}
	var timeout int64
	if len(call.args) == 2 {
		t, tnull, ok := intArg(call.args[1])
		if !ok || tnull {
			return false, nil
		}
		if t < 0 {
			return true, ss.queryError(pgerr.New(pgerr.InvalidParameterValue, "\"timeout\" must not be negative"))
		}
		timeout = t
	}
	terminate := call.fn == "pg_terminate_backend"
	s := ss.srv
	answer := func(v bool, notice string) error {
		if notice != "" {
			n := pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: "01000", Message: notice}
			ss.out, _ = n.Encode(ss.out)
		}
		ss.out = wireRow(ss.out, signalRowDesc(call.column), v)
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return nil
	}
	if f := s.fleet.Load(); f != nil && tagOf(uint32(pid)) != f.Tag() {
		return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"process %d is a session of another coordinator of the fleet", pid).
			WithHint("Run %s through the coordinator the session is connected to.", call.fn))
	}
	target := s.lookup(uint32(pid))
	if target == nil {
		return true, answer(false, "PID "+strconv.FormatInt(pid, 10)+" is not a PostgreSQL backend process")
	}
	if err := ss.maySignal(target, terminate); err != nil {
		return true, ss.queryError(err)
	}
	if !terminate {
		s.cancelHere(target.pid, target.secret)
		return true, answer(true, "")
	}
	if target == ss {
		// PostgreSQL's backend ends itself before it answers.
		return true, adminShutdown()
	}
	s.terminateSession(target)
	if timeout > 0 {
		for deadline := time.Now().Add(time.Duration(timeout) * time.Millisecond); s.lookup(uint32(pid)) == target; {
			if time.Now().After(deadline) {
				return true, answer(false, "backend with PID "+strconv.FormatInt(pid, 10)+" did not terminate within "+
					strconv.FormatInt(timeout, 10)+" milliseconds")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return true, answer(true, "")
}

// maySignal checks the caller's privileges over the target session as
// PostgreSQL checks them over a backend (asked of the default node).
func (ss *session) maySignal(target *session, terminate bool) error {
	if target.user == ss.user {
		return nil
	}
	var callerSuper, targetSuper, member bool
	if ss.srv.metaPool == nil {
		return pgerr.New("42501", "cannot check the privileges to signal process %d", target.pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := ss.srv.metaPool.QueryRow(ctx, `SELECT coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1), false),
	       coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $2), false),
	       coalesce(pg_catalog.pg_has_role($1, $2, 'USAGE') OR pg_catalog.pg_has_role($1, 'pg_signal_backend', 'USAGE'), false)`,
		ss.user, target.user).Scan(&callerSuper, &targetSuper, &member)
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
		return pgerr.New("42501", "must be a superuser to %s", what)
	case !member:
		return pgerr.New("42501", "must be a member of the role %s or member of pg_signal_backend", whose)
	}
	return nil
}

// terminateSession ends a session as pg_terminate_backend ends a backend:
// waiting for its client, it is told FATAL 57P01 at once; running a
// statement, the statement is cancelled and the session ends with that
// FATAL instead of the statement's answer.
func (s *Server) terminateSession(target *session) {
	target.terminated.Store(true)
	if target.wait.CompareAndSwap(waitRest, waitKilled) || target.wait.CompareAndSwap(waitTxn, waitKilled) {
		msg, _ := pgerr.Flatten(adminShutdown()).Encode(nil)
		target.clientMu.Lock()
		_ = target.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = target.conn.Write(msg)
		target.clientMu.Unlock()
		_ = target.conn.SetReadDeadline(time.Now())
		return
	}
	s.cancelHere(target.pid, target.secret)
}

// wireRow appends a one-column boolean result: RowDescription, the row,
// CommandComplete.
func wireRow(out, rowDesc []byte, v bool) []byte {
	out = wire.AppendFrame(out, 'T', rowDesc)
	val := []byte("f")
	if v {
		val = []byte("t")
	}
	dr := pgproto3.DataRow{Values: [][]byte{val}}
	out, _ = dr.Encode(out)
	cc := pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}
	out, _ = cc.Encode(out)
	return out
}
