package coordinator

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// Cursors over distributed and reference tables (simple protocol; what
// psql's FETCH_COUNT sends: DECLARE ... CURSOR FOR, FETCH FORWARD n,
// CLOSE). The coordinator runs the cursor's query at DECLARE, as any
// query of the session (in its transaction, on the workers it needs), and
// keeps the answer, bounded by --max-gather (54000 past it); FETCH, MOVE
// and CLOSE of the cursor are answered from it. PostgreSQL takes the
// cursor's snapshot at DECLARE too, so the rows are the ones PostgreSQL's
// cursor would give. The cursor lives until its transaction ends, or until
// a ROLLBACK TO a savepoint set before it was declared; a NO SCROLL cursor
// moves forward only (55000), others both ways. Refused with 0A000: BINARY
// and WITH HOLD cursors, FETCH and MOVE of such a cursor over the extended
// protocol or in a string of several statements. A query on no
// distributed or reference table declares its cursor on the worker, as
// before.

// coordCursor is one such cursor. Its position is PostgreSQL's portal's:
// pos rows fetched forward from the start (the current row, 1-based),
// atEnd once a forward fetch ran out of rows.
type coordCursor struct {
	rowDesc  []byte   // the RowDescription body
	rows     [][]byte // DataRow bodies, in order
	size     int      // bytes kept
	pos      int64
	atEnd    bool
	noScroll bool
	failed   bool     // a FETCH failed: PostgreSQL's portal cannot run again
	depth    int      // len(ss.savepoints) when it was declared
	settings string   // the session's settings at DECLARE (cursorSettings)
	tables   []string // the catalog tables its query reads
	// hold: WITH HOLD, it outlives its transaction once that commits
	// (pending until then).
	hold, pending bool
}

// endCursors drops the cursors a transaction's end ends: all but the WITH
// HOLD ones, and those of them declared in it unless it committed.
func (ss *session) endCursors(committed bool) {
	for name, c := range ss.cursors {
		switch {
		case !c.hold, c.pending && !committed:
			delete(ss.cursors, name)
		default:
			c.pending = false
		}
	}
}

// txnEnded ends what the coordinator keeps of a transaction that ended
// (COMMIT or ROLLBACK, AND CHAIN too, maybe earlier in the pipeline than
// the message at hand): its portals, and its cursors but the WITH HOLD
// ones of a transaction that committed.
func (ss *session) txnEnded(committed bool) {
	if len(ss.cursors) > 0 {
		ss.endCursors(committed)
	}
	if len(ss.scatterPortals) > 0 {
		clear(ss.scatterPortals)
	}
	if len(ss.bridged) > 0 {
		ss.endBlockPortals()
	}
}

// keepsPortals: the coordinator keeps portals or cursors of the session's
// (multi-shard ones, bridged ones), which a transaction's end ends.
func (ss *session) keepsPortals() bool {
	return len(ss.scatterPortals) > 0 || len(ss.cursors) > 0 || len(ss.bridged) > 0
}

// endsTxn: a statement is COMMIT, ROLLBACK (AND CHAIN too) or a savepoint
// statement: the first two end portals and cursors the coordinator keeps,
// ROLLBACK TO those bound after its savepoint, which a portal's depth
// (len(ss.savepoints) at its Bind) tells once the savepoints before it are
// answered.
func endsTxn(c *class) bool {
	return c.txn == "commit" || c.txn == "rollback" || len(c.sps) > 0
}

// settleTxEnd has the worker answer the pipeline up to a COMMIT, ROLLBACK
// or savepoint statement sent in it (txEndQueued) before a message that binds,
// describes or runs a portal: the ended transaction's portals and cursors
// are gone then, as on PostgreSQL, which runs the messages in order
// (adversary round 3: a multi-shard portal and a cursor gave rows after
// them). skipped: a message before failed, and this one is skipped with
// the rest of the pipeline.
func (ss *session) settleTxEnd() (skipped bool, err error) {
	ss.txEndQueued = false
	return ss.answerBefore()
}

const (
	cursorOptBinary   = 0x01
	cursorOptNoScroll = 0x04
	cursorOptHold     = 0x20
)

// cursorStatement answers DECLARE of a cursor over distributed or
// reference tables, and FETCH, MOVE and CLOSE of one; handled false leaves
// the statement to the rest of the session.
func (ss *session) cursorStatement(text string, cls *class) (handled bool, err error) {
	if !ss.routes || ss.multi != nil {
		return false, nil
	}
	if len(ss.cursors) == 0 {
		if cls.count == 1 && ss.pinned == "" && startsWithWord(text, "declare") {
			return ss.declareCursor(text)
		}
		return false, nil
	}
	if cls.count == 1 && ss.pinned == "" && startsWithWord(text, "declare") {
		return ss.declareCursor(text)
	}
	tree, err := pg_query.Parse(text)
	if err != nil {
		return false, nil // the worker says why
	}
	var ours, ends bool
	for _, raw := range tree.Stmts {
		n := raw.Stmt
		switch {
		case n.GetFetchStmt() != nil:
			ours = ours || ss.cursors[n.GetFetchStmt().Portalname] != nil
		case n.GetClosePortalStmt() != nil:
			name := n.GetClosePortalStmt().Portalname
			ours = ours || name == "" || ss.cursors[name] != nil
		case n.GetTransactionStmt() != nil:
			switch n.GetTransactionStmt().Kind {
			case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK, pg_query.TransactionStmtKind_TRANS_STMT_PREPARE:
				ends = true
				// (COMMIT ends them at its CommandComplete, txnEnded: one
				// that fails rolls back, and its WITH HOLD cursors go at
				// the session's return to idle, afterMessage; adversary:
				// they outlived a COMMIT that failed on a deferred
				// constraint, and a COMMIT in a string of several
				// statements dropped them.)
			}
		}
		if name := currentOf(n); name != "" && ss.cursors[name] != nil {
			return true, ss.cursorError(pgerr.New(pgerr.FeatureNotSupported,
				"WHERE CURRENT OF cursor %q, a cursor over distributed or reference tables, is not supported", name).
				WithHint("Update or delete the row by its key."))
		}
	}
	if len(tree.Stmts) > 1 && ours {
		// The worker would get a statement of a cursor it has not.
		return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"FETCH, MOVE or CLOSE of a cursor over distributed tables in a query string of several statements is not supported").
			WithHint("Send it as a statement of its own."))
	}
	if ends {
		// The transaction ends rolled back (AND CHAIN too): its cursors
		// with it, but for those WITH HOLD committed before.
		ss.endCursors(false)
		return false, nil
	}
	if !ours || len(tree.Stmts) != 1 {
		return false, nil
	}
	stmt := tree.Stmts[0].Stmt
	if cl := stmt.GetClosePortalStmt(); cl != nil {
		if cl.Portalname == "" {
			// CLOSE ALL: the workers' cursors too (in a failed
			// transaction the worker refuses it, and nothing closes).
			if ss.txStatus() != 'E' {
				clear(ss.cursors)
			}
			return false, nil
		}
		if ss.cursors[cl.Portalname] == nil {
			return false, nil
		}
		if ss.txStatus() == 'E' {
			return true, ss.cursorError(errFailedTxn)
		}
		delete(ss.cursors, cl.Portalname)
		ss.answerTag("CLOSE CURSOR")
		return true, nil
	}
	f := stmt.GetFetchStmt()
	if f == nil {
		return false, nil
	}
	cur := ss.cursors[f.Portalname]
	if cur == nil {
		return false, nil
	}
	switch {
	case ss.txStatus() == 'E':
		return true, ss.cursorError(errFailedTxn)
	case cur.failed:
		return true, ss.cursorError(pgerr.New("55000", "portal \"%s\" cannot be run", f.Portalname))
	case cur.settings != ss.cursorSettings():
		return true, ss.cursorError(pgerr.New(pgerr.FeatureNotSupported,
			"FETCH of cursor \"%s\" after the session's settings changed is not supported: pgfleet kept its rows as the settings were at DECLARE", f.Portalname).
			WithHint("Change settings before DECLARE, or declare the cursor again."))
	}
	var rows [][]byte
	out := &rows
	if f.Ismove {
		out = nil
	}
	n, err := cur.fetch(f.Direction, f.HowMany, out)
	if err != nil {
		cur.failed = true
		return true, ss.cursorError(err)
	}
	if f.Ismove {
		ss.answerTag(fmt.Sprintf("MOVE %d", n))
		return true, nil
	}
	ss.out = wire.AppendFrame(ss.out, 'T', cur.rowDesc)
	for _, r := range rows {
		ss.out = wire.AppendFrame(ss.out, 'D', r)
		if len(ss.out) > 1<<16 {
			if err := ss.flush(); err != nil {
				return true, err
			}
		}
	}
	ss.answerTag(fmt.Sprintf("FETCH %d", len(rows)))
	return true, nil
}

// answerTag ends a statement the coordinator answered itself.
func (ss *session) answerTag(tag string) {
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
}

// cursorError fails the transaction with err, as PostgreSQL's error in a
// transaction block does.
func (ss *session) cursorError(err error) error {
	ss.failBlock()
	return ss.queryError(err)
}

// failBlock marks the transaction block failed on the workers it holds
// (COMMIT then rolls back on every one). A block that holds none yet (its
// BEGIN still the coordinator's) fails through queryError's
// pendingFailed; marking it here would outlive it, and the session's next
// SET would be taken for one in a failed transaction.
func (ss *session) failBlock() {
	if ss.sc != nil && ss.inTxn() {
		ss.txFailed = true
	}
}

// declareCursor runs DECLARE name ... CURSOR ... FOR query when the query
// reads distributed or reference tables.
func (ss *session) declareCursor(text string) (bool, error) {
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetDeclareCursorStmt() == nil {
		return false, nil
	}
	d := tree.Stmts[0].Stmt.GetDeclareCursorStmt()
	query := cursorQuery(text)
	if query == "" {
		return false, nil
	}
	if ss.txStatus() == 'E' {
		return false, nil // the worker answers 25P02
	}
	if ss.cursors[d.Portalname] != nil {
		return true, ss.cursorFail(pgerr.New("42P03", "cursor \"%s\" already exists", d.Portalname))
	}
	p, _, err := ss.planSimple(query)
	if err == nil && p.Kind() == planner.KindDefault {
		return false, nil // the worker's cursor, as any statement
	}
	if err != nil {
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.Code == pgerr.FeatureNotSupported {
			// Refused as a query: the DECLARE gets the refusal.
			return true, ss.cursorFail(err)
		}
		// Others (a syntax error, a missing column): the query's own,
		// which running it gives as PostgreSQL would.
	}
	switch {
	case d.Options&cursorOptBinary != 0:
		return true, ss.cursorFail(pgerr.New(pgerr.FeatureNotSupported,
			"DECLARE BINARY CURSOR over distributed or reference tables is not supported").
			WithHint("Declare it without BINARY, or run the query itself."))
	case !ss.inTxn() && d.Options&cursorOptHold == 0:
		return true, ss.queryError(pgerr.New("25P01", "DECLARE CURSOR can only be used in transaction blocks"))
	}
	kept := 0
	for _, c := range ss.cursors {
		kept += c.size
	}
	m := &multiOut{start: len(ss.out), scanned: len(ss.out)}
	ss.multi = m
	c, stop, err := ss.captureRun(query, ss.srv.cfg.MaxGather-int64(kept))
	ss.multi = nil
	if stop {
		return true, err
	}
	if c.over {
		return true, ss.cursorFail(pgerr.New(codeProgramLimitExceeded,
			"the rows of cursor \"%s\" and the transaction's other cursors exceed %d bytes (--max-gather), which the coordinator keeps for cursors over distributed tables", d.Portalname, ss.srv.cfg.MaxGather).
			WithHint("Run the query itself (psql: \\unset FETCH_COUNT), or narrow it."))
	}
	hold := d.Options&cursorOptHold != 0
	cur := &coordCursor{noScroll: d.Options&cursorOptNoScroll != 0, depth: len(ss.savepoints), settings: ss.cursorSettings(),
		tables: p.Tables, size: len(c.frames), hold: hold, pending: hold && ss.inTxn()}
	failed := false
	for typ, body := range frames(c.frames) {
		switch typ {
		case 'T':
			cur.rowDesc = append([]byte(nil), body...)
		case 'D':
			cur.rows = append(cur.rows, body)
		case 'C':
		case 'E':
			failed = true
			ss.out = wire.AppendFrame(ss.out, 'E', withoutPosition('E', body))
		default: // notices, parameter changes
			ss.out = wire.AppendFrame(ss.out, typ, body)
		}
	}
	if failed {
		ss.failBlock()
		ss.out = readyForQuery(ss.out, ss.txStatus())
		return true, nil
	}
	if cur.rowDesc == nil {
		return true, ss.cursorFail(pgerr.New(pgerr.FeatureNotSupported, "the cursor's query returned no rows description").
			WithHint("Declare cursors for SELECT or VALUES."))
	}
	if ss.cursors == nil {
		ss.cursors = map[string]*coordCursor{}
	}
	ss.cursors[d.Portalname] = cur
	ss.answerTag("DECLARE CURSOR")
	return true, nil
}

// cursorFail answers a DECLARE refused before its query ran: inside the
// transaction block, which fails as on any error.
func (ss *session) cursorFail(err error) error {
	ss.failBlock()
	return ss.queryError(err)
}

// cursorQuery is the query of DECLARE ... FOR query, as written: the text
// after the statement's first FOR keyword.
func cursorQuery(text string) string {
	sr, err := pg_query.Scan(text)
	if err != nil {
		return ""
	}
	for _, t := range sr.Tokens {
		if t.Token == pg_query.Token_FOR {
			return strings.TrimRight(strings.TrimSpace(text[t.End:]), ";")
		}
	}
	return ""
}

// cursorNames are the cursors the FETCH, MOVE and CLOSE statements of a
// string name.
func cursorNames(text string) []string {
	tree, err := pg_query.Parse(text)
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range tree.Stmts {
		if f := s.Stmt.GetFetchStmt(); f != nil {
			out = append(out, f.Portalname)
		}
		if c := s.Stmt.GetClosePortalStmt(); c != nil {
			out = append(out, c.Portalname)
		}
	}
	return out
}

func (ss *session) anyCursor(names []string) bool {
	for _, n := range names {
		if ss.cursors[n] != nil || n == "" && len(ss.cursors) > 0 {
			return true
		}
	}
	return false
}

// extendedCursor refuses FETCH, MOVE and CLOSE of the coordinator's
// cursors over the extended protocol.
func (ss *session) extendedCursor(sql string) error {
	if len(ss.cursors) == 0 {
		return nil
	}
	lx := lexer{s: sql}
	if n, _, _, _ := lx.statement(); n == 0 || len(lx.words) == 0 {
		return nil
	}
	switch strings.ToUpper(lx.words[0]) {
	case "FETCH", "MOVE", "CLOSE":
		if ss.anyCursor(cursorNames(sql)) {
			return pgerr.New(pgerr.FeatureNotSupported,
				"FETCH, MOVE or CLOSE of a cursor over distributed tables with the extended query protocol is not supported").
				WithHint("Send it as a simple query.")
		}
	}
	return nil
}

// cursorsAtSavepoint follows a savepoint statement for the coordinator's
// cursors: ROLLBACK TO the savepoint at index i closes the cursors declared
// after it was set; RELEASE makes the cursors declared after the savepoint
// the enclosing one's. i < 0: a ROLLBACK TO that could not be followed,
// which closes them all.
func (ss *session) cursorsAtSavepoint(kind opKind, i int) {
	for name, p := range ss.scatterPortals {
		// Portals bound after the savepoint go with it, as cursors.
		switch {
		case i < 0, kind == opRollbackTo && p.depth > i:
			delete(ss.scatterPortals, name)
		case kind == opRelease && p.depth > i:
			p.depth = i
		}
	}
	for name, bp := range ss.bridged {
		switch {
		case !bp.inBlock:
		case i < 0, kind == opRollbackTo && bp.depth > i:
			delete(ss.bridged, name)
		case kind == opRelease && bp.depth > i:
			bp.depth = i
		}
	}
	for name, c := range ss.cursors {
		switch {
		case i < 0:
			delete(ss.cursors, name)
		case kind == opRollbackTo && c.depth > i:
			delete(ss.cursors, name)
		case kind == opRelease && c.depth > i:
			c.depth = i
		}
	}
}

// fetchAll is PostgreSQL's FETCH_ALL count.
const fetchAll = math.MaxInt64

// fetch moves the cursor as FETCH (out set) or MOVE direction count does
// in PostgreSQL (DoPortalRunFetch) and returns the count its tag says.
func (c *coordCursor) fetch(dir pg_query.FetchDirection, count int64, out *[][]byte) (int64, error) {
	switch dir {
	case pg_query.FetchDirection_FETCH_FORWARD:
		if count < 0 {
			dir, count = pg_query.FetchDirection_FETCH_BACKWARD, -count
		}
	case pg_query.FetchDirection_FETCH_BACKWARD:
		if count < 0 {
			dir, count = pg_query.FetchDirection_FETCH_FORWARD, -count
		}
	case pg_query.FetchDirection_FETCH_ABSOLUTE:
		switch {
		case count > 0:
			if count-1 <= c.pos/2 {
				if err := c.rewind(); err != nil {
					return 0, err
				}
				if count > 1 {
					c.run(count-1, nil)
				}
			} else {
				pos := c.pos
				if c.atEnd {
					pos++ // one more fetch when off the end
				}
				if count <= pos {
					if _, err := c.runBack(pos-count+1, nil); err != nil {
						return 0, err
					}
				} else if count > pos+1 {
					c.run(count-pos-1, nil)
				}
			}
			return c.run(1, out), nil
		case count < 0:
			c.run(fetchAll, nil)
			if count < -1 {
				if _, err := c.runBack(-count-1, nil); err != nil {
					return 0, err
				}
			}
			return c.runBack(1, out)
		default:
			if err := c.rewind(); err != nil {
				return 0, err
			}
			return 0, nil
		}
	case pg_query.FetchDirection_FETCH_RELATIVE:
		switch {
		case count > 0:
			if count > 1 {
				c.run(count-1, nil)
			}
			return c.run(1, out), nil
		case count < 0:
			if count < -1 {
				if _, err := c.runBack(-count-1, nil); err != nil {
					return 0, err
				}
			}
			return c.runBack(1, out)
		}
		dir = pg_query.FetchDirection_FETCH_FORWARD
	}
	forward := dir == pg_query.FetchDirection_FETCH_FORWARD
	if count == 0 {
		onRow := c.pos > 0 && !c.atEnd
		if out == nil { // MOVE 0: whether FETCH 0 would give a row
			if onRow {
				return 1, nil
			}
			return 0, nil
		}
		if !onRow {
			if forward {
				return 0, nil
			}
			return c.runBack(0, out) // NO SCROLL refuses even that
		}
		// Back up one row to give it again.
		if _, err := c.runBack(1, nil); err != nil {
			return 0, err
		}
		count, forward = 1, true
	}
	if !forward && count == fetchAll && out == nil {
		// MOVE BACKWARD ALL: a rewind.
		n := c.pos
		if n > 0 && !c.atEnd {
			n--
		}
		return n, c.rewind()
	}
	if forward {
		return c.run(count, out), nil
	}
	return c.runBack(count, out)
}

// run reads up to count rows forward (PortalRunSelect forward).
func (c *coordCursor) run(count int64, out *[][]byte) int64 {
	if c.atEnd || count <= 0 {
		return 0
	}
	n := int64(len(c.rows)) - c.pos
	if count < n {
		n = count
	}
	if out != nil {
		*out = append(*out, c.rows[c.pos:c.pos+n]...)
	}
	if count == fetchAll || n < count {
		c.atEnd = true
	}
	c.pos += n
	return n
}

// runBack reads up to count rows backward (PortalRunSelect backward): a
// NO SCROLL cursor refuses.
func (c *coordCursor) runBack(count int64, out *[][]byte) (int64, error) {
	if c.noScroll {
		return 0, errNoScroll
	}
	if c.pos == 0 || count <= 0 {
		return 0, nil
	}
	cur := c.pos // the row backward reads start before
	if c.atEnd {
		cur++
	}
	n := cur - 1
	if count < n {
		n = count
	}
	if out != nil {
		for k := cur - 1; k >= cur-n; k-- {
			*out = append(*out, c.rows[k-1])
		}
	}
	if n > 0 && c.atEnd {
		c.atEnd = false
		c.pos++
	}
	if count == fetchAll || n < count {
		c.pos = 0
	} else {
		c.pos -= n
	}
	return n, nil
}

// rewind goes back to the start (DoPortalRewind).
func (c *coordCursor) rewind() error {
	if c.pos == 0 && !c.atEnd {
		return nil
	}
	if c.noScroll {
		return errNoScroll
	}
	c.pos, c.atEnd = 0, false
	return nil
}

var errNoScroll = pgerr.New("55000", "cursor can only scan forward").
	WithHint("Declare it with SCROLL option to enable backward scan.")

// startsWithWord reports whether text starts with word (lower case),
// white space before it aside.
func startsWithWord(text, word string) bool {
	t := strings.TrimLeft(text, " \t\r\n")
	return len(t) > len(word) && strings.EqualFold(t[:len(word)], word) &&
		strings.IndexByte(" \t\r\n", t[len(word)]) >= 0
}

// currentOf is the cursor an UPDATE or DELETE ... WHERE CURRENT OF names.
func currentOf(n *pg_query.Node) string {
	var w *pg_query.Node
	if u := n.GetUpdateStmt(); u != nil {
		w = u.WhereClause
	} else if d := n.GetDeleteStmt(); d != nil {
		w = d.WhereClause
	}
	if c := w.GetCurrentOfExpr(); c != nil {
		return c.CursorName
	}
	return ""
}

// cursorsUse refuses DDL of tables an open cursor of the session reads, as
// PostgreSQL does (55006): the cursor's rows are its table's.
func (ss *session) cursorsUse(tables, words []string) error {
	var open [][]string // the tables of the cursors and of the portals fetched in parts
	for _, c := range ss.cursors {
		if c.hold && !c.pending {
			continue // materialized at its commit, as PostgreSQL's: it holds no table
		}
		open = append(open, c.tables)
	}
	for _, p := range ss.scatterPortals {
		if p.partial && p.rest != nil {
			open = append(open, p.sp.plan.Tables)
		}
	}
	for _, ts := range open {
		for _, t := range tables {
			if !slices.Contains(ts, t) {
				continue
			}
			verb := strings.ToUpper(words[0])
			switch verb {
			case "ALTER":
				verb = "ALTER TABLE"
			case "CREATE":
				verb = "CREATE INDEX"
			case "DROP":
				verb = "DROP INDEX"
			}
			_, rel, _ := strings.Cut(t, ".")
			return pgerr.New("55006", "cannot %s \"%s\" because it is being used by active queries in this session", verb, rel)
		}
	}
	return nil
}

// cursorSettings names the session's settings as they are now: its
// settings and the SETs of its transaction so far (a ROLLBACK TO undoes
// those), which shape the text of the rows a cursor gives.
func (ss *session) cursorSettings() string {
	return fmt.Sprintf("%s|%d|%t", ss.params.key, len(ss.pending), ss.settingsUnknown)
}
