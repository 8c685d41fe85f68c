package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// session is one client connection's state. Only its own goroutine touches
// it, except cancelTarget, which the cancel path reads.
type session struct {
	srv            *Server
	conn           net.Conn
	r              *wire.Reader
	w              io.Writer // conn, or its raw writer (rawio) for a plain socket
	out            []byte    // pending output to the client
	user, database string
	pid            uint32
	secret         []byte
	ready          bool // startup is over: relay ParameterStatus as it changes
	startupWait    bool // startup waits for a connection (welcome.go)
	tls            bool // conn is the TLS connection negotiated at startup

	params   sessionParams
	pending  []paramOp // session changes made in the current transaction
	txFailed bool      // the current transaction will not commit

	// What the session's settings do to string constants, as the server
	// last reported them: standard_conforming_strings is off (a backslash
	// in '...' escapes), client_encoding is not the server's (text arrives
	// to be converted).
	scsOff, foreignEnc bool
	utf8Client         bool // client_encoding and server_encoding are UTF8
	// embedsASCII: the client_encoding has multibyte characters whose
	// later bytes can be ASCII (SJIS, BIG5, ...), which the COPY splitter
	// cannot read in the client's bytes.
	embedsASCII bool

	pools  map[int32]*pooling.Pool // by node
	pool   *pooling.Pool           // the held connection's pool
	node   int32                   // the held connection's node
	sc     *pooling.ServerConn     // held from first use in a batch until ReadyForQuery 'I'
	pinned string                  // why the session keeps sc for good; "" if it does not
	// pinClean: pinned by session advisory locks alone (pinAdvisory), with
	// nothing run since that may change state the session does not follow;
	// advisoryRan: an advisory lock function ran since the last look
	// (unpinIfUnlocked).
	pinClean, advisoryRan bool
	// tempClean: pinned by temporary objects or LISTEN alone (followable),
	// with nothing run since that may change state the session does not
	// follow; tempDropRan: a statement that may have dropped them (or
	// unlistened) ran since the last look (unpinIfNoTemp).
	tempClean, tempDropRan bool
	// lock: the connection that holds the session advisory locks of a
	// session they alone pinned, set aside while its other statements run
	// as an unpinned session's do (advisorylock.go); sc nil when none.
	lock txConn
	// pinUndo: the pin state before the statement being routed pinned
	// the session (set only then): a statement refused before it reached
	// a worker (its connection could not be had) pins nothing.
	pinUndo *pinState
	// swapped: the pinned connection, set aside while a statement of
	// advisory lock calls alone runs on lock's (lockSwap).
	swapped   txConn
	gidUnlock func() // a client PREPARE TRANSACTION's lock on its id (lockGID), held while it runs
	// tempObjects: the session made temporary objects (on its pinned
	// connection), which may shadow a table's name.
	tempObjects bool
	// implicitTxn: a pipeline outside a transaction block went on to
	// other workers; its Sync commits them all (pipeline.go). batchTxn:
	// the pipeline up to its Sync has a transaction control or savepoint
	// statement.
	implicitTxn, batchTxn bool
	// ddlSent: a statement of the current transaction may have changed a
	// table (DDL); its end advances the server's stmtEpoch. ddlShared:
	// such a statement was not about a temporary object, and its end
	// tells the fleet (Server.ddlEnded).
	ddlSent, ddlShared bool
	// txAdvisoryDDL: DDL of the current transaction may have made or
	// changed user code that takes advisory locks (a function, a default),
	// which the viewSet, read from the committed catalog, does not show:
	// its later statements count as calling one (class.advisoryCode).
	txAdvisoryDDL bool
	// parkedUndone: abortParked ran for the current failure of the block.
	parkedUndone bool
	// bridged: the portals of statements the coordinator runs itself
	// over the extended protocol (bridge.go); bridging: such a statement
	// runs (its answer is kept in out).
	bridged map[string]*bridgePortal
	// rowsDescs: descriptions of rows-first statements (rowsfirstext.go).
	rowsDescs map[*Statement]*rowsDesc
	bridging  bool
	// terminated: pg_terminate_backend of this session's process ID
	// (signal.go): it ends with FATAL 57P01.
	terminated atomic.Bool
	// terminates: a statement of the client's cycle calls
	// pg_terminate_backend (drain).
	terminates bool
	// txScatter: the transaction block changed a distributed or
	// reference table (tableDDLInTxn); its multi-shard plans learn their
	// run-time state here, not in the server's cache, until it ends.
	txScatter *scatterCache
	// cursors: the transaction block's cursors over distributed tables,
	// answered by the coordinator (cursors.go).
	cursors    map[string]*coordCursor
	workerErrs int // worker errors relayed to the client so far (settle)
	// txEndQueued: an Execute of COMMIT, ROLLBACK or ROLLBACK TO went to
	// the worker in this pipeline, its answer not read yet; what the
	// coordinator keeps of the transaction's portals and cursors is known
	// only once it is (settleTxEnd).
	txEndQueued bool
	// clientMu orders writes to the client by others than the session's
	// goroutine while it waits for input: a watcher relaying
	// notifications, Shutdown telling the client.
	clientMu sync.Mutex
	// lent counts the connections lent to the session's own statements
	// over several workers (dialNode), given back as they close.
	lent atomic.Int32
	// spanHint: the nodes, in order, of the session's last transaction
	// block when it spanned several workers; spares: connections to them
	// taken at the next one's start, not in its transaction yet (takeSpares).
	spanHint []int32
	spares   []txConn

	stmts map[string]*Statement // client statement name -> statement
	// replay: the request being answered, to run again if it met a moved
	// shard (replay.go); flushes counts the answers written to the client.
	replay  replay
	flushes int
	// copyAhead: COPY messages the client sent behind an Execute before
	// the worker's CopyInResponse was read (dispatch), which copyIn relays
	// before reading more.
	copyAhead []wire.Frame
	portals   map[string]*Statement // portal -> statement it was bound from
	// portalSets: a portal's SET LOCALs, for a statement of
	// set_config(..., true) calls (setlocal.go), known at its Bind.
	portalSets map[string]portalSets
	// The last Parse body seen, so that a client re-parsing the same unnamed
	// statement (as libpq's PQexecParams does) skips the registry.
	lastParse   []byte
	lastParseSt *Statement
	bindName    string // the statement name of the last Bind
	queue       []expect
	qhead       int
	skipping    bool // after an error in an extended batch: ignore until Sync
	// lost is the error of a cycle whose server connection was lost
	// outside a transaction (lostCycle); the run loop answers it, and
	// lostEnd says whether the client's Sync or Query is answered with it.
	lost    *pgerr.Error
	lostEnd bool
	// multi follows the output of a query string of several statements
	// run one at a time (multistmt.go).
	multi *multiOut
	// capture: the answer of a statement the coordinator reads itself
	// (the SELECT of an INSERT ... SELECT it runs in two steps).
	capture      *capture
	needSync     bool // extended messages went to the server since its last ReadyForQuery
	cancelTarget atomic.Pointer[pooling.ServerConn]
	// txw: the transaction's connections while it spans several workers,
	// for the distributed deadlock detector; dlVictim: the detector
	// canceled its statement (deadlock.go).
	txw      atomic.Pointer[txnWorkers]
	wrw      atomic.Pointer[txnWorkers]
	dlVictim atomic.Bool
	// wait says whether the session is waiting for its client's next
	// message, and whether at rest (outside a transaction and a batch);
	// Shutdown ends a waiting session by swapping in waitKilled.
	wait atomic.Int32
	// sleepMu: see sleep.go. napOK: the session may sleep in its wait at
	// rest (canSleep, set before each wait). rawConn: the client's
	// connection is a plain socket.
	sleepMu sync.Mutex
	napOK   atomic.Bool
	rawConn bool
	// accepted is the client connection as accepted (conn is its TLS
	// layer, if any).
	accepted net.Conn
	// cancelMu keeps the server connection from going back to the pool
	// while a cancel request for it is being sent, so that a cancel never
	// reaches the next client's statement.
	cancelMu sync.Mutex
	// waitCancel ends a wait of the session's own (citus_rebalance_wait)
	// at a cancel request.
	waitCancel atomic.Pointer[context.CancelFunc]
	// writeConns are the connections a statement over several workers
	// runs on through pgx (nodeConns: multi-shard and reference writes,
	// COPY, the Citus functions), which a cancel request reaches too;
	// under cancelMu.
	writeConns map[int32]*pgx.Conn
	// txSnap is the catalog when the session's transaction block ran its
	// first statement (nil outside blocks): a table distributed since then
	// is refused in the block (txnCatalogCheck).
	txSnap *metadata.Snapshot
	// touched and touchedAll are the shards, and the tables with every
	// shard, that the session's transaction reached (nil outside one): a
	// move's hold lets such a transaction go on (hold.go).
	touched      []int64
	touchedAll   []string
	touchMarks   []touchMark // their lengths at each open savepoint
	flightSlot   int8        // 1 + the flight parity the session's request entered in, 0: none (hold.go)
	qbuf         []byte      // a rewritten Query body
	routes       bool        // the session's database is the one the catalog describes
	inject       []byte      // rows for the next relayed query's answer (see expect.inject)
	paramsUnsure bool        // the server connection's settings may differ from the session's
	batchWork    bool        // a Bind or Execute went to the server since its last ReadyForQuery
	// settingsDirty: a statement that changes settings was sent since the
	// last ReadyForQuery 'I' (its effect is not in sc.ParamsKey yet), and
	// settingsUnknown: the pinned connection's settings may have been
	// changed where pgfleet cannot follow (set_config(), SET ROLE): either
	// way statements are parsed under settings no key names (stmtKey).
	settingsDirty   bool
	settingsUnknown bool
	// namesBeforePin: the statement being routed is the one whose own pin
	// made the settings unknown; its table names resolve as PostgreSQL
	// parses it, before its code runs, so under the settings before it
	// (namesOnOwn). Set only around that statement's planning.
	namesBeforePin bool
	// pathTouched: a statement that may change how names resolve (SET,
	// SET LOCAL, RESET of search_path or the role; touchesPath) was sent
	// since the last ReadyForQuery 'I'; until then they resolve by what
	// the session's connection says (namesOnOwn).
	pathTouched bool
	// roleTempPath: the search_path the role or database sets names
	// pg_temp (welcome; tempPath).
	roleTempPath bool
	// cycles counts ReadyForQuery messages, nameGen the statements sent
	// that may make tables or run user code; own is what the session's
	// connection said of how names resolve (searchpath.go).
	cycles, nameGen uint64
	own             ownAnswer
	// setGen counts the statements that may have changed settings; parsed
	// is each client statement's reading settings at its Parse (parsekey.go).
	setGen   uint64
	setSeen  uint64 // setGen as of the last ReadyForQuery: every such statement answered
	parsed   map[string]parsedAt
	parseKey readKey                   // the reading settings as the current Parse arrived
	reported [len(reportedRead)]string // reportedRead's values, as last reported
	// A statement that may run user code with session effects (classify's
	// verify) ran on sc: stateBase is the connection's state snapshot taken
	// in front of it (nil: none), compared before sc goes back to the pool
	// (verifyRelease). verifyNext: take one ahead of the next simple query.
	verifyState bool
	verifyNext  bool
	// customSetNext: the simple query being run sets a custom setting
	// with set_config (class.setsCustom).
	customSetNext bool
	// lentUserCode: the statement being run may run user code, so the
	// connections lent to it (nodeConns) are closed after it;
	// lentImplicit: the catalog shows it may (runFunction takes this one:
	// pgfleet's functions are calls classify cannot tell from the user's).
	lentUserCode, lentImplicit bool
	// txUserCode: a statement that may run user code (other than
	// pgfleet's own functions) ran since the session last held no
	// connection; txUserCodeWas is its value before the current
	// statement. Connections of the transaction with no snapshot to
	// compare are closed at release (multiRelease, releaseIfIdle).
	txUserCode, txUserCodeWas bool
	// resnap: a SET in a block compared the state with the snapshot taken
	// before user code (relayCycle); the next statement that is not such
	// a SET takes one again.
	resnap bool
	// viewDDLPending: user code that may have made objects ran in the
	// current transaction (noteViewDDL); its end dates the viewSet again.
	viewDDLPending bool
	stateBase      []byte
	stateNames     []string // the state read's custom names (stateNamesOf)
	// stateLocals: the settings (and "role") the transaction's SET
	// LOCALs had set when the snapshot was read (blockLocals, localBase).
	stateLocals []string
	// defining: the custom settings of the statement about to take a
	// server connection when it is a lone SET or RESET of them
	// (definesAlone), which the checkout may take defined.
	defining string
	// stateRolledBack: the transaction block the snapshot was taken in
	// (stateTxn while it lasts) ended with ROLLBACK (noteTag).
	stateRolledBack, stateTxn bool
	// pendingBegin is a BEGIN the coordinator answered itself: it is sent
	// ahead of the transaction's first statement, on the worker that
	// statement needs.
	pendingBegin  string
	pendingFailed bool // a statement failed in the pending transaction
	// joinPipe, while set, takes the BEGIN of a worker the transaction
	// takes in (joinWorker) as messages to send ahead of the statement
	// that needs the worker, in one round trip, instead of running it
	// first (refInTxn); the caller then checks that it ran.
	joinPipe *[]byte
	// localPortal is a portal bound by the coordinator itself (a BEGIN,
	// COMMIT or ROLLBACK answered locally) and its statement.
	localPortal   string
	localPortalSt *Statement
	// scatterPortals are portals of multi-shard statements, which the
	// coordinator runs itself at Execute (scatter.go).
	scatterPortals map[string]*scatterPortal
	// scatterTargets are the connections a multi-shard statement is
	// running on (guarded by cancelMu), for cancel requests.
	scatterTargets []*pooling.ServerConn
	// sideTargets: connections taken beside the session's (sideCheckout),
	// under cancelMu.
	sideTargets []*pooling.ServerConn
	// refDone: a reference-table write of this extended batch committed
	// outside a transaction block (refext.go); until Sync, other
	// statements are refused.
	refDone bool

	// A transaction block over several workers (txnmulti.go): the other
	// workers' connections (the current one is sc), the BEGIN text that
	// opened the transaction ("" if the client's BEGIN went to a worker
	// directly, with other statements), and whether a SET or SAVEPOINT
	// was made in it (which keeps it on its workers).
	parked []txConn
	// wroteOn: nodes the transaction over several workers surely wrote on
	// (reference-table writes mark theirs); with two or more, COMMIT goes
	// straight to two-phase commit without asking (commitOnePhase).
	wroteOn     []int32
	txBegin     string
	txSet       bool
	txSavepoint bool
	// txLog: the transaction's SETs (SET LOCAL and RESET included), in
	// order, set again after its BEGIN (and between its savepoints, by
	// savepointMark.logN) on each worker it takes in; txLogLost: one
	// cannot be (its text is not known, it came after the transaction
	// took in a second worker, or a ROLLBACK TO undid a custom setting's
	// SET, whose placeholder stays): taking in a worker is refused then.
	txLog     []paramOp
	txLogLost bool
	// idleOff: the transaction's connections have their idle-in-transaction
	// timer off, and idleTimeout is what the coordinator enforces instead
	// (idletxn.go).
	idleOff     bool
	idleTimeout time.Duration
	idleRecheck bool // a statement may have changed it (noteIdleChange)
	// loginDDL: a statement changed what a login gets (class.logins):
	// the pools are refreshed once the transaction is over.
	loginDDL bool
	// chainAsk: the transaction was chained on the current worker
	// (txBegin ""); joinWorker asks that worker for its characteristics.
	chainAsk bool
	// chainStarted: the transaction block began with AND CHAIN. PostgreSQL
	// keeps such a transaction's characteristics through a failure (a
	// ROLLBACK AND CHAIN after it starts the next with them), where those
	// a BEGIN with modes gave are undone by the failure: every worker's
	// transaction is started as BEGIN <modes>; COMMIT AND CHAIN (beginSQL),
	// so that the worker keeps them as PostgreSQL does.
	chainStarted bool
	// savepoints: the transaction's savepoints, oldest first, each with
	// how many of pending's changes were made before it (ROLLBACK TO
	// keeps those only).
	savepoints []savepointMark
	spLost     bool // a ROLLBACK TO that could not be followed: pending is forgotten
	// citusPending: create_distributed_table and create_reference_table
	// called in the transaction block, which run when it commits
	// (citustxn.go).
	citusPending []citusCall
	// dropPending: the catalog names of distributed and reference tables
	// dropped in the transaction block (DROP TABLE), whose catalog entries
	// go with its commit decision (multiEnd).
	dropPending []string
	// blockSnap is the catalog less dropPending's tables (catalog), made
	// from blockBase when dropPending had blockDrops of them.
	blockSnap  *metadata.Snapshot
	blockBase  *metadata.Snapshot
	blockDrops int
	// settled: the session changes of transactions that committed
	// earlier in the current cycle (settleOps), taken again with the
	// worker's reported values at its ReadyForQuery.
	settled []paramOp
	// portalNode: the worker each portal of such a transaction was bound
	// on (portals live on the connection that bound them).
	portalNode map[string]int32

	// Sequence state (currval, lastval) lives on server connections
	// (seqcheck.go): seqUsed says a statement that may have called
	// nextval ran since the session began or its last DISCARD SEQUENCES;
	// seqDiscard asks relayCycle to clear the connection's first.
	seqUsed    bool
	seqDiscard bool
	// drawn is the text of the last statement planSimple planned with
	// sequence values drawn and in place, and drawnFrom the text it was
	// given ("" when none were drawn): a write run again with its time
	// frozen (runFrozen) runs that text, not the client's, so the values
	// are not drawn twice.
	drawn, drawnFrom string
	// seqGuard: user code runs in this cycle on a connection whose
	// sequence state was cleared while the session may have some
	// elsewhere; its 55000 errors (currval "not yet defined") are
	// refused instead (seqGuardError).
	seqGuard bool

	// Settings to put right on the held connection after this cycle
	// (paramfix.go): startup settings a RESET sent to the server's
	// default, and custom settings to read back after LOAD; resetQueued:
	// an Execute of such a RESET is in this extended batch.
	paramFix []string
	// paramFixLocal: the same for SET LOCAL x TO DEFAULT, set for the
	// transaction only.
	paramFixLocal []string
	loadFix       bool
	resetQueued   bool
}

// Each message relayed to the server is answered by one terminal message
// (after any number of rows, notices and the like).
const (
	tParse    = iota + 1 // ParseComplete
	tBind                // BindComplete
	tClose               // CloseComplete
	tDescribe            // RowDescription or NoData
	tExecute             // CommandComplete, EmptyQueryResponse or PortalSuspended
	tSync                // ReadyForQuery
	tQuery               // ReadyForQuery (simple query, function call)
)

const (
	eRelay   = iota + 1 // pass the server's answer to the client
	eSwallow            // a message pgfleet added: hide its answer
	eSynth              // a message pgfleet answered itself: send synth in order
)

// expect is one answer the session waits for, in order.
type expect struct {
	kind  uint8
	term  uint8
	synth []byte
	stmt  *Statement // Parse: statement being prepared; Execute: statement of the portal
	// A Parse or Close changes the session's statement names when the
	// client sends it; if the server skips the message after an error, the
	// change is undone: name goes back to prev (nil: no such statement).
	undo  bool
	name  string
	prev  *Statement
	cls   *class // simple query: its classification, when it changes the session
	opIdx int
	spIdx int  // the next of the class's savepoint statements (class.sps)
	begin bool // the Execute of a deferred BEGIN (ensureBegun)
	abort bool // a Parse sent to fail on purpose: hide its error
	// unpin: a Parse pinned the session here (a statement that will
	// change session state when it runs); if the Parse is skipped after
	// an earlier error of the batch, the pin goes (prevTemp is
	// tempObjects and settingsUnknown before it).
	unpin, prevTemp, prevUnknown bool
	// inject is sent after the answer's RowDescription (EXPLAIN's lines
	// about the distributed plan).
	inject []byte
	// evicted: a hidden Close of a statement evicted from the server's
	// cache; if the server skips it, the statement is still there.
	evicted string
	// client: a hidden Parse of the shard statement of the client's
	// statement client (routed statements are parsed by the worker only at
	// Describe or Bind); if it fails, the client's statement never existed.
	client    string
	clientStm *Statement
	// cst: the client's statement of a Bind or Describe (stmt is the
	// statement bound on the worker); check: a hidden Describe whose
	// answer is compared with what the client was told (cst.descs);
	// reclosed: a Parse preceded by a Close of the same name (a copy
	// parsed under other settings).
	cst      *Statement
	check    bool
	reclosed bool
	capture  bool // a hidden state snapshot: its row is stateBase
	// state: a message of the prepared state read (appendStateRead),
	// whose failure is the client's (its statements after it, to the
	// Sync, are skipped) rather than hidden.
	state bool
	// hide: the last parameters of a described statement are the
	// coordinator's (sequence values), left out of its description.
	hide int
	// sets: the SET LOCALs of a statement of set_config(..., true) calls
	// (setlocal.go), followed at its row.
	sets []paramOp
}

func (ss *session) push(e expect) { ss.queue = append(ss.queue, e) }

func (ss *session) flush() error {
	if len(ss.out) == 0 || ss.bridging {
		return nil
	}
	if c := ss.capture; c != nil {
		// A statement's answer the coordinator reads itself.
		c.take(ss.out[c.start:])
		ss.out = ss.out[:c.start]
		c.start = 0
	}
	if ss.multi != nil {
		ss.multi.scan(ss.out)
		ss.multi.start, ss.multi.scanned = 0, 0
		ss.multi.flushes++
	}
	ss.flushes++
	_, err := ss.w.Write(ss.out)
	if err == nil {
		ss.srv.metrics.countErrors(ss.out) // what the client was sent
	}
	if cap(ss.out) > 1<<20 {
		ss.out = nil
	} else {
		ss.out = ss.out[:0]
	}
	return err
}

// fatal sends a FATAL (or ERROR) to the client; the connection then closes.
func (ss *session) fatal(err error) {
	if errors.Is(err, errQuietClose) {
		return
	}
	er := pgerr.Flatten(err)
	ss.out, _ = er.Encode(ss.out)
	_ = ss.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if ss.flush() == nil {
		ss.linger()
	}
}

// linger lets a client that is still sending (the rest of a message over
// the limit) read the FATAL before the connection closes: closing a socket
// with unread input resets it, and the reset can discard the error the
// client has not read yet. The write side is shut, then input is read and
// dropped until the client closes, for at most a second and 64 MiB.
func (ss *session) linger() {
	cw, ok := ss.conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = ss.conn.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, ss.conn, 64<<20)
}

// A session's wait states (session.wait).
const (
	waitBusy   = iota // running a message, or reading one that has begun
	waitRest          // waiting for a message, outside a transaction and a batch
	waitTxn           // waiting for a message inside a transaction or batch
	waitKilled        // ended by Shutdown, which told the client
	// At rest, and (sleep.go) seen so by the sleep sweep once; asked by
	// it to let the goroutine go (the read deadline passed); asleep, with
	// no goroutine, until the idler wakes it.
	waitNod
	waitSleep
	waitAsleep
)

// run serves the session's messages until it ends, or (asleep) until
// its goroutine lets it sleep (sleep.go).
func (ss *session) run() (asleep bool) {
	s := ss.srv
	var request time.Time // when the client's request being answered arrived
	for {
		if ss.terminated.Load() {
			ss.fatal(adminShutdown()) // pg_terminate_backend (signal.go)
			return
		}
		var waited int32
		replaying := len(ss.replay.queue) > 0
		// Idle unless the client's next message is here whole: what is
		// answered goes out before the session waits for the rest of a
		// message begun, as PostgreSQL's would.
		idle := !replaying && !ss.r.Ready()
		if idle && ss.needSync && ss.sc != nil && len(ss.sc.Buf()) > 0 {
			// The client paused in the middle of a batch: what it sent
			// goes to the worker now, which then sees the pause as
			// PostgreSQL would (statement_timeout counts from the Parse).
			// An error there comes back when the answers are read.
			_ = ss.sc.Flush()
		}
		if idle {
			var ok bool
			if waited, ok = ss.goIdle(&request); !ok {
				return
			}
		}
		var limit time.Duration
		if waited == waitTxn && !ss.needSync && !ss.skipping {
			// As PostgreSQL's, the timer runs only once ReadyForQuery is
			// sent: not while a pipeline waits for its Sync (adversary
			// finding: a client that sent Flush and read its results
			// before Sync was ended with 25P03).
			if limit = ss.idleLimit(); limit > 0 {
				_ = ss.conn.SetReadDeadline(time.Now().Add(limit))
			}
		}
		var stopWatch func()
		if waited != waitBusy && ss.watchesServer() {
			stopWatch = ss.watchServer()
		}
		if idle {
			ss.r.Wait() // (with a shallow stack: see wire.Reader.Wait)
		}
		if waited != waitBusy {
			switch ss.awake(waited) {
			case waitKilled:
				// Shutdown or pg_terminate_backend ended the session
				// (killWaiting): it tells its client.
				if stopWatch != nil {
					stopWatch()
				}
				ss.fatal(adminShutdown())
				return
			case waitAsleep:
				return true
			}
			if s.stopping.Load() {
				// Past Shutdown's deadline nothing new starts.
				if stopWatch != nil {
					stopWatch()
				}
				ss.fatal(adminShutdown())
				return
			}
		}
		var f wire.Frame
		var err error
		if replaying {
			f, ss.replay.queue = ss.replay.queue[0], ss.replay.queue[1:]
		} else {
			f, err = ss.r.Next()
		}
		if stopWatch != nil {
			stopWatch()
		}
		if limit > 0 {
			_ = ss.conn.SetReadDeadline(time.Time{})
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				ss.fatal(idleInTransactionTimeout())
				return
			}
		}
		if err != nil {
			if ss.terminated.Load() {
				err = adminShutdown() // pg_terminate_backend woke the read
			} else {
				err = clientReadError(err)
			}
			ss.fatal(err)
			return
		}
		if idle && request.IsZero() {
			request = time.Now()
		}
		if !replaying {
			ss.noteRequest(f)
		}
		if ss.skipping && f.Type != 'S' && f.Type != 'X' && f.Type != 'H' {
			continue
		}
		if f.Type == 'X' {
			return
		}
		if idle && ss.lock.sc != nil && !ss.lock.sc.Alive() {
			ss.fatal(errLocksLost(ss.lock.sc.Addr))
			return
		}
		err = ss.dispatch(f)
		if ss.replay.on && (f.Type == 'Q' || f.Type == 'S') && len(ss.replay.queue) == 0 {
			if err == nil && ss.lost == nil && ss.retryStale() {
				continue
			}
			ss.replay.end()
		}
		if ss.lost != nil {
			// The server connection was lost outside a transaction: the
			// client gets the error and keeps its session.
			ss.out, _ = pgerr.Flatten(ss.lost).Encode(ss.out)
			if ss.lostEnd {
				ss.out = readyForQuery(ss.out, ss.txStatus())
			} else {
				ss.skipping = true
			}
			ss.lost, ss.lostEnd = nil, false
			continue
		}
		if err != nil {
			if s.stopping.Load() {
				// Shutdown's deadline cut the statement off (its worker
				// connections were broken): say why.
				err = adminShutdown()
			}
			ss.fatal(err)
			return
		}
		ss.afterMessage(f.Type)
	}
}

// goIdle is the session's turn to wait for its client: what it answered
// goes out (the request's time observed), large buffers go, and the wait
// is marked (waited: waitTxn in a transaction, else waitRest) for
// Shutdown and pg_terminate_backend; ok false when the session ends.
func (ss *session) goIdle(request *time.Time) (waited int32, ok bool) {
	s := ss.srv
	ss.leaveFlight() // the request reached its workers
	if ss.swapped.sc != nil || ss.advisoryRan && ss.pinClean && ss.sc != nil && ss.lock.sc == nil {
		// A statement that took the advisory locks' connection back
		// and was answered with no round trip after (refused here):
		// set aside again (advisorylock.go).
		ss.releaseIfIdle()
	}
	if len(ss.parked) > 0 && ss.sc != nil && ss.sc.TxStatus == 'E' {
		if !ss.parkedUndone {
			// Before the client hears of the error (txnmulti.go).
			ss.abortParked()
			ss.parkedUndone = true
		}
	} else if ss.parkedUndone {
		ss.parkedUndone = false
	}
	if ss.loginDDL && ss.txStatus() == 'I' && !ss.needSync {
		// Before the client hears the statement is done: a login after
		// that gets the new settings.
		ss.loginDDL = false
		s.refreshPools()
		s.refreshFleet()
	}
	if len(ss.out) > 0 {
		if ss.flush() != nil {
			return 0, false
		}
		if !request.IsZero() {
			s.metrics.requests.Observe(time.Since(*request).Seconds())
			*request = time.Time{}
		}
	}
	if cap(ss.qbuf)|cap(ss.lastParse) > maxKeptBuf {
		ss.shrink()
	}
	// The last large message is answered: its share of --message-memory
	// goes back now, not at the client's next message (which may not come
	// for a long time).
	ss.r.Release()
	if ss.idleRecheck && ss.qhead == len(ss.queue) && !ss.needSync {
		ss.recheckIdle()
	}
	waited = waitTxn
	if ss.txStatus() == 'I' && !ss.needSync && !ss.skipping {
		waited = waitRest
	}
	// A session holding part of a message reads the rest in Next, where a
	// passed deadline is the client's error: it does not sleep.
	ss.napOK.Store(waited == waitRest && ss.r.Buffered() == 0 && ss.canSleep())
	ss.wait.Store(waited)
	// terminateSession stores terminated before it looks at wait, as
	// Shutdown stores draining: one of the two sees the other. Either way
	// the session tells its client (killers only wake it).
	if ss.terminated.Load() || s.draining.Load() && (waited == waitRest || s.stopping.Load()) {
		ss.wait.Store(waitBusy)
		ss.fatal(adminShutdown())
		return 0, false
	}
	return waited, true
}

// dispatch handles one client message (not Terminate). The message loop
// (run) calls it and afterMessage rather than holding their work in its
// own frame: an idle session waits for its client in run with little on
// its goroutine's stack, which the runtime then shrinks to 4 KiB.
func (ss *session) dispatch(f wire.Frame) error {
	switch f.Type {
	case 'Q':
		return ss.simpleQuery(f.Body)
	case 'P':
		return ss.parse(f.Body)
	case 'B':
		return ss.bind(f.Body)
	case 'D':
		return ss.describe(f.Body)
	case 'E':
		return ss.execute(f.Body)
	case 'C':
		return ss.close(f.Body)
	case 'H':
		return ss.flushRequest()
	case 'S':
		return ss.sync()
	case 'F':
		ss.seqUsed = true // a function call may call nextval
		return ss.relayCycle('F', f.Body, nil, ss.srv.defaultNode.Load())
	case 'd', 'c', 'f':
		if ss.executeUnanswered() {
			// Behind an Execute not answered yet (no Sync between them):
			// it may be a COPY FROM STDIN, which PostgreSQL enters as it
			// runs the Execute, and then takes these as its data. The
			// batch goes to the worker with a Flush; if its answer is a
			// CopyInResponse, copyIn relays this message first (adversary
			// 158: the data was dropped, COPY 0, or the COPY hung).
			ss.copyAhead = append(ss.copyAhead, wire.Frame{Type: f.Type, Body: bytes.Clone(f.Body)})
			err := ss.flushRequest()
			ss.copyAhead = ss.copyAhead[:0]
			return err
		}
		// Copy messages outside COPY are ignored, as PostgreSQL does.
		return nil
	}
	return pgerr.Fatal(pgerr.ProtocolViolation, "invalid frontend message type %d", f.Type)
}

// afterMessage ends what a message of type typ ended: a transaction
// block's catalog, cursors and portals, DDL.
func (ss *session) afterMessage(typ byte) {
	ended := !ss.needSync && ss.txStatus() == 'I' // outside a transaction again
	if ss.txUserCode && ended && ss.sc == nil {
		ss.txUserCode = false
	}
	if ss.viewDDLPending && ended {
		ss.viewDDLPending = false
		ss.srv.viewEpoch.Add(1) // (noteViewDDL)
	}
	if ss.txSnap != nil && ended {
		// The transaction block ended: the next one keeps the catalog as
		// it is at its own first statement (a client that runs every
		// statement in a block never passes noteTxnStart outside one,
		// which would forget it).
		ss.txSnap = nil
	}
	if (len(ss.touched) > 0 || len(ss.touchedAll) > 0 || len(ss.touchMarks) > 0) && ended && !ss.implicitTxn {
		ss.touched, ss.touchedAll, ss.touchMarks = ss.touched[:0], ss.touchedAll[:0], ss.touchMarks[:0]
	}
	if ss.txScatter != nil && ended {
		// The transaction that changed tables ended: what every session's
		// plans learnt of them is stale if it committed.
		ss.txScatter = nil
		ss.srv.plans.reset()
		ss.srv.scatter.reset()
	}
	if len(ss.cursors) > 0 && ended {
		ss.endCursors(false) // a transaction's cursors end with it (WITH HOLD ones of earlier ones stay)
	}
	if typ == 'Q' && (len(ss.scatterPortals) > 0 || len(ss.bridged) > 0) {
		// A simple query destroys the unnamed portal; outside a block
		// (after its COMMIT or ROLLBACK) every portal is gone.
		delete(ss.scatterPortals, "")
		delete(ss.bridged, "")
		if ss.txStatus() == 'I' {
			ss.dropPortals()
		}
	}
	if ss.ddlSent && ended {
		// DDL ended outside the session's connection (the Citus
		// functions, object DDL on every worker, a string of several
		// statements): its transaction is over all the same.
		ss.ddlDone()
	}
}

// maxKeptBuf bounds the buffers a session keeps between messages (a
// rewritten query, the last Parse): after a larger message they are
// dropped, so that one large statement does not stay in a session's memory.
const maxKeptBuf = 1 << 20

// largeRelay: a relayed message with a longer body is written to the worker
// from where it lies rather than copied into the output buffer.
const largeRelay = 64 << 10

func (ss *session) shrink() {
	if cap(ss.qbuf) > maxKeptBuf {
		ss.qbuf = nil
	}
	if cap(ss.lastParse) > maxKeptBuf {
		ss.lastParse, ss.lastParseSt = nil, nil
	}
	// Answered expectations past the queue's end still point at their
	// statements.
	clear(ss.queue[len(ss.queue):cap(ss.queue)])
}

// clientReadError is what the client is told when reading its next message
// failed: nothing when it went away, FATAL 08P01 otherwise (a message over
// the limits: PostgreSQL closes the connection too, though it only logs the
// message).
func clientReadError(err error) error {
	var le *wire.LengthError
	var be *wire.BudgetError
	switch {
	case errors.As(err, &le):
		e := pgerr.Fatal(pgerr.ProtocolViolation, "invalid message length")
		e.Detail = fmt.Sprintf("Message type %q of %d bytes is longer than the limit of %d bytes.", le.Type, le.Len-4, le.Max)
		if le.Max >= 1<<20 {
			e.Hint = "The coordinator's --max-message-size bounds queries, Bind parameters and COPY data."
		}
		return e
	case errors.As(err, &be):
		e := pgerr.Fatal(pgerr.OutOfMemory, "out of memory")
		if be.Wait > 0 {
			e.Detail = fmt.Sprintf("Message type %q of %d bytes waited %v for memory: the coordinator's --message-memory (%d MiB) was taken by other sessions' large messages.",
				be.Type, be.Len, be.Wait, be.Budget>>20)
			e.Hint = "Retry; if this happens often, raise --message-memory or send smaller statements."
		} else {
			e.Detail = fmt.Sprintf("Message type %q of %d bytes is larger than the coordinator's --message-memory (%d MiB).", be.Type, be.Len, be.Budget>>20)
		}
		return e
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
		return errQuietClose
	}
	return pgerr.Fatal(pgerr.ProtocolViolation, "%v", err)
}

// end releases what the session holds when the client goes away.
func (ss *session) end() {
	releaseCitus(ss.citusPending, false)
	ss.citusPending, ss.dropPending, ss.blockSnap, ss.blockBase = nil, nil, nil, nil
	ss.dropSpares()
	ss.unpublishTxn()
	for _, c := range ss.parked {
		if ss.verifyState {
			c.sc.MarkBroken() // user code may have changed its session state
		}
		c.pool.Release(c.sc) // rolls the worker's transaction back
	}
	ss.parked = nil
	ss.lockEnd()
	if ss.sc == nil {
		return
	}
	if ss.pinned != "" || ss.qhead < len(ss.queue) || ss.needSync ||
		(ss.verifyState && (ss.sc.TxStatus != 'I' || !ss.verifyRelease())) {
		// Session state we cannot undo, or a batch cut off midway.
		ss.sc.MarkBroken()
	}
	ss.releaseServer() // rolls back an open transaction
}

// acquire takes a server connection to node for the session and brings its
// settings up to the session's. A session holding a connection to another
// node (in a transaction or an extended batch) gets an error: statements of
// one transaction must run on one worker until multi-worker commit exists.
func (ss *session) acquire(ctx context.Context, node int32) error {
	if ss.sc != nil && node != ss.node && ss.sc.TxStatus == 'I' && !ss.batchWork {
		// Only a Parse or Describe of this batch used the connection: end
		// that implicit transaction with a hidden Sync and move, unless
		// one of them failed there: then the client has the error and the
		// rest of the batch is skipped (errBatchFailed), as PostgreSQL
		// skips it (a stress test of shard moves found the Bind run on
		// the other worker after a Describe's error: a write reported
		// failed had committed).
		if err := ss.settle(); err != nil {
			return err
		}
	}
	if ss.sc != nil {
		if node != ss.node && ss.sc.TxStatus == 'E' {
			// As PostgreSQL: a failed transaction takes nothing until it ends.
			return pgerr.New(pgerr.InFailedSQLTransaction,
				"current transaction is aborted, commands ignored until end of transaction block")
		}
		if node != ss.node {
			if ss.sc.TxStatus == 'T' {
				return ss.joinWorker(ctx, node)
			}
			if ss.pinned != "" && ss.qhead == len(ss.queue) && !ss.needSync {
				return pgerr.New(pgerr.FeatureNotSupported,
					"this session is kept on worker %s (after %s) and the statement needs worker %s",
					ss.srv.nodeAddr(ss.node), ss.pinned, ss.srv.nodeAddr(node)).
					WithHint("Session state pgfleet cannot carry to other workers keeps the session on one; reconnect, or avoid %s with distributed tables.", ss.pinned)
			}
			if ss.needSync && ss.pinned == "" && (ss.txBegin != "" || !ss.batchTxn) {
				if err := ss.pipelineBlock(); err != nil {
					return err
				}
				return ss.joinWorker(ctx, node)
			}
			return pgerr.New(pgerr.FeatureNotSupported,
				"this batch already runs on worker %s and the statement needs worker %s",
				ss.srv.nodeAddr(ss.node), ss.srv.nodeAddr(node)).
				WithHint("Send Sync before a statement for rows on another worker.")
		}
		return nil
	}
	pool, err := ss.poolFor(node)
	if err != nil {
		return err
	}
	spares := len(ss.spanHint) > 1 && ss.pendingBegin != "" && ss.pinned == "" && len(ss.spares) == 0
	if spares {
		ss.takeSpares(ctx, node, func(n int32) bool { return n < node })
	}
	ss.pool, ss.node = pool, node
	sc, err := ss.checkoutFor(ctx, pool, ss.holding(), ss.defining)
	if err != nil {
		ss.dropSpares()
		return err
	}
	ss.sc = sc
	ss.cancelTarget.Store(sc)
	if ss.lock.sc != nil {
		// (Its statement and its advisory locks' connection: one
		// session to the deadlock detector.)
		ss.cancelMu.Lock()
		ss.publishTxn()
		ss.cancelMu.Unlock()
	}
	if spares {
		ss.takeSpares(ctx, node, func(n int32) bool { return n > node })
	}
	return nil
}

// takeSpares takes, in node order, a connection to each node of spanHint
// that want selects, for a transaction that is likely to span them as the
// session's last one did (txnmulti.go's joinWorker uses them). Taking every
// connection a transaction will need in node order, before it holds
// another worker's, keeps transactions that wait for the last connections
// of a pool from holding the others' (see pooling.Pool): throughput holds
// when clients outnumber the pool. A spare that cannot be had is left to
// joinWorker.
func (ss *session) takeSpares(ctx context.Context, node int32, want func(int32) bool) {
	for _, n := range ss.spanHint {
		if n == node || !want(n) {
			continue
		}
		pool, err := ss.poolFor(n)
		if err != nil {
			return
		}
		sc, err := ss.checkout(ctx, pool, ss.holding())
		if err != nil {
			return
		}
		ss.spares = append(ss.spares, txConn{node: n, pool: pool, sc: sc})
	}
}

// spare takes the spare connection to node, if the session holds one in
// the session's settings.
func (ss *session) spare(node int32) *pooling.ServerConn {
	for i, c := range ss.spares {
		if c.node == node {
			ss.spares = slices.Delete(ss.spares, i, i+1)
			if c.sc.ParamsKey != ss.params.key {
				c.pool.Release(c.sc)
				return nil
			}
			return c.sc
		}
	}
	return nil
}

// dropSpares gives back the spare connections the transaction did not use.
func (ss *session) dropSpares() {
	for _, c := range ss.spares {
		c.pool.Release(c.sc)
	}
	clear(ss.spares)
	ss.spares = ss.spares[:0]
}

// poolFor is the session's pool for a node: (worker, database, user).
func (ss *session) poolFor(node int32) (*pooling.Pool, error) {
	pool := ss.pools[node]
	if pool == nil {
		addr := ss.srv.nodeAddr(node)
		if addr == "" {
			return nil, pgerr.New(pgerr.Internal, "no address for node %d", node)
		}
		pool = ss.srv.pool(addr, ss.database, ss.user)
		ss.pools[node] = pool
	}
	return pool, nil
}

// holding counts the worker connections the session holds: its current one,
// the parked ones of its transaction and the connections lent to its own
// statements over several workers (dialNode). A checkout passes it (or more, for connections
// it takes one after another) as its class (pooling.Pool).
func (ss *session) holding() int {
	n := len(ss.parked) + len(ss.spares) + int(ss.lent.Load())
	if ss.sc != nil {
		n++
	}
	if ss.lock.sc != nil {
		n++
	}
	return n
}

// timeoutOff turns off the statement_timeout another session left on sc
// (its settings' key names one, or they are unknown) before sc takes this
// session's settings:
// PostgreSQL arms a statement's timer with the value in force when the
// statement starts, and a string of statements keeps it, so the previous
// client's 1 ms canceled the settings script of a client that set no
// timeout at all (adversary 143). A statement it cancels, as short as it
// is, is tried again.
func timeoutOff(sc *pooling.ServerConn, deadline time.Time) error {
	if !strings.Contains(strings.ToLower(sc.ParamsKey), "statement_timeout") && !strings.HasPrefix(sc.ParamsKey, "\x00") {
		return nil // (a key starting with NUL is unknown settings: pooling.UnknownKey)
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = sc.Exec("SET statement_timeout = 0", deadline, nil); !isCanceled(err) {
			return err
		}
	}
	return err
}

// isCanceled reports whether err is a worker's 57014.
func isCanceled(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerr.QueryCanceled
}

// sideCheckout takes a connection beside the ones the session holds (a
// value to compute, a statement to describe), in the class of what it
// holds. Spare connections go back first: they are an optimization and
// would raise the class beyond what the pools' reserve covers.
// A cancel request reaches it until sideRelease gives it back: a Parse
// there may wait on a lock as the statement would.
func (ss *session) sideCheckout(ctx context.Context, pool *pooling.Pool) (*pooling.ServerConn, error) {
	if len(ss.spares) > 0 {
		ss.dropSpares()
	}
	sc, err := ss.checkout(ctx, pool, ss.holding())
	if err != nil {
		return nil, err
	}
	ss.target(sc)
	return sc, nil
}

// sideRelease gives back a connection from sideCheckout.
func (ss *session) sideRelease(pool *pooling.Pool, sc *pooling.ServerConn) {
	ss.untarget(sc)
	pool.Release(sc)
}

// cancelable runs f with sc, a connection of the session's other than the
// one it holds (a parked one of its transaction), as a cancel target.
func (ss *session) cancelable(sc *pooling.ServerConn, f func() error) error {
	ss.target(sc)
	defer ss.untarget(sc)
	return f()
}

// target makes sc a cancel target beside the session's own connection.
func (ss *session) target(sc *pooling.ServerConn) {
	ss.cancelMu.Lock()
	ss.sideTargets = append(ss.sideTargets, sc)
	ss.cancelMu.Unlock()
}

// untarget takes sc out of the cancel targets.
func (ss *session) untarget(sc *pooling.ServerConn) {
	ss.cancelMu.Lock()
	if i := slices.Index(ss.sideTargets, sc); i >= 0 {
		ss.sideTargets = slices.Delete(ss.sideTargets, i, i+1)
	}
	ss.cancelMu.Unlock()
}

// checkout takes a connection from pool for a session holding held
// connections (its class) and brings its settings up to the session's; on
// failure the connection goes back broken.
func (ss *session) checkout(ctx context.Context, pool *pooling.Pool, held int) (*pooling.ServerConn, error) {
	return ss.checkoutFor(ctx, pool, held, "")
}

// checkoutFor is checkout for a statement that only defines the custom
// settings of the name set defining (definesAlone): it cannot tell whether
// the connection had them, so it may take one that did.
func (ss *session) checkoutFor(ctx context.Context, pool *pooling.Pool, held int, defining string) (*pooling.ServerConn, error) {
	if ss.srv.stopping.Load() {
		// Past Shutdown's deadline nothing new starts on a worker.
		return nil, adminShutdown()
	}
	defines := pooling.DefinesUnion(ss.params.defines, defining)
	if !ss.ready {
		// The startup's reads (welcome.go) see no custom setting, and the
		// session lets the connection go before its first statement.
		defines = pooling.AnyDefines
	}
	for attempt := 1; ; attempt++ {
		var sc *pooling.ServerConn
		var err error
		if ss.ready || ss.startupWait {
			sc, err = pool.AcquireFor(ctx, held, defines)
		} else {
			sc, err = pool.AcquireNow(ctx, defines) // the session's startup: welcome.go
		}
		if err != nil {
			return nil, err
		}
		if !pooling.DefinesWithin(sc.Defines, defines) {
			// Another client defined a custom setting on this backend,
			// which nothing undefines: this client would see it ('' where
			// PostgreSQL has NULL). A new connection takes its slot.
			if sc, err = pool.Renew(ctx, sc); err != nil {
				return nil, err
			}
		}
		if sc.ParamsKey != ss.params.key {
			err := ss.applySettings(sc, pool)
			if isCanceled(err) {
				// The previous client's statement_timeout (1 ms) canceled
				// every statement that would lift it, each timed by it on
				// a loaded worker: a new connection takes its slot.
				if sc, err = pool.Renew(ctx, sc); err != nil {
					return nil, err
				}
				if sc.ParamsKey != ss.params.key {
					err = ss.applySettings(sc, pool)
				}
			}
			if err != nil {
				sc.MarkBroken()
				pool.Release(sc)
				var pe *pgerr.Error
				if errors.As(err, &pe) {
					return nil, err
				}
				var wpe *pgconn.PgError
				if !errors.As(err, &wpe) {
					// The connection was dead (the worker restarted, the
					// backend was terminated): nothing of the client's
					// was sent on it, so another one may serve.
					if attempt < checkoutAttempts {
						continue
					}
					return nil, pgerr.New(pgerr.ConnectionFailure, "lost connection to worker %s while applying session settings: %v", sc.Addr, err).
						WithHint("Retry the statement; it was not run.")
				}
				fe := pgerr.Flatten(err)
				ss.srv.log.Warn("applying session settings on a worker connection", "worker", sc.Addr, "err", err)
				return nil, &pgerr.Error{Severity: "ERROR", Code: fe.Code, Detail: fe.Detail,
					Message: "cannot apply session settings on worker: " + fe.Message,
					Hint:    "Check the settings in the connection string and the session's SET statements."}
			}
		}
		if ss.params.defines != "" {
			sc.Defines = pooling.DefinesUnion(sc.Defines, ss.params.defines) // (what the key defined)
		}
		if ss.sc == nil {
			// A side connection (a value to compute, a scatter) must not
			// overwrite what the held one says of the session's settings.
			ss.noteStrings(sc)
		}
		return sc, nil
	}
}

// applySettings brings sc's settings up to the session's (one round
// trip; the ParameterStatus messages it brings go to the client).
func (ss *session) applySettings(sc *pooling.ServerConn, pool *pooling.Pool) error {
	// RESET ALL leaves the role and session authorization alone.
	sql := "RESET SESSION AUTHORIZATION;RESET ROLE;" + ss.params.key
	if ss.params.key == "" {
		sql += "RESET ALL"
	}
	var onStatus func([]byte)
	if ss.ready {
		onStatus = func(b []byte) { ss.out = wire.AppendFrame(ss.out, 'S', b) }
	}
	err := timeoutOff(sc, time.Now().Add(pool.Config().ResetTimeout))
	for try := 0; err == nil && try < 3; try++ {
		// A timer the previous client's statement_timeout armed may fire
		// after its statement ended, and cancel the next one (this
		// script; seen under load): tried again.
		if err = sc.Exec(sql, time.Now().Add(pool.Config().ResetTimeout), onStatus); !isCanceled(err) {
			break
		}
	}
	if err == nil {
		sc.ParamsKey = ss.params.key
	}
	return err
}

// checkoutAttempts bounds how many dead connections a checkout goes
// through before it reports the worker unreachable.
const checkoutAttempts = 3

// ensureBegun sends the BEGIN the coordinator answered itself ahead of the
// first Bind or Execute that does work on the held connection, as hidden
// extended-protocol messages (BEGIN there turns the batch's implicit
// transaction into a transaction block).
func (ss *session) ensureBegun() {
	ss.batchWork = true
	if ss.pendingBegin == "" {
		return
	}
	b := ss.sc.Buf()
	b = appendRun(b, ss.pendingBegin, nil)
	ss.push(expect{kind: eSwallow, term: tParse})
	ss.push(expect{kind: eSwallow, term: tBind})
	ss.push(expect{kind: eSwallow, term: tExecute, begin: true})
	if ss.chainStarted {
		b = appendRun(b, chainAgain, nil)
		ss.push(expect{kind: eSwallow, term: tParse})
		ss.push(expect{kind: eSwallow, term: tBind})
		ss.push(expect{kind: eSwallow, term: tExecute})
	}
	ss.sc.SetBuf(b)
	ss.txBegin = ss.pendingBegin
	ss.pendingBegin = ""
}

// txStatus is the session's transaction status for ReadyForQuery.
func (ss *session) txStatus() byte {
	switch {
	case ss.sc != nil:
		return ss.sc.TxStatus
	case ss.pendingFailed:
		return 'E'
	case ss.pendingBegin != "":
		return 'T'
	}
	return 'I'
}

// txStatus0 is the status of a transaction the worker has not seen yet.
func (ss *session) txStatus0() byte {
	if ss.pendingFailed {
		return 'E'
	}
	return 'T'
}

// inTxn reports whether the client is inside a transaction block.
func (ss *session) inTxn() bool { return ss.txStatus() != 'I' }

// localTxnOK reports whether a statement of class cls is a BEGIN, or the
// COMMIT or ROLLBACK of a transaction that has not touched a worker yet,
// which the coordinator answers itself: the BEGIN is sent later, to the
// worker the transaction's first statement needs.
func (ss *session) localTxnOK(cls *class) bool {
	if cls.count != 1 || cls.txn == "" || ss.sc != nil || ss.pinned != "" {
		return false
	}
	if cls.txn == "begin" {
		return ss.pendingBegin == ""
	}
	return ss.pendingBegin != ""
}

// applyLocalTxn does what localTxnOK allowed and returns the command tag.
// AND CHAIN keeps a BEGIN pending: the same one (the same
// characteristics), or after a failed transaction a plain BEGIN (the
// session's defaults, as PostgreSQL 15 starts it).
func (ss *session) applyLocalTxn(cls *class, sql string) string {
	if cls.txn == "begin" {
		ss.pendingBegin, ss.chainStarted = sql, false
		if lx := (lexer{s: sql}); lx.startsWith("START") {
			return "START TRANSACTION" // PostgreSQL's tag for START TRANSACTION
		}
		return "BEGIN"
	}
	tag := "ROLLBACK"
	if cls.txn == "commit" && !ss.pendingFailed {
		tag = "COMMIT"
	}
	ss.txnEnded(tag == "COMMIT")
	next := ""
	if cls.chain {
		next = ss.pendingBegin
		if ss.pendingFailed && !ss.chainStarted {
			next = "BEGIN" // the failure undid the BEGIN's modes
		}
	}
	ss.pendingBegin, ss.pendingFailed, ss.chainStarted = next, false, cls.chain
	return tag
}

// errPreparedView refuses statements that read pg_prepared_statements: on
// a pooled worker connection it lists that connection's statements, under
// pgfleet's names and other sessions' too, not the session's.
func errPreparedView() error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"pg_prepared_statements is not supported through pgfleet: the worker connection's view would list other sessions' statements, not this session's").
		WithHint("Keep track of the session's prepared statements in the application; DEALLOCATE and DISCARD ALL work as on PostgreSQL.")
}

// errReservedName refuses SQL PREPARE, EXECUTE and DEALLOCATE of names that
// begin with pgfleet_: pgfleet prepares its own statements under them on
// worker connections, so such a name would clash with one (42P05 where
// PostgreSQL succeeds) or run it.
func errReservedName() error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"prepared statement names beginning with pgfleet_ are reserved: pgfleet prepares its own statements under them on worker connections").
		WithHint("Give the prepared statement another name.")
}

// localTxn answers a simple-query BEGIN, COMMIT or ROLLBACK locally when
// localTxnOK allows it.
func (ss *session) localTxn(cls *class, sql string) bool {
	if !ss.localTxnOK(cls) {
		return false
	}
	tag := ss.applyLocalTxn(cls, sql)
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return true
}

func (ss *session) releaseServer() {
	if len(ss.spares) > 0 {
		ss.dropSpares()
	}
	ss.cancelMu.Lock()
	ss.cancelTarget.Store(nil)
	if ss.lock.sc != nil && len(ss.parked) == 0 {
		ss.txw.Store(nil) // (before the connection is another's: publishTxn)
		ss.dlVictim.Store(false)
	}
	ss.cancelMu.Unlock()
	ss.pool.Release(ss.sc)
	ss.sc = nil
	ss.resnap = false
}

// releaseIfIdle gives the server connection back between transactions.
func (ss *session) releaseIfIdle() {
	if ss.swapped.sc != nil {
		ss.lockSwapBack()
	}
	if ss.advisoryRan && ss.sc != nil && ss.pinned != "" && ss.sc.TxStatus == 'I' && ss.qhead == len(ss.queue) && !ss.needSync {
		ss.unpinIfUnlocked()
	}
	if ss.tempDropRan && ss.sc != nil && ss.pinned != "" && ss.sc.TxStatus == 'I' && ss.qhead == len(ss.queue) && !ss.needSync {
		ss.unpinIfNoTemp()
	}
	if ss.sc != nil && ss.pinned == "" && ss.sc.TxStatus == 'I' && ss.qhead == len(ss.queue) && !ss.needSync {
		unverified := ss.txUserCode && !ss.verifyState
		if ss.verifyState && !ss.verifyRelease() {
			return
		}
		if unverified {
			// User code ran in the transaction with no snapshot on this
			// connection (a coordinator-run write joined it): closed,
			// not pooled.
			ss.sc.MarkBroken()
		}
		ss.releaseServer()
	}
}

func (ss *session) pin(reason string) {
	if reason == pinTemp {
		ss.tempObjects = true
	}
	if pinChangesSettings(reason) {
		ss.settingsUnknown = true
		ss.setGen++
	}
	if ss.pinned == "" {
		ss.pinned = reason
		ss.pinClean = reason == pinAdvisory && !ss.settingsUnknown && !ss.tempObjects
		ss.tempClean = followable(reason) && !ss.settingsUnknown
		ss.srv.metrics.pinned.WithLabelValues(reason).Inc()
		return
	}
	if reason != pinAdvisory {
		ss.pinClean = false
	}
	if !followable(reason) {
		ss.tempClean = false
	}
}

// followable reports whether a pin's state can be counted on the
// connection (unpinIfNoTemp): temporary objects, LISTEN.
func followable(reason string) bool { return reason == pinTemp || reason == pinListen }

// pinListen is the pin of a session that ran LISTEN.
const pinListen = "LISTEN"

// pinTemp is the pin of a session that made temporary objects.
const pinTemp = "temporary object"

// tempCountSQL counts the objects in the connection's temporary schema
// (every catalog with a namespace: an operator family or conversion made
// in pg_temp is not a relation; adversary 156) and its listened channels.
const tempCountSQL = "SELECT pg_catalog.count(*) FROM (" +
	"SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_proc WHERE pronamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_type WHERE typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_operator WHERE oprnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_opfamily WHERE opfnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_opclass WHERE opcnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_conversion WHERE connamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_statistic_ext WHERE stxnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_collation WHERE collnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_constraint WHERE connamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_ts_config WHERE cfgnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_ts_dict WHERE dictnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_ts_parser WHERE prsnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_ts_template WHERE tmplnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()" +
	" UNION ALL SELECT 1 FROM pg_catalog.pg_listening_channels()) o"

// unpinIfNoTemp gives a session pinned by temporary objects or LISTEN
// alone its freedom back once its connection has none of them left (after
// DROP, DISCARD TEMP or ALL, UNLISTEN, or the end of a transaction that
// made them ON COMMIT DROP or rolled them back; outside a transaction, one
// round trip, after such statements only): its connection goes back to
// the pool, and its statements reach every worker again (a Django
// connection kept open that once used a temporary table refused every
// multi-shard statement until it reconnected, adversary 152; a
// node-postgres client after UNLISTEN *, adversary 154).
func (ss *session) unpinIfNoTemp() {
	ss.tempDropRan = false
	if !ss.tempClean || !followable(ss.pinned) {
		return
	}
	rows, err := ss.sc.Query(tempCountSQL, time.Now().Add(ss.pool.Config().ResetTimeout))
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] != "0" || ss.sc.TxStatus != 'I' {
		return
	}
	ss.pinned, ss.tempClean, ss.tempObjects = "", false, false
}

// pinState is what pin changes.
type pinState struct {
	pinned                              string
	unknown, clean, tempObjs, tempClean bool
}

// pinMark is the pin state before a statement pins the session, for
// unpinRefused; nil when the session is pinned already.
func (ss *session) pinMark() *pinState {
	if ss.pinned != "" {
		return nil
	}
	return &pinState{pinned: ss.pinned, unknown: ss.settingsUnknown, clean: ss.pinClean, tempObjs: ss.tempObjects, tempClean: ss.tempClean}
}

// unpinRefused undoes the pin of a statement refused before it reached a
// worker (its connection could not be had: a block on another worker
// that cannot take in this one): nothing ran, so nothing pins (adversary
// 151: such a refusal in a block left the session pinned for good).
func (ss *session) unpinRefused() {
	if u := ss.pinUndo; u != nil {
		ss.pinned, ss.settingsUnknown, ss.pinClean, ss.tempObjects, ss.tempClean = u.pinned, u.unknown, u.clean, u.tempObjs, u.tempClean
	}
	ss.pinUndo = nil
}

// pinSpanning refuses a statement that would pin the session (reason) in
// a transaction block over several workers: the state it leaves is on one
// of the block's connections, all of which go back to their pools at the
// block's end (adversary 147: a session advisory lock taken there was
// handed to the next client of the default worker's pool).
func (ss *session) pinSpanning(reason string) error {
	if len(ss.parked) == 0 || ss.pinned != "" {
		return nil
	}
	switch reason {
	case pinTemp, "set_config()", "search_path naming pg_temp":
		// Nothing of them reaches another client: a temporary object
		// fails the block's two-phase COMMIT (PostgreSQL refuses to
		// PREPARE it) and goes with its ROLLBACK; settings are reset on
		// the block's connections before anyone else uses them
		// (multiRelease: their settings are unknown).
		return nil
	}
	return errMultiRefused(fmt.Sprintf("%s is not supported in a transaction that spans several workers: the session would keep one worker connection for good", reason),
		"Run it before the transaction's statements on other workers, or outside the transaction block.")
}

// pinAdvisory is the pin of a session advisory lock (classify's
// sessionFuncs).
const pinAdvisory = "session advisory lock"

// noteAdvisoryDDL follows a statement of class cls (text) for
// txAdvisoryDDL: DDL calling an advisory lock function or what calls one
// (a default), or storing code that names one, sets it (not a COMMENT that
// only mentions one); a later statement of the transaction
// then counts as calling one (adversary 146: a function made in the block,
// called over a distributed table, took its lock on the shard's worker).
func (ss *session) noteAdvisoryDDL(cls *class, text string) {
	switch {
	case cls.ddl && (cls.advisory || cls.advisoryCode || cls.storesCode && !startsWithWord(text, "comment") && advisoryIn(text)):
		ss.txAdvisoryDDL = true
	case ss.txAdvisoryDDL && !cls.quiet && !cls.ddl:
		cls.advisoryBlock = true
	}
}

// advisoryIn reports whether text, strings and comments included, names
// an advisory lock function.
func advisoryIn(text string) bool {
	var buf [40]byte
	return !eachWord(text, func(w string) bool {
		return len(w) > len(buf) || !advisoryFunc(upperInto(buf[:], w))
	})
}

// notePinnedRun follows a statement (text, of class cls; st, a prepared
// one, or nil) that runs in a pinned session: one that may change what the
// session does not follow (a pin of another kind, SQL that may hide one,
// user code) leaves it pinned for good; one calling an advisory lock
// function has the session look, once it is idle, whether its last lock
// went (unpinIfUnlocked).
func (ss *session) notePinnedRun(cls *class, text string, st *Statement) {
	if ss.pinned == "" {
		return
	}
	if cls.advisory {
		ss.advisoryRan = true
	}
	if !ss.pinClean && !ss.tempClean {
		return
	}
	userCode := cls.verify || !cls.quiet && ss.viewVerify(text, cls.maint, st)
	if ss.pinClean && (cls.pin != "" && !advisoryOnly(cls, text) || userCode) {
		ss.pinClean = false
	}
	// (Classify keeps a statement's first pin only: several statements
	// with one may pin otherwise too.)
	if ss.tempClean && (cls.pin != "" && (!followable(cls.pin) || cls.count > 1) || userCode) {
		ss.tempClean = false
	}
	if ss.tempClean && (cls.ddl || cls.txn != "" || len(cls.ops) > 0 || cls.count > 1 || mayDiscard(text)) {
		ss.tempDropRan = true
	}
}

// mayDiscard reports whether text has the word DISCARD or UNLISTEN.
func mayDiscard(text string) bool {
	return planner.ContainsFold(text, "discard") || planner.ContainsFold(text, "unlisten")
}

// advisoryOnly reports whether text (of class cls), which pins for a
// session advisory lock, does nothing else the session does not follow:
// one statement, no SET, no user code, no other session function or
// temporary object (classify keeps only a statement's first pin).
func advisoryOnly(cls *class, text string) bool {
	if cls.pin != pinAdvisory || cls.count != 1 || cls.verify || cls.storesCode || len(cls.ops) > 0 || len(cls.sps) > 0 || cls.txn != "" {
		return false
	}
	var buf [40]byte
	return eachWord(text, func(w string) bool {
		if len(w) > len(buf) {
			return true
		}
		u := upperInto(buf[:], w)
		if why, ok := sessionFuncs[string(u)]; ok && why != pinAdvisory {
			return false
		}
		return string(u) != "TEMP" && string(u) != "TEMPORARY" && string(u) != "PG_TEMP" && string(u) != "INTO"
	})
}

// advisoryCountSQL counts the advisory locks of the connection's backend.
const advisoryCountSQL = "SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()"

// unpinIfUnlocked gives a session pinned by session advisory locks alone
// its freedom back once it holds none (after pg_advisory_unlock or
// unlock_all, outside a transaction: one round trip, after statements
// calling an advisory lock function only): its connection goes back to
// the pool, and its statements reach every worker again, as a session
// that never locked (a migration tool's lock, taken and released on a
// pooled connection that an application then uses).
func (ss *session) unpinIfUnlocked() {
	ss.advisoryRan = false
	if !ss.pinClean || ss.pinned != pinAdvisory {
		return
	}
	held, ok := advisoryLocks(ss.sc, ss.pool)
	if !ok || ss.sc.TxStatus != 'I' || held && !ss.lockAside() {
		return
	}
	ss.pinned, ss.pinClean = "", false
}

// synthError answers in order with an error pgfleet found itself, and skips
// the rest of the extended batch, as PostgreSQL does after an error.
//
// PostgreSQL's error would also abort the transaction (the batch's implicit
// one, or the client's explicit one), so when a server connection is held a
// Parse that must fail follows, its error hidden: the worker then rolls back
// what the batch did and reports the transaction as failed, as PostgreSQL
// would have.
func (ss *session) synthError(err error) {
	if ss.lost != nil {
		return // answered by the run loop
	}
	if err == errBatchFailed {
		ss.skipping = true // the worker's error is the answer
		return
	}
	er := pgerr.Flatten(err)
	ss.victimErr(er)
	userNames(ss.srv.catalog.Load(), er)
	b, _ := er.Encode(nil)
	ss.push(expect{kind: eSynth, synth: b})
	ss.skipping = true
	if ss.sc == nil && ss.pendingBegin != "" {
		ss.pendingFailed = true
	}
	if ss.sc != nil {
		ss.sc.SetBuf(append(ss.sc.Buf(), msgAbortParse...))
		ss.push(expect{kind: eSwallow, term: tParse, abort: true})
		// The server skips to a Sync now, which it must be sent, even
		// after a Flush answered everything before it.
		ss.needSync = true
	}
}

var (
	msgParseComplete = []byte{'1', 0, 0, 0, 4}
	msgCloseComplete = []byte{'3', 0, 0, 0, 4}
	msgBindComplete  = []byte{'2', 0, 0, 0, 4}
	msgNoData        = []byte{'n', 0, 0, 0, 4}
	msgDeallocate    = wire.AppendFrame(nil, 'C', []byte("DEALLOCATE\x00"))
	// msgAbortParse is a Parse that always fails (a syntax error).
	msgAbortParse = wire.AppendFrame(nil, 'P', []byte("\x00pgfleet abort after client error\x00\x00\x00"))
	msgAbortQuery = appendQuery(nil, "pgfleet abort after client error")
)

// simpleQuery relays a Query message: one or more statements, one cycle.
// setConstraintsRefused refuses SET CONSTRAINTS where it would not act as
// on PostgreSQL, in a database with distributed or reference tables
// (0A000): of named constraints, since a shard's have names of their own
// (set on the default node, the name reached the shell's only: adversary
// 140 committed a row its deferred key refused); and ALL in a transaction
// block that has a worker other than the default node, since the
// statement runs on the default node (a block on it alone, or on none
// yet, sets it there and again on each worker it takes in).
func (ss *session) setConstraintsRefused(cls *class, text string) error {
	if !cls.setConstraints && !cls.setConstraintsNamed && !cls.setConstraintsCode || !ss.routes {
		return nil
	}
	snap := ss.srv.catalog.Load()
	if snap == nil || len(snap.Tables) == 0 {
		return nil
	}
	elsewhere := ss.inTxn() && (ss.sc != nil && ss.node != ss.srv.defaultNode.Load() || len(ss.parked) > 0)
	if cls.setConstraintsNamed && !cls.setConstraints && !cls.setConstraintsCode && !elsewhere {
		// Constraints the same string made on tables none of pgfleet's,
		// which only the default node has, where it runs (Django's
		// AddField of a foreign key).
		if names, ok := madeHere(text, snap); ok {
			if ours, err := ss.srv.constraintsOfOurs(names, snap); err == nil && !ours {
				return nil
			}
		}
	}
	hint := "Declare the keys DEFERRABLE INITIALLY DEFERRED or INITIALLY IMMEDIATE as transactions need them (ALTER TABLE ... DROP CONSTRAINT, then ADD CONSTRAINT)."
	switch {
	case cls.setConstraintsCode:
		// A DO block or function would run it on one worker (adversary
		// 141: a transaction PostgreSQL aborts committed).
		return pgerr.New(pgerr.FeatureNotSupported,
			"SET CONSTRAINTS in a DO block or function is not supported in a database with distributed or reference tables: it would reach one worker of a transaction").
			WithHint("Send SET CONSTRAINTS ALL as a statement of its own, right after BEGIN.")
	case cls.setConstraintsNamed:
		return pgerr.New(pgerr.FeatureNotSupported,
			"SET CONSTRAINTS of named constraints is not supported in a database with distributed or reference tables: their shards' constraints have names of their own").
			WithHint("Use SET CONSTRAINTS ALL right after BEGIN, or %s", strings.ToLower(hint[:1])+hint[1:])
	case elsewhere:
		return pgerr.New(pgerr.FeatureNotSupported,
			"SET CONSTRAINTS ALL is not supported in a transaction block that runs on a worker other than the first: it would reach the first worker only").
			WithHint("Send it right after BEGIN, or %s", strings.ToLower(hint[:1])+hint[1:])
	}
	return nil
}

func (ss *session) simpleQuery(body []byte) error {
	// A statement that was refused before it ran leaves nothing to
	// verify for the next one (whose snapshot, in the transaction the
	// refusal failed, would fail and take the session for one whose
	// state changed).
	ss.verifyNext, ss.lentUserCode, ss.lentImplicit = false, false, false
	if ss.implicitTxn {
		return ss.queryInPipeline()
	}
	if !ss.bridging {
		if ss.sc != nil && ss.needSync {
			if handled, err := ss.queryAfterExtended(); handled {
				return err
			}
		} else if ss.onlySynthQueued() {
			// What the coordinator answered itself for messages before
			// the Query (a ParseComplete, a multi-shard write's
			// CommandComplete) goes out before the Query's answers, as
			// in PostgreSQL's order (adversary finding: after a BEGIN
			// or COMMIT the coordinator answered).
			ss.emitSynth()
		}
	}
	sql, _, ok := wire.CBytes(body)
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Query message")
	}
	if err := ss.checkEncoding(sql); err != nil {
		return ss.queryError(err)
	}
	text := string(sql)
	ss.noteTxnStart()
	if ss.routes {
		if err := ss.srv.fencedInExcept(text, ss.ownFences()); err != nil {
			return ss.queryError(err) // a table whose rows are moving (fence.go)
		}
	}
	ctext := text
	if ss.scsOff && strings.IndexByte(text, '\\') >= 0 {
		// A backslash escapes in a plain string under this setting: the
		// classifier reads the text as the worker will ('a\'' ; SET ...
		// is two statements).
		ctext = escapeStrings(text)
	}
	cls := classify(ctext)
	ss.noteClass(&cls)
	ss.ddlSent = ss.ddlSent || cls.ddl
	ss.ddlShared = ss.ddlShared || cls.ddl && !cls.temp
	if cls.ddl || cls.verify {
		ss.nameGen++ // names may resolve otherwise after it (ownResolve)
	}
	ss.terminates = ss.terminates || cls.terminate
	ss.noteIdleChange(ctext, &cls)
	ss.loginDDL = ss.loginDDL || cls.logins
	ss.savepointShapes(&cls)
	gidNode := int32(-1) // COMMIT or ROLLBACK PREPARED: the worker with the id
	if cls.twoPhase && cls.count > 1 && preparesTxn(ctext) {
		// The coordinator's checks (clientTwoPhase) are for a statement
		// of its own (adversary: one in a string prepared a block that
		// had declared a WITH HOLD cursor, and an id used on another
		// worker).
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"PREPARE TRANSACTION in a query string of several statements is not supported").
			WithHint("Send PREPARE TRANSACTION as a statement of its own."))
	}
	if cls.twoPhase && cls.count == 1 {
		n, handled, err := ss.clientTwoPhase(text)
		if u := ss.gidUnlock; u != nil {
			ss.gidUnlock = nil
			defer u() // after the PREPARE TRANSACTION ran (or was refused)
		}
		if handled {
			return err
		}
		if err != nil {
			return ss.queryError(err)
		}
		gidNode = n
	}
	if handled, err := ss.cursorStatement(text, &cls); handled {
		return err
	}
	if err := ss.setConstraintsRefused(&cls, text); err != nil {
		return ss.queryError(err)
	}
	if cls.count > 1 && (ss.routes || cls.signal) {
		if snap := ss.srv.catalog.Load(); snap != nil {
			failed := ss.pendingFailed || ss.sc != nil && ss.sc.TxStatus == 'E'
			// A signal call may name a session, which only the coordinator
			// can signal (signal.go): its string runs statement by
			// statement too.
			if parts := planner.Split(ctext, snap, failed || cls.signal); parts != nil {
				return ss.multiStatement(parts)
			}
		}
	}
	// (Read even after classify's verify: a call of pgfleet's own
	// functions is one, and lends connections that only the catalog's
	// user code, seen here, keeps from the pool; lentUserCode.)
	ss.lentImplicit = false
	if handled, err := ss.runMaintenance(text, &cls); handled {
		return err
	}
	if !cls.quiet && ss.pinned == "" {
		vc := ss.viewCheck(text, cls.maint, nil)
		pin := vc.pin
		ss.lentImplicit = vc.verify
		cls.advisoryCode = vc.advisory
		if pin && cls.pin == "" && !cls.storesCode {
			cls.pin = unseenPin
		}
		if cls.pin == "" && ss.tempPath(&cls) {
			cls.pin = "search_path naming pg_temp"
		}
	}
	if !cls.quiet && ss.pinned != "" {
		cls.advisoryCode = ss.implicitAdvisory(text, cls.maint, nil)
	}
	ss.noteAdvisoryDDL(&cls, text)
	if ss.lentImplicit {
		cls.verify = true // it names what may run user code unwritten
	}
	ss.noteViewDDL(cls.verify, text)
	if cls.txn != "" && ss.localTxn(&cls, text) {
		return nil
	}
	if cls.showPools {
		switch {
		case cls.count != 1:
			return ss.queryError(errShowPools("in a query string with other statements"))
		case ss.txStatus() == 'E':
			return ss.queryError(pendingFailedError(&cls))
		}
		return ss.showPools()
	}
	if len(ss.parked) > 0 || ss.catalogPending() {
		if done, err := ss.multiSimple(&cls, text); done {
			return err
		}
	}
	if ss.pendingFailed {
		return ss.queryError(pendingFailedError(&cls))
	}
	if ss.sc != nil && ss.sc.TxStatus == 'E' && !cls.mayEndFailed() {
		// As PostgreSQL: a failed transaction reads nothing but its end,
		// and answers 25P02 before analysing a statement (pgfleet's
		// planning included); only a syntax error comes first. The
		// worker holding the failed transaction gives exactly that
		// answer and runs nothing.
		return ss.relayCycle('Q', body, nil, ss.node)
	}
	ss.seqDiscard = false
	if cls.preparedView {
		return ss.queryError(errPreparedView())
	}
	if cls.reservedName {
		return ss.queryError(errReservedName())
	}
	if cls.seqFn != "" && ss.seqUsed {
		return ss.queryError(errSeqState(cls.seqFn))
	}
	if cls.resetNotLast && ss.resetsStartup(&cls) {
		return ss.queryError(errResetNotLast)
	}
	if cls.verify && cls.seqFn == "" {
		// User code may read sequence state the text does not show
		// (seqcheck.go).
		ss.seqDiscard = true
	}
	ss.seqGuard = cls.verify && cls.seqFn == "" && ss.seqUsed
	if !cls.quiet {
		ss.seqUsed = true
	}
	if cls.count == 1 && len(cls.ops) == 1 && ss.pinned == "" &&
		(cls.ops[0].kind == opDeallocate || cls.ops[0].kind == opDeallocAll) {
		return ss.deallocate(cls.ops[0])
	}
	// A simple Query destroys the unnamed statement, as in PostgreSQL.
	delete(ss.stmts, "")
	var cp *class
	if len(cls.localSets) > 0 && (cls.localOps == nil || ss.pinned != "") {
		// (Its parameters cannot be given here; a pinned session's
		// settings are its connection's: as any set_config.)
		cls.pin, cls.localSets, cls.localOps = "set_config()", nil, nil
	}
	if cls.pin == "" && cls.count > 1 && cls.verify && setsSession(cls.ops) {
		// A SET and user code in one query string: the snapshot is
		// taken ahead of the whole string, so a function that set the
		// value back after the SET shows no change, and the session
		// would take the SET's value for its own (adversary 166:
		// "SET work_mem = '3MB'; SELECT f()", f setting 2MB, gave 3MB;
		// a search_path so resolved names wrongly; older). The
		// connection stays with the session, which asks it.
		cls.pin = "session state changed by a function"
	}
	if len(cls.ops) > 0 || cls.chain || len(cls.sps) > 0 || cls.endLike && ss.keepsPortals() || len(cls.localOps) > 0 {
		cp = &cls // (followed at its CommandComplete: noteTag)
	}
	if ss.lock.sc != nil {
		if err := ss.lockBack(text, true, cls.advisory || cls.advisoryCode || lockStateIn(text), discardsAll(&cls) && cls.count == 1, cls.pin != ""); err != nil {
			if pgerr.Flatten(err).Severity == "FATAL" {
				return err
			}
			return ss.queryError(err)
		}
	}
	pinnedBefore, unknownBefore := ss.pinned, ss.settingsUnknown
	if cls.pin != "" {
		if err := ss.pinSpanning(cls.pin); err != nil {
			return ss.queryError(err)
		}
		ss.pinUndo = ss.pinMark()
		defer func() { ss.pinUndo = nil }() // (this statement's only)
		ss.pin(cls.pin)
		if !advisoryOnly(&cls, text) {
			ss.pinClean = false
		}
	}
	cleanBefore := ss.pinClean
	ss.notePinnedRun(&cls, text, nil)
	if cls.pin != "" || len(cls.ops) > 0 {
		ss.settingsDirty = true
		if cls.pin != "" || !customOnly(cls.ops) {
			ss.setGen++
		}
		ss.pathTouched = ss.pathTouched || touchesPath(cls.ops)
	}
	if len(cls.localOps) > 0 {
		ss.localSetsSent(cls.localOps)
	}
	// In a failed transaction a statement of its own runs nothing but
	// its end (ROLLBACK, COMMIT, ROLLBACK TO): no user code to verify,
	// and no snapshot (which would fail there, and leave the session
	// taken for one whose state changed).
	ss.verifyNext = cls.verify && ss.pinned == "" && !(cls.count == 1 && ss.txStatus() == 'E')
	ss.customSetNext = cls.setsCustom
	ss.lentUserCode = cls.verify
	ss.txUserCodeWas = ss.txUserCode
	ss.txUserCode = ss.txUserCode || cls.verify
	if cls.hidden {
		if err := ss.refuseHidden(text); err != nil {
			ss.unpinRefused() // (nothing ran: adversary 154, a refused CREATE FUNCTION pg_temp.f left a block that no ROLLBACK ended)
			return ss.queryError(err)
		}
	}
	if cls.twoPhase {
		if err := refuseOwnGID(text, ss.scsOff || cls.count > 1); err != nil {
			ss.unpinRefused()
			return ss.queryError(err)
		}
	}
	if cls.count == 1 && cls.signal {
		if handled, err := ss.signalSession(text); handled {
			return err
		}
	}
	if cls.ddl && cls.count == 1 {
		if db := dropDatabase(text); db != "" {
			// The pools' idle connections to it would make PostgreSQL
			// refuse: "being accessed by other users".
			ss.srv.closeIdle(db)
		}
	}
	if handled, err := ss.runDDL(text, &cls); handled {
		return err
	}
	// Statements on no distributed table run on the default node, or on
	// the worker the session's transaction is on (COMMIT, SET, SAVEPOINT).
	node := ss.currentNode()
	ptext := text
	if ss.scsOff && strings.IndexByte(text, '\\') >= 0 {
		ptext = escapeStrings(text)
	}
	// One statement's table names resolve before its code runs (a
	// function's set_config of search_path comes after); several
	// statements' later ones resolve after the earlier ones ran.
	ss.namesBeforePin = cls.count == 1 && !unknownBefore
	p, lits, err := ss.planSimple(ptext)
	if err == nil {
		// A multi-shard plan names the nodes: one that waited for a
		// cut-over is made again from the catalog the move left.
		waited, herr := ss.awaitShards(p)
		if herr != nil {
			ss.namesBeforePin = false
			ss.pinned, ss.settingsUnknown = pinnedBefore, unknownBefore
			return ss.queryError(herr)
		}
		if waited {
			p, lits, err = ss.planSimple(ptext)
		}
	}
	ss.namesBeforePin = false
	if err == nil && ss.unparsedPlan(p, text) {
		err = ss.unparsed(text)
	}
	if err == nil && ss.embedsASCII && p.Kind() != planner.KindDefault && !ascii(sql) {
		err = errASCIITrail
	}
	if err == nil && ss.decodedEscapes(p, ptext) {
		err = errDecodedEscapes
	}
	if err != nil {
		// The statement runs nowhere: a refused PREPARE (or other
		// pinning statement) leaves the session as it was.
		ss.pinned, ss.settingsUnknown = pinnedBefore, unknownBefore
		var sf *planner.SelectFirst
		if errors.As(err, &sf) {
			return ss.insertSelectRows(ptext, sf)
		}
		var qf *planner.SubqueryFirst
		if errors.As(err, &qf) {
			return ss.subqueriesFirst(ptext, qf)
		}
		var vf *planner.SetvalFirst
		if errors.As(err, &vf) {
			return ss.setvalFirst(vf)
		}
		var tr *planner.TimeRead
		if errors.As(err, &tr) {
			return ss.runFrozen(nil, text, tr.Err)
		}
		return ss.queryError(ss.workerVerdict(text, nil, err))
	}
	if cls.notify && p.Kind() != planner.KindDefault {
		return ss.queryError(errNotifyElsewhere)
	}
	if p.Kind() == planner.KindFunction && cls.pin == "" && cls.count == 1 && !ss.inTxn() {
		// pgfleet's own function (create_distributed_table, ...) runs
		// outside a transaction on connections of its own (runFunction),
		// never on the pinned one: it changes nothing there (adversary
		// 146: a migration's create_distributed_table under a session
		// lock kept the session pinned after the unlock).
		ss.pinClean = cleanBefore
	}
	if (cls.advisory || cls.listen || cls.advisoryCode && p.Kind() != planner.KindFunction) &&
		(p.Kind() != planner.KindDefault || ss.homeNode(text) != ss.srv.defaultNode.Load()) ||
		cls.advisoryBlock && p.Kind() != planner.KindDefault && p.Kind() != planner.KindFunction {
		ss.pinned, ss.settingsUnknown = pinnedBefore, unknownBefore
		return ss.queryError(ss.errDefaultOnly(cls.listen, p))
	}
	if cls.seqFn != "" {
		if p.Kind() != planner.KindDefault && p.Kind() != planner.KindRouter {
			return ss.queryError(errSeqState(cls.seqFn))
		}
		ss.seqDiscard = true
	}
	if p.Kind() == planner.KindDefault {
		node = ss.homeNode(text)
		if gidNode >= 0 {
			node = gidNode
		}
	}
	if err := ss.txnCatalogCheck(p); err != nil {
		return ss.queryError(err)
	}
	ss.srv.metrics.kinds.count(p.Kind())
	ss.notePlan(p.Kind())
	var r *planner.Route
	switch x := p.Root.(type) {
	case *planner.Function:
		return ss.runFunction(x)
	case *planner.CopyIn:
		return ss.copySplit(p, x, lits)
	case *planner.InsertSplit:
		return ss.insertSplit(p, x, lits, text)
	case *planner.MultiShardWrite:
		if p.Explain != nil {
			return ss.explainMultiWrite(p, lits)
		}
		return ss.multiShardWrite(p, lits, text)
	case *planner.CopyOut:
		return ss.copyOut(p, x, lits, text)
	case *planner.Scatter:
		if p.Explain != nil {
			return ss.explainScatter(p, lits)
		}
		return ss.scatterSimple(p, lits, func() (*planner.Plan, []literal, error) { return ss.planSimple(ptext) })
	case *planner.Route:
		r = x
	}
	if p.Kind() != planner.KindDefault {
		var hash int32
		if r != nil {
			hash, err = ss.literalHash(p, r.Value, lits)
			if err != nil {
				return ss.queryError(err)
			}
		}
		tgt, err := ss.routeHeld(p, hash, func() (*planner.Plan, int32, error) {
			np, nlits, err := ss.planSimple(ptext)
			if err != nil {
				return nil, 0, err
			}
			nr, ok := np.Root.(*planner.Route)
			if !ok {
				return nil, 0, errCatalogMoved
			}
			h, err := ss.literalHash(np, nr.Value, nlits)
			p, lits = np, nlits
			return np, h, err
		})
		if err != nil {
			return ss.queryError(err)
		}
		if tgt.copies {
			switch {
			case p.Explain != nil && !p.Explain.Analyze:
				// Planning a write shows the same plan on every copy:
				// the first copy's.
			case cls.seqFn != "":
				ss.seqDiscard = false
				return ss.queryError(errSeqState(cls.seqFn))
			case !ss.inTxn() && p.Explain == nil:
				return ss.writeAllNodes(p, lits, text)
			case p.Explain == nil && ss.pinned == "":
				// In a transaction block (even one whose BEGIN is still
				// deferred) it runs on every worker holding a copy, each
				// joined into the transaction, and commits with it.
				return ss.refWriteInTxn(p, lits)
			default:
				return ss.queryError(errAllNodes)
			}
		}
		node = tgt.node
		if p.Explain != nil && p.Explain.Text {
			ss.inject = explainRow(ss.srv.describeTarget(p, tgt, lits))
		}
		shardSQL := p.ShardSQL()[tgt.index]
		if lits != nil {
			shardSQL, _ = spliceLiterals(shardSQL, lits)
		}
		body = append(append(ss.qbuf[:0], shardSQL...), 0)
		ss.qbuf = body
	}
	return ss.relayCycle('Q', body, cp, node)
}

// checkEncoding gives the error PostgreSQL gives for a statement text
// that is not valid in the session's encoding, which it checks as the
// message arrives, before anything else: before a failed transaction's
// 25P02, and before any row of a statement the coordinator splits between
// workers (where another worker's error would come first). It checks only
// when the client's encoding is the servers' UTF8; other encodings are
// converted, and checked, by the worker. The check costs one pass over
// the text (ASCII a word at a time).
func (ss *session) checkEncoding(text []byte) error {
	if !ss.utf8Client || utf8.Valid(text) {
		return nil
	}
	i := 0
	for i < len(text) {
		r, n := utf8.DecodeRune(text[i:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		i += n
	}
	// PostgreSQL shows the bytes of the character the first byte
	// announces (pg_utf_mblen), as far as the text goes.
	l := 1
	switch b := text[i]; {
	case b >= 0xf0 && b < 0xf8:
		l = 4
	case b >= 0xe0:
		l = 3
	case b >= 0xc0:
		l = 2
	}
	l = min(l, len(text)-i)
	var hex []string
	for _, b := range text[i : i+l] {
		hex = append(hex, fmt.Sprintf("0x%02x", b))
	}
	return pgerr.New(pgerr.CharacterNotInRepertoire, "invalid byte sequence for encoding \"UTF8\": %s", strings.Join(hex, " "))
}

// noteStrings records how the session's settings read string constants,
// from the ParameterStatus values of a connection in its settings.
func (ss *session) noteStrings(sc *pooling.ServerConn) {
	ss.scsOff = sc.Params["standard_conforming_strings"] == "off"
	ce, se := sc.Params["client_encoding"], sc.Params["server_encoding"]
	ss.foreignEnc = ce != "" && se != "" && !strings.EqualFold(ce, se)
	ss.utf8Client = !ss.foreignEnc && strings.EqualFold(se, "UTF8")
	ss.embedsASCII = encodingEmbedsASCII(ce)
	ss.noteReported(sc.Params)
}

// encodingEmbedsASCII reports whether PostgreSQL's encoding name is one
// whose multibyte characters can hold ASCII bytes (pg_encoding_embeds_ascii
// is true for them), as PostgreSQL spells the names in ParameterStatus or
// a user in COPY's ENCODING option.
// Called at every checkout: it allocates nothing.
func encodingEmbedsASCII(enc string) bool {
	var buf [16]byte
	n := 0
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		switch {
		case c == '-' || c == '_':
			continue
		case n == len(buf):
			return false // longer than any of the names below
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	switch string(buf[:n]) {
	case "SJIS", "SHIFTJIS", "SHIFTJIS2004", "MSKANJI", "WIN932", "WINDOWS932", "BIG5", "WIN950", "WINDOWS950", "GBK", "WIN936", "WINDOWS936", "UHC", "WIN949", "WINDOWS949", "GB18030", "JOHAB":
		return true
	}
	return false
}

// heldNode is the node of the server connection the session holds, or 0.
func (ss *session) heldNode() int32 {
	if ss.sc == nil {
		return 0
	}
	return ss.node
}

// queryError answers a simple query with an error pgfleet found itself. In
// a transaction, the worker's transaction is made to fail too, as
// PostgreSQL's would, so that COMMIT rolls back.
func (ss *session) queryError(err error) error {
	if ss.lost != nil {
		return ss.lost // answered by the run loop
	}
	if err == errBatchFailed {
		return nil // skipped, as the batch's messages to its Sync
	}
	er := pgerr.Flatten(ss.staleShardErr(err))
	ss.victimErr(er)
	userNames(ss.srv.catalog.Load(), er)
	b, _ := er.Encode(nil)
	if ss.sc == nil {
		if ss.pendingBegin != "" {
			ss.pendingFailed = true
		}
		ss.out = append(ss.out, b...)
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return nil
	}
	ss.push(expect{kind: eSynth, synth: b})
	ss.sc.SetBuf(append(ss.sc.Buf(), msgAbortQuery...))
	ss.push(expect{kind: eRelay, term: tQuery, abort: true})
	return ss.roundTrip()
}

// queryAfterExtended readies a simple Query that the client sent after
// extended-protocol messages, before their Sync, which went to the held
// worker. Their answers come first, then PostgreSQL's rules:
//   - one of them failed: the Query is skipped, as the rest to the Sync
//     (handled);
//   - in a transaction block, or when only Parse and Describe ran there,
//     the Query runs as usual after them;
//   - outside a block, after statements ran: PostgreSQL would run the
//     Query in their implicit transaction and commit all at its end, which
//     pgfleet does not do when the Query is one it runs itself (a
//     reference or multi-shard write, DDL, COPY): it is refused with
//     0A000 and the statements before it are rolled back, as a failed
//     Query rolls them back on PostgreSQL (handled).
//
// (Adversary finding: a reference write sent this way ran and committed
// before the statements ahead of it were answered, whether they failed or
// not, and even when the client's block was then rolled back.)
func (ss *session) queryAfterExtended() (handled bool, err error) {
	// (A block's BEGIN sent in this batch is not in the worker's status
	// yet: txBegin says so.)
	if ss.inTxn() || ss.txBegin != "" || !ss.batchWork {
		if err := ss.settle(); err == errBatchFailed {
			return true, nil
		} else if err != nil {
			return true, err
		}
		return false, nil
	}
	errs := ss.workerErrs
	if err := ss.flushRound(); err != nil {
		return true, err
	}
	if ss.workerErrs != errs {
		ss.skipping = true
		return true, nil
	}
	return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
		"a simple Query after extended-protocol statements, before their Sync, outside a transaction block is not supported; the statements before it were rolled back").
		WithHint("Send Sync before the query, or wrap the statements in BEGIN ... COMMIT."))
}

// relayCycle sends one message that the server answers up to ReadyForQuery.
func (ss *session) relayCycle(typ byte, body []byte, cls *class, node int32) error {
	inject := ss.inject
	ss.inject = nil
	ss.defining = definesAlone(cls)
	err := ss.acquire(context.Background(), node)
	ss.defining = ""
	if err != nil {
		ss.unpinRefused()
		return ss.queryError(err)
	}
	ss.pinUndo = nil
	if ss.pendingBegin != "" {
		if err := ss.startPending(); err != nil {
			return ss.queryError(err)
		}
	}
	trackedSet := cls != nil && cls.quiet && len(cls.ops) > 0
	if ss.seqDiscard {
		ss.seqDiscard = false
		// (A statement whose snapshot is due takes it in the same round
		// trip; one taken before in the block stays.)
		snap := ss.verifyNext && !trackedSet && ss.pinned == "" && ss.sc.TxStatus != 'E' && (!ss.verifyState || ss.resnap)
		if answered, err := ss.discardSequences(snap, string(body)); err != nil || answered {
			// (Answered: the client was told why; its statement is not
			// sent. It was, after the error and its ReadyForQuery, and
			// the client read one answer too many; adversary 166.)
			return err
		}
		if snap {
			ss.verifyNext = false
		}
	}
	if ss.verifyState && trackedSet && cls.count == 1 && ss.pinned == "" && len(ss.parked) == 0 && ss.sc.TxStatus == 'T' {
		// A SET the session follows, on a connection where user code ran
		// in this block: compared with the snapshot now, before the SET
		// would show as a change (and pin a session whose user code
		// changed nothing; adversary: a trigger and a SET in one block
		// pinned, and the pool ran dry). A change pins as at release.
		// Otherwise the snapshot stays until the next statement that is
		// not such a SET replaces it (resnap, snapshotState): user code
		// queued in the block (a deferred trigger, a cursor's query) may
		// yet run, at a FETCH or the COMMIT, and a SET that fails leaves
		// the block with only this one to compare at release (adversary).
		base, rolledBack := ss.stateBase, ss.stateRolledBack
		if ss.verifyAt(false) {
			ss.verifyState, ss.stateBase, ss.stateRolledBack = true, base, rolledBack
			ss.resnap = true
		}
	}
	if ss.resnap && !trackedSet && ss.pinned == "" && ss.sc.TxStatus != 'E' {
		ss.verifyNext = true
	}
	if ss.verifyNext {
		ss.verifyNext = false
		ss.snapshotState(false, string(body), nil)
	}
	if len(body) > largeRelay {
		ss.sc.AppendLarge(typ, body) // written from the client's message, not copied
	} else {
		ss.sc.SetBuf(wire.AppendFrame(ss.sc.Buf(), typ, body))
	}
	var sets []paramOp
	if cls != nil {
		sets = cls.localOps
	}
	ss.push(expect{kind: eRelay, term: tQuery, cls: cls, inject: inject, sets: sets})
	return ss.roundTrip()
}

// chainAgain follows a BEGIN on a worker in a transaction block that began
// with AND CHAIN (chainStarted).
const chainAgain = "COMMIT AND CHAIN"

// beginSQL is the simple query that starts the session's transaction block
// on a worker with the BEGIN begin: the BEGIN, and in a block that began
// with AND CHAIN, a COMMIT AND CHAIN of it (see chainStarted).
func (ss *session) beginSQL(begin string) string {
	if ss.chainStarted {
		return begin + "\n;" + chainAgain // (the newline ends a -- comment the client's text ends with)
	}
	return begin
}

// startPending sends the BEGIN the coordinator answered itself on the held
// connection, as a simple query.
func (ss *session) startPending() error {
	for attempt := 1; ; attempt++ {
		err := ss.sc.Exec(ss.beginSQL(ss.pendingBegin), time.Now().Add(ss.pool.Config().ResetTimeout), nil)
		if err == nil && ss.sc.TxStatus == 'T' {
			break
		}
		ss.sc.MarkBroken()
		addr := ss.sc.Addr
		ss.releaseServer()
		var pe *pgconn.PgError
		if err != nil && !errors.As(err, &pe) {
			// The connection was dead: the BEGIN did not run, and
			// nothing else of the client's was sent on it.
			if attempt < checkoutAttempts {
				if aerr := ss.acquire(context.Background(), ss.node); aerr != nil {
					return aerr
				}
				continue
			}
			return pgerr.New(pgerr.ConnectionFailure, "lost connection to worker %s while starting the transaction: %v", addr, err).
				WithHint("Retry the statement; it was not run.")
		}
		if err == nil {
			err = pgerr.New(pgerr.InvalidTransactionState, "the worker did not start the transaction")
		}
		return err
	}
	ss.txBegin = ss.pendingBegin
	ss.pendingBegin = ""
	return nil
}

// roundTrip sends what is queued for the server and relays its answers.
// hiddenSync ends what the session sent the held connection in this batch
// with a Sync of its own, whose ReadyForQuery the client does not see, and
// reads the answers (outside a transaction block that ends the implicit
// transaction; inside, the block stays open).
func (ss *session) hiddenSync() error {
	ss.sc.SetBuf(appendSync(ss.sc.Buf()))
	ss.push(expect{kind: eSwallow, term: tSync})
	return ss.roundTrip()
}

func (ss *session) roundTrip() error {
	if err := ss.sc.Flush(); err != nil {
		return ss.lostCycle(err)
	}
	if err := ss.drain(); err != nil {
		return err
	}
	ss.queue, ss.qhead = ss.queue[:0], 0
	ss.resetQueued = false
	if len(ss.paramFix)+len(ss.paramFixLocal) > 0 || ss.loadFix {
		if err := ss.fixParams(); err != nil {
			return err
		}
	}
	if len(ss.parked) > 0 && ss.sc != nil && ss.sc.TxStatus == 'I' {
		return ss.splitEnd()
	}
	ss.releaseIfIdle()
	return nil
}

// deallocate runs DEALLOCATE of protocol-level statements on the session,
// where they live.
func (ss *session) deallocate(op paramOp) error {
	tag := "DEALLOCATE ALL"
	if ss.sc != nil && ss.sc.TxStatus == 'E' {
		er := pgerr.Flatten(pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block"))
		ss.out, _ = er.Encode(ss.out)
		ss.out = readyForQuery(ss.out, 'E')
		return nil
	}
	if op.kind == opDeallocAll {
		clear(ss.stmts)
	} else if err := ss.dropStatement(op.name); err == nil {
		tag = "DEALLOCATE"
	} else {
		er := pgerr.Flatten(err)
		ss.out, _ = er.Encode(ss.out)
		tag = ""
	}
	if tag != "" {
		cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
		ss.out, _ = cc.Encode(ss.out)
	}
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// savepointShapes: a ROLLBACK TO SAVEPOINT may undo DDL of the
// transaction block (txScatter): its multi-shard plans learn again.
func (ss *session) savepointShapes(cls *class) {
	for _, o := range cls.sps {
		ss.touchSavepoint(o)
	}
	if ss.txScatter != nil && slices.ContainsFunc(cls.sps, func(o paramOp) bool { return o.kind == opRollbackTo }) {
		ss.txScatter = &scatterCache{}
	}
}

// dropPortals ends the multi-shard and bridged portals when their
// transaction is over.
func (ss *session) dropPortals() {
	clear(ss.scatterPortals)
	clear(ss.bridged)
}

// ddlDone advances the server's statement epoch at the end of a
// transaction that sent DDL: from then on every connection prepares its
// statements again before using them, as a client's new Parse on
// PostgreSQL plans afresh (a statement another session prepared on the
// connection before a table changed would answer "cached plan must not
// change result type").
func (ss *session) ddlDone() {
	ss.txAdvisoryDDL = false
	if ss.ddlSent {
		ss.ddlSent = false
		ss.srv.stmtEpoch.Add(1)
		ss.srv.oidsStale()
		if ss.ddlShared {
			ss.srv.ddlEnded() // not for a temporary object's, which no other session sees
		}
		ss.ddlShared = false
	}
}

// dropStatement is DEALLOCATE name of a protocol-level statement, which
// lives in the session, not on a worker.
func (ss *session) dropStatement(name string) error {
	if _, ok := ss.stmts[name]; !ok {
		return pgerr.New(pgerr.UndefinedPreparedStmt, "prepared statement %q does not exist", name)
	}
	delete(ss.stmts, name)
	return nil
}

// localDealloc reports whether a statement of class cls is a DEALLOCATE of
// one statement that the session answers itself, in either protocol: a
// session that is not pinned has no SQL-level prepared statements (SQL
// PREPARE pins), so the name is a protocol-level one (psycopg deallocates
// its evicted statements so, over the extended protocol).
func (ss *session) localDealloc(cls *class) bool {
	return cls.count == 1 && len(cls.ops) == 1 && cls.ops[0].kind == opDeallocate && ss.pinned == ""
}

// acquireExt takes a server connection to node for an extended-protocol
// message; the connection then stays with the session until the batch's
// Sync is answered.
func (ss *session) acquireExt(node int32) bool {
	if err := ss.acquire(context.Background(), node); err != nil {
		ss.unpinRefused()
		ss.synthError(err)
		return false
	}
	ss.pinUndo = nil
	ss.needSync = true
	return true
}

// prepareOn queues a Parse of st on the held server connection, closing
// the statement the cache evicts to make room.
func (ss *session) prepareOn(st *Statement, kind uint8) *expect {
	if ss.pendingBegin != "" && !ss.pendingFailed && beginHasModes(ss.pendingBegin) {
		// The client's BEGIN (answered already) sets an isolation level
		// or access mode, which PostgreSQL accepts only before the
		// transaction's first snapshot, and a Parse may take one: the
		// BEGIN goes first (25001 "must be called before any query",
		// when the connection had to prepare the statement). A
		// transaction that failed before it reached a worker stays the
		// coordinator's (its statements get 25P02 at Bind).
		ss.ensureBegun()
	}
	sc := ss.sc
	key := ss.stmtKey()
	if st.cls.fetch {
		// A FETCH is parsed again at every use, never reused from the
		// connection's cache: PostgreSQL 15 crashes (the whole worker
		// restarts) on a Describe of a FETCH prepared while its cursor
		// existed once that cursor is gone (FetchStatementTargetList),
		// which a statement another session left on the connection
		// would be. Parsed here, in the client's transaction, its
		// result is its cursor's now, or none.
		key = pooling.UnknownKey
	}
	ev, stale := sc.Stmts.Add(st.Name, key)
	if ev != "" {
		b := append(append([]byte{'S'}, ev...), 0)
		sc.SetBuf(wire.AppendFrame(sc.Buf(), 'C', b))
		ss.push(expect{kind: eSwallow, term: tClose, evicted: ev})
	}
	if stale {
		// The connection holds the statement parsed under other settings.
		b := append(append([]byte{'S'}, st.Name...), 0)
		sc.SetBuf(wire.AppendFrame(sc.Buf(), 'C', b))
		ss.push(expect{kind: eSwallow, term: tClose})
	}
	sc.SetBuf(append(sc.Buf(), st.parse...))
	ss.push(expect{kind: kind, term: tParse, stmt: st, reclosed: stale})
	return &ss.queue[len(ss.queue)-1]
}

// setStmt binds a client statement name and remembers how to undo it.
func (ss *session) setStmt(e *expect, name string, st *Statement) {
	prev, ok := ss.stmts[name]
	if !ok {
		prev = nil
	}
	e.undo, e.name, e.prev = true, name, prev
	if st == nil {
		delete(ss.stmts, name)
		delete(ss.parsed, name)
	} else {
		ss.stmts[name] = st
		if ss.parsed == nil {
			ss.parsed = map[string]parsedAt{}
		}
		ss.parsed[name] = parsedAt{key: ss.parseKey, stamp: ss.srv.descStamp()}
	}
}

// parseHome is homeNode for a statement at its Parse, which pins the
// session first when the statement pins (below): its Bind then runs where
// the session is kept. (A session advisory lock in a block on another
// worker passed the Parse for the default node, pinned the session there,
// and was refused at the Bind, leaving the session pinned: adversary 145.)
func (ss *session) parseHome(st *Statement) int32 {
	if st.cls.pin != "" && ss.pinned == "" {
		return ss.currentNode()
	}
	return ss.homeNode(st.Query)
}

// parseFailed answers a Parse with err. PostgreSQL drops the unnamed
// statement before it analyses a new one, so a failed Parse of it leaves
// none (put back if the Parse turns out skipped, after an earlier error of
// the batch).
func (ss *session) parseFailed(name []byte, err error) {
	n := len(ss.queue)
	ss.synthError(err)
	if len(name) == 0 && len(ss.queue) > n {
		ss.setStmt(&ss.queue[n], "", nil)
	}
}

// checkAtParse has a worker parse a routed statement's shard form the first
// time any session parses its text (per statement epoch): PostgreSQL
// analyses a statement at Parse, and one it refuses (a column that does not
// exist, a constant of the wrong type) defines no name and, in a
// transaction block, fails the transaction. A session that holds a
// connection on the statement's worker (its transaction, its pinned
// connection) has it parsed there, between round trips, where its own
// changes and locks are; otherwise a pooled connection parses it, unless
// the session's transaction or settings are such that one would not see
// the tables as the session does (its DDL, a SET of the transaction, a
// pinned connection's temporary objects). Those, and later Parses, are
// answered by the coordinator alone, the error left to the Bind.
//
// When the client's pipeline is on the session's connection, the check goes
// into it, its answer the client's (handled: the Parse is answered so).
func (ss *session) checkAtParse(st *Statement, name []byte) (handled bool, _ error) {
	if st.checked.Load() || st.prepared.Load() || st.cls.txn != "" || len(st.cls.sps) > 0 || st.cls.ddl {
		return false, nil
	}
	x, node, _, runs, err := ss.routeDescribe(st)
	if err != nil || runs != onNode || x == nil {
		return false, err
	}
	body := append(append(append([]byte{0}, x.Query...), 0), x.paramTail...)
	if ss.sc != nil && node == ss.node {
		if ss.qhead != len(ss.queue) || ss.needSync || len(ss.sc.Buf()) > 0 {
			// In the pipeline: the worker's ParseComplete or error is
			// the client's; a failure undoes the name.
			ss.sc.SetBuf(appendCheckParse(ss.sc.Buf(), body))
			ss.push(expect{kind: eRelay, term: tParse})
			ss.setStmt(&ss.queue[len(ss.queue)-1], string(name), st)
			ss.push(expect{kind: eSwallow, term: tClose})
			ss.needSync = true
			return true, nil
		}
		werr, err := ss.parseOn(ss.sc, body)
		if err != nil {
			return false, ss.lostServer(err)
		}
		if werr != nil {
			return false, werr
		}
		if ss.pooledAlike() {
			st.checked.Store(true) // as a pooled connection would have found it
		}
		return false, nil
	}
	if !ss.pooledAlike() {
		return false, nil
	}
	if ss.parkedOn(node) >= 0 {
		return false, nil // the transaction's locks there would hold a pooled connection up
	}
	pool, err := ss.poolFor(node)
	if err != nil {
		return false, err
	}
	sc, err := ss.sideCheckout(context.Background(), pool)
	if err != nil {
		return false, err
	}
	werr, err := ss.parseOn(sc, body)
	if err != nil {
		sc.MarkBroken()
	}
	ss.sideRelease(pool, sc)
	if err != nil {
		return false, executor.LostWorker(sc.Addr, err)
	}
	if werr != nil {
		return false, werr
	}
	st.checked.Store(true)
	return false, nil
}

// pooledAlike reports whether a pooled connection in the session's
// settings sees the tables as the session does: nothing of its own
// (pinned), no DDL or SET of its transaction.
func (ss *session) pooledAlike() bool {
	return ss.pinned == "" && !ss.ddlSent && !ss.ddlShared && !ss.settingsDirty && !ss.txSet && len(ss.pending) == 0 && !ss.pathTouched
}

// appendCheckParse appends a Parse of a statement (a Parse body after its
// name) under a name of its own, and its Close.
func appendCheckParse(b, body []byte) []byte {
	const name = "pgfleet.check"
	b = wire.AppendFrame(b, 'P', append([]byte(name), body...))
	b, _ = (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(b)
	return b
}

// parseOn parses a statement (a Parse body after its name) on sc with
// appendCheckParse and returns the worker's error.
func (ss *session) parseOn(sc *pooling.ServerConn, body []byte) (*executor.WorkerError, error) {
	sc.SetBuf(appendSync(appendCheckParse(sc.Buf(), body)))
	if err := sc.Flush(); err != nil {
		return nil, err
	}
	var werr *executor.WorkerError
	err := executor.Cycle(sc, func(typ byte, body []byte) {
		if typ == 'E' && werr == nil {
			werr = executor.NewWorkerError(body)
		}
	})
	return werr, err
}

// atParse names no client statement: a statement described at its
// Parse, before the client's name is bound to it (scatterDesc).
const atParse = "\x00parse"

func (ss *session) parse(body []byte) error {
	name, rest, ok := wire.CBytes(body)
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Parse message")
	}
	if q, _, _ := wire.CBytes(rest); ss.checkEncoding(q) != nil || ss.checkEncoding(name) != nil {
		if err := ss.checkEncoding(name); err != nil {
			ss.synthError(err)
		} else {
			ss.synthError(ss.checkEncoding(q))
		}
		return nil
	}
	ss.parseKey = ss.readKeyNow()
	st := ss.lastParseSt
	if st == nil || st.stale.Load() || !ss.srv.stmts.current(st) || ss.ddlShared || !bytes.Equal(rest, ss.lastParse) {
		if _, _, ok := wire.CString(rest); !ok {
			return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Parse message")
		}
		if ss.ddlShared {
			// After DDL in this transaction, which no other session
			// sees yet: a statement of the session's own, analysed
			// with the tables as the transaction has them.
			st = ss.srv.stmts.own(rest)
		} else if st = ss.srv.stmts.intern(rest); st == nil {
			return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Parse message")
		}
		ss.lastParse = append(ss.lastParse[:0], rest...)
		ss.lastParseSt = st
	}
	if ss.sc == nil && ss.pendingFailed && !st.cls.mayEndFailed() {
		// A failed transaction block that has reached no worker yet (the
		// coordinator's own error failed it): PostgreSQL's 25P02 at the
		// Parse, the statement not stored, an unnamed one dropped
		// (adversary finding: a ParseComplete, then 25P02 at the Bind).
		ss.parseFailed(name, pendingFailedError(&st.cls))
		return nil
	}
	if len(name) > 0 {
		if _, dup := ss.stmts[string(name)]; dup {
			if ss.sc != nil && ss.sc.TxStatus == 'E' && !st.cls.mayEndFailed() {
				// PostgreSQL answers a failed transaction before it
				// stores the statement (found by an adversary).
				ss.synthError(pgerr.New(pgerr.InFailedSQLTransaction,
					"current transaction is aborted, commands ignored until end of transaction block"))
				return nil
			}
			ss.synthError(pgerr.New(pgerr.DuplicatePreparedStmt, "prepared statement %q already exists", name))
			return nil
		}
	}
	if ss.sc != nil && ss.sc.TxStatus == 'E' && !st.cls.mayEndFailed() {
		// As PostgreSQL: a failed transaction answers 25P02 before it
		// analyses a statement (pgfleet's planning included), after
		// the message's encoding check (22021) and the syntax check
		// (42601). The worker holding the failed transaction gives
		// exactly that answer.
		if !ss.acquireExt(ss.node) {
			return nil
		}
		ss.setStmt(ss.prepareOn(st, eRelay), string(name), st)
		return nil
	}
	ss.noteClass(&st.cls)
	if st.cls.preparedView {
		ss.parseFailed(name, errPreparedView())
		return nil
	}
	if st.cls.reservedName {
		ss.parseFailed(name, errReservedName())
		return nil
	}
	if st.cls.showPools {
		ss.parseFailed(name, errShowPools("over the extended query protocol"))
		return nil
	}
	if err := ss.setConstraintsRefused(&st.cls, st.Query); err != nil {
		ss.parseFailed(name, err)
		return nil
	}
	if ss.scsOff && strings.IndexByte(st.Query, '\\') >= 0 && !reflect.DeepEqual(classify(escapeStrings(st.Query)), st.cls) {
		// The statement is classified once for every session, as text
		// under standard_conforming_strings on; here its backslashes
		// escape, and it reads otherwise (a call hidden in a string).
		ss.parseFailed(name, pgerr.New(pgerr.FeatureNotSupported,
			"a prepared statement that reads differently with standard_conforming_strings off is not supported").
			WithHint("Turn standard_conforming_strings on (the default), or use the simple query protocol."))
		return nil
	}
	if k := ss.bridgeNow(st); k != bridgeNone {
		if k == bridgeRowsFirst {
			// PostgreSQL's analysis, at the Parse; after statements that
			// ran in this pipeline outside a block, at the Describe or
			// Bind instead (the Execute is refused there, but the name
			// stays defined, as PostgreSQL defines it: adversary round 3,
			// psycopg's prepared statement went missing).
			if _, err := ss.describeRowsFirst(st); err != nil && err != errRowsFirstPipeline {
				ss.parseFailed(name, err)
				return nil
			}
		}
		ss.push(expect{kind: eSynth, synth: msgParseComplete})
		ss.setStmt(&ss.queue[len(ss.queue)-1], string(name), st)
		return nil
	}
	failed := ss.txStatus() == 'E' // before planning, which may ask the held connection
	sp, err := ss.stmtPlan(st)
	if err != nil && st.cls.count > 1 && pgerr.Flatten(err).Code == pgerr.FeatureNotSupported {
		// PostgreSQL refuses several statements in one Parse after its
		// syntax check, before anything else (a failed transaction's
		// 25P02 included).
		err = pgerr.New(pgerr.SyntaxError, "cannot insert multiple commands into a prepared statement")
	} else if err != nil && failed && !st.cls.mayEndFailed() {
		// A failed transaction the worker has not seen (its BEGIN is
		// still the coordinator's): 25P02 before planning errors.
		err = errFailedTxn
	}
	if err != nil {
		err = ss.workerVerdict(st.Query, st.paramTail, err)
	}
	if err == nil && st.cls.hidden {
		err = ss.refuseHidden(st.Query)
	}
	if err == nil && st.cls.twoPhase {
		err = refuseOwnGID(st.Query, ss.scsOff)
	}
	if err == nil && st.cls.notify && sp.plan.Kind() != planner.KindDefault {
		err = errNotifyElsewhere
	}
	if err == nil && ((sp.plan.Kind() != planner.KindDefault || ss.parseHome(st) != ss.srv.defaultNode.Load()) &&
		(st.cls.advisory || st.cls.listen || sp.plan.Kind() != planner.KindFunction && ss.stAdvisory(st)) ||
		ss.txAdvisoryDDL && !st.cls.ddl && !st.cls.quiet && sp.plan.Kind() != planner.KindDefault && sp.plan.Kind() != planner.KindFunction) {
		err = ss.errDefaultOnly(st.cls.listen, sp.plan)
	}
	if err == nil && st.cls.ddl && !st.cls.temp {
		err = ss.extendedObjectDDL(st.Query)
	}
	if err == nil {
		err = ss.extendedCursor(st.Query)
	}
	if err != nil {
		ss.parseFailed(name, err)
		return nil
	}
	if ss.lock.sc != nil {
		if err := ss.lockBack(st.Query, false, st.cls.advisory || lockStateIn(st.Query) || ss.stAdvisory(st), discardsAll(&st.cls), st.cls.pin != ""); err != nil {
			if pgerr.Flatten(err).Severity == "FATAL" {
				return err
			}
			ss.parseFailed(name, err)
			return nil
		}
	}
	if ss.localDealloc(&st.cls) {
		if failed {
			ss.parseFailed(name, errFailedTxn)
			return nil
		}
		ss.push(expect{kind: eSynth, synth: msgParseComplete})
		ss.setStmt(&ss.queue[len(ss.queue)-1], string(name), st)
		return nil
	}
	if st.cls.pin != "" {
		if err := ss.pinSpanning(st.cls.pin); err != nil {
			ss.parseFailed(name, err)
			return nil
		}
		if ss.pinned == "" {
			// No answer of its own: a mark in the batch, undone with
			// the Parse when an earlier message fails (adversary
			// finding: a skipped Parse of CREATE TEMP TABLE or
			// set_config() pinned the session, and one in a block that
			// never reached a worker left it failed for good: ROLLBACK
			// got 25P02).
			mark := expect{kind: eSynth, unpin: true, prevTemp: ss.tempObjects, prevUnknown: ss.settingsUnknown}
			ss.push(mark)
			defer func() {
				if ss.skipping {
					// The coordinator refused the Parse below: nothing
					// was made, nothing pins (adversary finding, as
					// above, for a refused one).
					ss.undo(&mark, false)
				}
			}()
		}
		ss.pin(st.cls.pin)
		if !advisoryOnly(&st.cls, st.Query) {
			ss.pinClean = false
		}
	}
	var e *expect
	if sp.plan.Kind() != planner.KindDefault || (st.cls.txn != "" && (ss.sc == nil || len(ss.parked) > 0 || ss.catalogPending())) {
		if ss.txStatus() == 'E' && st.cls.txn == "" && !(len(st.cls.sps) == 1 && st.cls.sps[0].kind == opRollbackTo) {
			// As PostgreSQL: a failed transaction parses only its end.
			ss.parseFailed(name, pgerr.New(pgerr.InFailedSQLTransaction,
				"current transaction is aborted, commands ignored until end of transaction block"))
			return nil
		}
		if _, multi := sp.plan.Root.(*planner.Scatter); multi && ss.txScatter == nil {
			// PostgreSQL analyses a statement at Parse: one the workers
			// refuse (an operator that does not exist, say) defines no
			// name. Described once per plan, as for its Describe.
			_, _, err := ss.scatterDesc(atParse, st)
			if errors.Is(err, executor.ErrResultChanged) {
				// Described before a table changed, and forgotten now:
				// this Parse makes a new statement.
				if fresh := ss.srv.stmts.derive(st, rest); fresh != nil && fresh != st {
					st = fresh
					ss.lastParseSt = fresh
					_, _, err = ss.scatterDesc(atParse, st)
				}
			}
			if err != nil {
				ss.parseFailed(name, err)
				return nil
			}
		} else if handled, err := ss.checkAtParse(st, name); err != nil {
			ss.parseFailed(name, err)
			return nil
		} else if handled {
			return nil
		}
		// A routed statement is prepared on its shard's node at Bind, when
		// the distribution value is known.
		ss.push(expect{kind: eSynth, synth: msgParseComplete})
		ss.setStmt(&ss.queue[len(ss.queue)-1], string(name), st)
		return nil
	}
	if !ss.acquireExt(ss.homeNode(st.Query)) {
		return nil
	}
	if ss.sc.Stmts.Has(st.Name, ss.stmtKey()) {
		ss.push(expect{kind: eSynth, synth: msgParseComplete})
		e = &ss.queue[len(ss.queue)-1]
	} else {
		e = ss.prepareOn(st, eRelay)
	}
	ss.setStmt(e, string(name), st)
	return nil
}

func noStatement(name []byte) error {
	if len(name) == 0 {
		return pgerr.New(pgerr.UndefinedPreparedStmt, "unnamed prepared statement does not exist")
	}
	return pgerr.New(pgerr.UndefinedPreparedStmt, "prepared statement %q does not exist", name)
}

func (ss *session) bind(body []byte) error {
	portal, rest, ok1 := wire.CBytes(body)
	name, params, ok2 := wire.CBytes(rest)
	if !ok1 || !ok2 {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	if ss.txEndQueued {
		if skipped, err := ss.settleTxEnd(); skipped || err != nil {
			return err
		}
	}
	if len(ss.bridged) > 0 {
		if len(portal) > 0 && ss.bridged[string(portal)] != nil {
			if ss.txStatus() == 'E' {
				ss.synthError(errFailedTxn) // (before the name, as PostgreSQL)
			} else {
				ss.synthError(errPortalExists(portal))
			}
			return nil
		}
		delete(ss.bridged, "") // (the unnamed portal is replaced)
	}
	st := ss.stmts[string(name)]
	if st == nil {
		ss.synthError(noStatement(name))
		return nil
	}
	if st.stale.Load() {
		ss.synthError(ss.resultChanged(st))
		return nil
	}
	if err := ss.parsedUnder(name, st); err != nil {
		ss.synthError(err)
		return nil
	}
	if k := ss.bridgeNow(st); k != bridgeNone {
		ss.bridgeBind(string(portal), string(name), st, k, params)
		return nil
	}
	if st.cls.txn != "" || len(st.cls.sps) > 0 {
		if ss.implicitTxn {
			ss.synthError(errMultiRefused("transaction control and savepoint statements in a pipeline that runs on several workers outside a transaction block are not supported",
				"Send BEGIN first, or Sync before the statement."))
			return nil
		}
		ss.batchTxn = true
	}
	if ss.localTxnOK(&st.cls) || ss.localDealloc(&st.cls) {
		ss.localPortal = string(portal)
		ss.localPortalSt = st
		ss.push(expect{kind: eSynth, synth: msgBindComplete})
		return nil
	}
	if len(ss.parked) > 0 || ss.catalogPending() {
		local, err := ss.multiBind(string(portal), st)
		if err != nil {
			if pe := pgerr.Flatten(err); pe.Severity == "FATAL" {
				return err
			}
			ss.synthError(err)
			return nil
		}
		if local {
			return nil
		}
	}
	if ss.pendingFailed {
		// A statement failed in a transaction the worker has not seen.
		ss.synthError(pendingFailedError(&st.cls))
		return nil
	}
	if ss.refDone {
		ss.synthError(errAfterRefWrite)
		return nil
	}
	if st.cls.hidden && bindRunsText(body, namesReserved) {
		ss.synthError(errReservedName()) // query_to_xml($1), $1 = 'EXECUTE pgfleet_1'
		return nil
	}
	if st.cls.hidden {
		if err := ss.sqlTextBound(st.Query, body); err != nil {
			ss.synthError(err)
			return nil
		}
	}
	if st.cls.seqFn != "" && ss.seqUsed {
		ss.synthError(errSeqState(st.cls.seqFn))
		return nil
	}
	ss.ddlSent = ss.ddlSent || st.cls.ddl
	ss.ddlShared = ss.ddlShared || st.cls.ddl && !st.cls.temp
	if st.cls.ddl || st.cls.verify {
		ss.nameGen++
	}
	ss.terminates = ss.terminates || st.cls.terminate
	ss.noteIdleChange(st.Query, &st.cls)
	ss.loginDDL = ss.loginDDL || st.cls.logins
	ss.savepointShapes(&st.cls)
	seqHad := ss.seqUsed
	if !st.cls.quiet {
		ss.seqUsed = true
	}
	clientSt := st
	ss.lentImplicit = false
	var pin, namesBefore bool
	if !clientSt.cls.quiet && ss.pinned == "" {
		ss.lentImplicit, pin = ss.implicitCode(clientSt.Query, clientSt.cls.maint, clientSt)
	}
	if ss.lock.sc != nil {
		if err := ss.lockBack(st.Query, false, st.cls.advisory || lockStateIn(st.Query) || ss.stAdvisory(st), discardsAll(&st.cls),
			st.cls.pin != "" || pin || ss.tempPath(&clientSt.cls)); err != nil {
			if pgerr.Flatten(err).Severity == "FATAL" {
				return err
			}
			ss.synthError(err)
			return nil
		}
	}
	ss.notePinnedRun(&clientSt.cls, clientSt.Query, clientSt)
	var sets []paramOp
	setsPin := false
	if len(clientSt.cls.localSets) > 0 {
		// (A pinned session's settings are its connection's: as any
		// set_config.)
		sets, setsPin = localOps(clientSt.cls.localSets, params, clientSt.paramTail)
		setsPin = !setsPin || ss.pinned != ""
		if setsPin {
			sets = nil
		}
	}
	if setsPin {
		if err := ss.pinSpanning("set_config()"); err != nil {
			ss.synthError(err)
			return nil
		}
		ss.pinUndo = ss.pinMark()
		defer func() { ss.pinUndo = nil }() // (this Bind's only)
		ss.pin("set_config()")
	}
	if !clientSt.cls.quiet && ss.pinned == "" {
		// (Or SQL text given to a built-in as a parameter:
		// query_to_xml($1).)
		unseen := pin && !clientSt.cls.storesCode || clientSt.cls.hidden && bindRunsText(body, unseenIn)
		temp := ss.tempPath(&clientSt.cls)
		if unseen || temp {
			ss.pinUndo = ss.pinMark()
			defer func() { ss.pinUndo = nil }() // (this Bind's only)
		}
		if unseen {
			if err := ss.pinSpanning(unseenPin); err != nil {
				ss.synthError(err)
				return nil
			}
			// (Its own table names resolve before the code runs.)
			namesBefore = !ss.settingsUnknown
			ss.pin(unseenPin) // (before its Execute runs the code)
		}
		if temp {
			if err := ss.pinSpanning("search_path naming pg_temp"); err != nil {
				ss.synthError(err)
				return nil
			}
			ss.pin("search_path naming pg_temp")
		}
	}
	verify := clientSt.cls.verify || ss.lentImplicit
	ss.txUserCodeWas = ss.txUserCode
	ss.txUserCode = ss.txUserCode || verify
	ss.noteViewDDL(verify, clientSt.Query)
	if len(ss.scatterPortals) > 0 {
		if p := ss.scatterPortals[string(portal)]; p != nil && len(portal) > 0 && p.keptAtSync() {
			ss.synthError(pgerr.New("42P03", "portal \"%s\" already exists", portal))
			return nil
		}
		delete(ss.scatterPortals, string(portal))
	}
	clientParams := params
	ss.namesBeforePin = namesBefore
	st, node, params, runs, err := ss.routeBind(st, name, params)
	ss.namesBeforePin = false
	if err == nil && runs != onNode && clientSt.cls.seqFn != "" {
		ss.synthError(errSeqState(clientSt.cls.seqFn))
		return nil
	}
	if (err != nil || runs != onNode) && !clientSt.cls.ddl {
		// A Bind kept here rather than relayed, or one that could not be
		// routed (a distribution value's parameter missing): PostgreSQL's
		// checks of the Bind, made here, against the client's name for
		// the statement. (Not for DDL, whose $n may be a function's
		// argument, not the statement's parameter.)
		if cerr := bindCountErr(clientSt, string(name), clientParams); cerr != nil {
			err = cerr
		}
	}
	switch {
	case err != nil:
	case runs == onShards:
		ss.seqGuard = ss.seqGuard || verify && seqHad
		ss.scatterBind(string(portal), string(name), clientSt, params)
		return nil
	case runs == onCopies:
		ss.refBind(string(portal), clientSt, params)
		return nil
	case runs == onShardWrites:
		ss.multiWriteBind(string(portal), clientSt, params)
		return nil
	}
	if err != nil {
		ss.unpinRefused()
		ss.synthError(ss.bindVerdict(clientSt, err))
		return nil
	}
	if len(portal) > 0 && len(ss.portalNode) > 0 && !ss.portalFree(string(portal), node) {
		return nil
	}
	if !ss.acquireExt(node) {
		return nil
	}
	ss.ensureBegun()
	if ss.begunAlone() {
		ss.notePortal(string(portal))
	}
	if clientSt.cls.seqFn != "" || verify {
		// currval or lastval, in the text or maybe in user code
		// (seqcheck.go).
		ss.queueDiscardSequences()
		ss.seqGuard = ss.seqGuard || verify && seqHad
	}
	if (verify || ss.resnap) && ss.pinned == "" && ss.sc.TxStatus != 'E' {
		// (A statement in a failed transaction runs no user code.)
		ss.snapshotState(true, clientSt.Query, body)
	}
	if !ss.sc.Stmts.Has(st.Name, ss.stmtKey()) {
		e := ss.prepareOn(st, eSwallow)
		if st != clientSt {
			e.client, e.clientStm = string(name), clientSt
		}
		if clientSt.descFor(ss.stmtKey()) != nil {
			if ok, err := ss.checkDesc(st, clientSt); !ok {
				return err
			}
		}
	}
	b := ss.sc.Buf()
	n := 4 + len(portal) + 1 + len(st.Name) + 1 + len(params)
	b = append(b, 'B', byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	b = append(append(b, portal...), 0)
	b = append(append(b, st.Name...), 0)
	b = append(b, params...)
	ss.sc.SetBuf(b)
	if string(name) != ss.bindName {
		ss.bindName = string(name) // kept: a client binds the same statement again and again
	}
	ss.push(expect{kind: eRelay, term: tBind, stmt: st, name: ss.bindName, cst: clientSt})
	if sets != nil {
		if ss.portalSets == nil {
			ss.portalSets = map[string]portalSets{}
		}
		ss.portalSets[string(portal)] = portalSets{st: st, ops: sets} // (st: the portal's, as execute finds it)
	}
	if len(portal) == 0 {
		ss.portals[""] = st
	} else {
		ss.portals[string(portal)] = st
	}
	return nil
}

func (ss *session) describe(body []byte) error {
	if len(body) < 2 {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Describe message")
	}
	name, _, ok := wire.CBytes(body[1:])
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Describe message")
	}
	switch body[0] {
	case 'S':
		st := ss.stmts[string(name)]
		if st == nil {
			ss.synthError(noStatement(name))
			return nil
		}
		if st.stale.Load() {
			ss.synthError(ss.resultChanged(st))
			return nil
		}
		if k := ss.bridgeNow(st); k != bridgeNone {
			ss.bridgeDescribe(st, k, true, nil)
			return nil
		}
		clientSt := st
		st, node, hide, runs, err := ss.routeDescribe(st)
		if err == nil && runs == onShards {
			ss.scatterDescribe(string(name), clientSt)
			return nil
		}
		if err != nil {
			ss.synthError(err)
			return nil
		}
		if !ss.acquireExt(node) {
			return nil
		}
		if !ss.sc.Stmts.Has(st.Name, ss.stmtKey()) {
			e := ss.prepareOn(st, eSwallow)
			if st != clientSt {
				e.client, e.clientStm = string(name), clientSt
			}
		}
		b := append(append([]byte{'S'}, st.Name...), 0)
		ss.sc.SetBuf(wire.AppendFrame(ss.sc.Buf(), 'D', b))
		ss.push(expect{kind: eRelay, term: tDescribe, stmt: st, name: string(name), cst: clientSt, hide: hide})
		return nil
	case 'P':
		if ss.localPortalSt != nil && string(name) == ss.localPortal {
			ss.push(expect{kind: eSynth, synth: msgNoData})
			return nil
		}
		if ss.txEndQueued {
			if skipped, err := ss.settleTxEnd(); skipped || err != nil {
				return err
			}
		}
		if bp := ss.bridged[string(name)]; bp != nil {
			ss.bridgeDescribe(bp.st, bp.kind, false, bp.results)
			return nil
		}
		if cur := ss.cursors[string(name)]; cur != nil && len(name) > 0 {
			// A cursor is a portal: psycopg's named cursor describes it
			// by its name after DECLARE.
			if ss.txStatus() == 'E' {
				ss.synthError(errFailedTxn) // as PostgreSQL's for a portal of rows
				return nil
			}
			ss.push(expect{kind: eSynth, synth: wire.AppendFrame(nil, 'T', cur.rowDesc)})
			return nil
		}
		if len(ss.scatterPortals) > 0 {
			if sp := ss.scatterPortals[string(name)]; sp != nil {
				if ss.txStatus() == 'E' && sp.keptAtSync() {
					ss.synthError(errFailedTxn) // as PostgreSQL's for a portal of rows
					return nil
				}
				ss.push(expect{kind: eSynth, synth: sp.describe()})
				return nil
			}
		}
		if len(ss.parked) > 0 && !ss.portalWorker(string(name)) {
			return nil
		}
		if !ss.acquireExt(ss.currentNode()) {
			return nil
		}
		ss.sc.SetBuf(wire.AppendFrame(ss.sc.Buf(), 'D', body))
	default:
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid DESCRIBE message subtype %d", body[0])
	}
	ss.push(expect{kind: eRelay, term: tDescribe})
	return nil
}

func (ss *session) execute(body []byte) error {
	portal, _, ok := wire.CBytes(body)
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Execute message")
	}
	if ss.txEndQueued {
		if skipped, err := ss.settleTxEnd(); skipped || err != nil {
			return err
		}
	}
	if bp := ss.bridged[string(portal)]; bp != nil {
		return ss.bridgeExecute(bp, executeMaxRows(body))
	}
	if st := ss.localPortalSt; st != nil && string(portal) == ss.localPortal {
		ss.localPortalSt = nil
		if ss.localDealloc(&st.cls) {
			// As a Close: undone if an earlier message of the batch fails
			// on a worker and PostgreSQL would have skipped this one.
			name := st.cls.ops[0].name
			if _, ok := ss.stmts[name]; !ok {
				ss.synthError(ss.dropStatement(name))
				return nil
			}
			ss.push(expect{kind: eSynth, synth: msgDeallocate})
			ss.setStmt(&ss.queue[len(ss.queue)-1], name, nil)
			return nil
		}
		if len(ss.parked) > 0 {
			return ss.multiExecute(st)
		}
		if tag := ss.applyLocalTxn(&st.cls, st.Query); tag != "" {
			cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
			b, _ := cc.Encode(nil)
			ss.push(expect{kind: eSynth, synth: b})
			return nil
		}
	}
	if len(ss.scatterPortals) > 0 {
		if sp := ss.scatterPortals[string(portal)]; sp != nil {
			if sp.ref {
				return ss.refExecute(sp, body)
			}
			if sp.write {
				return ss.multiWriteExecute(sp, body)
			}
			return ss.scatterExecute(string(portal), sp, body)
		}
	}
	if len(ss.parked) > 0 && !ss.portalWorker(string(portal)) {
		return nil
	}
	if ss.resetQueued {
		ss.synthError(errResetNotLast)
		return nil
	}
	if !ss.acquireExt(ss.currentNode()) {
		return nil
	}
	ss.ensureBegun()
	st := ss.portals[string(portal)]
	if st != nil && st.cls.twoPhase && ss.txStatus() != 'E' && (ss.inTxn() || ss.txBegin != "" || ss.batchTxn) && preparesTxn(st.Query) {
		// Bound before its block began (in the same pipeline): its Bind
		// went to the worker, so the coordinator's checks, which need
		// it to run as a query (clientTwoPhase), cannot be made
		// (adversary round 5: an id prepared on two workers).
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"PREPARE TRANSACTION bound before its transaction block began is not supported").
			WithHint("Bind PREPARE TRANSACTION after BEGIN, or send it as a simple query."))
		return nil
	}
	if st != nil && len(st.cls.ops) > 0 && ss.resetsStartup(&st.cls) {
		ss.resetQueued = true
	}
	var sets []paramOp
	if st != nil && len(st.cls.localSets) > 0 {
		if ps := ss.portalSets[string(portal)]; ps.st == st {
			sets = ps.ops
		}
		if sets != nil {
			ss.localSetsSent(sets)
		} else if ss.pinned == "" {
			// (The Bind pins the session when it cannot follow the
			// calls; a portal whose calls are not known here is not
			// run unfollowed either.)
			if err := ss.pinSpanning("set_config()"); err != nil {
				ss.synthError(err)
				return nil
			}
			ss.pin("set_config()")
		}
	}
	if st != nil && (st.cls.pin != "" || len(st.cls.ops) > 0) {
		ss.settingsDirty = true
		if st.cls.pin != "" || !customOnly(st.cls.ops) {
			ss.setGen++
		}
		ss.pathTouched = ss.pathTouched || touchesPath(st.cls.ops)
		if st.cls.pin != "" {
			if err := ss.pinSpanning(st.cls.pin); err != nil {
				ss.synthError(err)
				return nil
			}
			ss.pin(st.cls.pin)
			if !advisoryOnly(&st.cls, st.Query) {
				ss.pinClean = false
			}
			// (Pinned only now, by a statement prepared before: its
			// Bind did not count it. Adversary 146: a cached
			// pg_try_advisory_lock left the session pinned.)
			ss.notePinnedRun(&st.cls, st.Query, st)
		}
	}
	ss.sc.SetBuf(wire.AppendFrame(ss.sc.Buf(), 'E', body))
	ss.push(expect{kind: eRelay, term: tExecute, stmt: st, sets: sets})
	if st != nil && endsTxn(&st.cls) {
		ss.txEndQueued = true
	}
	return nil
}

func (ss *session) close(body []byte) error {
	if len(body) < 2 {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Close message")
	}
	name, _, ok := wire.CBytes(body[1:])
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Close message")
	}
	switch body[0] {
	case 'S':
		// Statements live in the session; the server keeps its copy for
		// other clients.
		ss.push(expect{kind: eSynth, synth: msgCloseComplete})
		ss.setStmt(&ss.queue[len(ss.queue)-1], string(name), nil)
	case 'P':
		delete(ss.portals, string(name))
		if ss.bridgeClose(string(name)) {
			ss.push(expect{kind: eSynth, synth: msgCloseComplete})
			return nil
		}
		if sp := ss.scatterPortals[string(name)]; sp != nil {
			delete(ss.scatterPortals, string(name))
			ss.push(expect{kind: eSynth, synth: msgCloseComplete})
			return nil
		}
		if node, ok := ss.portalNode[string(name)]; ok && ss.sc != nil && ss.sc.TxStatus == 'E' && node != ss.node {
			// A failed transaction's portal on another of its workers:
			// closed, as PostgreSQL closes one in a failed transaction
			// (ROLLBACK ends it there).
			delete(ss.portalNode, string(name))
			ss.push(expect{kind: eSynth, synth: msgCloseComplete})
			return nil
		}
		if len(ss.parked) > 0 && !ss.portalWorker(string(name)) {
			return nil
		}
		delete(ss.portalNode, string(name))
		if ss.sc == nil {
			ss.push(expect{kind: eSynth, synth: msgCloseComplete})
			return nil
		}
		ss.sc.SetBuf(wire.AppendFrame(ss.sc.Buf(), 'C', body))
		ss.push(expect{kind: eRelay, term: tClose})
	default:
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid CLOSE message subtype %d", body[0])
	}
	return nil
}

// executeUnanswered reports whether the held connection owes the answer
// to an Execute the client sent in this batch.
func (ss *session) executeUnanswered() bool {
	if ss.sc == nil || ss.skipping {
		return false
	}
	for _, e := range ss.queue[ss.qhead:] {
		if e.kind == eRelay && e.term == tExecute {
			return true
		}
	}
	return false
}

func (ss *session) flushRequest() error {
	if ss.sc == nil {
		ss.emitSynth()
		return ss.flush()
	}
	if err := ss.flushRound(); err != nil {
		return err
	}
	return ss.flush()
}

// flushRound has the held worker answer everything queued for it, with a
// Flush: its transaction, implicit or not, stays open.
func (ss *session) flushRound() error {
	ss.sc.SetBuf(appendFlush(ss.sc.Buf()))
	if err := ss.sc.Flush(); err != nil {
		return ss.lostServer(err)
	}
	if err := ss.drain(); err != nil {
		return err
	}
	ss.queue, ss.qhead = ss.queue[:0], 0
	return nil
}

// onlySynthQueued reports whether answers are queued and all of them are
// the coordinator's own (none waits for a worker).
func (ss *session) onlySynthQueued() bool {
	if ss.qhead == len(ss.queue) {
		return false
	}
	for _, e := range ss.queue[ss.qhead:] {
		if e.kind != eSynth {
			return false
		}
	}
	return true
}

// emitSynth sends answers pgfleet made itself when no server is involved.
func (ss *session) emitSynth() {
	for ; ss.qhead < len(ss.queue); ss.qhead++ {
		if e := &ss.queue[ss.qhead]; e.kind == eSynth {
			ss.out = append(ss.out, e.synth...)
		}
	}
	ss.queue, ss.qhead = ss.queue[:0], 0
}

func (ss *session) sync() error {
	ss.skipping = false
	for name, bp := range ss.bridged {
		if !bp.inBlock {
			delete(ss.bridged, name) // (a block's live on, as its portals do)
		}
	}
	ss.refDone = false
	ss.batchTxn = false
	ss.localPortalSt = nil
	if len(ss.scatterPortals) > 0 {
		// Multi-shard SELECT portals end with their transaction (a
		// block's live on for the next Executes, JDBC's fetch size:
		// dropPortals at ReadyForQuery idle); write portals end here.
		for name, p := range ss.scatterPortals {
			if !p.keptAtSync() {
				delete(ss.scatterPortals, name)
			}
		}
	}
	if ss.implicitTxn {
		ss.dropPortals() // the pipeline's transaction ends here
		return ss.implicitEnd()
	}
	if ss.sc == nil {
		ss.emitSynth()
		if ss.txStatus() == 'I' {
			ss.dropPortals()
		}
		ss.out = readyForQuery(ss.out, ss.txStatus())
		ss.setSeen = ss.setGen
		return nil
	}
	if ss.settledInBlock() {
		// The worker owes nothing since its last ReadyForQuery (this
		// batch's statements ran in round trips of their own, as a
		// reference write's copies do) and the block stays open: its
		// answer to a Sync would be that ReadyForQuery again.
		status := ss.sc.TxStatus
		ss.emitSynth()
		ss.clientReady(status)
		ss.endOfCycle(status)
		ss.resetQueued = false
		return nil
	}
	ss.sc.SetBuf(appendSync(ss.sc.Buf()))
	ss.push(expect{kind: eRelay, term: tSync})
	return ss.roundTrip()
}

// clientReady ends the client's cycle with the ReadyForQuery of status,
// the held connection's worker's.
func (ss *session) clientReady(status byte) {
	ss.seqGuard, ss.terminates = false, false
	if status == 'I' && ss.pendingBegin != "" {
		// The worker has not seen the client's BEGIN yet.
		ss.out = readyForQuery(ss.out, ss.txStatus0())
		return
	}
	ss.out = readyForQuery(ss.out, status)
	if status == 'I' {
		// The client's transaction is over, its multi-shard portals with
		// it (not at a hidden Sync, which ends only the worker's).
		ss.dropPortals()
	}
}

// settledInBlock reports whether a Sync may be answered without the held
// connection's worker: it is in a transaction block, nothing was sent to it
// since its last ReadyForQuery (ServerConn.Owed, needSync) and the batch's
// answers are all the session's own, with no settings to fix after it.
func (ss *session) settledInBlock() bool {
	sc := ss.sc
	return !ss.unanswered() && !sc.Owed() && (sc.TxStatus == 'T' || sc.TxStatus == 'E') &&
		len(ss.paramFix) == 0 && !ss.loadFix && !ss.resetQueued && ss.pendingBegin == ""
}

// unanswered reports whether a message of the client's batch went to the
// held connection's worker and is not answered yet (the session's own
// answers, such as a ParseComplete it gave itself, are not waited for).
func (ss *session) unanswered() bool {
	if ss.needSync {
		return true
	}
	for _, e := range ss.queue[ss.qhead:] {
		if e.kind != eSynth {
			return true
		}
	}
	return false
}

// lostServer ends the session when its server connection fails mid-cycle:
// what the worker did with the statement is unknown, so the client must be
// told rather than given a made-up answer.
func (ss *session) lostServer(err error) error {
	addr := ss.sc.Addr
	ss.sc.MarkBroken()
	ss.releaseServer()
	return &pgerr.Error{Severity: "FATAL", Code: pgerr.ConnectionFailure,
		Message: fmt.Sprintf("lost connection to worker %s: %v", addr, err),
		Hint:    "The statement's outcome is unknown; reconnect and check before retrying."}
}

// idleFatal is the FATAL a worker sent on sc, a connection of the
// session's transaction left idle, before closing it (its
// idle-in-transaction timeout, a termination), as an error for the
// client, or nil. It must be read before anything is written to sc: a
// write to the closed connection brings the worker's reset, which
// discards what was unread (adversary 143: 08006 "outcome unknown" where
// PostgreSQL says 25P03, the block rolled back).
func idleFatal(sc *pooling.ServerConn) error {
	if !sc.Readable() || sc.SetReadDeadline(time.Now().Add(50*time.Millisecond)) != nil {
		return nil
	}
	defer sc.SetReadDeadline(time.Time{})
	f, err := sc.Next()
	if err != nil || f.Type != 'E' {
		return nil
	}
	var er pgproto3.ErrorResponse
	if er.Decode(f.Body) != nil || er.Severity != "FATAL" {
		// (Only a FATAL comes unasked on a connection of a block that
		// cannot be pinned: a notice of it is dropped.)
		sc.MarkBroken()
		return nil
	}
	sc.MarkBroken()
	return &pgerr.Error{Severity: "FATAL", Code: er.Code, Message: er.Message, Detail: er.Detail, Hint: er.Hint}
}

// lostCycle handles the loss of the server connection (an error reading or
// writing it, or the worker's FATAL) during a client's cycle. Outside a
// transaction, with no session state on the connection, the session
// survives: the statement gets 08006 (its outcome is unknown, as with any
// lost connection; the client may check and retry), and the next one takes
// a new connection. Inside a transaction, or when the connection held
// session state, or when another cycle is queued behind this one, it ends
// the session as lostServer does.
func (ss *session) lostCycle(err error) error {
	sc := ss.sc
	if sc.TxStatus != 'I' || len(ss.parked) > 0 || ss.pendingBegin != "" || ss.txBegin != "" ||
		ss.pinned != "" || ss.verifyState {
		return ss.lostServer(err)
	}
	rest := ss.queue[ss.qhead:]
	end := -1
	for i, e := range rest {
		if e.kind == eRelay && (e.term == tQuery || e.term == tSync) {
			end = i
			break
		}
	}
	if end >= 0 && end != len(rest)-1 {
		return ss.lostServer(err) // a later cycle is queued too
	}
	addr := sc.Addr
	sc.MarkBroken()
	ss.releaseServer()
	ss.queue, ss.qhead = ss.queue[:0], 0
	ss.needSync, ss.batchWork, ss.resetQueued, ss.seqGuard = false, false, false, false
	ss.paramFix, ss.loadFix = ss.paramFix[:0], false
	if len(ss.portals) > 0 {
		clear(ss.portals)
		clear(ss.portalSets)
	}
	ss.lost = &pgerr.Error{Severity: "ERROR", Code: pgerr.ConnectionFailure,
		Message: fmt.Sprintf("lost connection to worker %s: %v", addr, err),
		Hint:    "The statement's outcome is unknown; check before retrying it. The session is intact: the next statement uses a new connection."}
	ss.lostEnd = end >= 0
	return ss.lost
}

// drain relays the server's answers until every queued expectation is met.
func (ss *session) drain() error {
	sc := ss.sc
	for ss.qhead < len(ss.queue) {
		e := &ss.queue[ss.qhead]
		if e.kind == eSynth {
			ss.out = append(ss.out, e.synth...)
			ss.qhead++
			continue
		}
		f, err := sc.Next()
		if err != nil {
			return ss.lostCycle(err)
		}
		if f.Type == 'E' && executor.FatalSeverity(f.Body) {
			// The worker ends the connection (57P01 when it shuts down or
			// the backend is terminated): that is not the client's server
			// going away, so it is not relayed as is.
			var er pgproto3.ErrorResponse
			_ = er.Decode(f.Body)
			if ss.terminates && er.Code == pgerr.AdminShutdown {
				// The client's statement terminated its own backend
				// (pg_terminate_backend(pg_backend_pid())): PostgreSQL
				// ends that session, so pgfleet ends this one.
				sc.MarkBroken()
				ss.releaseServer()
				return &pgerr.Error{Severity: "FATAL", Code: er.Code, Message: er.Message}
			}
			if er.Code == pgerr.IdleInTransactionTimeout {
				// The worker timed the client out in its transaction
				// (the session's own setting) before this statement
				// reached it: as PostgreSQL, the session ends with
				// 25P03 and the transaction is rolled back.
				sc.MarkBroken()
				ss.releaseServer()
				return idleInTransactionTimeout()
			}
			return ss.lostCycle(fmt.Errorf("%s: %s (SQLSTATE %s)", er.Severity, er.Message, er.Code))
		}
		relay := e.kind == eRelay
		switch f.Type {
		case 'Z':
			if len(f.Body) != 1 {
				return ss.lostServer(errors.New("invalid ReadyForQuery"))
			}
			if e.kind != eSwallow {
				ss.clientReady(f.Body[0])
			}
			ss.qhead++
			ss.endOfCycle(f.Body[0])
			continue
		case 'E':
			if (ss.srv.stopping.Load() || ss.terminated.Load()) && errCode(f.Body) == pgerr.QueryCanceled {
				// Shutdown's deadline cancelled the statement: the client is
				// told what PostgreSQL's fast shutdown says.
				return adminShutdown()
			}
			if e.cst != nil && (e.term == tBind || e.term == tDescribe) && errCode(f.Body) == pgerr.FeatureNotSupported {
				// "cached plan must not change result type": the worker's
				// statement was prepared before a table changed.
				ss.staleStmt(e.cst)
			}
			if e.state {
				f.Body = ss.stateReadFailed(f.Body)
			}
			f.Body = ss.victimBody(f.Body) // the distributed deadlock detector's cancel (deadlock.go)
			if !e.abort {
				ss.workerErrs++
				body := userNamesBody(ss.srv.catalog.Load(), ss.defaultOnly(ss.staleShardBody(ss.clientNames(e, f.Body)), sc.Addr))
				if ss.seqGuard && errCode(body) == pgerr.ObjectNotInPrerequisite {
					body = seqGuardError(body)
				}
				ss.out = wire.AppendFrame(ss.out, 'E', body)
			}
			ss.txFailed = true
			if ss.pendingBegin != "" {
				// A Parse or Describe ahead of the deferred BEGIN failed:
				// in PostgreSQL the transaction block would have.
				ss.pendingFailed = true
			}
			ss.paramFix, ss.loadFix = ss.paramFix[:0], false
			if executor.FatalSeverity(f.Body) {
				sc.MarkBroken()
				ss.releaseServer()
				_ = ss.flush()
				return errQuietClose
			}
			if e.term == tQuery {
				continue
			}
			// Skipped to the Sync: undone latest first (a Parse and a
			// Close of one name put back what was there before both).
			end := ss.qhead
			for end < len(ss.queue) && ss.queue[end].term != tSync {
				end++
			}
			for i := end - 1; i >= ss.qhead; i-- {
				ss.undo(&ss.queue[i], i == ss.qhead)
			}
			if ss.qhead < end {
				if e := &ss.queue[ss.qhead]; e.undo && e.name == "" && e.term == tParse {
					// The failed Parse of the unnamed statement:
					// PostgreSQL dropped the one before it first.
					delete(ss.stmts, "")
					delete(ss.parsed, "")
				}
			}
			ss.qhead = end
			if ss.qhead == len(ss.queue) {
				ss.skipping = true // the Sync is still to come
			}
			continue
		case 'D':
			if e.capture {
				ss.stateBase = append(ss.stateBase[:0], f.Body...)
				ss.stateLocals = ss.blockLocals(ss.stateLocals[:0])
				continue
			}
			if e.sets != nil {
				// Its one row: every call ran (an Execute with a row
				// limit ends at PortalSuspended, with no CommandComplete;
				// adversary 163: followed only at the tag, the settings
				// were not replayed and other workers read without them).
				for _, op := range e.sets {
					ss.noteOp(op)
				}
				e.sets = nil
			}
		case 'S':
			sc.NoteParameterStatus(f.Body)
			ss.noteStrings(sc)
			relay = true
		case 'N':
			relay = true
		case 'A':
			ss.ownNotification(f.Body, sc.PID)
			relay = true
		case 'G':
			// A Sync the client sent after the COPY's Execute reached the
			// server in copy-in mode, which ignores it: expect none for it.
			q := ss.queue[:ss.qhead+1]
			for _, x := range ss.queue[ss.qhead+1:] {
				if x.term != tSync {
					q = append(q, x)
				}
			}
			ss.queue = q
			ss.out = wire.AppendFrame(ss.out, 'G', f.Body)
			if err := ss.copyIn(e.term == tQuery); err != nil {
				return err
			}
			continue
		case 'C':
			if len(f.Body) >= 4 && (f.Body[0] == 'S' && (f.Body[1] == 'A' || f.Body[3] == 0) || f.Body[0] == 'R' && f.Body[1] == 'E' && f.Body[2] == 'S') {
				ss.noteTxnTag(f.Body)
			}
			if e.cls != nil || (e.stmt != nil && (len(e.stmt.cls.ops) > 0 || len(e.stmt.cls.sps) > 0 || e.stmt.cls.chain ||
				e.stmt.cls.endLike && ss.keepsPortals())) || len(ss.pending) > 0 || ss.verifyState {
				ss.noteTag(e, f.Body)
			}
			if e.term == tExecute {
				ss.qhead++
			}
		case '1':
			if e.term == tParse {
				if e.stmt != nil {
					e.stmt.prepared.Store(true)
				}
				if e.clientStm != nil {
					e.clientStm.prepared.Store(true)
				}
				ss.qhead++
			}
		case '2':
			if e.term == tBind {
				ss.qhead++
			}
		case '3':
			if e.term == tClose {
				ss.qhead++
			}
		case 't':
			body := f.Body
			if e.hide > 0 {
				body = hideSeqParams(body, e.hide)
			}
			if e.cst != nil && e.cst.paramDesc.Load() == nil {
				var pd pgproto3.ParameterDescription
				if pd.Decode(body) == nil {
					e.cst.paramDesc.Store(&pd.ParameterOIDs)
				}
			}
			if e.hide > 0 {
				ss.out = wire.AppendFrame(ss.out, 't', body)
				continue
			}
		case 'T', 'n':
			if e.term == tDescribe {
				if e.cst != nil {
					ss.noteDesc(e, f)
				}
				ss.qhead++
			}
			if e.inject != nil && f.Type == 'T' {
				ss.out = wire.AppendFrame(ss.out, 'T', f.Body)
				ss.out = append(ss.out, e.inject...)
				e.inject = nil
				continue
			}
		case 'I', 's':
			if e.term == tExecute {
				ss.qhead++
			}
		}
		if relay {
			ss.out = wire.AppendFrame(ss.out, f.Type, f.Body)
			if len(ss.out) > 64<<10 {
				if err := ss.flush(); err != nil {
					sc.MarkBroken()
					return errQuietClose
				}
			}
		}
	}
	return nil
}

// clientNames shows the client's own statement name in an error about a
// statement the server knows under pgfleet's name.
func (ss *session) clientNames(e *expect, body []byte) []byte {
	if e.stmt == nil || (e.term != tBind && e.term != tDescribe) {
		return body
	}
	internal := []byte(`"` + e.stmt.Name + `"`)
	if !bytes.Contains(body, internal) {
		return body
	}
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil {
		return body
	}
	er.Message = strings.ReplaceAll(er.Message, string(internal), `"`+e.name+`"`)
	er.Detail = strings.ReplaceAll(er.Detail, string(internal), `"`+e.name+`"`)
	b, err := er.Encode(nil)
	if err != nil {
		return body
	}
	return b[5:]
}

// undo forgets what a message skipped or failed (failed) by the server
// would have made.
func (ss *session) undo(e *expect, failed bool) {
	if e.begin && ss.pendingBegin == "" {
		// The deferred BEGIN was skipped after an earlier error of the
		// batch (a Parse): the worker never started the transaction,
		// which PostgreSQL would have, and failed.
		ss.pendingBegin, ss.txBegin, ss.pendingFailed = ss.txBegin, "", true
	}
	if e.term == tParse && e.stmt != nil {
		if e.reclosed {
			ss.sc.Stmts.Doubt(e.stmt.Name) // its Close may have been skipped too
		} else {
			ss.sc.Stmts.Drop(e.stmt.Name)
		}
	}
	if e.evicted != "" {
		ss.sc.Stmts.Restore(e.evicted)
	}
	if e.unpin {
		ss.pinned, ss.tempObjects, ss.settingsUnknown = "", e.prevTemp, e.prevUnknown
	}
	if failed && e.clientStm != nil && !e.clientStm.prepared.Load() && ss.stmts[e.client] == e.clientStm &&
		ss.parsed[e.client].stamp == ss.srv.descStamp() {
		// Its first Parse on a worker failed: on PostgreSQL the client's
		// Parse would have. One that a worker prepared before (itself, on
		// the default node, or a shard statement of it) stays: a shard
		// missing for a moment, during a move, fails its Parse there, and
		// the client's statement lives on, as PostgreSQL's does when its
		// table changes (found by an adversary: every later Bind got
		// 26000). So does one whose Parse was only skipped, after an
		// earlier message of the batch failed: the client was told it
		// was parsed, and PostgreSQL's statements outlive a failed batch
		// (adversary finding: 26000 at the next Bind). So does one
		// parsed before DDL through this coordinator or a catalog change
		// (descStamp): its text may have been sound then, as PostgreSQL
		// found it at Parse, and its table changed since (adversary
		// finding: a column dropped after the Parse and added back gave
		// 26000 for good, where PostgreSQL gives 42703, then rows).
		delete(ss.stmts, e.client)
	}
	if e.undo {
		if e.prev == nil {
			delete(ss.stmts, e.name)
		} else {
			ss.stmts[e.name] = e.prev
		}
	}
}

// noteTag follows a CommandComplete for the statements that change session
// state, in the order they ran.
func (ss *session) noteTag(e *expect, body []byte) {
	tag, _, _ := wire.CBytes(body)
	c := e.cls
	if c == nil && e.stmt != nil {
		c = &e.stmt.cls
	}
	if ss.verifyState && ss.stateTxn {
		switch {
		case string(tag) == "COMMIT":
			// (COMMIT AND CHAIN: a ROLLBACK after it undoes only the
			// chained transaction.)
			ss.stateTxn = false
		case string(tag) == "ROLLBACK" && (c == nil || c.txn == "rollback" || c.txn == "commit"):
			// The transaction the snapshot was taken in ended with
			// ROLLBACK (a ROLLBACK TO has its savepoint statement in
			// c.sps, and c.txn ""). Not after ROLLBACK AND CHAIN, whose
			// chained transaction's user code takes no snapshot of its
			// own: its settings are compared (adversary 165: a
			// function's set_config(..., false) there was lost after
			// COMMIT); the first transaction's SET LOCALs are read as
			// the session's (localBase).
			ss.stateRolledBack = ss.stateRolledBack || c == nil || !c.chain
			ss.stateTxn = false
		}
	}
	spTag := c != nil && e.spIdx < len(c.sps) && string(tag) == c.sps[e.spIdx].tag() // a savepoint statement's
	if c != nil && c.endLike && (string(tag) == "COMMIT" || string(tag) == "ROLLBACK") && !spTag {
		// A transaction's end (not a ROLLBACK TO's tag), maybe in a
		// string of several statements or earlier in a pipeline.
		ss.txnEnded(string(tag) == "COMMIT")
		ss.settleOps(string(tag) == "COMMIT", c.chain)
	}
	if c != nil && c.chain && (string(tag) == "COMMIT" || string(tag) == "ROLLBACK") {
		ss.chained(string(tag) == "COMMIT")
		return
	}
	if c != nil && c.seqReset && (string(tag) == "DISCARD SEQUENCES" || string(tag) == "DISCARD ALL") {
		ss.seqUsed = false
	}
	if spTag {
		e.spIdx++
		if ss.noteSavepoint(c.sps[e.spIdx-1]) {
			return
		}
	}
	if len(ss.pending) > 0 && string(tag) == "ROLLBACK" {
		// ROLLBACK, or a ROLLBACK TO SAVEPOINT not followed (the same
		// tag), after which some of the transaction's SETs may have
		// stayed: forget them, and have the connection reset before
		// anyone uses it again.
		ss.txFailed = true
		ss.paramsUnsure = true
		ss.savepoints, ss.spLost = ss.savepoints[:0], true
	}
	var ops []paramOp
	if e.cls != nil {
		ops = e.cls.ops
	} else if e.stmt != nil {
		ops = e.stmt.cls.ops
	}
	if e.opIdx >= len(ops) || string(tag) != ops[e.opIdx].tag() {
		if string(tag) == "SET" || string(tag) == "RESET" {
			ss.txLogLost = true // (a SET not followed: not set again elsewhere)
		}
		return
	}
	op := ops[e.opIdx]
	e.opIdx++
	ss.noteOp(op)
}

// noteOp follows one session change that ran (noteTag; a set_config's
// SET LOCAL, setlocal.go).
func (ss *session) noteOp(op paramOp) {
	if op.text != "" {
		// (Outside a transaction block the log is cleared at its
		// ReadyForQuery, endOfCycle.)
		ss.txLog = append(ss.txLog, op) // (parked connections run it when switched back to: joinWorker)
	} else if op.tag() == "SET" || op.tag() == "RESET" {
		ss.txLogLost = true
	}
	ss.noteParamFix(op)
	ss.noteDefines(op)
	switch op.kind {
	case opSet, opReset, opResetAll, opSetDefault, opPlaceholder:
		ss.pending = append(ss.pending, op)
	case opDiscardAll, opDeallocAll:
		// The server dropped every prepared statement, ours included.
		ss.sc.Stmts.Clear()
		clear(ss.stmts)
		ss.lastParseSt = nil
		if op.kind == opDiscardAll {
			ss.pending = append(ss.pending, op)
			clear(ss.cursors) // its cursors too, WITH HOLD ones included
		}
	case opDeallocate:
		delete(ss.stmts, op.name)
	}
}

// settleOps follows the end of a transaction (COMMIT or ROLLBACK, and
// COMMIT of a failed one, whose tag is ROLLBACK) as PostgreSQL does with
// the session's settings: the transaction's SET, RESET and DISCARD ALL
// stay if it committed and go if it rolled back, whatever the statements
// after it in the same query string or pipeline do, which run in a
// transaction of their own. (They used to wait for the ReadyForQuery and
// follow the whole string's outcome: an adversary's "SET TimeZone =
// 'Asia/Tokyo'; COMMIT; SELECT 1/0" left the worker connection in Tokyo
// while the session forgot it, and the pool gave it to the next client;
// "SET ...; ROLLBACK; SET DateStyle ..." lost the DateStyle.)
func (ss *session) settleOps(committed, chain bool) {
	if committed && !ss.txFailed {
		// The values the worker reports (ParameterStatus) come before
		// the ReadyForQuery, not with the COMMIT: taken then
		// (endOfCycle), as the statement wrote them until then.
		ss.params.applyOps(ss.pending, nil)
		ss.settled = append(ss.settled, ss.pending...)
	} else {
		ss.keepPlaceholders()
		if len(ss.pending) > 0 && !chain {
			// (A ROLLBACK TO taken for a ROLLBACK would leave some of
			// them: the connection is reset before anyone uses it. A
			// chained block would take that for a SET of its own.)
			ss.paramsUnsure = true
		}
	}
	ss.pending = ss.pending[:0]
	ss.savepoints, ss.spLost = ss.savepoints[:0], false
	ss.txFailed = false
	ss.txSet = ss.paramsUnsure
	ss.txLog, ss.txLogLost = ss.txLog[:0], false
	// What the connection's settings are is known at the cycle's
	// ReadyForQuery outside a block (endOfCycle, with the values the
	// worker reports); until then it is reset before anyone else uses it.
	ss.sc.ParamsKey = pooling.UnknownKey
}

// endOfCycle runs at ReadyForQuery.
func (ss *session) endOfCycle(status byte) {
	if len(ss.settled) > 0 && status == 'I' {
		// Changes of transactions that committed earlier in the cycle
		// (settleOps), with the values the worker reports: outside a
		// block they are its session's. A cycle that ends inside a block
		// keeps them for the block's end, as the values it reports may
		// be the open block's (adversary: SET DateStyle = 'SQL'; COMMIT;
		// BEGIN kept the text 'SQL' where the worker had SQL, DMY, and the
		// pool took the two for the same).
		ss.params.applyOps(ss.settled, ss.sc.Params)
		ss.settled = ss.settled[:0]
	}
	ss.sc.TxStatus = status
	ss.txEndQueued = false // every answer read
	ss.cycles++
	ss.setSeen = ss.setGen
	ss.needSync = false
	ss.batchWork = false
	if status != 'I' {
		return
	}
	if len(ss.bridged) > 0 && ss.pendingBegin == "" {
		// (Not a connection's set-up before the block's BEGIN reached
		// it: adversary round 3.)
		ss.endBlockPortals()
	}
	ss.ddlDone()
	if len(ss.spares) > 0 {
		ss.dropSpares()
	}
	if ss.begunAlone() && len(ss.parked) == 0 {
		ss.spanHint = ss.spanHint[:0] // the transaction stayed on one worker
	}
	ss.txBegin, ss.txSet, ss.txSavepoint, ss.chainAsk, ss.chainStarted = "", false, false, false, false
	ss.savepoints, ss.spLost = ss.savepoints[:0], false
	ss.txLog, ss.txLogLost = ss.txLog[:0], false
	releaseCitus(ss.citusPending, false)
	ss.citusPending, ss.dropPending, ss.blockSnap, ss.blockBase = nil, nil, nil, nil
	if len(ss.pending) > 0 {
		if !ss.txFailed {
			ss.params.applyOps(ss.pending, ss.sc.Params)
		} else {
			ss.keepPlaceholders()
		}
		ss.pending = ss.pending[:0]
	}
	ss.sc.ParamsKey = ss.params.key
	if ss.paramsUnsure {
		ss.sc.ParamsKey = pooling.UnknownKey
		ss.paramsUnsure = false
	}
	ss.settingsDirty, ss.pathTouched = false, false
	ss.txFailed = false
	if len(ss.portals) > 0 {
		clear(ss.portals)
		clear(ss.portalSets)
	}
	if len(ss.portalNode) > 0 {
		clear(ss.portalNode)
	}
}

// copyIn streams COPY FROM STDIN data from the client to the server until
// CopyDone or CopyFail. With early (a COPY of a simple Query), an error the
// server sends midway ends the streaming at once, as PostgreSQL's error
// reaches its client while it still sends (the relay then passes the error
// and ReadyForQuery on; the client's CopyData after them is ignored, as
// PostgreSQL ignores it); notices sent midway (a trigger's) are passed on
// as they come.
func (ss *session) copyIn(early bool) error {
	if err := ss.flush(); err != nil {
		ss.sc.MarkBroken()
		return errQuietClose
	}
	sc := ss.sc
	for {
		var f wire.Frame
		var err error
		if len(ss.copyAhead) > 0 {
			f, ss.copyAhead = ss.copyAhead[0], ss.copyAhead[1:]
		} else {
			f, err = ss.r.Next()
		}
		if ss.terminated.Load() {
			sc.MarkBroken() // pg_terminate_backend (signal.go): the worker's COPY is abandoned
			return adminShutdown()
		}
		if err != nil {
			sc.MarkBroken()
			return clientReadError(err)
		}
		switch f.Type {
		case 'd':
			sc.SetBuf(wire.AppendFrame(sc.Buf(), 'd', f.Body))
			if len(sc.Buf()) >= 64<<10 {
				if err := sc.Flush(); err != nil {
					return ss.lostServer(err)
				}
				if early {
					if stop, err := ss.copyAnswered(sc); stop || err != nil {
						return err
					}
				}
			}
		case 'c', 'f':
			sc.SetBuf(wire.AppendFrame(sc.Buf(), f.Type, f.Body))
			// In the extended protocol the server holds CommandComplete
			// back until Sync or Flush, which the client sends only after
			// it has it: a Flush (answered by nothing) breaks the wait.
			sc.SetBuf(appendFlush(sc.Buf()))
			if err := sc.Flush(); err != nil {
				return ss.lostServer(err)
			}
			return nil
		case 'H', 'S':
			// Ignored during COPY FROM STDIN, as PostgreSQL does.
		case 'X':
			sc.MarkBroken()
			return errQuietClose
		default:
			// PostgreSQL answers any other message in COPY FROM STDIN with
			// an error and ends the connection, the protocol being out of
			// step (adversary 159: pgfleet failed the COPY, 57014, and went
			// on). The worker's COPY ends with its connection.
			sc.MarkBroken()
			er := pgerr.Flatten(pgerr.New(pgerr.ProtocolViolation, "unexpected message type 0x%02X during COPY from stdin", f.Type))
			ss.out, _ = er.Encode(ss.out)
			return pgerr.Fatal(pgerr.ProtocolViolation, "terminating connection because protocol synchronization was lost")
		}
	}
}

// copyAnswered looks, without waiting, at what the server sent during a
// COPY FROM STDIN: notices go to the client now; anything else (an error)
// stops the streaming (stop), left for the relay.
func (ss *session) copyAnswered(sc *pooling.ServerConn) (stop bool, err error) {
	for sc.Readable() {
		typ, whole, err := sc.R.Whole()
		if err != nil {
			return true, ss.lostServer(err)
		}
		if typ != 'N' || !whole {
			return true, nil
		}
		f, err := sc.Next()
		if err != nil {
			return true, ss.lostServer(err)
		}
		ss.out = wire.AppendFrame(ss.out, 'N', f.Body)
		if err := ss.flush(); err != nil {
			sc.MarkBroken()
			return true, errQuietClose
		}
	}
	return false, nil
}

// sendCancel forwards a cancel to the server connection a session holds.
func sendCancel(ctx context.Context, sc *pooling.ServerConn) error { return sc.Cancel(ctx) }

// stmtKey is the settings key statements are parsed under on the held
// connection now: its ParamsKey, or UnknownKey while a SET earlier in the
// transaction or pipeline (or a set_config() of a pinned session) may have
// changed them.
func (ss *session) stmtKey() string { return ss.stmtKeyOn(ss.sc) }

// stmtKeyOn is stmtKey for a connection the session checked out.
func (ss *session) stmtKeyOn(sc *pooling.ServerConn) string {
	if ss.settingsAside() {
		return pooling.UnknownKey
	}
	return sc.ParamsKey
}

// settingsAside reports whether the session's connections may run under
// settings their ParamsKey does not say: a SET earlier in the transaction
// block (which txnCheck replays: txLog) or pipeline, or settings not known.
func (ss *session) settingsAside() bool {
	return ss.settingsDirty || ss.txSet || len(ss.txLog) > 0 || len(ss.pending) > 0 || ss.settingsUnknown
}

// bindRunsText reports whether a Bind's parameter values, which a
// built-in that runs SQL given as text may run (query_to_xml($1)), hold
// code that check finds (the portal's and statement's names left out).
func bindRunsText(body []byte, check func(string) bool) bool {
	_, rest, ok := wire.CBytes(body)
	if ok {
		_, rest, ok = wire.CBytes(rest)
	}
	return ok && check(string(rest))
}

// tempPath reports whether a statement may make an object (CREATE, SELECT
// ... INTO, EXPLAIN ANALYZE CREATE TABLE ... AS) while the session's
// search_path from its startup packet, its role or its database (ALTER
// ROLE/DATABASE ... SET search_path) names pg_temp: the object is then a
// temporary one, which must stay with the session (adversary). A SET
// search_path naming it pins at once (classify).
func (ss *session) tempPath(cls *class) bool {
	return (cls.ddl || cls.selectInto || cls.explain) && (ss.roleTempPath || ss.params.path != "" && namesTempSchema(ss.params.path))
}

// unseenPin pins a session whose statement may run user code that changes
// state the state read cannot see (stateviews.go unseenIn): random()'s
// seed, dblink connections, a LOADed module, a replication origin or
// slot, a backup.
const unseenPin = "user code changing state pgfleet cannot read"

// pinChangesSettings reports whether a pin's reason may have changed the
// connection's settings in ways its settings key does not show.
func pinChangesSettings(reason string) bool {
	switch reason {
	case "set_config()", "SET ROLE", "SET SESSION AUTHORIZATION", "RESET ROLE", "RESET SESSION", "LOAD", "session state changed by a function", unseenPin,
		"SET FROM CURRENT":
		return true
	}
	return false
}

// checkDesc is called after a hidden Parse of st for a Bind of the client's
// statement cst, whose description the client was given: it describes st
// on the worker at once (one round trip, only when a connection prepares
// the statement) and reports whether its result is still what the client
// was told. If not, the client gets 0A000 as on PostgreSQL and the Bind is
// not sent: rows of another shape must never reach a client that decodes
// them by the old description.
func (ss *session) checkDesc(st, cst *Statement) (bool, error) {
	b, _ := (&pgproto3.Describe{ObjectType: 'S', Name: st.Name}).Encode(ss.sc.Buf())
	ss.sc.SetBuf(b)
	ss.push(expect{kind: eSwallow, term: tDescribe, stmt: st, cst: cst, check: true})
	if err := ss.flushRound(); err != nil {
		return false, err
	}
	if ss.skipping {
		return false, nil // a message failed: the Bind is skipped, as the server skips it
	}
	if cst.stale.Load() {
		ss.synthError(ss.resultChanged(cst))
		return false, nil
	}
	return true, nil
}

// noteDesc follows a statement's description from a worker: the first is
// what clients are told; a later one of another shape means a table changed
// since. A hidden check marks the statement stale; a Describe relayed to the
// client gives that client a new statement with the new description (as a
// fresh Parse on PostgreSQL would), and the old one goes stale for the
// sessions that hold it.
func (ss *session) noteDesc(e *expect, f wire.Frame) {
	var row []byte
	if f.Type == 'T' {
		row = f.Body
	}
	key := ss.stmtKey()
	if key == pooling.UnknownKey {
		return
	}
	// Names resolve by search_path, so only descriptions made under the
	// same settings are compared.
	d := e.cst.descFor(key)
	if d == nil {
		if !e.check {
			e.cst.addDesc(key, row)
		}
		return
	}
	if bytes.Equal(d.row, row) || executor.SameShape(d.row, row) || e.cst.cls.fetch {
		return
	}
	old := e.cst
	ss.staleStmt(old)
	if e.check || e.kind != eRelay || ss.stmts[e.name] != old {
		return
	}
	fresh := ss.srv.stmts.intern(append(append([]byte(old.Query), 0), old.paramTail...))
	if fresh == nil || fresh == old {
		return
	}
	fresh.addDesc(key, row)
	ss.stmts[e.name] = fresh
}

// staleStmt marks a client's statement as prepared before its result
// changed, and makes the registry forget it and its shard statements.
func (ss *session) staleStmt(st *Statement) {
	st.stale.Store(true)
	ss.srv.stmts.forget(st)
	if sp := st.plan.Load(); sp != nil {
		for i := range sp.shards {
			sp.shards[i].each(func(x *Statement) {
				if x != st {
					ss.srv.stmts.forget(x)
				}
			})
		}
	}
	if ss.lastParseSt == st {
		ss.lastParseSt = nil
	}
}

// errCode is the SQLSTATE of an ErrorResponse body.
func errCode(body []byte) string {
	for len(body) > 1 && body[0] != 0 {
		typ := body[0]
		v, rest, ok := wire.CBytes(body[1:])
		if !ok {
			return ""
		}
		if typ == 'C' {
			return string(v)
		}
		body = rest
	}
	return ""
}

// stateHead reads the parts of a server connection's session state that a
// function, procedure or DO block can change without the statement's text
// showing it: settings made for the session, the role and session user,
// temporary objects (relations, functions, types, operators, ...), SQL-level prepared statements, holdable cursors,
// LISTEN channels and advisory locks (the first column); and settings made
// for the session (the second: a transaction's end undoes what it changed
// of them, so after a ROLLBACK they are not compared, see verifyRelease),
// but for the transaction's characteristics, which pg_settings lists as
// the session's in a block begun with them (BEGIN ISOLATION LEVEL ...,
// READ ONLY) and which no block outlives: compared, every such block that
// called a function pinned its session for good (PostgREST begins each
// request so).
//
// Placeholder settings (custom names like app.tenant that no module
// defines) are not in pg_settings: those named in the statement's text or
// in the bodies of user functions that may change session state are read
// by name (stateNamesOf); user code that may set one by a name built at
// run time pins its session (runTimeName).
const stateHead = `SELECT pg_catalog.concat_ws(' | ',
 current_user, session_user,
 CASE WHEN pg_catalog.pg_my_temp_schema() OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 0 ELSE
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_class WHERE relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc WHERE pronamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_type WHERE typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_operator WHERE oprnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_collation WHERE collnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_conversion WHERE connamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_opfamily WHERE opfnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_opclass WHERE opcnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_ts_config WHERE cfgnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_ts_dict WHERE dictnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) OPERATOR(pg_catalog.+)
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_statistic_ext WHERE stxnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) END,
 COALESCE((SELECT pg_catalog.string_agg(name, ',' ORDER BY name) FROM pg_catalog.pg_prepared_statements WHERE from_sql), ''),
 COALESCE((SELECT pg_catalog.string_agg(name, ',' ORDER BY name) FROM pg_catalog.pg_cursors WHERE is_holdable), ''),
 COALESCE((SELECT pg_catalog.string_agg(c, ',' ORDER BY c) FROM pg_catalog.pg_listening_channels() c), ''),
 (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid())),
 pg_catalog.concat_ws(' | ', COALESCE((SELECT pg_catalog.array_agg(name OPERATOR(pg_catalog.||) '=' OPERATOR(pg_catalog.||) setting ORDER BY name)
   FROM pg_catalog.pg_settings WHERE source OPERATOR(pg_catalog.=) 'session'
   AND name OPERATOR(pg_catalog.<>) ALL ('{transaction_isolation,transaction_read_only,transaction_deferrable}'::pg_catalog.text[]))::pg_catalog.text, '{}'),
 ARRAY(SELECT pg_catalog.current_setting(n, true) FROM pg_catalog.unnest(`

// stateTail follows stateHead's array of custom setting names.
const stateTail = `::pg_catalog.text[]) WITH ORDINALITY AS u(n, i) ORDER BY i)::pg_catalog.text)`

// The state read is prepared once per server connection under
// stateStmtName, the custom names its parameter, and bound, outside a
// transaction block (stateNamed), for each snapshot on the extended
// protocol and for each comparison: it costs the
// worker about a third of the text's (0.8 ms against 2.1 ms, pgbench on
// the development machine), most of that text's cost being its planning.
// A simple-protocol snapshot, pipelined as a Query ahead of the client's,
// sends the text (stateText): an extended message there, before a Query
// with no Sync between, would have the worker skip the client's Query if
// it failed.
const (
	stateStmtName = "pgfleet_state"
	stateKey      = "state" // its settings key: the text names only pg_catalog
	stateQuery    = stateHead + "$1" + stateTail
)

var (
	stateStmt  = &Statement{Name: stateStmtName, Query: stateQuery}
	stateParse = mustEncode(&pgproto3.Parse{Name: stateStmtName, Query: stateQuery})
)

func mustEncode(m interface{ Encode([]byte) ([]byte, error) }) []byte {
	b, err := m.Encode(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// stateText is the state read as text, with its custom names in place.
func stateText(names []string) string {
	return stateHead + "'" + namesLiteral(names) + "'" + stateTail
}

// namesLiteral is names as a text[] literal ({"app.x","app.y"}; custom
// setting names hold no quote, comma or backslash: customName).
func namesLiteral(names []string) string {
	b := []byte{'{'}
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), n...), '"')
	}
	return string(append(b, '}'))
}

// appendStateRead appends the Bind and Execute of the connection's
// prepared state read, after its Parse (and the Close of a copy it
// replaces, or of the statement it evicts) when the connection does not
// hold it.
func (ss *session) appendStateRead(b []byte, queued bool) []byte {
	sc := ss.sc
	if !sc.Stmts.Has(stateStmtName, stateKey) {
		ev, stale := sc.Stmts.Add(stateStmtName, stateKey)
		if ev != "" {
			b = wire.AppendFrame(b, 'C', append(append([]byte{'S'}, ev...), 0))
			if queued {
				ss.push(expect{kind: eSwallow, term: tClose, evicted: ev})
			}
		}
		if stale {
			b = wire.AppendFrame(b, 'C', append(append([]byte{'S'}, stateStmtName...), 0))
			if queued {
				ss.push(expect{kind: eSwallow, term: tClose})
			}
		}
		b = append(b, stateParse...)
		if queued {
			ss.push(expect{kind: eSwallow, term: tParse, state: true, stmt: stateStmt, reclosed: stale})
		}
	}
	b, _ = (&pgproto3.Bind{PreparedStatement: stateStmtName, Parameters: [][]byte{[]byte(namesLiteral(ss.stateNames))}}).Encode(b)
	return appendExecute(b)
}

// stateReadFailed handles a worker's error to the prepared state read
// pipelined ahead of a client's statement (outside a transaction block,
// stateNamed) and returns the error for the client, whose messages after
// it to the Sync are skipped. The read found its statement gone only if
// code pgfleet does not check deallocated it since the last read found it
// (user code that pgfleet checks is followed by a read that finds it).
func (ss *session) stateReadFailed(body []byte) []byte {
	ss.sc.Stmts.Doubt(stateStmtName)
	if errCode(body) != pgerr.UndefinedPreparedStmt {
		return body
	}
	e := pgerr.New(pgerr.FeatureNotSupported, "pgfleet's prepared read of session state was deallocated on the worker connection by code it does not check (EXECUTE 'DEALLOCATE ...' in an extension's function); the statement was not run").
		WithHint("Retry it.")
	b, _ := pgerr.Flatten(e).Encode(nil)
	return b[5:]
}

// stateNamed reports whether the state read may bind the connection's
// prepared statement: outside a transaction block only. User code may
// have deallocated it (EXECUTE 'DEALLOCATE ALL'), and in a block the Bind's
// error would abort the client's transaction (adversary: a SET after such
// a function rolled the block back); outside, the error is the read's
// alone, and the read after the code that ran finds it (readState).
func (ss *session) stateNamed() bool {
	return ss.sc.TxStatus == 'I' && ss.txBegin == "" && ss.pendingBegin == ""
}

// readState reads the held connection's session state (one round trip;
// two when the prepared read was deallocated).
func (ss *session) readState() ([][]*string, error) {
	sc := ss.sc
	if !ss.stateNamed() {
		return executor.QueryText(sc, stateText(ss.stateNames))
	}
	sc.SetBuf(appendSync(ss.appendStateRead(sc.Buf(), false)))
	if err := sc.Flush(); err != nil {
		sc.MarkBroken()
		return nil, executor.LostWorker(sc.Addr, err)
	}
	rows, err := executor.ReadText(sc)
	var we *executor.WorkerError
	if errors.As(err, &we) {
		ss.stateReadLost(we.PG.Code)
	}
	return rows, err
}

// stateReadLost follows a worker's error to the prepared state read
// (outside a transaction block): the statement may not be there (its Parse
// did not run); and if it was deallocated (26000: user code ran EXECUTE
// 'DEALLOCATE ALL' or 'DEALLOCATE pgfleet_state'), the connection's
// statement cache is brought in line with the worker's, one query
// (TestDeallocateInUserCode). The caller counts the state as changed.
func (ss *session) stateReadLost(code string) {
	sc := ss.sc
	sc.Stmts.Doubt(stateStmtName)
	if code != pgerr.UndefinedPreparedStmt || sc.TxStatus != 'I' {
		return
	}
	rows, err := executor.QueryText(sc, "SELECT name FROM pg_catalog.pg_prepared_statements WHERE NOT from_sql")
	if err != nil {
		sc.MarkBroken() // (its cache unknown: not reused)
		return
	}
	held := make(map[string]bool, len(rows))
	for _, r := range rows {
		if len(r) == 1 && r[0] != nil {
			held[*r[0]] = true
		}
	}
	sc.Stmts.Retain(func(name string) bool { return held[name] })
	sc.Stmts.Doubt(stateStmtName)
}

// stateNamesOf returns the custom settings the state
// read reads around sql: the dotted words of its text and of its Bind's
// parameters, if any (at most
// maxTextNames, past which the session is pinned; whole strings and a DO
// block's EXECUTE 'SET app.x = ...' alike), and those of the bodies of user functions that may change
// session state (viewSet.customs: set_tenant() calling
// set_config('app.tenant', ...) was not read, so the client lost the value
// it set at the next checkout, and the placeholder stayed defined for the
// next client).
func (ss *session) stateNamesOf(sql string, bind []byte) []string {
	seen := map[string]bool{}
	text := dottedNames(sql, seen, nil)
	if built, _ := dynamicNames(sql, 0); len(built) > 0 {
		// (A DO block's EXECUTE 'SET app' || '.x = 1'.)
		text = mergeNames(text, built)
	}
	if len(bind) > 0 {
		// A Bind's parameters too: SQL text given to a function that
		// runs it ('SET app.x = 5' as $1 of EXECUTE $1), or a name
		// given to set_config through one.
		text = dottedNames(string(bind), seen, text)
	}
	if len(text) > maxTextNames {
		// Past what the read reads, a name the statement's user code
		// sets would be missed (adversary: a DO block with 70 qualified
		// columns before its SET app.x): the session keeps its
		// connection instead.
		ss.pin("statement naming too many settings to read")
		text = text[:maxTextNames]
	}
	return mergeNames(text, ss.srv.stateViews().customs)
}

// maxTextNames bounds the dotted words of a statement's text the state
// read reads (a table's qualified columns are such words too); a statement
// with more pins its session.
const maxTextNames = 256

// customName reports whether s is a custom setting's name as PostgreSQL
// takes one (valid_custom_variable_name): two or more parts joined by
// dots, each a letter, an underscore or a non-ASCII byte, then those,
// digits and $. (Any length: set_config's name is not an identifier;
// adversary: 'app.ténant', 'app.t$1' and a 64-byte name were not read.)
func customName(s string) bool {
	dots := 0
	start := true
	for k := 0; k < len(s); k++ {
		c := s[k]
		switch {
		case c == '.':
			if start {
				return false
			}
			dots++
			start = true
		case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80:
			start = false
		case !start && (c >= '0' && c <= '9' || c == '$'):
		default:
			return false
		}
	}
	return dots > 0 && !start
}

// sameState compares a state read (stateHead's one row) with a snapshot's
// values: the first column always, the settings when settings is set.
func sameState(rows [][]*string, base [][]byte, settings bool) bool {
	if len(rows) != 1 || len(rows[0]) != 2 || len(base) != 2 {
		return false
	}
	col := func(i int) bool {
		r := rows[0][i]
		return (r == nil) == (base[i] == nil) && (r == nil || *r == string(base[i]))
	}
	return col(0) && (!settings || col(1))
}

// snapshotState queues a hidden read of the connection's session state
// ahead of a statement that may change it (classify's verify), once per
// use of the connection: pipelined with the statement, so it costs no
// round trip. verifyRelease compares it with the state afterwards.
func (ss *session) snapshotState(extended bool, sql string, bind []byte) {
	if ss.verifyState && !ss.resnap {
		return
	}
	// (resnap: the snapshot was compared at a SET since; this one
	// replaces it.)
	names := ss.stateNamesOf(sql, bind)
	if ss.resnap {
		// (A snapshot replaced in the block: the names read before stay
		// read; a cursor's user code at a FETCH sets a name only its
		// DECLARE showed; adversary round 12.)
		names = mergeNames(ss.stateNames, names)
	}
	ss.verifyState, ss.stateRolledBack, ss.resnap = true, false, false
	ss.stateTxn = ss.sc.TxStatus == 'T'
	ss.stateBase = ss.stateBase[:0]
	ss.stateNames = names
	b := ss.sc.Buf()
	switch {
	case extended && ss.stateNamed():
		// (A failure, unlike the text's below, is the client's: its
		// messages after it are skipped to the Sync, and hiding the
		// error would leave it no answer to them.)
		b = ss.appendStateRead(b, true)
		ss.push(expect{kind: eSwallow, term: tBind, state: true})
		ss.push(expect{kind: eSwallow, term: tExecute, state: true, capture: true})
	case extended:
		b = appendRun(b, stateText(ss.stateNames), nil)
		ss.push(expect{kind: eSwallow, term: tParse, abort: true})
		ss.push(expect{kind: eSwallow, term: tBind, abort: true})
		ss.push(expect{kind: eSwallow, term: tExecute, abort: true, capture: true})
	default:
		b = appendQuery(b, stateText(ss.stateNames))
		ss.push(expect{kind: eSwallow, term: tQuery, abort: true, capture: true})
	}
	ss.sc.SetBuf(b)
}

// verifyRelease runs when a connection on which user code may have changed
// session state is about to go back to the pool (one query, on this rare
// path only): if its state is not what it was before, the session keeps
// the connection for good (pinned), so that no other client inherits the
// change and this one keeps seeing it, as on PostgreSQL. It reports whether
// the connection may go back.
func (ss *session) verifyRelease() bool { return ss.verifyAt(true) }

// verifyAt is verifyRelease; adopt false compares in the middle of a
// transaction block (at a SET), where a custom setting's change cannot be
// taken into the session: whether it lasts (set_config(..., false)) or
// not (..., true; a ROLLBACK) is known only at the block's end (adversary
// round 12: a tenant a function set, then a SET, then ROLLBACK, stayed the
// client's). There it pins, as any change.
func (ss *session) verifyAt(adopt bool) bool {
	base, rolledBack := ss.stateBase, ss.stateRolledBack
	ss.verifyState, ss.stateBase, ss.stateRolledBack = false, ss.stateBase[:0], false
	var dr pgproto3.DataRow
	ok := len(base) > 0 && dr.Decode(base) == nil && len(dr.Values) == 2
	if ok && ss.sc.TxStatus == 'I' && dr.Values[0] != nil {
		// Outside a transaction no transaction-level advisory lock is
		// left, and a session that is not pinned holds no session-level
		// one: the snapshot's count (stateHead's last) stands for 0. (An
		// adversary's pg_advisory_xact_lock, counted in the snapshot,
		// hid the session lock a function then took.)
		v := dr.Values[0]
		if i := bytes.LastIndex(v, []byte(" | ")); i >= 0 {
			dr.Values[0] = append(v[:i+3:i+3], '0')
		}
	}
	if ok {
		rows, err := ss.readState()
		// After a ROLLBACK of the transaction the snapshot was taken in,
		// its settings are what they were before it began, whatever user
		// code or SET LOCAL did (the snapshot may show a SET LOCAL that
		// is gone now); the rest is compared.
		if err == nil && adopt && len(ss.stateLocals) > 0 {
			// (The snapshot shows the transaction's SET LOCALs, gone
			// now: localsnap.go.)
			var known bool
			if rows, dr.Values, known = ss.localsCompared(rows, dr.Values, rolledBack); !known {
				err = errLocalsUnread
			}
		}
		ok = err == nil && sameState(rows, dr.Values, false)
		if err != nil && ss.sc.TxStatus != 'I' {
			ss.sc.MarkBroken()
		}
		if ok && !sameState(rows, dr.Values, true) {
			// Settings changed: custom ones user code set are taken
			// into the session (placeholders.go); others pin.
			ok = adopt && rows[0][1] != nil && dr.Values[1] != nil && ss.adoptCustoms(*rows[0][1], string(dr.Values[1]), rolledBack) ||
				!adopt && rolledBack
		}
	}
	if !ok {
		ss.pin("session state changed by a function")
		ss.settingsUnknown = true
		ss.setGen++
		return false
	}
	// Settings the snapshot cannot see may still have changed: the next
	// checkout resets the connection (RESET ALL) before anyone uses it.
	ss.sc.ParamsKey = pooling.UnknownKey
	return true
}

// savepointMark is a savepoint of the transaction block and how many of
// the session's pending changes were made before it.
type savepointMark struct {
	name string
	n    int
	logN int // len(txLog) when it was made
}

// noteSavepoint follows a savepoint statement that succeeded, as
// PostgreSQL does with the session's settings: ROLLBACK TO s undoes the
// changes made after s (s stays), and brings a failed transaction back;
// RELEASE s forgets s and the savepoints after it, keeping the changes.
// False: a ROLLBACK TO whose savepoint is not known here, which the
// caller treats as a ROLLBACK that may have undone anything.
func (ss *session) noteSavepoint(op paramOp) bool {
	find := func() int {
		for i := len(ss.savepoints) - 1; i >= 0; i-- {
			if ss.savepoints[i].name == op.name {
				return i
			}
		}
		return -1
	}
	switch op.kind {
	case opSavepoint:
		ss.savepoints = append(ss.savepoints, savepointMark{name: op.name, n: len(ss.pending), logN: len(ss.txLog)})
	case opRelease:
		if i := find(); i >= 0 {
			ss.savepoints = ss.savepoints[:i]
			ss.cursorsAtSavepoint(opRelease, i)
		}
	case opRollbackTo:
		i := find()
		if i < 0 || ss.spLost {
			ss.cursorsAtSavepoint(opRollbackTo, -1)
			ss.txLogLost = true
			return false
		}
		ss.cursorsAtSavepoint(opRollbackTo, i)
		for _, o := range ss.txLog[min(ss.savepoints[i].logN, len(ss.txLog)):] {
			o.customNames(func(string) { ss.txLogLost = true })
		}
		ss.txLog = ss.txLog[:min(ss.savepoints[i].logN, len(ss.txLog))]
		for j := range ss.parked {
			// (The ROLLBACK TO undid the later ones there too.)
			ss.parked[j].logN = min(ss.parked[j].logN, len(ss.txLog))
		}
		undone := slices.Clone(ss.pending[ss.savepoints[i].n:])
		ss.pending = ss.pending[:ss.savepoints[i].n]
		for _, o := range undone {
			// A custom setting's placeholder outlives the SET that
			// made it.
			if o.name != "" && custom(o.name) {
				ss.pending = append(ss.pending, paramOp{kind: opPlaceholder, name: o.name})
			}
		}
		ss.savepoints = ss.savepoints[:i+1]
		ss.txFailed = false
	}
	return true
}

// errNotifyElsewhere refuses pg_notify() in a statement over distributed
// or reference tables: it would run on the worker of the rows, whose
// listeners are not the coordinators' (LISTEN runs on the default node),
// and the notification would be lost.
var errNotifyElsewhere = pgerr.New(pgerr.FeatureNotSupported,
	"pg_notify() in a statement over distributed or reference tables is not supported: its notification would not reach listeners").
	WithHint("Call pg_notify() (or NOTIFY) in a statement of its own.")

// errDefaultOnly refuses an advisory lock function (or a LISTEN) in a
// statement that would run on a worker other than the default one, where
// every session's advisory locks are taken, so that they exclude each
// other (and where NOTIFYs are sent).
func (ss *session) errDefaultOnly(listen bool, p *planner.Plan) error {
	if listen {
		return pgerr.New(pgerr.FeatureNotSupported,
			"LISTEN is not supported once this session's transaction or connection is on worker %s: it would not hear notifications, which are sent on the default worker", ss.srv.nodeAddr(ss.node)).
			WithHint("LISTEN before the transaction block's statements on other workers, or outside the block.")
	}
	if p != nil && p.Kind() != planner.KindDefault {
		return pgerr.New(pgerr.FeatureNotSupported,
			"advisory lock functions (called directly, or by a function, trigger or view the statement uses) in a statement over distributed or reference tables are not supported: the lock would be taken on a worker other sessions' locks are not on").
			WithHint("Call the advisory lock function, or the function that takes the lock, in a statement of its own (SELECT pg_advisory_lock(...)).")
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"advisory lock functions are not supported once this session's transaction or connection is on worker %s: advisory locks are taken on the default worker, where other sessions' are", ss.srv.nodeAddr(ss.node)).
		WithHint("Take the lock before the transaction block's statements on other workers, or use the transaction-level form (pg_advisory_xact_lock), which a block takes on the default worker.")
}

var errFailedTxn = pgerr.New(pgerr.InFailedSQLTransaction,
	"current transaction is aborted, commands ignored until end of transaction block")

// pendingFailedError answers a statement in a failed transaction the
// worker has not seen: 25P02, or for ROLLBACK TO the error PostgreSQL gives
// there (no savepoint can exist, as none reached a worker).
func pendingFailedError(cls *class) error {
	if cls.count == 1 && len(cls.sps) == 1 && cls.sps[0].kind == opRollbackTo {
		return pgerr.New(pgerr.InvalidSavepointSpec, "savepoint \"%s\" does not exist", cls.sps[0].name)
	}
	return pgerr.New(pgerr.InFailedSQLTransaction,
		"current transaction is aborted, commands ignored until end of transaction block")
}

// keepPlaceholders takes into the session the custom settings its
// transaction's SETs defined: a placeholder outlives the SET that made
// it, in a transaction rolled back too, on every worker the session uses
// next.
func (ss *session) keepPlaceholders() {
	for _, o := range ss.pending {
		o.customNames(func(name string) { ss.params.apply(paramOp{kind: opPlaceholder, name: name}) })
	}
}
