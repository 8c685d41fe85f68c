package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Multi-shard SELECTs (planner.MultiShard): the session sends each worker
// one statement covering all its shards, on connections of its own pools,
// all at once; then reads the workers one after the other, streaming rows
// to the client (concatenation) or gathering partial rows (in binary) that
// one of those connections combines with the plan's merge statement, which
// takes each partial column as an array parameter.

const (
	// codeProgramLimitExceeded is SQLSTATE 54000.
	codeProgramLimitExceeded = "54000"
)

// appendError appends err as an ErrorResponse naming the user's tables.
func appendError(dst []byte, snap *metadata.Snapshot, err error) []byte {
	var we *executor.WorkerError
	if errors.As(err, &we) {
		return wire.AppendFrame(dst, 'E', userNamesBody(snap, we.Body))
	}
	er := pgerr.Flatten(err)
	userNames(snap, er)
	b, _ := er.Encode(dst)
	return b
}

// scatterDesc is how a multi-shard statement of the extended protocol
// looks to the client (the statement described on the first shard), and the
// statements the workers run, with the parameter types found there.
type scatterDesc struct {
	paramDesc []byte // ParameterDescription body
	paramOIDs []uint32
	rowDesc   []byte // RowDescription body; nil: NoData
	ncols     int
	workers   []*Statement // by Scatter.Workers
	fallback  []*Statement // by the plan's Fallback.Scatter.Workers
	stamp     descStamp    // when it was made
	// changed: the shards' result is no longer this (a table changed).
	// Statements prepared with it fail as PostgreSQL's do; the next Parse
	// of the text makes a new Statement, described afresh.
	changed atomic.Bool
}

// scatterPortal is a Bind of a multi-shard statement, run at Execute.
type scatterPortal struct {
	st      *Statement
	sp      *stmtPlan
	desc    *scatterDesc
	params  []byte // the Bind's parameter formats and values
	results []byte // the Bind's result formats (count and codes)
	done    bool   // executed: run to completion
	// ref: a reference-table write (refext.go), run on every copy; tag is
	// its command tag once done.
	ref bool
	tag []byte
	// write: a multi-shard write (multiwrite.go), run on every shard.
	write bool
	// partial: run with a row limit (fetched in parts): rest are the
	// DataRow frames the next Executes give, verb its tag's first word.
	partial bool
	rest    []byte
	verb    string
	// depth: len(ss.savepoints) when it was bound (a ROLLBACK TO an
	// earlier savepoint drops it); settings: the session's when its rows
	// were made (cursorSettings).
	depth    int
	settings string
}

// keptAtSync: a multi-shard SELECT's portal, which lives until its
// transaction ends (a block's across Syncs, as PostgreSQL's portals);
// the write portals end at Sync.
func (sp *scatterPortal) keptAtSync() bool { return !sp.ref && !sp.write }

// keepRows keeps the DataRow frames of a portal's captured answer and its
// tag's verb; the rest (notices, parameter changes) goes to out.
func (sp *scatterPortal) keepRows(out, captured []byte) []byte {
	sp.verb = "SELECT"
	for typ, body := range frames(captured) {
		switch typ {
		case 'D':
			sp.rest = wire.AppendFrame(sp.rest, typ, body)
		case 'C':
			if v, _, _ := strings.Cut(string(body), " "); v != "" {
				sp.verb = strings.TrimRight(v, "\x00")
			}
		default:
			out = wire.AppendFrame(out, typ, body)
		}
	}
	return out
}

// nextPart appends the portal's next limit rows (all for 0) to out, then
// PortalSuspended when limit rows were given (PostgreSQL cannot tell then
// whether more follow), else CommandComplete with the rows given.
func (sp *scatterPortal) nextPart(out []byte, limit int) []byte {
	n := 0
	for len(sp.rest) > 0 && (limit <= 0 || n < limit) {
		_, _, k, _ := wire.SplitFrame(sp.rest)
		out = append(out, sp.rest[:k]...)
		sp.rest = sp.rest[k:]
		n++
	}
	if len(sp.rest) == 0 {
		sp.rest = nil
	}
	if limit > 0 && n == limit {
		return append(out, 's', 0, 0, 0, 4)
	}
	return commandComplete(out, fmt.Sprintf("%s %d", sp.verb, n))
}

// describe is the portal's RowDescription, with its result formats.
func (sp *scatterPortal) describe() []byte {
	if sp.desc == nil || sp.desc.rowDesc == nil {
		return msgNoData
	}
	return wire.AppendFrame(nil, 'T', withFormats(sp.desc.rowDesc, sp.results))
}

// withFormats sets the format codes of a RowDescription body.
func withFormats(rowDesc, results []byte) []byte {
	n := int(binary.BigEndian.Uint16(results))
	if n == 0 {
		return rowDesc
	}
	var rd pgproto3.RowDescription
	if rd.Decode(rowDesc) != nil {
		return rowDesc
	}
	for i := range rd.Fields {
		k := i
		if n == 1 {
			k = 0
		}
		rd.Fields[i].Format = int16(binary.BigEndian.Uint16(results[2+2*k:]))
	}
	b, _ := rd.Encode(nil)
	return b[5:]
}

// scatterCache holds multi-shard plans' run-time state, until the catalog
// changes.
type scatterCache struct {
	mu  sync.Mutex
	m   map[*planner.Plan]*executor.Runtime
	gen atomic.Uint64 // counts resets: descriptions made before are stale
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (c *scatterCache) get(p *planner.Plan) *executor.Runtime {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedPlans {
		c.m = map[*planner.Plan]*executor.Runtime{}
	}
	rt := c.m[p]
	if rt == nil {
		rt = &executor.Runtime{}
		c.m[p] = rt
	}
	return rt
}

func (c *scatterCache) reset() {
	c.mu.Lock()
	c.m = nil
	c.gen.Add(1)
	c.mu.Unlock()
}

// scatterCache is where the session's multi-shard plans keep what they
// learn at run time: the server's, shared by every session; in a
// transaction block that changed a distributed or reference table
// (tableDDLInTxn), the session's own until the transaction ends, for its
// tables have a shape there no other session sees.
func (ss *session) scatterCache() *scatterCache {
	if ss.txScatter != nil {
		return ss.txScatter
	}
	return &ss.srv.scatter
}

func (c *scatterCache) generation() uint64 {
	return c.gen.Load()
}

// scatterAllowed refuses a multi-shard statement where its separate
// connections would not see what the session sees. In a transaction block
// under READ COMMITTED each statement takes its own snapshot, so the part
// for the transaction's worker runs on the transaction's connection and
// the others on pooled ones, where the transaction has written nothing
// (txnCheck checks the isolation level and settings on the connections).
func (ss *session) scatterAllowed() error {
	if (ss.sc != nil && ss.sc.TxStatus == 'E') || (ss.sc == nil && ss.pendingFailed) {
		return pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block")
	}
	if ss.pinned != "" {
		reason := ss.pinned
		ss.unpinRefused() // (pinned by this statement, refused before it ran: it pins nothing)
		return pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard query is not supported in a session pinned to one worker connection (%s)", reason).
			WithHint("Reconnect, or pin the query to one shard with WHERE <distribution column> = <value>.")
	}
	if ss.pendingFailed || ss.sc != nil && ss.sc.TxStatus == 'E' {
		return pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block")
	}
	if ss.sc == nil && ss.pendingBegin != "" {
		if level, ok := beginIsolation(ss.pendingBegin); !ok || !readCommitted(level) {
			return errTxnIsolation(level)
		}
	}
	return nil
}

// fleetRefusal says, of a multi-shard query's refusal, when the query is
// a read of pg_prepared_xacts, which gathers every worker's
// (planner.FleetView): its message speaks of multi-shard queries, its
// hint of distribution columns.
func fleetRefusal(x *planner.Scatter, err error) error {
	var pe *pgerr.Error
	if x == nil || !x.Fleet || !errors.As(err, &pe) || pe.Code != pgerr.FeatureNotSupported || pe.Detail != "" {
		return err
	}
	e := *pe
	e.Detail = "A read of pg_prepared_xacts gathers every worker's prepared transactions as a multi-shard query does."
	e.Hint = "Read pg_prepared_xacts from a new session, outside a transaction block, with client_encoding UTF8."
	return &e
}

// beginIsolation finds the isolation level a BEGIN or START TRANSACTION
// asks for ("" if none); ok is false if unsure.
func beginIsolation(sql string) (level string, ok bool) {
	lx := lexer{s: sql}
	n, _, _, _ := lx.statement()
	w := lx.words[:n]
	for i := 0; i+1 < n; i++ {
		if !strings.EqualFold(w[i], "ISOLATION") || !strings.EqualFold(w[i+1], "LEVEL") {
			continue
		}
		switch {
		case i+3 < n && strings.EqualFold(w[i+2], "READ") && (strings.EqualFold(w[i+3], "COMMITTED") || strings.EqualFold(w[i+3], "UNCOMMITTED")):
			level = "read committed"
		case i+3 < n && strings.EqualFold(w[i+2], "REPEATABLE") && strings.EqualFold(w[i+3], "READ"):
			return "repeatable read", true
		case i+2 < n && strings.EqualFold(w[i+2], "SERIALIZABLE"):
			return "serializable", true
		default:
			return "", false
		}
	}
	if n == maxWords {
		return "", false // more words than the lexer keeps
	}
	return level, true
}

// readCommitted reports whether an isolation level ("" for the default,
// checked on the connections) takes a snapshot per statement.
func readCommitted(level string) bool {
	return level == "" || level == "read committed" || level == "read uncommitted"
}

// errTxnIsolation refuses a multi-shard statement in a transaction whose
// snapshot spans its statements.
func errTxnIsolation(level string) error {
	what := "this transaction's isolation level"
	if level != "" {
		what = strings.ToUpper(level)
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"a multi-shard query is not supported in a transaction block under %s", what).
		WithHint("Under REPEATABLE READ or SERIALIZABLE one snapshot spans the transaction, which the query's connections to other workers cannot share: " +
			"use READ COMMITTED (the default), run the query outside the transaction block, or pin it to one shard with WHERE <distribution column> = <value>.")
}

// timeWordValue reports whether a constant or text parameter of the
// statement reads as the current moment ('now', 'today', ...) when given
// to a date/time type.
func (r *scatterRun) timeWordValue() bool {
	for _, l := range r.lits {
		if planner.TimeWord(l.value) {
			return true
		}
	}
	if r.port != nil {
		for k := 0; ; k++ {
			v, format, null, ok := bindParam(r.port.params, k)
			if !ok {
				break
			}
			if !null && format == 0 && len(v) < 16 && planner.TimeWord(string(v)) {
				return true
			}
		}
	}
	return false
}

// txnStateSQL reads, on every connection of a multi-shard statement in a
// transaction block, the isolation levels and the settings made with SET
// (SET LOCAL included) but those of the transaction's characteristics.
// pg_settings does not list custom settings (placeholders): txnStateText
// adds the values of those the transaction set.
const txnStateSQL = "SELECT pg_catalog.current_setting('transaction_isolation'), pg_catalog.current_setting('default_transaction_isolation'), " +
	"(SELECT pg_catalog.string_agg(name OPERATOR(pg_catalog.||) '=' OPERATOR(pg_catalog.||) setting, ',' ORDER BY name) FROM pg_catalog.pg_settings " +
	"WHERE source OPERATOR(pg_catalog.=) 'session' AND NOT name OPERATOR(pg_catalog.=) ANY (ARRAY['transaction_isolation', 'transaction_read_only', 'transaction_deferrable']))"

// txnStateText is txnStateSQL with, when the transaction set custom
// settings (SET LOCAL app.tenant), their values as one more column: the
// other workers' connections do not have them (adversary: a multi-shard
// count filtered on current_setting('app.tenant') after SET LOCAL counted
// only the transaction's worker's rows).
func (ss *session) txnStateText() string {
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, op := range ss.pending {
		op.customNames(add)
		if op.kind == opResetAll {
			// (RESET ALL empties every custom setting the session has:
			// adversary round 15, app.x still 'a' on the other workers.)
			for _, n := range strings.Split(ss.params.defines, "\x00") {
				if customName(n) {
					add(n)
				}
			}
		}
	}
	if len(names) == 0 {
		return txnStateSQL
	}
	// (As the state read reads them: stateHead.)
	return txnStateSQL + ", ARRAY(SELECT pg_catalog.current_setting(n, true) FROM pg_catalog.unnest(" +
		quoteLiteral(namesLiteral(names)) + "::pg_catalog.text[]) n)::pg_catalog.text"
}

// txnCheck refuses a multi-shard statement in a transaction block unless
// every part of it sees what the transaction would: the transaction takes
// a snapshot per statement (READ COMMITTED), and its connection has the
// settings of the pooled ones (no SET or SET LOCAL in the transaction).
// The transaction's connection is asked when it is held; while BEGIN is
// deferred, the BEGIN's text and the pooled connections' default.
func (r *scatterRun) txnCheck() error {
	ss := r.ss
	if !ss.inTxn() {
		return nil
	}
	if r.x.TxTime != "" || r.timeWordValue() {
		what := r.x.TxTime
		if what == "" {
			what = "a date/time input such as 'now' or 'today'"
		}
		return pgerr.New(pgerr.FeatureNotSupported,
			"%s in a multi-shard query in a transaction block is not supported: its other workers' connections would read their own time, not the transaction's", what).
			WithHint("Read the time first (SELECT now()) and pass it as a parameter, or run the query outside the transaction block.")
	}
	level := ""
	if ss.sc == nil {
		var ok bool
		if level, ok = beginIsolation(ss.pendingBegin); !ok || !readCommitted(level) {
			return errTxnIsolation(level)
		}
	}
	conns := r.conns[:len(r.conns):len(r.conns)]
	if ss.sc != nil && r.txIdx < 0 {
		conns = append(conns, ss.sc)
	}
	// The block's SETs (SET LOCAL included), when every one is known:
	// the transaction's other workers' connections run those they have not
	// (catchUp), and pooled connections run the query in a transaction of
	// their own that begins with them and is rolled back at release, which
	// undoes them (a SET of the session's too), so that every part of the
	// query reads under the block's settings.
	replay := ""
	if ss.sc != nil && len(ss.txLog) > 0 && !ss.txLogLost && !ss.paramsUnsure && !namesIdleTimeout(ss.txLog) {
		replay = "BEGIN\n; " + ss.logReplay(0, len(ss.txLog)) + "\n; "
		for k, p := range ss.parked {
			if slices.Contains(r.conns, p.sc) {
				if err := ss.catchUp(k); err != nil {
					return err
				}
			}
		}
	}
	lost := func(i int) {
		conns[i].MarkBroken()
		if i < len(r.conns) {
			r.pending[i] = true
		} else {
			r.txLost = true
		}
	}
	stateSQL := ss.txnStateText()
	cols := 3
	if stateSQL != txnStateSQL {
		cols = 4
	}
	for i, sc := range conns {
		q := pgproto3.Query{String: stateSQL}
		if replay != "" && i < len(r.conns) && i != r.txIdx && (r.parked == nil || !r.parked[i]) {
			q.String = replay + stateSQL
			r.wrapped[i] = true
			for _, op := range ss.txLog {
				// (Set there now: defined on that backend for good.)
				op.customNames(func(name string) { sc.Defines = pooling.AddDefine(sc.Defines, name) })
			}
		}
		b, _ := q.Encode(sc.Buf())
		sc.SetBuf(b)
		if err := sc.Flush(); err != nil {
			for j := i; j < len(conns); j++ {
				lost(j)
			}
			return executor.LostWorker(sc.Addr, err)
		}
	}
	var states [][]*string
	var first error
	for i, sc := range conns {
		rows, err := executor.ReadText(sc)
		if err != nil && !errors.As(err, new(*executor.WorkerError)) {
			lost(i)
		}
		if err == nil && i < len(r.wrapped) && r.wrapped[i] && len(rows) > 1 {
			// The replayed SETs may have rows of their own (a RESET's
			// startup value is set again with set_config): the state is
			// the last.
			rows = rows[len(rows)-1:]
		}
		if err == nil && (len(rows) != 1 || len(rows[0]) != cols || rows[0][0] == nil || rows[0][1] == nil) {
			err = pgerr.New(pgerr.Internal, "unexpected answer from worker %s about its transaction", sc.Addr)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		states = append(states, rows[0])
	}
	if first != nil {
		return first
	}
	if ss.sc == nil {
		// Deferred BEGIN: the transaction's worker is not known yet; any
		// worker's default must be READ COMMITTED.
		for _, st := range states {
			if level == "" && !readCommitted(*st[1]) {
				return errTxnIsolation(*st[1])
			}
		}
		return nil
	}
	txn := states[len(states)-1] // the transaction's connection: appended last, or at txIdx
	if r.txIdx >= 0 {
		txn = states[r.txIdx]
	}
	if !readCommitted(*txn[0]) {
		return errTxnIsolation(*txn[0])
	}
	for _, st := range states {
		if ptrString(st[2]) != ptrString(txn[2]) || cols == 4 && ptrString(st[3]) != ptrString(txn[3]) {
			return pgerr.New(pgerr.FeatureNotSupported,
				"a multi-shard query is not supported in a transaction block after SET or SET LOCAL changed a setting").
				WithHint("The query's connections to other workers have the session's settings as of its last commit: " +
					"run it before the SET, after COMMIT, or pin it to one shard with WHERE <distribution column> = <value>.")
		}
	}
	return nil
}

// scatterSimple runs a multi-shard statement of the simple protocol.
// errHeldNow: a multi-shard run found its tables held by a cut-over just
// before it reached the workers (scatterRun.run); the caller waits and
// plans again.
var errHeldNow = errors.New("held by a cut-over")

func (ss *session) scatterSimple(p *planner.Plan, lits []literal, replan func() (*planner.Plan, []literal, error)) error {
	if err := ss.scatterAllowed(); err != nil {
		return ss.queryError(fleetRefusal(p.Scatter(), err))
	}
	if ss.sc != nil && ss.sc.TxStatus != 'T' {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "a multi-shard query cannot run while the session holds a worker connection").
			WithHint("End the transaction first, or pin the query to one shard with WHERE <distribution column> = <value>."))
	}
	mark := len(ss.out)
	r := &scatterRun{ss: ss, p: p, x: p.Scatter(), lits: lits}
	err := r.run()
	if err != nil && r.ex.Unbound && !r.ex.Gone && !r.txLost {
		// The prepared form failed before any row (its Parse or Bind):
		// the text has PostgreSQL's own answer. Only its notices were
		// sent, which are taken back.
		r.ex.RT.Mu.Lock()
		if r.ex.UnboundParse {
			r.ex.RT.Unbindable = true
		}
		delete(r.ex.RT.BindDescs, r.descKey)
		r.ex.RT.Mu.Unlock()
		ss.out = ss.out[:mark]
		r = &scatterRun{ss: ss, p: p, x: p.Scatter(), lits: lits, noBind: true}
		err = r.run()
	}
	if err != nil && r.ex.Stale && !ss.inTxn() && len(ss.out) == mark {
		// A table changed while the statement waited for it (DDL
		// committed by another session): outside a transaction block
		// nothing ran that counts, so it runs again with the table as it
		// is now, as PostgreSQL, whose statement waited before it read
		// the table's columns. Nor is the description kept from before.
		r.ex.RT.Mu.Lock()
		delete(r.ex.RT.BindDescs, r.descKey)
		r.ex.RT.Mu.Unlock()
		r = &scatterRun{ss: ss, p: p, x: p.Scatter(), lits: lits}
		err = r.run()
	}
	if r.fallBack(err, mark) {
		r = &scatterRun{ss: ss, p: p.Scatter().Fallback, x: p.Scatter().Fallback.Scatter(), lits: lits}
		err = r.run()
	}
	// Any of the runs above may find the tables held just before it
	// reaches the workers: wait, plan again and run.
	for tries := 0; errors.Is(err, errHeldNow); tries++ {
		if _, err = ss.awaitHold(0, p.Tables); err != nil {
			break
		}
		np, nlits, perr := replan()
		switch {
		case perr != nil:
			err = perr
		case np.Scatter() == nil || tries == 3:
			err = errCatalogMoved
		default:
			p, lits = np, nlits
			r = &scatterRun{ss: ss, p: p, x: p.Scatter(), lits: lits}
			err = r.run()
		}
	}
	if errors.Is(err, errHeldNow) {
		err = errCatalogMoved
	}
	if errors.Is(err, errQuietClose) {
		return err
	}
	if r.txLost {
		return ss.lostServer(err)
	}
	if resultTypeChanged(err) {
		// A worker's statement prepared for the run (or the merge's)
		// saw a table change under it again: a simple query has no
		// prepared statement of the client's to fail, so retry.
		err = executor.ErrTableChanged
	}
	if err != nil && ss.inTxn() {
		// The transaction fails, as on PostgreSQL (its worker's too).
		ss.out = appendError(ss.out, ss.srv.catalog.Load(), ss.guardSeq(err))
		return ss.failTxn()
	}
	if err != nil {
		ss.out = appendError(ss.out, ss.srv.catalog.Load(), ss.guardSeq(err))
	}
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// resultTypeChanged reports whether err is PostgreSQL's "cached plan must
// not change result type", a worker's or the executor's own.
func resultTypeChanged(err error) bool {
	if err == executor.ErrResultChanged {
		return true
	}
	var we *executor.WorkerError
	return errors.As(err, &we) && we.PG.Code == pgerr.FeatureNotSupported && we.PG.Message == executor.ErrResultChanged.Message
}

// failTxn makes the session's transaction fail after a simple query's
// error was sent, and ends the answer, as queryError does.
func (ss *session) failTxn() error {
	if ss.sc == nil {
		if ss.pendingBegin != "" {
			ss.pendingFailed = true
		}
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return nil
	}
	ss.sc.SetBuf(append(ss.sc.Buf(), msgAbortQuery...))
	ss.push(expect{kind: eRelay, term: tQuery, abort: true})
	return ss.roundTrip()
}

// scatterFailed answers an Execute of a multi-shard portal with err, after
// the rows already sent: the rest of the batch is skipped and, in a
// transaction block, the transaction fails, as on PostgreSQL.
func (ss *session) scatterFailed(err error) {
	ss.out = appendError(ss.out, ss.srv.catalog.Load(), ss.guardSeq(err))
	ss.skipping = true
	if ss.sc == nil && ss.pendingBegin != "" {
		ss.pendingFailed = true
	}
	if ss.sc != nil {
		ss.sc.SetBuf(append(ss.sc.Buf(), msgAbortParse...))
		ss.push(expect{kind: eSwallow, term: tParse, abort: true})
		ss.needSync = true
	}
}

// scatterDescribe answers Describe of the client's multi-shard statement
// name.
func (ss *session) scatterDescribe(name string, st *Statement) {
	desc, st, err := ss.scatterDesc(name, st)
	if err != nil {
		ss.synthError(err)
		return
	}
	if pa, ok := ss.parsed[name]; ok && ss.stmts[name] == st {
		pa.told = true
		ss.parsed[name] = pa
	}
	b := wire.AppendFrame(nil, 't', desc.paramDesc)
	if desc.rowDesc == nil {
		b = append(b, msgNoData...)
	} else {
		b = wire.AppendFrame(b, 'T', desc.rowDesc)
	}
	ss.push(expect{kind: eSynth, synth: b})
}

// scatterBind answers Bind of a multi-shard statement: the portal is kept
// in the session and runs at Execute.
func (ss *session) scatterBind(portal, name string, st *Statement, params []byte) {
	if err := ss.scatterAllowed(); err != nil {
		if sp, perr := ss.stmtPlan(st); perr == nil {
			err = fleetRefusal(sp.plan.Scatter(), err)
		}
		ss.synthError(err)
		return
	}
	desc, st, err := ss.scatterDesc(name, st)
	if err != nil {
		ss.synthError(err)
		return
	}
	sp, err := ss.stmtPlan(st)
	if err != nil {
		ss.synthError(err)
		return
	}
	n, results, ok := bindResults(params)
	if !ok {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "invalid Bind message"))
		return
	}
	if n != len(desc.paramOIDs) {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement %q requires %d",
			n, name, len(desc.paramOIDs)))
		return
	}
	if nr := int(binary.BigEndian.Uint16(results)); nr > 1 && nr != desc.ncols {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "bind message has %d result formats but query has %d columns", nr, desc.ncols))
		return
	}
	if ss.scatterPortals == nil {
		ss.scatterPortals = map[string]*scatterPortal{}
	}
	cp := append([]byte(nil), params...)
	split := len(params) - len(results)
	ss.scatterPortals[portal] = &scatterPortal{st: st, sp: sp, desc: desc, params: cp[:split:split], results: cp[split:],
		depth: len(ss.savepoints)}
	delete(ss.portals, portal)
	ss.push(expect{kind: eSynth, synth: msgBindComplete})
}

// bindResults finds the result-format section of a Bind's parameter part
// (after the statement name), and the number of parameters.
func bindResults(b []byte) (nparams int, results []byte, ok bool) {
	if len(b) < 2 {
		return 0, nil, false
	}
	nf := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) < 2*nf+2 {
		return 0, nil, false
	}
	b = b[2*nf:]
	nparams = int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for i := 0; i < nparams; i++ {
		if len(b) < 4 {
			return 0, nil, false
		}
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if n > 0 {
			if int(n) > len(b) {
				return 0, nil, false
			}
			b = b[n:]
		}
	}
	if len(b) < 2 || len(b) != 2+2*int(binary.BigEndian.Uint16(b)) {
		return 0, nil, false
	}
	return nparams, b, true
}

// scatterExecute runs a multi-shard portal.
func (ss *session) scatterExecute(portal string, sp *scatterPortal, body []byte) error {
	_, rest, _ := wire.CBytes(body)
	var limit int
	if len(rest) >= 4 {
		limit = int(int32(binary.BigEndian.Uint32(rest)))
	}
	if sp.done {
		// PostgreSQL answers a portal that ran to completion with no
		// rows; one fetched in parts gives its next rows.
		if ss.txStatus() == 'E' {
			ss.synthError(errFailedTxn)
			return nil
		}
		var b []byte
		if sp.partial && sp.rest != nil && sp.settings != ss.cursorSettings() {
			ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
				"fetching the rest of a multi-shard result after the session's settings changed is not supported: pgfleet kept its rows as the settings were at the first Execute").
				WithHint("Change settings before the query, or fetch the whole result at once."))
			return nil
		}
		if sp.partial {
			b = sp.nextPart(nil, limit)
		} else {
			b = commandComplete(nil, "SELECT 0")
		}
		ss.push(expect{kind: eSynth, synth: b})
		return nil
	}
	if ss.sc != nil && !ss.batchWork && (ss.sc.TxStatus == 'I' || ss.needSync) {
		// Only Parse or Describe used the held connection in this batch:
		// answer them with a hidden Sync (outside a transaction block,
		// that ends the implicit transaction and gives the connection
		// back); one that failed there fails the batch, and the read is
		// skipped, as PostgreSQL skips it.
		if err := ss.settle(); err == errBatchFailed {
			return nil
		} else if err != nil {
			return err
		}
	}
	if ss.sc != nil && ss.needSync && ss.pinned == "" {
		// Statements of this pipeline ran on the held connection: as
		// part of the pipeline's transaction, which sees them
		// (pipeline.go).
		if err := ss.pipelineBlock(); err != nil {
			ss.synthError(err)
			return nil
		}
	}
	if ss.sc != nil && (ss.sc.TxStatus == 'I' || ss.batchWork || ss.needSync) {
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard query after other statements in the same pipeline is not supported yet").
			WithHint("Send Sync before it."))
		return nil
	}
	// Nothing is queued for a server: answers so far go out first, then
	// the result streams after them. In a transaction block, the held
	// connection is the transaction's, idle since its last Sync.
	ss.emitSynth()
	p := sp.sp.plan
	if err := ss.scatterAllowed(); err != nil {
		ss.scatterFailed(fleetRefusal(p.Scatter(), err))
		return nil
	}
	if cur, err := ss.stmtPlan(sp.st); err != nil || cur.version != sp.sp.version {
		ss.scatterFailed(errCatalogMoved)
		return nil
	}
	// It runs now (not before: refused in a failed block, it runs after a
	// ROLLBACK TO, as PostgreSQL's; adversary: it gave no rows then).
	sp.done = true
	mark := len(ss.out)
	var c *capture
	if limit > 0 {
		// Fetched in parts (a fetch size): the whole answer is kept,
		// bounded by --max-gather, and given limit rows at a time.
		c = &capture{start: mark, limit: ss.srv.cfg.MaxGather}
		ss.capture = c
	}
	r := &scatterRun{ss: ss, p: p, x: p.Scatter(), port: sp}
	err := r.run()
	if r.fallBack(err, mark) {
		r = &scatterRun{ss: ss, p: p.Scatter().Fallback, x: p.Scatter().Fallback.Scatter(), port: sp, stmts: sp.desc.fallback}
		err = r.run()
	}
	if c != nil {
		ss.endCapture(c)
		switch {
		case err == nil && c.over:
			err = pgerr.New(codeProgramLimitExceeded,
				"the rows of this multi-shard result fetched in parts exceed %d bytes (--max-gather), which the coordinator keeps to give them in parts", c.limit).
				WithHint("Fetch the whole result (no fetch size / row limit), or narrow the query.")
		case err != nil:
			ss.out = append(ss.out, c.frames...)
		default:
			sp.partial, sp.settings = true, ss.cursorSettings()
			ss.out = sp.keepRows(ss.out, c.frames)
			ss.out = sp.nextPart(ss.out, limit)
		}
	}
	if errors.Is(err, errQuietClose) {
		return err
	}
	if r.txLost {
		return ss.lostServer(err)
	}
	if err != nil {
		if executor.FormatsMismatch(err) {
			// The worker's statement has other columns than the Bind's
			// result formats say.
			err = executor.ErrResultChanged
		}
		var we *executor.WorkerError
		if err == executor.ErrResultChanged || errors.As(err, &we) && we.PG.Code == pgerr.FeatureNotSupported {
			// A table changed since the statement was described (or the
			// worker says "cached plan must not change result type" of
			// its statement prepared before): the client's statement
			// fails from now on, as it would on PostgreSQL.
			ss.srv.resultMoved() // first: a session that sees changed sees the new epoch too
			sp.desc.changed.Store(true)
			ss.resultChanged(sp.st)
		}
		ss.scatterFailed(err)
	}
	return nil
}

// scatterDesc describes the client's multi-shard statement name (st) of
// the extended protocol on the worker holding its first shard, once per
// plan, and again after DDL. It returns the statement to run, a new one
// for st when the client prepared st after the DDL that changed its
// result (refreshStmt).
func (ss *session) scatterDesc(name string, st *Statement) (*scatterDesc, *Statement, error) {
	sp, err := ss.stmtPlan(st)
	if err != nil {
		return nil, st, err
	}
	if ss.txScatter != nil {
		// Described on another connection, which sees the tables as
		// they were before this transaction changed them.
		return nil, st, pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard statement over the extended protocol after this transaction changed a distributed or reference table is not supported").
			WithHint("Commit the change first, or send the statement with the simple query protocol.")
	}
	stamp := ss.srv.descStamp()
	old := sp.scatter.Load()
	if old != nil && old.changed.Load() {
		if fresh := ss.refreshStmt(name, st); fresh != nil {
			return ss.scatterDesc(name, fresh)
		}
		return nil, st, ss.resultChanged(st)
	}
	if old != nil && old.stamp == stamp {
		return old, st, nil
	}
	p := sp.plan
	node, err := ss.srv.firstShardNode(p)
	if err != nil {
		return nil, st, err
	}
	if m := p.Scatter().Merge; m != nil && len(m.Local) > 0 && ss.sc != nil {
		// Described on another connection of the default node, which
		// would wait for this transaction's locks on the local table
		// (adversary: TRUNCATE then a join hung), and not see a table it
		// made or a temporary table.
		return nil, st, pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard statement reading %s, which is not a distributed or reference table, over the extended protocol in a transaction block or a pinned session is not supported", strings.Join(m.Local, ", ")).
			WithHint("Send it with the simple query protocol, or prepare it before the transaction begins.")
	}
	pool, err := ss.poolFor(node)
	if err != nil {
		return nil, st, err
	}
	sc, err := ss.sideCheckout(context.Background(), pool)
	if err != nil {
		return nil, st, err
	}
	key := ss.stmtKeyOn(sc)
	b := sc.Buf()
	tail := workerParamTail(paramOIDs(st.paramTail), p.ShardSQL()[0])
	// Described again (a table may have changed, or the catalog, which
	// plans the statement anew): with the parameter types clients were
	// given, which stay, as PostgreSQL keeps a prepared statement's.
	// Clients encode their values by them.
	if old != nil {
		tail = workerParamTail(old.paramOIDs, p.ShardSQL()[0])
	} else if told := st.paramDesc.Load(); told != nil {
		tail = workerParamTail(*told, p.ShardSQL()[0])
	}
	b = wire.AppendFrame(b, 'P', append(append(append([]byte{0}, p.ShardSQL()[0]...), 0), tail...))
	b, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(b)
	b = appendSync(b)
	sc.SetBuf(b)
	d := &scatterDesc{stamp: stamp}
	var werr error
	if err := sc.Flush(); err != nil {
		sc.MarkBroken()
		ss.sideRelease(pool, sc)
		return nil, st, executor.LostWorker(sc.Addr, err)
	}
	err = executor.Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 't':
			d.paramDesc = append([]byte(nil), body...)
		case 'T':
			d.rowDesc = append([]byte(nil), body...)
		case 'E':
			if werr == nil {
				werr = executor.NewWorkerError(body)
			}
		}
	})
	ss.sideRelease(pool, sc)
	if err != nil {
		return nil, st, err
	}
	if werr != nil {
		return nil, st, werr
	}
	var pd pgproto3.ParameterDescription
	if err := pd.Decode(d.paramDesc); err != nil {
		return nil, st, pgerr.New(pgerr.Internal, "invalid parameter description from a worker")
	}
	told := st.descFor(key)
	if key == pooling.UnknownKey {
		told = nil
	}
	if old != nil && !executor.SameShape(old.rowDesc, d.rowDesc) || told != nil && !executor.SameShape(told.row, d.rowDesc) {
		// Described before a table changed: clients may hold the old
		// description.
		if old != nil {
			old.changed.Store(true)
		}
		if fresh := ss.refreshStmt(name, st); fresh != nil {
			return ss.scatterDesc(name, fresh)
		}
		ss.staleStmt(st)
		return nil, st, ss.resultChanged(st)
	}
	d.paramOIDs = pd.ParameterOIDs
	st.paramDesc.CompareAndSwap(nil, &d.paramOIDs)
	if told == nil && key != pooling.UnknownKey {
		st.addDesc(key, d.rowDesc)
	}
	if d.rowDesc != nil {
		d.ncols = int(binary.BigEndian.Uint16(d.rowDesc))
	}
	// Statements of their own (not interned by text): a server connection
	// that prepared the text for an older description (before the table
	// changed) must not run it for this one.
	for _, w := range p.Scatter().Workers {
		d.workers = append(d.workers, ss.srv.stmts.unique(append(append([]byte(w.SQL), 0), workerParamTail(d.paramOIDs, w.SQL)...)))
	}
	if fb := p.Scatter().Fallback; fb != nil {
		for _, w := range fb.Scatter().Workers {
			d.fallback = append(d.fallback, ss.srv.stmts.unique(append(append([]byte(w.SQL), 0), workerParamTail(d.paramOIDs, w.SQL)...)))
		}
	}
	sp.scatter.Store(d)
	return d, st, nil
}

// descStamp dates a multi-shard statement's description: the DDL epoch
// of this coordinator (stmtEpoch) and the generation of the server's
// multi-shard cache (a catalog change). A description of another stamp
// is made again.
type descStamp struct {
	epoch int64
	gen   uint64
}

func (s *Server) descStamp() descStamp {
	return descStamp{epoch: s.stmtEpoch.Load(), gen: s.scatter.generation()}
}

// refreshStmt gives the client's statement name a new Statement for st's
// text when the client prepared it after the last DDL through this
// coordinator and the last catalog change, and st's result changed: on
// PostgreSQL such a statement was analysed with the table as it is now,
// and answers (its description, asked for since, was made afresh). The
// old one is stale for every session (prepared before, they fail as
// PostgreSQL's do). nil when the client's statement is older than either.
func (ss *session) refreshStmt(name string, st *Statement) *Statement {
	if pa := ss.parsed[name]; ss.stmts[name] != st || pa.stamp != ss.srv.descStamp() || pa.told {
		// (A client told the old description encodes its values and
		// reads its rows by it: PostgreSQL's 0A000 rather than another.)
		return nil
	}
	ss.staleStmt(st)
	fresh := ss.srv.stmts.intern(append(append([]byte(st.Query), 0), st.paramTail...))
	if fresh == nil || fresh == st {
		return nil
	}
	ss.stmts[name] = fresh
	return fresh
}

// resultChanged answers a Describe, Bind or Execute of a statement
// prepared before its result changed: the registry forgets the statement,
// so that the client's next Parse of the text makes a new one.
func (ss *session) resultChanged(st *Statement) error {
	ss.srv.stmts.forget(st)
	if ss.lastParseSt == st {
		ss.lastParseSt = nil
	}
	return executor.ErrResultChanged
}

// forget drops st from the registry if it is still there.
func (r *stmtRegistry) forget(st *Statement) {
	key := st.Query + "\x00" + string(st.paramTail)
	r.mu.Lock()
	if r.m[key] == st {
		delete(r.m, key)
	}
	r.mu.Unlock()
}

// unique makes a statement for a Parse body's query and parameter types
// under a name of its own, without interning it.
func (r *stmtRegistry) unique(rest []byte) *Statement {
	q, _, _ := wire.CString(rest)
	r.mu.Lock()
	r.next++
	name := "pgfleet_" + strconv.FormatUint(r.next, 10)
	r.mu.Unlock()
	body := append(append([]byte(name), 0), rest...)
	return &Statement{Name: name, Query: q, parse: wire.AppendFrame(nil, 'P', body), cls: classify(q),
		paramTail: append([]byte(nil), rest[len(q)+1:]...)}
}

// own is a statement of one session's, made after DDL in its open
// transaction: it and its shard statements (derive) are parsed afresh
// on the transaction's connections, which see the tables as the
// transaction has them.
func (r *stmtRegistry) own(rest []byte) *Statement {
	st := r.unique(rest)
	st.own = true
	return st
}

// derive is a statement made from parent's (a shard's form of it): a
// session's own for an own parent, else interned.
func (r *stmtRegistry) derive(parent *Statement, rest []byte) *Statement {
	if parent.own {
		return r.own(rest)
	}
	return r.intern(rest)
}

// workerParamTail is paramTail for a worker's statement sql: a type that
// is not built in has another OID on each worker (types are created on
// each, in its own OID sequence, and may have been dropped and created
// again since a statement was described), so it is left for the worker to
// infer from the statement, as the first one did; a parameter the
// statement does not use (a gathering's statements use none) is text,
// which takes any value.
func workerParamTail(oids []uint32, sql string) []byte {
	w := make([]uint32, len(oids))
	for i, o := range oids {
		w[i] = executor.WorkerParamOID(o, usesParam(sql, i+1))
	}
	return executor.ParamTail(w)
}

// usesParam reports whether sql has the parameter $k (by its text: a $k
// inside a string constant counts too, which leaves its type to infer).
func usesParam(sql string, k int) bool {
	p := "$" + strconv.Itoa(k)
	for i := strings.Index(sql, p); i >= 0; {
		end := i + len(p)
		if end == len(sql) || sql[end] < '0' || sql[end] > '9' {
			return true
		}
		j := strings.Index(sql[end:], p)
		if j < 0 {
			return false
		}
		i = end + j
	}
	return false
}

// firstShardNode is the node holding a multi-shard plan's first shard,
// which describes its result (and runs a gathering's statement). A
// gathering that reads local relations runs where they are: the first
// shard must be on the default node.
func (s *Server) firstShardNode(p *planner.Plan) (int32, error) {
	x := p.Scatter()
	if x.Fleet {
		return s.defaultNode.Load(), nil
	}
	shards := s.catalog.Load().Shards[x.Table]
	if len(shards) == 0 || len(shards[0].Nodes) == 0 {
		return 0, errCatalogMoved
	}
	node := shards[0].Nodes[0]
	if m := x.Merge; m != nil && len(m.Local) > 0 && node != s.defaultNode.Load() {
		return 0, pgerr.New(pgerr.FeatureNotSupported, "reading %s, which is not a distributed or reference table, beside %s is not supported while the first shard of %s is not on the default node (%s)",
			strings.Join(m.Local, ", "), strings.Join(m.Tables, ", "), x.Table, s.nodeAddr(s.defaultNode.Load())).
			WithHint("Read %s in a statement of its own, make it a reference table (create_reference_table), or move the table's first shard back to the default node (citus_move_shard_placement).", strings.Join(m.Local, ", "))
	}
	return node, nil
}

// cancelScatter sends a cancel request for each connection a multi-shard
// statement runs on, and each the session took beside its own (the caller
// holds cancelMu).
func (ss *session) cancelScatter(ctx context.Context) {
	for _, sc := range slices.Concat(ss.scatterTargets, ss.sideTargets) {
		if err := sendCancel(ctx, sc); err != nil {
			ss.srv.log.Warn("forwarding cancel request", "worker", sc.Addr, "err", fmt.Sprint(err))
		}
	}
}

// scatterRun is one run of a multi-shard statement: the session's side of
// it (plans, connections, the transaction's checks); the executor runs the
// statement on the connections (executor.Scatter).
type scatterRun struct {
	ss *session
	p  *planner.Plan
	x  *planner.Scatter
	// rt is the plan's runtime state, taken once for the run: the checks
	// fill the one the executor reads (a catalog change between them
	// resets the cache, whose next get is a new, unchecked one).
	rt   *executor.Runtime
	lits []literal // simple protocol: the statement's constants
	// noBind: the constants go spliced into the text, not bound to the
	// workers' prepared statements (bindParams). descKey: the bound run's
	// key to its result's description (executor.Runtime.BindDescs).
	noBind  bool
	descKey executor.BindKey
	port    *scatterPortal // extended protocol
	ex      executor.Scatter

	pools   []*pooling.Pool
	conns   []*pooling.ServerConn
	pending []bool // sent to and not yet read up to ReadyForQuery
	descIdx int    // the connection holding the first shard
	// txIdx is the connection that is the session's transaction's
	// current one (-1: none); parked marks the transaction's other
	// workers' connections (txnmulti.go), which the query reads on too,
	// to see the transaction's writes there; txLost: one of them was left
	// in an unknown state.
	txIdx  int
	parked []bool
	txLost bool
	// wrapped marks pooled connections that run the query in a
	// transaction of their own, begun with the block's SETs (txnCheck),
	// rolled back at release.
	wrapped []bool
	// stmts: the workers' prepared statements when not the portal's
	// (its plan's fallback, extended protocol).
	stmts []*Statement
	// textCols, rowCols: a gathering's columns that go as text, and its
	// rows' width (executor.Runtime), read after the check.
	textCols map[int]executor.TextCol
	rowCols  int
	limit    int64
	offset   int64
}

// fallBack reports whether the run ended on a MergeLimit that the plan's
// fallback (gathering) can answer; the client has been sent nothing of
// the run but workers' notices, which are taken back (from mark on).
func (r *scatterRun) fallBack(err error, mark int) bool {
	if r.x.Fallback == nil || r.ex.Gone || r.txLost || !errors.As(err, new(*executor.MergeLimit)) {
		return false
	}
	if r.port != nil && (r.port.desc.fallback == nil || len(r.port.desc.fallback) != len(r.x.Fallback.Scatter().Workers)) {
		return false
	}
	if len(r.ss.out) >= mark {
		r.ss.out = r.ss.out[:mark]
	}
	return true
}

// run takes connections to every worker, makes the session's checks and
// has the executor run the statement (executor.Scatter.Run). An error it
// returns has not been sent yet.
func (r *scatterRun) run() error {
	ss := r.ss
	r.txIdx = -1
	node, err := ss.srv.firstShardNode(r.p)
	if err != nil {
		return err
	}
	r.descIdx = -1
	for i, w := range r.x.Workers {
		if w.Node == node {
			r.descIdx = i
		}
	}
	if r.descIdx < 0 {
		return errCatalogMoved
	}
	r.limit = -1
	if r.x.Merge.Kind != planner.SQLMerge {
		if r.limit, err = r.value(r.x.Merge.Limit, -1, "2201W", "LIMIT"); err != nil {
			return err
		}
		if r.offset, err = r.value(r.x.Merge.Offset, 0, "2201X", "OFFSET"); err != nil {
			return err
		}
	}
	defer r.release()
	if err := r.acquire(); err != nil {
		return err
	}
	if err := r.txnCheck(); err != nil {
		return fleetRefusal(r.x, err)
	}
	if err := r.check(); err != nil {
		return err
	}
	if err := r.checkEncoding(); err != nil {
		return fleetRefusal(r.x, err)
	}
	if ss.srv.holds.n.Load() > 0 && r.port == nil {
		// A cut-over's hold came while the run took its connections and
		// made its checks (round trips, a pool's wait): nothing has
		// reached a worker yet, and the plan names the nodes the move is
		// changing (found under load in TestMoveInTransactions: 40001).
		if _, _, held := ss.srv.holding(0, r.p.Tables, ss.touched, ss.touchedAll); held {
			return errHeldNow
		}
	}
	r.ex = executor.Scatter{X: r.x, FirstSQL: r.p.ShardSQL()[0], Conns: r.conns, First: r.descIdx, Pending: r.pending,
		RT: r.runtime(), Env: &ss.srv.execEnv, Limit: r.limit, Offset: r.offset,
		TextCols: r.textCols, RowCols: r.rowCols, Sink: clientSink{ss}, Cancel: ss.cancelGather}
	if r.port != nil {
		b, err := r.port.bound(r.stmts)
		if err != nil {
			return err
		}
		r.ex.Bound = b
	} else {
		r.ex.Text = litText(r.lits)
		if !r.noBind {
			r.ex.Params = r.bindParams()
		}
	}
	err = r.ex.Run()
	if err == nil && r.ex.Params != nil && r.ex.Params.RowDesc == nil {
		rt := r.ex.RT
		rt.Mu.Lock()
		if rt.BindDescs == nil || len(rt.BindDescs) >= 64 {
			rt.BindDescs = map[executor.BindKey][]byte{}
		}
		rt.BindDescs[r.descKey] = r.ex.RowDesc()
		rt.Mu.Unlock()
	}
	return err
}

// bindParams is the run's prepared form (executor.TextParams): each
// worker's statement prepared, the constants bound as parameters, typed
// as PostgreSQL's parser types them, so that the workers plan it once
// rather than at every execution. nil (the text runs) unless the plan
// allows it (planner.Bindable), every constant is a number whose meaning
// and conversions cannot depend on being a parameter (literalType), no
// sum of two of them can fail, and the statement runs on pooled
// connections only: a failed Parse or Bind (which the text then answers)
// must not touch the session's transaction.
func (r *scatterRun) bindParams() *executor.TextParams {
	b := r.x.Bind
	// (A merge, or one worker's rows as they come: either way nothing
	// reaches the client before the workers' Binds are answered.)
	if b == nil || len(r.lits) == 0 || r.x.Merge.Kind != planner.SQLMerge && !r.x.Whole || r.txIdx >= 0 || slices.Contains(r.parked, true) {
		return nil
	}
	var sig [len(executor.BindKey{}.Types)]byte
	if len(r.lits) > len(sig) {
		return nil
	}
	for i, l := range r.lits {
		t := literalType(l)
		if t == 0 {
			return nil
		}
		sig[i] = t
	}
	for _, s := range b.Sums {
		if s.A < 1 || s.B < 1 || s.A > len(r.lits) || s.B > len(r.lits) || !sumFits(r.lits[s.A-1], r.lits[s.B-1], s.Op) {
			return nil
		}
	}
	// The result's description depends on the constants' types and the
	// session's settings (search_path).
	r.descKey = executor.BindKey{Types: sig, Settings: r.ss.params.key}
	rt := r.ex.RT
	rt.Mu.Lock()
	if rt.Unbindable {
		rt.Mu.Unlock()
		return nil
	}
	stmts := rt.BindStmts[string(sig[:len(r.lits)])]
	desc := rt.BindDescs[r.descKey]
	rt.Mu.Unlock()
	if stmts == nil {
		stmts = make([]executor.Stmt, len(r.x.Workers))
		for i, w := range r.x.Workers {
			oids := make([]uint32, len(r.lits))
			for k := range r.lits {
				switch {
				case !usesParam(w.SQL, k+1):
					oids[k] = pgtype.TextOID // takes any value
				case sig[k] == 'i':
					oids[k] = pgtype.Int4OID
				case sig[k] == 'l':
					oids[k] = pgtype.Int8OID
				case sig[k] == 'n':
					oids[k] = pgtype.NumericOID
				}
			}
			stmts[i] = r.ss.srv.execEnv.Prepared(append(append([]byte(w.SQL), 0), executor.ParamTail(oids)...))
		}
		rt.Mu.Lock()
		if rt.BindStmts == nil || len(rt.BindStmts) >= 16 {
			rt.BindStmts = map[string][]executor.Stmt{}
		}
		rt.BindStmts[string(sig[:len(r.lits)])] = stmts
		rt.Mu.Unlock()
	}
	values := make([][]byte, len(r.lits))
	for i, l := range r.lits {
		values[i] = []byte(l.value)
	}
	return &executor.TextParams{Stmts: stmts, Values: values, RowDesc: desc}
}

// literalType is how PostgreSQL's parser types a lifted constant that may
// be bound as a parameter: 'i' int4, 'l' int8 (integers, by their
// digits), 'n' numeric for a decimal of at most 18 characters without an
// exponent; 0 for anything else, which is not bound:
//   - a string: a parameter of unknown type has its type fixed when the
//     statement is prepared, and keeps it after an ALTER of the column
//     it is compared with (on another coordinator, say), where the
//     text's literal would take the new type;
//   - a larger or smaller numeric (1e400, 0.000...1): its implicit cast to
//     float4 or float8 may fail, which PostgreSQL does while planning the
//     text and a generic plan only for a row that needs it;
//   - an integer beyond int8, and an IN list collapsed into one literal.
func literalType(l literal) byte {
	tok := l.token
	if l.list || tok == "" || tok[0] < '0' || tok[0] > '9' || len(tok) > 19 {
		return 0
	}
	dot := false
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case c == '.' && !dot:
			dot = true
		case c < '0' || c > '9':
			return 0
		}
	}
	if dot {
		if len(tok) > 18 {
			return 0
		}
		return 'n'
	}
	v, err := strconv.ParseInt(tok, 10, 64)
	switch {
	case err != nil:
		return 0 // beyond int8: numeric
	case v <= math.MaxInt32:
		return 'i'
	}
	return 'l'
}

// sumFits reports whether a op b (two lifted constants, planner.ParamSum)
// is evaluated without error: two integers whose sum or difference is
// within their type (int4, or int8 if either is).
func sumFits(a, b literal, op byte) bool {
	ta, tb := literalType(a), literalType(b)
	if ta != 'i' && ta != 'l' || tb != 'i' && tb != 'l' {
		return false
	}
	x, err1 := strconv.ParseInt(a.token, 10, 64)
	y, err2 := strconv.ParseInt(b.token, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	if op == '-' {
		if y == math.MinInt64 {
			return false
		}
		y = -y
	}
	s := x + y
	if (y > 0 && s < x) || (y < 0 && s > x) {
		return false // beyond int8
	}
	if ta == 'i' && tb == 'i' {
		return s >= math.MinInt32 && s <= math.MaxInt32
	}
	return true
}

// bound is the portal as the executor runs it, with the workers'
// statements stmts (nil: the portal's).
func (sp *scatterPortal) bound(stmts []*Statement) (*executor.Bound, error) {
	b, err := executor.DecodeBind(sp.params, sp.results)
	if err != nil {
		return nil, err
	}
	if stmts == nil {
		stmts = sp.desc.workers
	}
	b.RowDesc, b.NCols, b.ParamOIDs = sp.desc.rowDesc, sp.desc.ncols, sp.desc.paramOIDs
	b.Stmts = make([]executor.Stmt, len(stmts))
	for i, st := range stmts {
		b.Stmts[i] = executor.Stmt{Name: st.Name, Parse: st.parse}
	}
	return b, nil
}

// clientSink is the executor's way to the session's client: messages
// queue in ss.out, written out past 64 KiB of rows or COPY data.
type clientSink struct{ ss *session }

func (k clientSink) Send(typ byte, body []byte) bool {
	ss := k.ss
	ss.out = wire.AppendFrame(ss.out, typ, body)
	if (typ == 'D' || typ == 'd') && len(ss.out) > 64<<10 {
		return ss.flush() == nil
	}
	return true
}

// litText is a simple-protocol statement's constants (executor.Text).
type litText []literal

func (l litText) Splice(sql string) string { return splice(sql, l) }

func (l litText) SpliceParams(sql string, params []int, first int) (string, error) {
	lits := make([]literal, len(params))
	for i, k := range params {
		if k > len(l) {
			return "", pgerr.New(pgerr.ProtocolViolation, "there is no parameter $%d", k)
		}
		lits[i] = l[k-1]
	}
	out, _ := spliceFrom(sql, lits, first)
	return out, nil
}

// splice puts a simple-protocol statement's constants back.
func splice(sql string, lits []literal) string {
	if lits == nil {
		return sql
	}
	out, _ := spliceLiterals(sql, lits)
	return out
}

// cancelGather cancels a multi-shard statement's parts on every worker
// (its partial results grew past --max-gather).
func (ss *session) cancelGather() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ss.cancelMu.Lock()
	ss.cancelScatter(ctx)
	ss.cancelMu.Unlock()
	cancel()
}

// value reads a LIMIT or OFFSET of a concatenation: a constant or a
// parameter, as PostgreSQL rounds it to bigint.
func (r *scatterRun) value(v *planner.Value, none int64, code, what string) (int64, error) {
	if v == nil {
		return none, nil
	}
	text := v.Const
	if v.Param > 0 {
		switch {
		case r.port != nil:
			b, format, isNull, ok := bindParam(r.port.params, v.Param-1)
			switch {
			case !ok:
				return 0, pgerr.New(pgerr.ProtocolViolation, "invalid Bind message")
			case isNull:
				return none, nil
			case format == 1 && len(b) == 8:
				text = strconv.FormatInt(int64(binary.BigEndian.Uint64(b)), 10)
			case format == 1 && len(b) == 4:
				text = strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(b))), 10)
			case format == 1:
				return 0, pgerr.New(pgerr.FeatureNotSupported, "a binary %s parameter of %d bytes is not supported in a multi-shard query", what, len(b)).
					WithHint("Send the parameter in text format, or as a bigint.")
			default:
				text = string(b)
			}
		case v.Param <= len(r.lits):
			text = r.lits[v.Param-1].value
		default:
			return 0, pgerr.New(pgerr.ProtocolViolation, "there is no parameter $%d", v.Param)
		}
	}
	text = strings.TrimSpace(text)
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(text, 64)
		if ferr != nil || math.IsNaN(f) || math.Abs(f) > 9.2e18 {
			return 0, pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type bigint: %q", text)
		}
		n = int64(math.Round(f))
	}
	if n < 0 {
		return 0, pgerr.New(code, "%s must not be negative", what)
	}
	return n, nil
}

// acquire takes a connection to every worker, in node order, each in the
// class of the connections the session holds by then (pooling.Pool), so
// that sessions never wait for each other's connections forever.
func (r *scatterRun) acquire() error {
	ss := r.ss
	n := len(r.x.Workers)
	r.pools, r.conns, r.pending, r.wrapped = make([]*pooling.Pool, n), make([]*pooling.ServerConn, n), make([]bool, n), make([]bool, n)
	r.txIdx = -1
	ss.dropSpares()      // (side checkouts do not go beyond the classes' reserve)
	held := ss.holding() // the class of the next checkout (pooling.Pool)
	if r.userCode() && ss.sc != nil && len(ss.txLog) > 0 {
		// After SETs in the block, the read runs on the transaction's
		// connection too (txnCheck), where user code no state read
		// follows would keep the session pinned to it for good (release;
		// adversary 162): refused, as before such reads were run.
		return pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard query that calls functions which may change session state is not supported after a SET in the same transaction block").
			WithHint("Run it before the SET, or outside the transaction block.")
	}
	if r.userCode() && len(ss.parked) > 0 {
		return pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard query that calls functions which may change session state is not supported in a transaction that spans several workers").
			WithHint("Run it before the transaction touches a second worker, or outside the transaction block.")
	}
	if len(ss.parked) > 0 {
		r.parked = make([]bool, n)
	}
	if r.port != nil && r.port.st.cls.setsCustom || r.port == nil && ss.customSetNext {
		// Its setting would stay on the shards' connections, which are
		// closed after it: the client would lose what it set.
		return pgerr.New(pgerr.FeatureNotSupported,
			"set_config() in a multi-shard query is not supported: the setting would not reach this session").
			WithHint("Call set_config in a statement of its own, or in one on a single shard.")
	}
	if ss.sc != nil && ss.verifyState && r.needsOthers() && (ss.needSync || ss.stateChanged()) {
		// (In a pipeline the connection owes answers: not read here.)
		// User code changed the session on the transaction's connection
		// (a function's set_config): the other workers' connections,
		// outside it, would read without the change (adversary: a
		// tenant a function set in the block was NULL on the other
		// worker's shards, 10 rows where PostgreSQL counts 40).
		return errMultiRefused(fmt.Sprintf("a function changed this session's settings or state in this transaction on worker %s; a multi-shard query would not see the change on the other workers", ss.srv.nodeAddr(ss.node)),
			"Make the change with SET before BEGIN, or keep the transaction to rows on one worker.")
	}
	for i, w := range r.x.Workers {
		if ss.sc != nil && w.Node == ss.node && r.txIdx < 0 {
			// In a transaction block: the transaction's own connection,
			// which sees its writes.
			r.pools[i], r.conns[i], r.txIdx = ss.pool, ss.sc, i
			continue
		}
		if k := ss.parkedOn(w.Node); k >= 0 && !slices.Contains(r.conns[:i], ss.parked[k].sc) {
			// Another worker of the transaction: its connection there.
			r.pools[i], r.conns[i], r.parked[i] = ss.parked[k].pool, ss.parked[k].sc, true
			continue
		}
		pool, err := ss.poolFor(w.Node)
		if err != nil {
			return err
		}
		sc, err := ss.checkout(context.Background(), pool, held)
		if err != nil {
			return err
		}
		held++
		r.pools[i], r.conns[i] = pool, sc
	}
	ss.cancelMu.Lock()
	ss.scatterTargets = r.conns
	ss.cancelMu.Unlock()
	if ss.settingsAside() {
		// After a SET in the block, its connections run under the block's
		// settings (txnCheck's replay on pooled ones): a statement the
		// workers parse now folds its constants under them (a timestamptz
		// literal under SET LOCAL TimeZone), and is neither one prepared
		// under the connection's usual settings nor one for later sessions
		// (adversary 161: a later session read another time zone's rows).
		for _, sc := range r.conns {
			sc.OtherSettings = true
		}
	}
	if r.userCode() {
		// User code may read sequence state: none of another client's
		// (seqcheck.go).
		for _, sc := range r.conns {
			if sc.TxStatus == 'E' {
				continue
			}
			if err := sc.Exec("DISCARD SEQUENCES", time.Now().Add(txCleanupTimeout), nil); err != nil {
				var pe *pgconn.PgError
				if !errors.As(err, &pe) {
					sc.MarkBroken()
				}
				return err
			}
		}
	}
	return nil
}

// userCode reports whether the run's statement calls code that is not
// built in (a user's function), which may change session state.
func (r *scatterRun) userCode() bool {
	ss := r.ss
	return (r.port != nil && ss.stVerify(r.port.st)) || (r.port == nil && ss.verifyNext)
}

// release gives the connections back; one left mid-answer is closed.
func (r *scatterRun) release() {
	ss := r.ss
	ss.cancelMu.Lock()
	ss.scatterTargets = nil
	ss.cancelMu.Unlock()
	// User code (a function that is not built in) may have changed session
	// state on the shards' connections where no snapshot was taken: they
	// are closed rather than given to another session, and the session
	// keeps its transaction's connection for good.
	userCode := r.userCode()
	for i, sc := range r.conns {
		if sc == nil {
			continue
		}
		sc.OtherSettings = false
		if r.pending[i] || (userCode && i != r.txIdx) {
			sc.MarkBroken()
		}
		if userCode && i == r.txIdx {
			ss.pin("session state changed by a function")
		}
		if i == r.txIdx || r.parked != nil && r.parked[i] {
			// The session keeps it; left mid-answer, the transaction is lost.
			r.txLost = r.txLost || r.pending[i]
			continue
		}
		if r.wrapped != nil && r.wrapped[i] && !r.pending[i] {
			// Its transaction of the block's SETs (txnCheck) is undone.
			if err := sc.Exec("ROLLBACK", time.Now().Add(txCleanupTimeout), nil); err != nil || sc.TxStatus != 'I' {
				sc.MarkBroken()
			}
		}
		r.pools[i].Release(sc)
	}
}

// runtime is the run's runtime state (rt), taken from the session's cache
// on first use.
func (r *scatterRun) runtime() *executor.Runtime {
	if r.rt == nil {
		r.rt = r.ss.scatterCache().get(r.p)
	}
	return r.rt
}

// check makes the plan's catalog checks, once per plan: no function the
// merge takes for a plain function is an aggregate or window function,
// and no column the merge compares has a collation other than the
// database's default.
func (r *scatterRun) check() error {
	x := r.x
	if len(x.CheckFuncs) == 0 && len(x.CheckCollation) == 0 && len(x.LimitFuncs) == 0 {
		return nil
	}
	rt := r.runtime()
	rt.Mu.Lock()
	defer rt.Mu.Unlock()
	// The run takes the gathering's text columns as the check found them.
	defer func() { r.textCols, r.rowCols = rt.TextCols, rt.RowCols }()
	if rt.Checked {
		return rt.CheckErr
	}
	var q string
	if len(x.CheckFuncs) > 0 {
		q = "SELECT (SELECT pg_catalog.string_agg(DISTINCT proname::text, ', ') FROM pg_catalog.pg_proc WHERE prokind IN ('a', 'w') AND proname::text = ANY (" +
			textArray(x.CheckFuncs) + "))"
	} else {
		q = "SELECT NULL::text"
	}
	if x.Merge.Gather {
		for _, rel := range x.CheckRelations {
			q += gatherCheckSQL(rel)
		}
	} else if len(x.CheckCollation) > 0 {
		cols := "true"
		if x.CheckCollation[0] != "*" {
			cols = "attname::text = ANY (" + textArray(x.CheckCollation) + ")"
		}
		q += ", (SELECT pg_catalog.string_agg(DISTINCT attname::text, ', ') FROM pg_catalog.pg_attribute WHERE attrelid IN (SELECT pg_catalog.to_regclass(n) FROM pg_catalog.unnest(" +
			textArray(x.CheckRelations) + ") n) AND attnum > 0 AND NOT attisdropped AND attcollation NOT IN (0, 100) AND " + cols + ")"
	} else {
		q += ", NULL::text"
	}
	sc := r.conns[r.descIdx]
	rows, err := executor.QueryText(sc, q)
	if err != nil {
		if !errors.As(err, new(*executor.WorkerError)) {
			r.pending[r.descIdx] = true // the connection is in an unknown state
		}
		return err
	}
	rt.Checked = true
	if x.Merge.Gather && len(rows) == 1 && len(rows[0]) == 1+gatherChecks*len(x.CheckRelations) {
		var bad []string
		rt.Collations = make([]map[string]string, len(x.CheckRelations))
		rt.Keys = make([][]int, len(x.CheckRelations))
		rt.TextCols = map[int]executor.TextCol{}
		offset := 0
		for k := range x.CheckRelations {
			c := rows[0][1+gatherChecks*k:]
			colls, types, names, count, texts, key := c[0], c[1], c[2], c[3], c[4], c[5]
			if key != nil {
				for _, p := range strings.Split(*key, ",") {
					n, err := strconv.Atoi(p)
					if err != nil {
						rt.Keys[k] = nil
						break
					}
					rt.Keys[k] = append(rt.Keys[k], n)
				}
			}
			if len(x.CheckRelations) > 1 {
				offset++ // the table's separator
			}
			if err := rt.NoteTextCols(offset, texts); err != nil {
				rt.CheckErr = err
				return err
			}
			n, _ := strconv.Atoi(ptrString(count))
			offset += n
			if names != nil {
				for _, tn := range strings.Split(*names, ",") {
					rt.Encoded = rt.Encoded || !executor.EncodingFree[tn]
				}
			}
			if types != nil {
				bad = append(bad, *types+" of "+x.Merge.Tables[k])
			}
			if colls != nil {
				if rt.Collations[k], err = parseCollations(*colls); err != nil {
					rt.CheckErr = err
					return err
				}
			}
		}
		rt.RowCols = offset
		if len(rt.TextCols) > 0 {
			rt.Encoded = true // text in the client's encoding
		}
		if bad != nil {
			rt.BadTypes = pgerr.New(pgerr.FeatureNotSupported,
				"this multi-shard query runs over gathered rows, whose columns %s are of types the coordinator cannot gather yet", strings.Join(bad, "; ")).
				WithHint("Pin the query to one shard with WHERE <distribution column> = <value>, or write it so that each shard's part can be aggregated on the shard.")
		}
		rows[0][1] = nil
	}
	if len(rows) == 1 && rows[0][0] != nil {
		rt.CheckErr = &executor.MergeLimit{Err: pgerr.New(pgerr.FeatureNotSupported,
			"the multi-shard query calls %s, an aggregate or window function the coordinator cannot combine across shards", *rows[0][0]).
			WithHint("Supported across shards: count, sum, min, max, avg, bool_and, bool_or, bit_and, bit_or, bit_xor; or GROUP BY the distribution column.")}
	} else if len(rows) == 1 && rows[0][1] != nil {
		rt.CheckErr = &executor.MergeLimit{Err: pgerr.New(pgerr.FeatureNotSupported,
			"the multi-shard query sorts, groups or compares column %s, whose collation is not the database default; merging its shards' results is not supported yet", *rows[0][1]).
			WithHint("Pin the query to one shard, or drop ORDER BY, GROUP BY and DISTINCT on that column.")}
	}
	if rt.CheckErr == nil && len(x.LimitFuncs) > 0 {
		// Each shard stops at the LIMIT on its own, evaluating the select
		// list on more rows than PostgreSQL: a VOLATILE function there
		// would run more often (its side effects, notices, nextval).
		rows, err := executor.QueryText(sc, "SELECT pg_catalog.string_agg(DISTINCT proname::text, ', ') FROM pg_catalog.pg_proc WHERE provolatile = 'v' AND proname::text = ANY ("+
			textArray(x.LimitFuncs)+")")
		if err != nil {
			rt.Checked = false
			if !errors.As(err, new(*executor.WorkerError)) {
				r.pending[r.descIdx] = true
			}
			return err
		}
		if len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil {
			rt.CheckErr = &executor.MergeLimit{Err: pgerr.New(pgerr.FeatureNotSupported,
				"the multi-shard query calls %s, a volatile function, in its select list under a LIMIT: each shard would call it on more rows than PostgreSQL does", *rows[0][0]).
				WithHint("Pin the query to one shard with WHERE <distribution column> = <value>, or call the function in a query of its own over the rows returned.")}
		}
	}
	return rt.CheckErr
}

// gatherCheckSQL reads five things of a gathered table (rel, one of its
// shards) as six columns: its columns' collations where they are not the
// default (the gathered statement applies them); its columns that cannot
// be gathered at all (textShipped says which others go as text); its
// columns' type names; its number of columns; and, one per line, the
// position (from 0), type oid as a RowDescription gives it (a domain's
// base type) and type name (format_type) of each column that goes as text;
// and its primary key's columns, as positions (from 1) among its columns
// (for planner.groupByKeys).
//
// A column goes through the merge as a binary array element of its type
// when it has one (built-in base types with binary I/O). Those that have
// none go as text and are cast back to their type by the merge statement,
// under the same session settings, when their text round trip is exact:
// enums, arrays of built-in non-float, non-geometric base types or of
// enums, and domains over built-in non-float, non-geometric base types.
// The rest is refused: xml (its binary receive, and its text output, drop
// an encoding declaration), composites, float and geometric arrays (their
// text depends on extra_float_digits), other user-defined types.
// gatherChecks is the number of values gatherCheckSQL reads.
const gatherChecks = 6

func gatherCheckSQL(rel string) string {
	attrs := "WHERE a.attrelid = pg_catalog.to_regclass(" + quoteLiteral(rel) + ") AND a.attnum > 0 AND NOT a.attisdropped"
	return ", (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.collname), ',') " +
		"FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace " +
		attrs + " AND a.attcollation NOT IN (0, 100))" +
		", (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ' (' || pg_catalog.format_type(a.atttypid, a.atttypmod) || ')', ', ' ORDER BY a.attnum) " +
		"FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid " + attrs +
		" AND " + binaryMissing + " AND NOT " + textShipped + ")" +
		", (SELECT pg_catalog.string_agg(t.typname::text, ',') FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid " + attrs + ")" +
		", (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a " + attrs + ")" +
		", (SELECT pg_catalog.string_agg(x.ord || ' ' || x.oid || ' ' || x.name, E'\\n' ORDER BY x.ord) FROM (SELECT pg_catalog.row_number() OVER (ORDER BY a.attnum) - 1 AS ord, " +
		"(CASE t.typtype WHEN 'd' THEN t.typbasetype ELSE a.atttypid END)::pg_catalog.int8 AS oid, pg_catalog.format_type(a.atttypid, a.atttypmod) AS name, (" + binaryMissing + " AND " + textShipped + ") AS text " +
		"FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid " + attrs + ") x WHERE x.text)" +
		// The primary key's columns, as positions among the columns (a
		// deferrable key gives PostgreSQL no functional dependency).
		", (SELECT pg_catalog.string_agg((SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute b WHERE b.attrelid = a.attrelid " +
		"AND b.attnum > 0 AND NOT b.attisdropped AND b.attnum <= a.attnum)::text, ',' ORDER BY k.i) " +
		"FROM pg_catalog.pg_constraint con, pg_catalog.unnest(con.conkey) WITH ORDINALITY k(n, i), pg_catalog.pg_attribute a " +
		"WHERE con.conrelid = pg_catalog.to_regclass(" + quoteLiteral(rel) + ") AND con.contype = 'p' AND NOT con.condeferrable AND a.attrelid = con.conrelid AND a.attnum = k.n)"
}

// binaryMissing: a column of type t (pg_type) cannot go through the merge
// as a binary array element of its type.
const binaryMissing = "(t.typtype <> 'b' OR t.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace OR t.typcategory = 'A' OR t.typsend = 0 OR t.typreceive = 0 " +
	"OR t.typname IN ('xml', 'aclitem'))"

// textShipped: a column of type t that binaryMissing leaves out goes
// through the merge as text (gatherCheckSQL).
var textShipped = "(t.typtype = 'e' " +
	"OR (t.typcategory = 'A' AND EXISTS (SELECT FROM pg_catalog.pg_type e WHERE e.oid = t.typelem AND (e.typtype = 'e' OR " + plainBuiltin("e") + "))) " +
	"OR (t.typtype = 'd' AND EXISTS (SELECT FROM pg_catalog.pg_type b WHERE b.oid = t.typbasetype AND " + plainBuiltin("b") + ")))"

// plainBuiltin: a built-in base type whose text reads back as the same
// value under the settings the merge shares with the workers: not a float
// or geometric type (extra_float_digits), a date/time type (a DateStyle
// with the YMD order prints dates it does not read back; zone
// abbreviations), xml (its text drops an encoding declaration), or an
// array.
func plainBuiltin(t string) string {
	return "(" + t + ".typtype = 'b' AND " + t + ".typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND " + t + ".typcategory NOT IN ('A', 'G', 'D') AND " +
		t + ".typname NOT IN ('float4', 'float8', 'aclitem', 'xml') AND " + t + ".typinput <> 0)"
}

// checkEncoding refuses gathering text in a client_encoding other than the
// server's before any row moves: the workers would send it converted (and
// fail on a character the client's encoding lacks, where PostgreSQL, which
// never sends it, answers).
func (r *scatterRun) checkEncoding() error {
	if !r.x.Merge.Gather {
		return nil
	}
	sc := r.conns[r.descIdx]
	ce, se := sc.Params["client_encoding"], sc.Params["server_encoding"]
	if strings.EqualFold(ce, se) {
		return nil
	}
	rt := r.runtime()
	rt.Mu.Lock()
	encoded := rt.Encoded
	rt.Mu.Unlock()
	if !encoded {
		return nil
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"this multi-shard query gathers the text of %s, which is not supported with client_encoding %s", strings.Join(r.x.Merge.Tables, ", "), ce).
		WithHint("Use client_encoding UTF8 for this query, or pin it to one shard with WHERE <distribution column> = <value>.")
}

// parseCollations reads "column collation,..." (each part as quote_ident
// gives it: a name with a space or comma is quoted) into a map from column
// name to the collation, kept quoted.
func parseCollations(s string) (map[string]string, error) {
	out := map[string]string{}
	lx := s
	for lx != "" {
		col, rest, ok := cutIdent(lx)
		if !ok || !strings.HasPrefix(rest, " ") {
			return nil, pgerr.New(pgerr.Internal, "unreadable column collations %q", s)
		}
		rest = rest[1:]
		nsp, rest, ok := cutIdent(rest)
		if !ok || !strings.HasPrefix(rest, ".") {
			return nil, pgerr.New(pgerr.Internal, "unreadable column collations %q", s)
		}
		coll, rest, ok := cutIdent(rest[1:])
		if !ok {
			return nil, pgerr.New(pgerr.Internal, "unreadable column collations %q", s)
		}
		name := col
		if strings.HasPrefix(col, `"`) {
			name = strings.ReplaceAll(col[1:len(col)-1], `""`, `"`)
		}
		out[name] = nsp + "." + coll
		lx = strings.TrimPrefix(rest, ",")
	}
	return out, nil
}

// cutIdent cuts one identifier as quote_ident writes it off the front of s.
func cutIdent(s string) (ident, rest string, ok bool) {
	if strings.HasPrefix(s, `"`) {
		for i := 1; i < len(s); i++ {
			if s[i] != '"' {
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' {
				i++
				continue
			}
			return s[:i+1], s[i+1:], true
		}
		return "", "", false
	}
	i := strings.IndexAny(s, " .,")
	if i < 0 {
		i = len(s)
	}
	return s[:i], s[i:], i > 0
}

// textArray is a text[] literal of the strings.
func textArray(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quoteLiteral(s)
	}
	return "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
}

// builtinTypes returns the built-in types (name, array type), loaded once
// from a worker.
func (s *Server) builtinTypes(sc *pooling.ServerConn) (map[uint32]executor.Type, error) {
	if m := s.pgTypes.Load(); m != nil {
		return *m, nil
	}
	rows, err := executor.QueryText(sc, "SELECT oid::text, typname::text, typarray::text FROM pg_catalog.pg_type WHERE oid < 16384")
	if err != nil {
		return nil, err
	}
	m := make(map[uint32]executor.Type, len(rows))
	for _, row := range rows {
		if len(row) != 3 || row[0] == nil || row[1] == nil || row[2] == nil {
			continue
		}
		oid, _ := strconv.ParseUint(*row[0], 10, 32)
		arr, _ := strconv.ParseUint(*row[2], 10, 32)
		m[uint32(oid)] = executor.Type{Name: *row[1], Array: uint32(arr)}
	}
	s.pgTypes.Store(&m)
	return m, nil
}

// needsOthers reports whether the run reads a worker other than the one of
// the session's transaction connection and its parked ones.
func (r *scatterRun) needsOthers() bool {
	for _, w := range r.x.Workers {
		if w.Node != r.ss.node && r.ss.parkedOn(w.Node) < 0 {
			return true
		}
	}
	return false
}
