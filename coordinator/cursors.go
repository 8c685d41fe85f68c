package coordinator

import (
	"errors"
	"fmt"
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

// coordCursor is one such cursor.
type coordCursor struct {
	rowDesc  []byte   // the RowDescription body
	rows     [][]byte // DataRow bodies, in order
	pos      int      // 0: before the first row; len(rows)+1: after the last
	noScroll bool
	depth    int // len(ss.savepoints) when it was declared
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
	if !ss.routes || ss.pinned != "" || ss.multi != nil {
		return false, nil
	}
	lx := lexer{s: text}
	if n, _, _, _ := lx.statement(); n == 0 || len(lx.words) == 0 {
		return false, nil
	}
	word := strings.ToUpper(lx.words[0])
	switch {
	case word == "DECLARE" && cls.count == 1:
		return ss.declareCursor(text)
	case word == "FETCH" || word == "MOVE" || word == "CLOSE":
	case len(ss.cursors) > 0 && cls.count > 1:
		// A FETCH of a cursor here later in the string would reach a
		// worker, which has no such cursor.
		if names := cursorNames(text); ss.anyCursor(names) {
			return true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
				"FETCH, MOVE or CLOSE of a cursor over distributed tables in a query string of several statements is not supported").
				WithHint("Send it as a statement of its own."))
		}
		return false, nil
	default:
		return false, nil
	}
	if len(ss.cursors) == 0 || cls.count > 1 {
		return false, nil
	}
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) != 1 {
		return false, nil
	}
	stmt := tree.Stmts[0].Stmt
	if cl := stmt.GetClosePortalStmt(); cl != nil {
		if cl.Portalname == "" {
			// CLOSE ALL: the workers' cursors too.
			clear(ss.cursors)
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
	if ss.txStatus() == 'E' {
		return true, ss.cursorError(errFailedTxn)
	}
	rows, err := cur.fetch(f.Direction, f.HowMany)
	if err != nil {
		return true, ss.cursorError(err)
	}
	if f.Ismove {
		ss.answerTag(fmt.Sprintf("MOVE %d", len(rows)))
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
	ss.out = append(ss.out, 'Z', 0, 0, 0, 5, ss.txStatus())
}

// cursorError fails the transaction with err, as PostgreSQL's error in a
// transaction block does.
func (ss *session) cursorError(err error) error {
	ss.txFailed = true
	return ss.queryError(err)
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
	p, _, err := ss.planSimple(query)
	if err == nil && p.Kind == planner.Default {
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
	case !ss.inTxn():
		return true, ss.queryError(pgerr.New("25P01", "DECLARE CURSOR can only be used in transaction blocks"))
	case d.Options&cursorOptBinary != 0:
		return true, ss.cursorFail(pgerr.New(pgerr.FeatureNotSupported,
			"DECLARE BINARY CURSOR over distributed or reference tables is not supported").
			WithHint("Declare it without BINARY, or run the query itself."))
	case d.Options&cursorOptHold != 0:
		return true, ss.cursorFail(pgerr.New(pgerr.FeatureNotSupported,
			"DECLARE CURSOR WITH HOLD over distributed or reference tables is not supported").
			WithHint("Declare it WITHOUT HOLD inside the transaction block, or run the query itself."))
	case ss.cursors[d.Portalname] != nil:
		return true, ss.cursorFail(pgerr.New("42P03", "cursor %q already exists", d.Portalname))
	}
	m := &multiOut{start: len(ss.out), scanned: len(ss.out)}
	ss.multi = m
	c := &capture{start: len(ss.out), limit: ss.srv.cfg.MaxGather}
	ss.capture = c
	stop, err := ss.partRun(query, false)
	ss.capture, ss.multi = nil, nil
	if stop {
		return true, err
	}
	c.take(ss.out[c.start:])
	ss.out = ss.out[:c.start]
	if c.over {
		return true, ss.cursorFail(pgerr.New(codeProgramLimitExceeded,
			"the rows of cursor %q exceed %d bytes (--max-gather), which the coordinator keeps for a cursor over distributed tables", d.Portalname, c.limit).
			WithHint("Run the query itself (psql: \\unset FETCH_COUNT), or narrow it."))
	}
	cur := &coordCursor{noScroll: d.Options&cursorOptNoScroll != 0, depth: len(ss.savepoints)}
	failed := false
	for b := c.frames; ; {
		typ, body, n, ok := wire.SplitFrame(b)
		if !ok {
			break
		}
		b = b[n:]
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
		ss.txFailed = true
		ss.out = append(ss.out, 'Z', 0, 0, 0, 5, ss.txStatus())
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
	if ss.inTxn() {
		ss.txFailed = true
	}
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

// fetch moves the cursor as FETCH (or MOVE) direction count does in
// PostgreSQL and returns the rows it passes over.
func (c *coordCursor) fetch(dir pg_query.FetchDirection, count int64) ([][]byte, error) {
	n := int64(len(c.rows))
	pos := int64(c.pos)
	switch dir {
	case pg_query.FetchDirection_FETCH_FORWARD:
		if count < 0 {
			dir, count = pg_query.FetchDirection_FETCH_BACKWARD, -count
		}
	case pg_query.FetchDirection_FETCH_BACKWARD:
		if count < 0 {
			dir, count = pg_query.FetchDirection_FETCH_FORWARD, -count
		}
	}
	backward := func() error {
		if c.noScroll {
			return pgerr.New("55000", "cursor can only scan forward").
				WithHint("Declare it with SCROLL option to enable backward scan.")
		}
		return nil
	}
	one := func(target int64) ([][]byte, error) {
		if target < pos {
			if err := backward(); err != nil {
				return nil, err
			}
		}
		switch {
		case target <= 0:
			c.pos = 0
			return nil, nil
		case target > n:
			c.pos = int(n + 1)
			return nil, nil
		}
		c.pos = int(target)
		return [][]byte{c.rows[target-1]}, nil
	}
	switch dir {
	case pg_query.FetchDirection_FETCH_ABSOLUTE:
		if count < 0 {
			return one(n + 1 + count)
		}
		return one(count)
	case pg_query.FetchDirection_FETCH_RELATIVE:
		if count == 0 {
			if pos < 1 || pos > n {
				return nil, nil
			}
			if err := backward(); err != nil { // PostgreSQL steps back to read it again
				return nil, err
			}
			return [][]byte{c.rows[pos-1]}, nil
		}
		return one(pos + count)
	case pg_query.FetchDirection_FETCH_FORWARD:
		if count == 0 { // FORWARD 0: the current row again
			return c.fetch(pg_query.FetchDirection_FETCH_RELATIVE, 0)
		}
		// Rows pos+1 up to pos+count; past the last, the cursor is after it.
		last := n
		if count <= n-pos {
			last = pos + count
			c.pos = int(last)
		} else {
			c.pos = int(n + 1)
		}
		if pos >= last {
			return nil, nil
		}
		return c.rows[pos:last], nil
	case pg_query.FetchDirection_FETCH_BACKWARD:
		if err := backward(); err != nil {
			return nil, err
		}
		if count == 0 {
			return c.fetch(pg_query.FetchDirection_FETCH_RELATIVE, 0)
		}
		// Rows pos-1 down to pos-count; before the first, the cursor is
		// before it.
		first := int64(1)
		if count < pos {
			first = pos - count
			c.pos = int(first)
		} else {
			c.pos = 0
		}
		var rows [][]byte
		for k := pos - 1; k >= first; k-- {
			rows = append(rows, c.rows[k-1])
		}
		return rows, nil
	}
	return nil, pgerr.New(pgerr.FeatureNotSupported, "this FETCH direction is not supported").
		WithHint("Use FETCH FORWARD, BACKWARD, ABSOLUTE or RELATIVE.")
}
