package coordinator

import (
	"bytes"
	"regexp"
	"strings"

	"github.com/pgfleet/pgfleet/metadata"
)

// opKind is a change to a session's parameters made by one statement.
type opKind uint8

const (
	opSet        opKind = iota + 1 // SET name ...       (tag SET)
	opReset                        // RESET name         (tag RESET)
	opResetAll                     // RESET ALL          (tag RESET)
	opDiscardAll                   // DISCARD ALL        (tag DISCARD ALL)
	opDeallocate                   // DEALLOCATE name    (tag DEALLOCATE)
	opDeallocAll                   // DEALLOCATE ALL     (tag DEALLOCATE ALL)
	opNone                         // a statement with a SET/RESET tag and no session change
	// opSetDefault is SET name TO DEFAULT (tag SET), which PostgreSQL
	// treats as RESET name.
	opSetDefault
	// opPlaceholder is SET LOCAL of a custom (dotted) setting (tag SET):
	// it leaves the placeholder defined in the session once the
	// transaction ends.
	opPlaceholder
	// Savepoints (class.sps, not ops): SAVEPOINT name (tag SAVEPOINT),
	// RELEASE [SAVEPOINT] name (tag RELEASE), ROLLBACK [WORK|TRANSACTION]
	// TO [SAVEPOINT] name (tag ROLLBACK). The session's changes pending in
	// a transaction follow them.
	opSavepoint
	opRelease
	opRollbackTo
)

// resets reports whether op sets a setting back to its reset value.
func (o paramOp) resets() bool {
	switch o.kind {
	case opReset, opSetDefault, opResetAll, opDiscardAll:
		return true
	}
	return o.dflt // (SET LOCAL x TO DEFAULT)
}

// paramOp is one session-state change, matched to the statement's
// CommandComplete tag when it runs.
type paramOp struct {
	kind opKind
	name string // parameter (lower case) or statement name
	sql  string // the SET statement, replayed on other server connections
	// tagText is the tag of an opNone (SET LOCAL, SET ROLE, ...), which
	// keeps the matching of later tags in step.
	tagText string
	// more are SETs the same statement makes too (SET SESSION
	// CHARACTERISTICS: one for each default_transaction_* setting).
	more []paramOp
	// dflt: SET LOCAL of a setting TO DEFAULT (an opNone), which the
	// session follows with the startup value, as a RESET (paramfix.go).
	dflt bool
	// text is a SET or RESET statement's text (SET LOCAL and SET
	// TRANSACTION too), set again after BEGIN on a worker a transaction
	// takes in (session.txLog).
	text string
}

func (o paramOp) tag() string {
	switch o.kind {
	case opSet, opSetDefault, opPlaceholder:
		return "SET"
	case opReset, opResetAll:
		return "RESET"
	case opDiscardAll:
		return "DISCARD ALL"
	case opDeallocate:
		return "DEALLOCATE"
	case opNone:
		return o.tagText
	case opSavepoint:
		return "SAVEPOINT"
	case opRelease:
		return "RELEASE"
	case opRollbackTo:
		return "ROLLBACK"
	default:
		return "DEALLOCATE ALL"
	}
}

// class is what the coordinator must know about a query string before it
// sends it: whether it changes session state that must follow the client
// across server connections, or state that cannot be multiplexed at all.
type class struct {
	// txn is "begin", "commit" or "rollback" for a statement that starts or
	// ends a transaction block (ROLLBACK TO SAVEPOINT is not one).
	txn string
	// preparedView: a statement names pg_prepared_statements, which on a
	// pooled worker connection lists its statements (every session's that
	// used it, under pgfleet's names), not the session's.
	preparedView bool
	// reservedName: a SQL PREPARE, EXECUTE or DEALLOCATE names a statement
	// pgfleet_...: the names pgfleet prepares its own statements under on
	// worker connections (EXECUTE pgfleet_1(41) ran pgfleet's statement).
	reservedName bool
	// selectInto: an INTO not of INSERT or MERGE (SELECT ... INTO t makes
	// a table: a temporary one under a search_path naming pg_temp).
	selectInto bool
	// explain: an EXPLAIN (EXPLAIN ANALYZE CREATE TABLE ... AS makes one).
	explain bool
	// storesCode: a statement that stores code without running it (CREATE
	// FUNCTION, PROCEDURE, VIEW, TRIGGER, RULE; DROP, COMMENT, GRANT,
	// REVOKE): names in a body it stores do not pin (unseenPin).
	storesCode bool
	// fetch: a FETCH, whose result PostgreSQL never checks against its
	// description (a utility statement is not analysed again: prepared
	// before its cursor, it is described with no result and returns rows).
	fetch bool
	// showPools: SHOW POOLS, which the coordinator answers (PgBouncer's
	// report of its pools; PostgreSQL has no setting of that name).
	showPools bool
	// setConstraints: SET CONSTRAINTS ALL (setConstraintsNamed: SET
	// CONSTRAINTS of named constraints), refused where there are
	// distributed or reference tables as setConstraintsRefused says.
	setConstraints, setConstraintsNamed bool
	// setConstraintsCode: a DO block or a CREATE FUNCTION or PROCEDURE
	// whose text has SET CONSTRAINTS (setConstraintsRefused).
	setConstraintsCode bool
	// chain: the COMMIT or ROLLBACK is AND CHAIN (a new transaction block
	// with the same characteristics starts at once).
	chain bool
	// seqFn names a call of currval or lastval, which read sequence state
	// kept on a server connection (see seqCheck).
	seqFn string
	// seqReset: the string is one DISCARD SEQUENCES or DISCARD ALL.
	seqReset bool
	// resetNotLast: a statement that resets settings (RESET, SET ... TO
	// DEFAULT, DISCARD ALL) is followed by others in the string.
	resetNotLast bool
	// maint: a statement is ANALYZE, VACUUM, REINDEX or CLUSTER, which run
	// the index expressions and statistics of tables they need not name.
	maint bool
	// quiet: every statement is one that cannot call a function (SET,
	// RESET, transaction control, DISCARD, DEALLOCATE), so none can call
	// nextval.
	quiet bool
	pin   string    // why the session must keep its server connection; "" if it need not
	ops   []paramOp // session changes, in statement order
	sps   []paramOp // savepoint statements, in statement order
	count int       // statements in the string
	// verify: the statement may run user code (DO, CALL, a function that
	// is not built in) whose session effects the text does not show; the
	// server connection's state is checked before it serves anyone else.
	verify bool
	// localSets: the statement is only set_config(name, value, true)
	// calls, followed as the SET LOCALs they are (setlocal.go); localOps:
	// those SET LOCALs, when every name and value is a literal (else they
	// are known at the Bind).
	localSets []localSet
	localOps  []paramOp
	// setsCustom: set_config of a literal custom name (customSetConfig),
	// which the session takes as its SET; a multi-shard statement cannot
	// carry it back from the shards' connections.
	setsCustom bool
	// hidden: it makes or runs a body pgfleet does not plan (a view,
	// function, procedure, rule, trigger or DO block; see views.go).
	hidden bool
	// ddl: a statement starts with CREATE, ALTER, DROP, COMMENT, GRANT or
	// REVOKE (objectDDL checks it further on the extended protocol).
	ddl bool
	// notify: a statement calls pg_notify, whose notification reaches
	// only listeners of the worker it runs on (the default node's).
	notify bool
	// advisory: a statement calls an advisory lock function, whose lock
	// excludes only other sessions' on the worker it runs on: every
	// session's go to the default node (adversary 143).
	advisory bool
	// advisoryCode: user code the statement reaches calls one (the
	// session's viewSet.advisory; set by the session, not classify).
	// pgfleet's own functions (planner.KindFunction) run none of it.
	advisoryCode bool
	// advisoryBlock: the transaction made such code (txAdvisoryDDL): the
	// statement is refused over distributed and reference tables.
	advisoryBlock bool
	// listen: a LISTEN, which hears only the NOTIFYs of the worker it runs
	// on: every session's go to the default node (adversary 143).
	listen bool
	// terminate: a statement calls pg_terminate_backend, and may end its
	// own worker backend (drain relays that FATAL as PostgreSQL would);
	// signal: it calls that or pg_cancel_backend (signal.go).
	terminate, signal bool
	// logins: a statement changes what a login gets (ALTER or DROP of a
	// role or database, GRANT, REVOKE): the pools open new connections
	// once it has committed (refreshPools).
	logins bool
	// temp: DDL of a temporary object (TEMP, or in pg_temp), which lives
	// on the session's pinned connection only, never on every worker.
	temp bool
	// endLike: a statement starts with COMMIT, END, ROLLBACK, ABORT or
	// PREPARE, so it may be one a failed transaction accepts.
	endLike bool
	// twoPhase: a statement is PREPARE TRANSACTION, COMMIT PREPARED or
	// ROLLBACK PREPARED (refuseOwnGID).
	twoPhase bool
}

// mayEndFailed reports whether a statement of the string may be one a
// failed transaction accepts (COMMIT, ROLLBACK, ROLLBACK TO SAVEPOINT,
// PREPARE TRANSACTION and the like); false means every statement would get
// 25P02 there.
func (c *class) mayEndFailed() bool {
	return c.endLike
}

// classify scans sql lexically (comments, quotes and dollar quotes skipped)
// without a full parse: it looks only at each statement's leading keywords
// and at calls of functions with session-level effects.
func classify(sql string) class {
	var c class
	lx := lexer{s: sql}
	quiet := 0
	resets := false
	for {
		n, start, end, more := lx.statement()
		if n > 0 {
			c.count++
			if resets {
				c.resetNotLast = true
			}
			nops := len(c.ops)
			// (In any case: "drop table t" was not taken for DDL.)
			switch {
			case oneOf(lx.words[0], "CREATE", "ALTER", "DROP", "COMMENT", "GRANT", "REVOKE"):
				c.ddl = true
				if oneOf(lx.words[0], "GRANT", "REVOKE") ||
					n > 1 && oneOf(lx.words[0], "ALTER", "DROP") && oneOf(lx.words[1], "ROLE", "USER", "GROUP", "DATABASE") {
					c.logins = true
				}
			case oneOf(lx.words[0], "COMMIT", "END", "ROLLBACK", "ABORT", "PREPARE"):
				c.endLike = true
				if n > 1 && (oneOf(lx.words[0], "PREPARE") && oneOf(lx.words[1], "TRANSACTION") ||
					oneOf(lx.words[0], "COMMIT", "ROLLBACK") && oneOf(lx.words[1], "PREPARED")) {
					c.twoPhase = true
				}
			}
			if quietStatement(lx.words[0]) && !(n > 1 && oneOf(lx.words[0], "SET") && oneOf(lx.words[1], "CONSTRAINTS")) {
				quiet++ // (SET CONSTRAINTS ... IMMEDIATE runs deferred triggers)
			}
			if lx.sawSessionFunc != "" && c.pin == "" && !definesView(lx.words[:n]) {
				c.pin = lx.sawSessionFunc
			}
			if lx.sawTemp && c.pin == "" {
				c.pin = pinTemp
			}
			if lx.sawSQLText || oneOf(lx.words[0], "DO") {
				// Its strings are code: DO $$ ... setseed(0.5) ... $$,
				// query_to_xml('select setseed(0.5)'), EXECUTE 'EXECUTE
				// pgfleet_1' (adversary). (Not any call of user code: its
				// literals are data, and 'seed' or 'load' there pinned
				// ordinary statements.)
				if c.pin == "" && unseenIn(sql[start:end]) {
					c.pin = unseenPin
				}
				if namesReserved(sql[start:end]) {
					c.reservedName = true
				}
			}
			if lx.sawSeqFunc != "" {
				c.seqFn = lx.sawSeqFunc
			}
			if lx.sawUserCall {
				c.verify = true
			}
			if lx.sawCustomSet {
				c.setsCustom = true
			}
			if lx.sawSQLText || lx.sawShards {
				c.hidden = true
			}
			if lx.sawNotify {
				c.notify = true
			}
			if lx.sawAdvisory {
				c.advisory = true
			}
			if lx.sawTerminate {
				c.terminate = true
			}
			if lx.sawSignal {
				c.signal = true
			}
			if lx.sawPrepared {
				c.preparedView = true
			}
			if lx.sawReserved {
				c.reservedName = true
			}
			if lx.sawInto {
				c.selectInto = true
			}
			if strings.EqualFold(lx.words[0], "EXPLAIN") {
				c.explain = true
			}
			if f := lx.words[0][0] | 0x20; (f == 'c' || f == 'd' || f == 'g' || f == 'r') && c.count == 1 && storesCode(lx.words[:n]) {
				c.storesCode = true
				c.setConstraintsCode = setConstraintsIn.MatchString(sql[start:end])
			}
			if oneOf(lx.words[0], "ANALYZE", "ANALYSE", "VACUUM", "REINDEX", "CLUSTER") {
				c.maint = true
			}
			if strings.EqualFold(lx.words[0], "FETCH") {
				c.fetch = true
			}
			if n == 2 && !lx.punct && strings.EqualFold(lx.words[0], "SHOW") && strings.EqualFold(lx.words[1], "POOLS") {
				c.showPools = true
			}
			if w := lx.words[:n]; interesting(w) {
				upper := make([]string, n)
				for i, x := range w {
					if x[0] != '"' {
						x = strings.ToUpper(x)
					}
					upper[i] = x
				}
				classifyStatement(&c, upper, strings.TrimSpace(sql[start:end]), lx.punct)
			}
			for _, op := range c.ops[nops:] {
				resets = resets || op.resets()
			}
		}
		lx.sawSessionFunc, lx.sawSeqFunc, lx.sawUserCall, lx.sawSQLText, lx.sawNotify, lx.sawPrepared = "", "", false, false, false, false
		lx.sawTerminate, lx.sawSignal, lx.sawTemp, lx.sawReserved, lx.sawInto, lx.sawCustomSet = false, false, false, false, false, false
		lx.sawAdvisory = false
		if !more {
			if c.count != 1 {
				c.seqReset = false
			}
			c.quiet = c.count > 0 && quiet == c.count && c.seqFn == ""
			if c.count == 1 && (c.pin == "set_config()" || c.pin == "" && c.setsCustom) {
				c.followLocalSets(sql)
			}
			return c
		}
	}
}

// leadingKeywords are the statements classify looks into; any other
// statement (SELECT, INSERT, ...) costs no allocation.
var leadingKeywords = []string{"SET", "RESET", "DISCARD", "DEALLOCATE", "LISTEN", "PREPARE", "LOAD", "DECLARE", "CREATE",
	"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "DO", "CALL", "SAVEPOINT", "RELEASE", "ALTER", "DROP", "COMMENT"}

// quietStatement reports whether a statement starting with word w cannot
// call a function (what follows SET is a value, not an expression).
func quietStatement(w string) bool {
	if len(w) < 3 || len(w) > 10 {
		return false
	}
	switch w[0] | 0x20 { // lower case
	case 's', 'r', 'b', 'c', 'e', 'a', 'd':
	default:
		return false // SELECT, INSERT, UPDATE, ... are rejected above or below
	}
	for _, k := range [...]string{"SET", "RESET", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "DISCARD", "DEALLOCATE", "SHOW", "SAVEPOINT", "RELEASE"} {
		if len(w) == len(k) && strings.EqualFold(w, k) {
			return true
		}
	}
	return false
}

func interesting(w []string) bool {
	for _, k := range leadingKeywords {
		if strings.EqualFold(w[0], k) {
			return true
		}
	}
	return false // (SELECT ... INTO TEMP t: the lexer's sawTemp)
}

// txnEnd reads COMMIT, END, ROLLBACK or ABORT statements:
// {COMMIT|END|ROLLBACK|ABORT} [WORK|TRANSACTION] [AND [NO] CHAIN], the
// whole statement being these words (punct: it has other tokens). Anything
// else (ROLLBACK TO SAVEPOINT, COMMIT PREPARED, a syntax error) is not a
// transaction end: it goes to the worker as it is.
func txnEnd(w []string, punct bool) (txn string, chain bool) {
	if punct {
		return "", false
	}
	i := 1
	if i < len(w) && (w[i] == "WORK" || w[i] == "TRANSACTION") {
		i++
	}
	if i < len(w) {
		switch {
		case len(w) == i+2 && w[i] == "AND" && w[i+1] == "CHAIN":
			chain = true
		case len(w) == i+3 && w[i] == "AND" && w[i+1] == "NO" && w[i+2] == "CHAIN":
		default:
			return "", false
		}
	}
	if w[0] == "COMMIT" || w[0] == "END" {
		return "commit", chain
	}
	return "rollback", chain
}

// validBegin reports whether stmt is a BEGIN or START TRANSACTION that
// PostgreSQL accepts: BEGIN [WORK | TRANSACTION] or START TRANSACTION, then
// transaction modes (ISOLATION LEVEL ..., READ ONLY | READ WRITE,
// [NOT] DEFERRABLE), each at most once, separated by white space or
// commas, comments aside. Anything else (a syntax error, quoting, a mode
// given twice) is not answered by the coordinator: it goes to a worker,
// which says what PostgreSQL says (the coordinator used to answer BEGIN
// to "begin isolation level nonsense" and fail the next statement).
func validBegin(stmt string) bool {
	var buf [24]string
	toks, ok := modeTokens(stmt, buf[:0])
	if !ok {
		return false
	}
	at := func(i int) string {
		if i < len(toks) {
			return toks[i]
		}
		return ""
	}
	i := 1
	switch {
	case at(0) == "BEGIN" && (at(1) == "WORK" || at(1) == "TRANSACTION"):
		i = 2
	case at(0) == "START" && at(1) == "TRANSACTION":
		i = 2
	case at(0) != "BEGIN":
		return false
	}
	_, ok = txnModes(toks[i:])
	return ok
}

// modeTokens splits a statement of keywords and commas (BEGIN, SET
// SESSION CHARACTERISTICS) into upper-cased words and ","; anything else
// in it (a literal, a quoted name, more words than fit in toks) is not
// ok.
func modeTokens(stmt string, toks []string) ([]string, bool) {
	for i := 0; i < len(stmt); {
		ch := stmt[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f':
			i++
		case ch == '-' && i+1 < len(stmt) && stmt[i+1] == '-':
			for i < len(stmt) && stmt[i] != '\n' && stmt[i] != '\r' {
				i++
			}
		case ch == '/' && i+1 < len(stmt) && stmt[i+1] == '*':
			depth := 0
			for i+1 < len(stmt) {
				if stmt[i] == '/' && stmt[i+1] == '*' {
					depth++
					i += 2
				} else if stmt[i] == '*' && stmt[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			if depth != 0 {
				return nil, false
			}
		case len(toks) == cap(toks):
			return nil, false // longer than any valid one
		case ch == ',':
			toks = append(toks, ",")
			i++
		case ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			st := i
			for i < len(stmt) && (stmt[i] >= 'a' && stmt[i] <= 'z' || stmt[i] >= 'A' && stmt[i] <= 'Z' || stmt[i] == '_') {
				i++
			}
			toks = append(toks, upperWord(stmt[st:i]))
		default:
			return nil, false
		}
	}
	return toks, true
}

// txnModes reads a list of transaction modes (ISOLATION LEVEL ..., READ
// ONLY | WRITE, [NOT] DEFERRABLE, separated by commas or not, each at most
// once) and returns the settings they give: default_transaction_isolation,
// _read_only and _deferrable, "" for a mode not given.
func txnModes(toks []string) (modes [3]string, ok bool) {
	at := func(i int) string {
		if i < len(toks) {
			return toks[i]
		}
		return ""
	}
	for i, first := 0, true; i < len(toks); first = false {
		if !first && at(i) == "," {
			i++
		}
		var mode int
		var v string
		switch {
		case at(i) == "ISOLATION" && at(i+1) == "LEVEL":
			mode = 0
			switch l := at(i + 2); {
			case l == "SERIALIZABLE":
				v, i = "serializable", i+3
			case l == "REPEATABLE" && at(i+3) == "READ":
				v, i = "repeatable read", i+4
			case l == "READ" && (at(i+3) == "COMMITTED" || at(i+3) == "UNCOMMITTED"):
				v, i = "read "+strings.ToLower(at(i+3)), i+4
			default:
				return modes, false
			}
		case at(i) == "READ" && (at(i+1) == "ONLY" || at(i+1) == "WRITE"):
			mode, v = 1, "off"
			if at(i+1) == "ONLY" {
				v = "on"
			}
			i += 2
		case at(i) == "DEFERRABLE":
			mode, v, i = 2, "on", i+1
		case at(i) == "NOT" && at(i+1) == "DEFERRABLE":
			mode, v, i = 2, "off", i+2
		default:
			return modes, false
		}
		if modes[mode] != "" {
			return modes, false
		}
		modes[mode] = v
	}
	return modes, true
}

// txnModeSettings are the settings txnModes' results are, in order.
var txnModeSettings = [3]string{"default_transaction_isolation", "default_transaction_read_only", "default_transaction_deferrable"}

// sessionCharacteristics is what SET SESSION CHARACTERISTICS AS
// TRANSACTION does, as PostgreSQL does it: a SET of each
// default_transaction_* setting it names, in one op (one SET tag). ok is
// false for a statement it cannot read.
func sessionCharacteristics(stmt string) (paramOp, bool) {
	var buf [24]string
	toks, ok := modeTokens(stmt, buf[:0])
	if !ok || len(toks) < 6 || toks[0] != "SET" || toks[1] != "SESSION" || toks[2] != "CHARACTERISTICS" ||
		toks[3] != "AS" || toks[4] != "TRANSACTION" {
		return paramOp{}, false
	}
	modes, ok := txnModes(toks[5:])
	if !ok {
		return paramOp{}, false
	}
	var ops []paramOp
	for i, v := range modes {
		if v != "" {
			ops = append(ops, paramOp{kind: opSet, name: txnModeSettings[i], sql: "SET " + txnModeSettings[i] + " = '" + v + "'"})
		}
	}
	op := ops[0]
	if len(ops) > 1 {
		op.more = ops[1:]
	}
	return op, true
}

// beginHasModes reports whether a BEGIN that validBegin accepts sets
// transaction modes (more than BEGIN [WORK | TRANSACTION] or START
// TRANSACTION).
func beginHasModes(sql string) bool {
	lx := lexer{s: sql}
	n, _, _, _ := lx.statement()
	switch {
	case n <= 1:
		return false
	case n == 2:
		w := lx.words[1]
		return !strings.EqualFold(w, "WORK") && !strings.EqualFold(w, "TRANSACTION")
	}
	return true
}

// oneOf reports whether w is one of the upper-case keywords ks, in any case.
func oneOf(w string, ks ...string) bool {
	for _, k := range ks {
		if len(w) == len(k) && strings.EqualFold(w, k) {
			return true
		}
	}
	return false
}

// upperWord is w in upper case, without allocating when it already is.
func upperWord(w string) string {
	for i := 0; i < len(w); i++ {
		if w[i] >= 'a' && w[i] <= 'z' {
			return strings.ToUpper(w)
		}
	}
	return w
}

// setConstraintsIn finds SET CONSTRAINTS in a statement's text (a DO
// block's or a function's body).
var setConstraintsIn = regexp.MustCompile(`(?i)\bset\s+constraints\b`)

func classifyStatement(c *class, w []string, stmt string, punct bool) {
	at := func(i int) string {
		if i < len(w) {
			return w[i]
		}
		return ""
	}
	if at(0) == "SET" && !(at(1) == "TRANSACTION" && at(2) == "SNAPSHOT") || at(0) == "RESET" {
		// (A snapshot is the worker's own: not set again elsewhere.)
		n0 := len(c.ops)
		defer func() {
			if len(c.ops) == n0+1 {
				c.ops[n0].text = stmt
			}
		}()
	}
	setPin := func(why string) {
		if c.pin == "" {
			c.pin = why
		}
	}
	if hiddenKind(w) != "" {
		c.hidden = true
	}
	switch at(0) {
	case "BEGIN", "START":
		if (at(0) == "BEGIN" || at(1) == "TRANSACTION") && validBegin(stmt) {
			c.txn = "begin"
		}
	case "COMMIT", "END", "ROLLBACK", "ABORT":
		if txn, chain := txnEnd(w, punct); txn != "" {
			c.txn = txn
			c.chain = c.chain || chain
			return
		}
		if at(0) == "ROLLBACK" {
			i := 1
			if at(i) == "WORK" || at(i) == "TRANSACTION" {
				i++
			}
			if at(i) == "TO" {
				if i++; at(i) == "SAVEPOINT" {
					i++
				}
				if i+1 == len(w) {
					c.sps = append(c.sps, paramOp{kind: opRollbackTo, name: identName(stmt, at(i))})
				}
			}
		}
	case "SAVEPOINT":
		if len(w) == 2 {
			c.sps = append(c.sps, paramOp{kind: opSavepoint, name: identName(stmt, at(1))})
		}
	case "RELEASE":
		i := 1
		if at(1) == "SAVEPOINT" {
			i = 2
		}
		if i+1 == len(w) {
			c.sps = append(c.sps, paramOp{kind: opRelease, name: identName(stmt, at(i))})
		}
	case "DO", "CALL":
		c.verify = true
		c.setConstraintsCode = c.setConstraintsCode || at(0) == "DO" && setConstraintsIn.MatchString(stmt)
	case "SET":
		first := unquoteName(at(1))
		if first == "SESSION" && at(2) != "AUTHORIZATION" && at(2) != "CHARACTERISTICS" {
			first = unquoteName(at(2))
		}
		if first == "CONSTRAINTS" {
			// (Tag SET CONSTRAINTS: a SET of no setting. Taken for one
			// named constraints, its tag did not match, and the next
			// SET's was noted as it: SET CONSTRAINTS ALL DEFERRED; SET
			// work_mem = '1MB' lost the work_mem.)
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET CONSTRAINTS"})
			if at(2) == "ALL" {
				c.setConstraints = true
			} else {
				c.setConstraintsNamed = true
			}
			return
		}
		if first == "ROLE" || first == "SESSION_AUTHORIZATION" {
			// SET ROLE, SET SESSION ROLE, SET "role" = ..., SET
			// session_authorization = ...: RESET ALL does not undo these.
			setPin("SET ROLE")
			if first == "SESSION_AUTHORIZATION" {
				setPin("SET SESSION AUTHORIZATION")
			}
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET"})
			return
		}
		if n := len(w); n >= 4 && w[n-2] == "FROM" && w[n-1] == "CURRENT" {
			// SET x FROM CURRENT makes the connection's value now (a SET
			// LOCAL's) the session's: not a value the session could set
			// on another connection, and it reads the connection's
			// (adversary: replayed as written, it failed with 42704 on
			// the next connection, or gave the default).
			setPin("SET FROM CURRENT")
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET"})
			return
		}
		name := at(1)
		skip := 1
		switch name {
		case "LOCAL":
			if strings.EqualFold(settingName(stmt, 2), "seed") {
				setPin("SET seed") // seeds random() for the session, not the transaction
			}
			if n := settingName(stmt, 2); strings.Contains(n, ".") {
				c.ops = append(c.ops, paramOp{kind: opPlaceholder, name: n})
				return
			}
			// (Named, for touchesPath: SET LOCAL search_path.)
			n := strings.ToLower(settingName(stmt, 2))
			switch n {
			case "schema":
				n = "search_path"
			case "time": // SET LOCAL TIME ZONE (adversary 164: named "time", it could not be RESET)
				n = "timezone"
			case "names":
				n = "client_encoding"
			case "xml": // SET LOCAL XML OPTION
				n = "xmloption"
			}
			if n == "search_path" && namesTempSchema(stmt) {
				setPin("search_path naming pg_temp") // (its block's CREATE TABLE makes a temporary table that outlives it)
			}
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET", name: n, dflt: setsDefault(w, stmt)})
			return
		case "TRANSACTION":
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET"})
			return
		case "SESSION":
			skip = 2
			switch at(2) {
			case "AUTHORIZATION":
				setPin("SET SESSION AUTHORIZATION")
				c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET"})
				return
			case "CHARACTERISTICS":
				if op, ok := sessionCharacteristics(stmt); ok {
					c.ops = append(c.ops, op)
					return
				}
				name = "session characteristics"
			case "TIME":
				name = "timezone"
			case "SCHEMA":
				name = "search_path"
			default:
				name = settingName(stmt, 2)
			}
		case "ROLE":
			setPin("SET ROLE")
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "SET"})
			return
		case "TIME":
			name = "timezone"
		case "NAMES":
			name = "client_encoding"
		case "SCHEMA":
			name = "search_path"
		default:
			if skip == 1 {
				name = settingName(stmt, 1)
			}
		}
		name = strings.ToLower(name)
		if name == "search_path" && namesTempSchema(stmt) {
			// CREATE TABLE t, SELECT INTO t and CREATE SEQUENCE s then make
			// temporary objects with no TEMP written (adversary).
			setPin("search_path naming pg_temp")
		}
		if name == "seed" {
			setPin("SET seed") // random()'s state, which no RESET undoes
		}
		if setsDefault(w, stmt) {
			// SET name TO DEFAULT, SET name = DEFAULT, SET TIME ZONE
			// DEFAULT or LOCAL: a RESET.
			c.ops = append(c.ops, paramOp{kind: opSetDefault, name: name})
			return
		}
		c.ops = append(c.ops, paramOp{kind: opSet, name: name, sql: stmt})
	case "RESET":
		switch at(1) {
		case "ALL":
			c.ops = append(c.ops, paramOp{kind: opResetAll})
		case "ROLE", "SESSION":
			setPin("RESET " + at(1))
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "RESET"})
		case "TIME":
			c.ops = append(c.ops, paramOp{kind: opReset, name: "timezone"})
		default:
			c.ops = append(c.ops, paramOp{kind: opReset, name: strings.ToLower(settingName(stmt, 1))})
		}
	case "DISCARD":
		switch at(1) {
		case "ALL":
			c.ops = append(c.ops, paramOp{kind: opDiscardAll})
			c.seqReset = true
		case "SEQUENCES":
			c.ops = append(c.ops, paramOp{kind: opNone, tagText: "DISCARD SEQUENCES"})
			c.seqReset = true
		case "TEMP", "TEMPORARY":
			return
		}
	case "DEALLOCATE":
		i := 1
		if at(1) == "PREPARE" {
			i = 2
		}
		if at(i) == "ALL" {
			c.ops = append(c.ops, paramOp{kind: opDeallocAll})
		} else {
			c.ops = append(c.ops, paramOp{kind: opDeallocate, name: identName(stmt, at(i))})
		}
	case "LISTEN":
		setPin(pinListen)
		c.listen = true
	case "PREPARE":
		if at(1) != "TRANSACTION" { // (PREPARE TRANSACTION ends the block)
			setPin("SQL PREPARE")
		}
	case "LOAD":
		setPin("LOAD")
		c.ops = append(c.ops, paramOp{kind: opNone, tagText: "LOAD"})
	case "DECLARE":
		for i := 1; i+1 < len(w); i++ {
			if w[i] == "WITH" && w[i+1] == "HOLD" {
				setPin("DECLARE ... WITH HOLD")
			}
			if w[i] == "FOR" {
				break
			}
		}
	case "CREATE":
		i := 1
		if at(1) == "OR" && at(2) == "REPLACE" {
			i = 3
		}
		if at(i) == "GLOBAL" || at(i) == "LOCAL" {
			i++
		}
		if at(i) == "TEMP" || at(i) == "TEMPORARY" || tempSchema(w) {
			setPin(pinTemp)
			c.temp = true
		}
	case "ALTER", "DROP", "COMMENT":
		if tempSchema(w) {
			c.temp = true // the object lives on the session's connection only
		}
	}
}

// setsDefault reports whether a SET statement (words w, upper-cased) sets
// its setting to DEFAULT.
func setsDefault(w []string, stmt string) bool {
	n := len(w)
	if n < 3 || n >= maxWords || (w[n-1] != "DEFAULT" && w[n-1] != "LOCAL") || len(stmt) < len(w[n-1]) ||
		!strings.EqualFold(stmt[len(stmt)-len(w[n-1]):], w[n-1]) {
		return false
	}
	if w[1] == "TIME" && w[2] == "ZONE" && n == 4 || w[1] == "SESSION" && w[2] == "TIME" && n == 5 {
		return true
	}
	if w[n-1] != "DEFAULT" {
		return false
	}
	before := strings.TrimRight(stmt[:len(stmt)-len("DEFAULT")], " \t\r\n\f")
	return strings.HasSuffix(before, "=") || w[n-2] == "TO" && len(before) >= 3 && strings.EqualFold(before[len(before)-2:], "TO") &&
		!isIdentChar(before[len(before)-3])
}

// settingName reads the setting name of a SET or RESET statement after
// its first skip words: an identifier or a dotted chain of them (a custom
// setting, "ext.name"), unquoted parts lower-cased as PostgreSQL does.
func settingName(stmt string, skip int) string {
	i := 0
	skipSpace := func() { i = skipBlanks(stmt, i) }
	word := func() (string, bool) {
		skipSpace()
		if i < len(stmt) && stmt[i] == '"' {
			var b strings.Builder
			for i++; i < len(stmt); i++ {
				if stmt[i] == '"' {
					if i+1 < len(stmt) && stmt[i+1] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					i++
					return b.String(), true
				}
				b.WriteByte(stmt[i])
			}
			return b.String(), true
		}
		st := i
		if i < len(stmt) && isIdentStart(stmt[i]) {
			for i < len(stmt) && isIdentChar(stmt[i]) {
				i++
			}
		}
		return strings.ToLower(stmt[st:i]), i > st
	}
	for k := 0; k < skip; k++ {
		if _, ok := word(); !ok {
			return ""
		}
	}
	name, ok := word()
	if !ok {
		return ""
	}
	for {
		skipSpace()
		if i >= len(stmt) || stmt[i] != '.' {
			return name
		}
		i++
		part, ok := word()
		if !ok {
			return name
		}
		name += "." + part
	}
}

// unquoteName is a setting name as PostgreSQL compares it: quotes removed,
// upper-cased here like the unquoted words (setting names ignore case).
func unquoteName(w string) string {
	if strings.HasPrefix(w, `"`) {
		return strings.ToUpper(strings.ReplaceAll(strings.Trim(w, `"`), `""`, `"`))
	}
	return w
}

// isTempSchema reports whether a word names the session's temporary schema
// (pg_temp, pg_temp_N), quoted or not.
func isTempSchema(w string) bool {
	w = strings.Trim(w, `"`)
	return len(w) >= 7 && strings.EqualFold(w[:7], "PG_TEMP") && (len(w) == 7 || w[7] == '_')
}

// namesTempSchema reports whether a SET search_path statement's text
// names pg_temp anywhere (quoted or not; an explicit pg_temp first, or
// after schemas that do not exist, is where CREATE puts new objects).
func namesTempSchema(stmt string) bool {
	// (Or may spell it: E'pg\x5ftemp', U&'pg\005ftemp', UESCAPE.)
	l := strings.ToLower(stmt)
	return strings.Contains(l, "pg_temp") || strings.Contains(l, `\`) || strings.Contains(l, "uescape")
}

// tempSchema reports whether a CREATE statement's leading words name an
// object in the temporary schema (CREATE TABLE pg_temp.t ...).
func tempSchema(w []string) bool {
	for i := 1; i < len(w) && i < 8; i++ {
		if isTempSchema(w[i]) {
			return true
		}
	}
	return false
}

// identName recovers the original spelling of a statement name from the
// statement (the lexer upper-cases unquoted words; PostgreSQL lower-cases them).
func identName(stmt, upper string) string {
	if strings.HasPrefix(upper, "\"") {
		return strings.ReplaceAll(strings.Trim(upper, "\""), "\"\"", "\"")
	}
	return strings.ToLower(upper)
}

// sessionFuncs are functions whose effects outlive the transaction.
var sessionFuncs = map[string]string{
	"PG_ADVISORY_LOCK":            "session advisory lock",
	"PG_ADVISORY_LOCK_SHARED":     "session advisory lock",
	"PG_TRY_ADVISORY_LOCK":        "session advisory lock",
	"PG_TRY_ADVISORY_LOCK_SHARED": "session advisory lock",
	"SET_CONFIG":                  "set_config()",
	"DBLINK_CONNECT":              "dblink connection",
	"LO_OPEN":                     "large object descriptor",
	"SETSEED":                     "setseed()", // random()'s state: a fresh session's is unseeded
	// A session's replication origin, and a temporary replication slot,
	// which lives as long as its session (adversary).
	"PG_REPLICATION_ORIGIN_SESSION_SETUP": "replication origin",
	"PG_CREATE_PHYSICAL_REPLICATION_SLOT": "temporary replication slot",
	"PG_CREATE_LOGICAL_REPLICATION_SLOT":  "temporary replication slot",
	"PG_COPY_PHYSICAL_REPLICATION_SLOT":   "temporary replication slot",
	"PG_COPY_LOGICAL_REPLICATION_SLOT":    "temporary replication slot",
	"PG_BACKUP_START":                     "backup in progress", // (until pg_backup_stop in the same session)
	"PG_START_BACKUP":                     "backup in progress",
	"PG_IMPORT_SYSTEM_COLLATIONS":         "collations in a schema it is given (a temporary one)",
	"DBLINK_CONNECT_U":                    "dblink connection",
}

// advisoryFunc reports whether an upper-cased name is an advisory lock
// function's.
func advisoryFunc(name []byte) bool {
	return bytes.HasPrefix(name, []byte("PG_ADVISORY_")) || bytes.HasPrefix(name, []byte("PG_TRY_ADVISORY_"))
}

// lexer walks SQL text statement by statement. It keeps the first few words
// of each statement (upper-cased) and notes calls to session functions.
type lexer struct {
	s              string
	i              int
	words          [maxWords]string // the statement's first words, as written
	sawSessionFunc string
	// sawPrepared: the text names pg_prepared_statements.
	sawPrepared  bool
	sawSeqFunc   string // "currval" or "lastval" when the statement names one
	punct        bool   // the statement has tokens other than words
	sawUserCall  bool   // a call of a function that is not built in, or pg_settings
	sawCustomSet bool   // set_config of a literal custom name (customSetConfig)
	sawSQLText   bool   // a call of a built-in that runs SQL given as text
	sawAllTables bool   // a call of a built-in that reads every table (schema_to_xml)
	sawNotify    bool   // a call of pg_notify
	sawAdvisory  bool   // a call of an advisory lock function
	sawTerminate bool   // a call of pg_terminate_backend
	sawSignal    bool   // a call of it or pg_cancel_backend
	sawShards    bool   // the word pgfleet_shards (metadata.ShardsSchema)
	// sawTemp: the statement makes a temporary object wherever its words
	// say so (TEMP after CREATE, INTO, OR REPLACE, LOCAL or GLOBAL; a name
	// in pg_temp), past the first words too (EXPLAIN ANALYZE CREATE TEMP
	// TABLE, a long SELECT ... INTO TEMP: adversary).
	sawTemp     bool
	sawReserved bool   // a statement name of pgfleet's after PREPARE, EXECUTE or DEALLOCATE
	sawInto     bool   // INTO, not after INSERT or MERGE
	prev        string // the word before the current one, "" after punctuation other than "."
	// chainPrev is the word before the current dotted name (s.t: the
	// word before s), dot that the last token was ".".
	chainPrev string
	dot       bool
	// w1, w2: the statement's last two words (punctuation between them or
	// not); uamp: the quote at lx.i opens a U& name or string.
	w1, w2 string
	uamp   bool
}

const maxWords = 12

// definesView reports whether a statement's first words create a view
// (CREATE [OR REPLACE] [TEMP|TEMPORARY] [RECURSIVE] VIEW): its query is
// stored, not run, so a session function it names changes nothing now.
// (CREATE MATERIALIZED VIEW runs its query and is not one.)
func definesView(w []string) bool {
	i := 0
	next := func(k string) bool {
		if i < len(w) && strings.EqualFold(w[i], k) {
			i++
			return true
		}
		return false
	}
	if !next("CREATE") {
		return false
	}
	if next("OR") && !next("REPLACE") {
		return false
	}
	_ = next("TEMP") || next("TEMPORARY")
	_ = next("RECURSIVE")
	return next("VIEW")
}

// startsWith reports whether the first statement's first word is w (upper
// case), comments and white space skipped.
func (lx *lexer) startsWith(w string) bool {
	n, _, _, _ := lx.statement()
	return n > 0 && strings.EqualFold(lx.words[0], w)
}

func (lx *lexer) statement() (n, start, end int, more bool) {
	s := lx.s
	start = lx.i
	depth := 0
	lx.punct = false
	lx.w1, lx.w2 = "", ""
	for lx.i < len(s) {
		ch := s[lx.i]
		switch {
		case ch == ';' && depth == 0:
			end = lx.i
			lx.i++
			return n, start, end, true
		case ch == '(':
			depth++
			lx.i++
			lx.punct = true
			lx.prev, lx.dot = "", false
		case ch == ')':
			lx.prev, lx.dot = "", false
			if depth > 0 {
				depth--
			}
			lx.i++
			lx.punct = true
		case commentEnd(s, lx.i) > lx.i:
			lx.i = commentEnd(s, lx.i)
		case ch == '\'':
			lx.skipQuoted('\'', escapePrefix(s, lx.i))
			lx.punct = true
			lx.prev, lx.dot, lx.uamp = "", false, false
		case ch == '"':
			st := lx.i
			lx.skipQuoted('"', false)
			w := s[st:lx.i]
			if lx.uamp {
				// U&"pg\005Ftemp": judged by what it spells (adversary).
				lx.uamp = false
				if d, next, ok := unicodeEscaped(s, st); ok {
					w = `"` + strings.ReplaceAll(d, `"`, `""`) + `"`
					lx.i = next // (past a UESCAPE clause: a "(" after it makes a call)
				} else {
					lx.sawUserCall = true // (malformed: PostgreSQL refuses it; checked all the same)
				}
			}
			if n < maxWords {
				lx.words[n] = w
				n++
			}
			if len(w) == 9 || len(w) == 10 {
				lx.noteSeqFunc(w[1 : len(w)-1])
			}
			if w == `"pg_prepared_statements"` || w == `"pg_prepared_statement"` {
				lx.sawPrepared = true
			}
			if w == `"pg_settings"` {
				lx.sawUserCall = true
			}
			if w == `"`+metadata.ShardsSchema+`"` {
				lx.sawShards = true
			}
			lx.word(w)
			if lx.callFollows() {
				// "set_config"(...): a quoted name is the name itself.
				lx.noteCall(w[1:max(1, len(w)-1)])
			} else if lx.dot {
				lx.noteAttr(w[1:max(1, len(w)-1)])
			}
			lx.prev, lx.dot = w, false
		case ch == '$' && lx.dollarQuote():
			lx.punct = true
			lx.prev, lx.dot = "", false
		case (ch == 'U' || ch == 'u') && lx.i+2 < len(s) && s[lx.i+1] == '&' && (s[lx.i+2] == '"' || s[lx.i+2] == '\''):
			lx.i += 2 // (U&: the name or string that follows is what counts)
			lx.uamp = true
		case isIdentStart(ch):
			st := lx.i
			for lx.i < len(s) && isIdentChar(s[lx.i]) {
				lx.i++
			}
			w := s[st:lx.i]
			if n < maxWords {
				lx.words[n] = w
				n++
			}
			if len(w) == 7 {
				lx.noteSeqFunc(w)
			}
			if len(w) == 11 && strings.EqualFold(w, "pg_settings") {
				lx.sawUserCall = true // its UPDATE rule calls set_config
			}
			if len(w) >= 7 && len(w) <= 32 && lx.sawSessionFunc == "" {
				var buf [32]byte
				if why, ok := sessionFuncs[string(upperInto(buf[:], w))]; ok {
					if why == "set_config()" && customSetConfig(s, lx.i) {
						// set_config('app.tenant', ...): a custom setting,
						// which the state read reads by name and the session
						// takes as its SET (adoptCustoms), as a function's.
						lx.sawUserCall, lx.sawCustomSet = true, true
					} else {
						lx.sawSessionFunc = why
					}
				}
			}
			if (len(w) == len("pg_prepared_statements") || len(w) == len("pg_prepared_statement")) &&
				(strings.EqualFold(w, "pg_prepared_statements") || strings.EqualFold(w, "pg_prepared_statement")) {
				lx.sawPrepared = true // (the view, or the function behind it: adversary)
			}
			if len(w) == len(metadata.ShardsSchema) && strings.EqualFold(w, metadata.ShardsSchema) {
				lx.sawShards = true
			}
			lx.word(w)
			if lx.callFollows() {
				lx.noteCall(w)
			} else if lx.dot {
				lx.noteAttr(w)
			}
			lx.prev, lx.dot = w, false
		default:
			if ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r' && ch != '\f' {
				lx.punct = true
				lx.dot = ch == '.'
				if !lx.dot {
					lx.prev = ""
				}
			}
			lx.i++
		}
	}
	return n, start, len(s), false
}

// noteSeqFunc notes a word that names currval or lastval (any case; a
// quoted name only in lower case, as PostgreSQL reads it).
func (lx *lexer) noteSeqFunc(w string) {
	switch {
	case strings.EqualFold(w, "currval"):
		lx.sawSeqFunc = "currval"
	case strings.EqualFold(w, "lastval"):
		lx.sawSeqFunc = "lastval"
	}
}

func (lx *lexer) skipBlockComment() {
	s, depth := lx.s, 0
	for lx.i+1 < len(s) {
		if s[lx.i] == '/' && s[lx.i+1] == '*' {
			depth++
			lx.i += 2
		} else if s[lx.i] == '*' && s[lx.i+1] == '/' {
			depth--
			lx.i += 2
			if depth == 0 {
				return
			}
		} else {
			lx.i++
		}
	}
	lx.i = len(s)
}

func (lx *lexer) skipQuoted(q byte, backslash bool) {
	s := lx.s
	lx.i++
	for lx.i < len(s) {
		c := s[lx.i]
		if backslash && c == '\\' {
			lx.i = min(lx.i+2, len(s)) // never past the end: callers slice up to lx.i
			continue
		}
		lx.i++
		if c == q {
			if lx.i < len(s) && s[lx.i] == q {
				lx.i++
				continue
			}
			if k := continuation(s, lx.i); backslash && q == '\'' && k > 0 {
				// 'a'<newline>'b' is one string, an E string's escapes
				// and all (adversary: a continuation's \' read as
				// closing it hid a SET ROLE after it).
				lx.i = k + 1
				continue
			}
			return
		}
	}
}

// continuation returns the index of the quote that continues a string
// literal ending at s[i] (whitespace with a newline, -- comments, then a
// quote), or -1.
func continuation(s string, i int) int {
	newline := false
	for i < len(s) {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\f':
			i++
		case c == '\n' || c == '\r':
			newline = true
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-': // (not /* */: PostgreSQL allows only these)
			i = commentEnd(s, i)
		case c == '\'' && newline:
			return i
		default:
			return -1
		}
	}
	return -1
}

// dollarQuote skips a $tag$...$tag$ string if one starts here.
func (lx *lexer) dollarQuote() bool {
	s := lx.s
	j := lx.i + 1
	for j < len(s) && s[j] != '$' {
		if !isIdentChar(s[j]) || (j == lx.i+1 && s[j] >= '0' && s[j] <= '9') {
			lx.i++ // a parameter like $1, or a lone $
			return true
		}
		j++
	}
	if j >= len(s) {
		lx.i++
		return true
	}
	tag := s[lx.i : j+1]
	k := strings.Index(s[j+1:], tag)
	if k < 0 {
		lx.i = len(s)
	} else {
		lx.i = j + 1 + k + len(tag)
	}
	return true
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$' }

// commentEnd returns the index after the comment that starts at s[i] (a
// -- comment to its line's end, which a newline or a carriage return ends
// as in PostgreSQL's scanner; a nested /* */ comment, to the end of s if
// unclosed), or i when none does. Every lexer of the coordinator skips
// comments through it.
func commentEnd(s string, i int) int {
	switch {
	case i+1 >= len(s):
	case s[i] == '-' && s[i+1] == '-':
		for i < len(s) && s[i] != '\n' && s[i] != '\r' {
			i++
		}
	case s[i] == '/' && s[i+1] == '*':
		lx := lexer{s: s, i: i}
		lx.skipBlockComment()
		i = lx.i
	}
	return i
}

// skipBlanks returns the index of the first character at or after i that
// is neither whitespace (PostgreSQL's: space, tab, newline, carriage
// return, form feed) nor in a comment.
func skipBlanks(s string, i int) int {
	for i < len(s) {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		default:
			j := commentEnd(s, i)
			if j == i {
				return i
			}
			i = j
		}
	}
	return i
}

// callFollows reports whether the next character after blanks and
// comments is "(" (adversary: "set_config" /**/ ( and a form feed hid
// calls).
func (lx *lexer) callFollows() bool {
	j := skipBlanks(lx.s, lx.i)
	return j < len(lx.s) && lx.s[j] == '('
}

// customSetConfig reports whether s at i, after the word set_config, is a
// call whose first argument is a plain string literal naming a custom
// setting (customName): ( 'app.tenant' ,
func customSetConfig(s string, i int) bool {
	i = skipBlanks(s, i)
	if i >= len(s) || s[i] != '(' {
		return false
	}
	i = skipBlanks(s, i+1)
	if i >= len(s) || s[i] != '\'' {
		return false
	}
	j := strings.IndexByte(s[i+1:], '\'')
	if j < 0 || !customName(s[i+1:i+1+j]) {
		return false
	}
	k := skipBlanks(s, i+2+j)
	return k < len(s) && s[k] == ','
}

// noteCall looks at a name written before "(": a session function (quoted
// or not), or a word that is neither a built-in function nor a keyword (a
// user-defined function, or a table or alias with a column list, which
// costs only a check).
func (lx *lexer) noteCall(w string) {
	if len(w) == 0 || len(w) > 63 {
		lx.sawUserCall = true
		return
	}
	var buf [63]byte
	name := upperInto(buf[:], w)
	if advisoryFunc(name) {
		lx.sawAdvisory = true
	}
	switch string(name) {
	case "PG_NOTIFY":
		lx.sawNotify = true
	case "PG_TERMINATE_BACKEND":
		lx.sawTerminate, lx.sawSignal = true, true
	case "PG_CANCEL_BACKEND":
		lx.sawSignal = true
	}
	if why, ok := sessionFuncs[string(name)]; ok && lx.sawSessionFunc == "" {
		if why == "set_config()" && customSetConfig(lx.s, lx.i) {
			lx.sawUserCall, lx.sawCustomSet = true, true // (as in the word's own check)
		} else {
			lx.sawSessionFunc = why
		}
	}
	if f, ok := builtins[string(name)]; ok {
		if f&runsSQLText != 0 {
			lx.sawSQLText = true
			lx.sawUserCall = true // the text may call anything
		}
		if f&readsAllTables != 0 {
			lx.sawAllTables = true
		}
		return
	}
	// A table's or alias's column list: INSERT INTO t (...), AS x (...),
	// CREATE TABLE t (...), REFERENCES t (...), ON t (...).
	for _, k := range [...]string{"INTO", "TABLE", "AS", "REFERENCES", "ON", "EXISTS", "VIEW", "TYPE", "INDEX", "FUNCTION", "PROCEDURE"} {
		if strings.EqualFold(lx.chainPrev, k) { // (INTO s.t (...); not type.f(...): adversary)
			return
		}
	}
	lx.sawUserCall = true
}

// word notes a word (quoted or not) of the current statement: the word
// before its dotted name, and whether it makes a temporary object.
func (lx *lexer) word(w string) {
	if !lx.dot {
		lx.chainPrev = lx.prev
	}
	if len(w) > 8 && (w[0]|0x20 == 'p' || w[0] == '"') && lx.prev != "" && reservedStmtName(strings.TrimPrefix(w, `"`)) &&
		oneOf(lx.prev, "PREPARE", "EXECUTE", "DEALLOCATE") {
		lx.sawReserved = true
	}
	if (len(w) == 4 || len(w) == 9) && lx.prev != "" && (strings.EqualFold(w, "TEMP") || strings.EqualFold(w, "TEMPORARY")) &&
		oneOf(lx.prev, "CREATE", "INTO", "REPLACE", "LOCAL", "GLOBAL") && !(oneOf(lx.prev, "INTO") && oneOf(lx.w2, "INSERT", "MERGE")) {
		lx.sawTemp = true // (INSERT INTO temp VALUES ...: a table named temp)
	}
	if len(w) >= 7 && (w[0]|0x20 == 'p' || w[0] == '"') && !lx.dot && lx.prev != "" && isTempSchema(w) &&
		(oneOf(lx.prev, "INTO") && !oneOf(lx.w2, "INSERT", "MERGE") || oneOf(lx.prev, "TABLE") ||
			oneOf(lx.prev, "EXISTS") && oneOf(lx.words[0], "CREATE", "EXPLAIN")) {
		// pg_temp.t, "pg_temp".t where one is made: SELECT ... INTO
		// pg_temp.t, EXPLAIN ANALYZE CREATE TABLE pg_temp.t AS (past the
		// first words classifyStatement reads). (Not wherever one is
		// named: a SELECT of a temporary type that failed pinned.)
		if j := skipBlanks(lx.s, lx.i); j < len(lx.s) && lx.s[j] == '.' {
			lx.sawTemp = true
		}
	}
	if len(w) == 4 && w[0]|0x20 == 'i' && strings.EqualFold(w, "INTO") && !oneOf(lx.w1, "INSERT", "MERGE") {
		lx.sawInto = true
	}
	lx.w2, lx.w1 = lx.w1, w
}

// storesCode reports whether a statement's first words store code
// without running it: CREATE [OR REPLACE] FUNCTION, PROCEDURE, VIEW (not
// MATERIALIZED), TRIGGER, RULE, or DROP, COMMENT, GRANT, REVOKE.
func storesCode(w []string) bool {
	if len(w) == 0 {
		return false
	}
	if oneOf(w[0], "DROP", "COMMENT", "GRANT", "REVOKE") {
		return true
	}
	if definesView(w) {
		return true
	}
	i := 1
	if i+1 < len(w) && oneOf(w[i], "OR") && oneOf(w[i+1], "REPLACE") {
		i += 2
	}
	if i < len(w) && oneOf(w[i], "CONSTRAINT") {
		i++ // CREATE CONSTRAINT TRIGGER
	}
	return oneOf(w[0], "CREATE") && i < len(w) && oneOf(w[i], "FUNCTION", "PROCEDURE", "TRIGGER", "RULE")
}

// reservedStmtName reports whether w (unquoted) is a name pgfleet keeps for
// the statements it prepares on worker connections: pgfleet_N,
// pgfleet_state, pgfleet_implicit... (any pgfleet_ name).
func reservedStmtName(w string) bool {
	return len(w) > 8 && strings.EqualFold(w[:8], "pgfleet_")
}

// namesReserved reports whether code (a DO body, SQL text) runs PREPARE,
// EXECUTE or DEALLOCATE [PREPARE] of a reserved name (reservedStmtName). A
// message or value that merely mentions one is not refused.
func namesReserved(code string) bool {
	prev := ""
	return !eachWord(code, func(w string) bool {
		if reservedStmtName(w) && oneOf(prev, "PREPARE", "EXECUTE", "DEALLOCATE") {
			return false // (DEALLOCATE PREPARE x: PREPARE before it too)
		}
		prev = w
		return true
	})
}

// upperInto writes w upper-cased (ASCII letters) into buf, which must be
// as long, and returns that part of it: a map lookup by it allocates
// nothing.
func upperInto(buf []byte, w string) []byte {
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(w)]
}

// noteAttr looks at a name after "." that no "(" follows: attribute
// notation, (x).f, calls f(x) when x has no column f (adversary:
// (42::bigint)."pg_advisory_lock" took a session lock unseen). Session
// functions and built-ins that run SQL text count as calls; other names
// are columns, or user functions, which stateViews names.
func (lx *lexer) noteAttr(w string) {
	if len(w) < 7 || len(w) > 63 {
		return
	}
	var buf [63]byte
	name := upperInto(buf[:], w)
	if why, ok := sessionFuncs[string(name)]; ok && lx.sawSessionFunc == "" {
		lx.sawSessionFunc = why
	}
	if advisoryFunc(name) {
		lx.sawAdvisory = true // ((11::bigint).pg_advisory_lock: adversary 145)
	}
	if builtins[string(name)]&runsSQLText != 0 {
		lx.sawSQLText, lx.sawUserCall = true, true
	}
}

// builtins is builtinNames as a set, with what classify must know of some.
var builtins = func() map[string]uint8 {
	m := map[string]uint8{}
	for _, n := range strings.Fields(builtinNames) {
		m[n] = 0
	}
	for _, n := range []string{"QUERY_TO_XML", "QUERY_TO_XMLSCHEMA", "QUERY_TO_XML_AND_XMLSCHEMA",
		"TABLE_TO_XML", "TABLE_TO_XMLSCHEMA", "TABLE_TO_XML_AND_XMLSCHEMA", "CURSOR_TO_XML", "CURSOR_TO_XMLSCHEMA",
		"SCHEMA_TO_XML", "SCHEMA_TO_XMLSCHEMA", "SCHEMA_TO_XML_AND_XMLSCHEMA",
		"DATABASE_TO_XML", "DATABASE_TO_XMLSCHEMA", "DATABASE_TO_XML_AND_XMLSCHEMA", "TS_STAT", "TS_REWRITE",
		// (These run an index's expressions, the index named by OID
		// or text: adversary.)
		"BRIN_SUMMARIZE_NEW_VALUES", "BRIN_SUMMARIZE_RANGE", "BRIN_DESUMMARIZE_RANGE", "GIN_CLEAN_PENDING_LIST"} {
		m[n] = runsSQLText
	}
	// These read every table of a schema or database, none named.
	for _, n := range []string{"SCHEMA_TO_XML", "SCHEMA_TO_XMLSCHEMA", "SCHEMA_TO_XML_AND_XMLSCHEMA",
		"DATABASE_TO_XML", "DATABASE_TO_XMLSCHEMA", "DATABASE_TO_XML_AND_XMLSCHEMA"} {
		m[n] |= readsAllTables
	}
	return m
}()

// runsSQLText marks built-in functions that run a query or read a table
// named in a string argument.
const (
	runsSQLText    = 1
	readsAllTables = 2
)
