package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// A multi-shard SELECT (planner.Scatter) runs as one statement per worker
// covering all its shards, sent to every worker at once on connections
// the caller leased from the pools; the workers are then read one after
// the other, their rows streamed to the sink (concatenation) or gathered
// as partial rows in binary that the first shard's connection combines
// with the plan's merge statement, which takes each partial column as an
// array parameter.

// Sink is where a run's answer goes (the client session). Send queues one
// message for the client and reports false once the client is gone.
type Sink interface {
	Send(typ byte, body []byte) bool
}

// Text is a simple-protocol statement's constants, which the executor puts
// back into the statements it sends (the plan has $n in their place).
type Text interface {
	// Splice puts the constants in place of $1, $2, ...
	Splice(sql string) string
	// SpliceParams puts constants params[0], params[1], ... (numbered from
	// 1) in place of $first, $first+1, ...
	SpliceParams(sql string, params []int, first int) (string, error)
}

// Stmt is a statement prepared on workers under a name: its name and its
// Parse message.
type Stmt struct {
	Name  string
	Parse []byte
}

// Bound is a multi-shard statement of the extended protocol as bound by
// the client.
type Bound struct {
	// Formats and Values are the Bind's parameters (a nil value: NULL).
	Formats []int16
	Values  [][]byte
	// Results are the Bind's result format codes.
	Results []int16
	// RowDesc is what the client was told the rows are (nil: NoData), NCols
	// its column count, ParamOIDs the statement's parameter types.
	RowDesc   []byte
	NCols     int
	ParamOIDs []uint32
	// Stmts are the workers' statements, by the plan's Workers.
	Stmts []Stmt
}

// TextParams is how a simple-protocol statement's workers run their
// statements prepared: Stmts by the plan's Workers, and the constants as
// text parameters (no NULL among them).
type TextParams struct {
	Stmts  []Stmt
	Values [][]byte
	// RowDesc is the result's description as an earlier run of the text
	// got it (with constants of the same types, under the same settings),
	// nil: the text is described in this run.
	RowDesc []byte
}

// described reports whether the run has the result's description already.
func (r *Scatter) described() bool { return r.Params != nil && r.Params.RowDesc != nil }

// RowDesc is the result's description the run told the client.
func (r *Scatter) RowDesc() []byte { return r.rowDesc }

// DecodeBind reads the parameter and result parts of a Bind (after the
// portal and statement names).
func DecodeBind(params, results []byte) (*Bound, error) {
	body := make([]byte, 0, 2+len(params)+len(results))
	body = append(append(append(body, 0, 0), params...), results...)
	var m pgproto3.Bind
	if err := m.Decode(body); err != nil {
		return nil, pgerr.New(pgerr.ProtocolViolation, "invalid Bind message")
	}
	return &Bound{Formats: m.ParameterFormatCodes, Values: m.Parameters, Results: m.ResultFormatCodes}, nil
}

// Format is the format of parameter k (from 0).
func (b *Bound) Format(k int) int16 {
	switch {
	case len(b.Formats) == 1:
		return b.Formats[0]
	case k < len(b.Formats):
		return b.Formats[k]
	}
	return 0
}

// codeProgramLimitExceeded is SQLSTATE 54000.
const codeProgramLimitExceeded = "54000"

// Type is a built-in type: its name and its array type.
type Type struct {
	Name  string
	Array uint32
}

// Env is what runs share: the server's limits and registries.
type Env struct {
	// MaxGather bounds the bytes of partial rows a merge gathers.
	MaxGather int64
	// Types are the built-in types, loaded once through a worker connection.
	Types func(sc *pooling.ServerConn) (map[uint32]Type, error)
	// Prepared is the statement of a Parse body's query and parameter
	// types under a name shared by every session (merge statements).
	Prepared func(rest []byte) Stmt
}

// Runtime is what a multi-shard plan learns on its first runs: the outcome
// of its catalog checks, its merge statements by column types, and the
// width of a select list with a *. Its fields are under Mu.
type Runtime struct {
	Mu       sync.Mutex
	Checked  bool
	CheckErr error
	// Collations: a gathered table's columns whose collation is not the
	// database default, and theirs (qualified, quoted).
	Collations []map[string]string // per gathered table
	// Keys: a gathered table's primary key columns, as positions (from
	// 1) among its columns; nil when it has none.
	Keys [][]int
	// Encoded: a gathered table has columns whose binary form is in the
	// client_encoding (text and the like).
	Encoded bool
	// BadTypes: a gathered table's columns that it cannot gather, refused
	// at the merge (after the workers' verdicts on the statement: 42803
	// comes before this 0A000).
	BadTypes error
	// NCols: partial columns, once known (the select list has a *).
	NCols int
	// TextCols: the gathered rows' columns (by position) that go through
	// the merge as text, and RowCols the number of columns of those rows,
	// both as the catalog said at the check.
	TextCols map[int]TextCol
	RowCols  int
	merges   map[string]mergeStmt
	// Unbindable: the plan's prepared form for the simple protocol
	// (TextParams) failed at its Parse, so its text runs. BindStmts are
	// its workers' statements by their parameter types.
	Unbindable bool
	BindStmts  map[string][]Stmt
	// BindDescs: the results' descriptions of its bound runs, by their
	// constants' types and the session's settings (TextParams.RowDesc).
	BindDescs map[BindKey][]byte
}

// BindKey is a bound run's constants' types (a byte each) and the
// session's settings key: a map key read without building a string.
type BindKey struct {
	Types    [64]byte
	Settings string
}

// TextCol is a gathered column that goes through the merge as text: its
// type's oid, and its name (format_type) to cast it back.
type TextCol struct {
	OID  uint32
	Name string
}

type mergeStmt struct {
	sql string
	err error
}

// NoteTextCols records the text columns a gathered table's check listed
// (lines of position, type oid and type name), its columns starting at
// offset in the gathered rows.
func (rt *Runtime) NoteTextCols(offset int, list *string) error {
	if list == nil {
		return nil
	}
	for _, line := range strings.Split(*list, "\n") {
		pos, rest, ok1 := strings.Cut(line, " ")
		oid, name, ok2 := strings.Cut(rest, " ")
		p, err1 := strconv.Atoi(pos)
		o, err2 := strconv.ParseUint(oid, 10, 32)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || name == "" {
			return pgerr.New(pgerr.FeatureNotSupported, "a gathered column's type %q cannot be named back", line).
				WithHint("Pin the query to one shard with WHERE <distribution column> = <value>.")
		}
		rt.TextCols[offset+p] = TextCol{OID: uint32(o), Name: name}
	}
	return nil
}

// MergeLimit is the refusal of what a merge of partial results cannot do
// (sort or group by values it cannot ship, a collation, an aggregate it
// cannot combine) where gathering the tables can: a plan with a fallback
// (planner.Plan.Fallback) runs that instead.
type MergeLimit struct{ Err *pgerr.Error }

func (m *MergeLimit) Error() string { return m.Err.Error() }
func (m *MergeLimit) Unwrap() error { return m.Err }

var (
	// ErrResultChanged: the shards' statement no longer returns what the
	// client was told (a table changed). As on PostgreSQL, the client must
	// prepare the statement again. It is PostgreSQL's own error, word for
	// word (no hint), not a refusal, with its routine, by which
	// postgres.js knows to prepare the statement again.
	ErrResultChanged = &pgerr.Error{Severity: "ERROR", Code: pgerr.FeatureNotSupported, Message: "cached plan must not change result type",
		Routine: "RevalidateCachedQuery"}
	// ErrTableChanged: a table changed while a simple-protocol statement ran.
	ErrTableChanged = pgerr.New("40001", "a table changed while the multi-shard statement ran").
			WithHint("Retry the statement.")
	// ErrCatalogMoved: the catalog changed under the plan.
	ErrCatalogMoved = pgerr.New("40001", "the table's distribution changed while the statement was planned").
			WithHint("Retry the statement.")
	// ErrClientGone: the client went away during the run.
	ErrClientGone = errors.New("closed")
)

// Scatter is one run of a multi-shard SELECT.
type Scatter struct {
	X *planner.Scatter
	// FirstSQL is the plan's statement for the first shard, which describes
	// the result to a simple-protocol client.
	FirstSQL string
	// Conns are the workers' connections, by X.Workers; First is the one
	// holding the first shard, which describes, checks and merges.
	Conns []*pooling.ServerConn
	First int
	// Pending: sent to and not yet read up to ReadyForQuery (the caller
	// closes those rather than pool them).
	Pending []bool
	// Text: simple protocol (the statement's constants). Bound: extended.
	Text  Text
	Bound *Bound
	// Params: a simple-protocol statement whose workers run their
	// statements prepared, its constants bound as parameters (planner.
	// Bindable); nil: spliced into the text.
	Params *TextParams
	// Unbound: the run failed at the Parse or Bind of Params' statements
	// (before any row): the caller runs the text instead, which has
	// PostgreSQL's own answer. UnboundParse: at the Parse.
	Unbound, UnboundParse bool
	// RT is the plan's run-time state; Env the server's.
	RT  *Runtime
	Env *Env
	// Limit and Offset of a concatenation (Limit < 0: none).
	Limit, Offset int64
	// TextCols and RowCols: a gathering's columns that go as text, and its
	// rows' width (RT's, read by the caller's checks).
	TextCols map[int]TextCol
	RowCols  int
	Sink     Sink
	// Cancel cancels the statements on every worker (gathered past
	// Env.MaxGather).
	Cancel func()

	// Stale: the run failed because the shards' statement has other
	// columns than the count learnt for its * (a table changed since):
	// the count is forgotten, and the statement may run again.
	Stale bool
	// Gone: the client went away.
	Gone bool

	parsed      []bool
	rowDesc     []byte // what the client is told the result looks like
	partialDesc []byte // the shards' partial rows
	err         error  // the first error; rows after it are dropped

	skipped, sent int64
	// gathering
	ncols   int      // partial columns (known before sending with row ids)
	shipped []int    // per partial column: its array among cols, or -1
	cols    [][]byte // per shipped column: array elements (length, bytes)
	nulls   []bool
	kept    []byte // with row ids: the rows as the shards sent them
	offs    []int  // where each kept row starts
	rows    int
	size    int
}

func (r *Scatter) merging() bool { return r.X.Merge.Kind == planner.SQLMerge }

// Run sends the statement to every worker and answers the client: in the
// simple protocol a RowDescription, then rows and CommandComplete; in the
// extended one rows and CommandComplete. An error it returns has not been
// sent yet.
func (r *Scatter) Run() error {
	r.parsed = make([]bool, len(r.Conns))
	if r.described() {
		r.rowDesc = r.Params.RowDesc
		if !r.merging() {
			r.Sink.Send('T', r.rowDesc)
		}
	}
	if r.merging() && r.X.Merge.RowIDs {
		if err := r.layout(); err != nil {
			return err
		}
	}
	for i, sc := range r.Conns {
		r.send(i, sc)
	}
	for i, sc := range r.Conns {
		if err := sc.Flush(); err != nil {
			sc.MarkBroken()
			return LostWorker(sc.Addr, err)
		}
		r.Pending[i] = true
	}
	r.read(r.First)
	for i := range r.Conns {
		if i != r.First {
			r.read(i)
		}
	}
	if r.Gone {
		return ErrClientGone
	}
	if r.err != nil {
		r.err = beyondLimit(r.X.Merge, r.err)
		if r.merging() && r.X.Merge.RowIDs && r.X.Merge.Columns == 0 && r.Bound == nil {
			// Perhaps because the table changed since its columns were
			// counted (a Bind with too few result formats).
			r.forgetColumns()
			r.Stale = FormatsMismatch(r.err)
		}
		return r.err
	}
	if r.merging() {
		err := r.merge()
		if err == ErrTableChanged && r.X.Merge.Columns == 0 {
			r.forgetColumns()
		}
		return err
	}
	r.complete(r.sent)
	return nil
}

// beyondLimit turns a data exception (SQLSTATE class 22: an overflow, a
// division by zero, a bad cast) from a shard of a statement whose shards
// stop at limit+offset rows each into a refusal: together they evaluated
// the select list and WHERE on more rows than PostgreSQL, which stops at
// limit+offset rows in all and may never reach the failing one. (An
// invalid LIMIT or OFFSET value, 2201W or 2201X, fails there too.)
func beyondLimit(m *planner.Merge, err error) error {
	var we *WorkerError
	if !m.ShardLimit || !errors.As(err, &we) || !strings.HasPrefix(we.PG.Code, "22") ||
		we.PG.Code == "2201W" || we.PG.Code == "2201X" {
		return err
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"a shard failed with %q (SQLSTATE %s) on a row PostgreSQL may not have reached: each shard evaluates this query up to its LIMIT on its own",
		we.PG.Message, we.PG.Code).
		WithHint("Pin the query to one shard with WHERE <distribution column> = <value>, or remove the LIMIT.")
}

// FormatsMismatch reports whether err is a worker's refusal of a Bind
// whose result formats do not fit its statement's columns.
func FormatsMismatch(err error) bool {
	var we *WorkerError
	return errors.As(err, &we) && we.PG.Code == pgerr.ProtocolViolation && strings.Contains(we.PG.Message, "result formats")
}

func (r *Scatter) forgetColumns() {
	r.RT.Mu.Lock()
	r.RT.NCols = 0
	r.RT.Mu.Unlock()
}

// changed is the error for shards' rows of another shape than expected (a
// table changed): for a prepared statement, PostgreSQL's; else a retry.
func (r *Scatter) changed() error {
	if r.Bound != nil {
		return ErrResultChanged
	}
	return ErrTableChanged
}

// text is sql with the statement's constants (simple protocol).
func (r *Scatter) text(sql string) string {
	if r.Text == nil {
		return sql
	}
	return r.Text.Splice(sql)
}

// send queues the statement for worker i.
func (r *Scatter) send(i int, sc *pooling.ServerConn) {
	w := r.X.Workers[i]
	var results []int16
	switch {
	case r.merging() && r.X.Merge.RowIDs:
		// The columns the merge sees in binary, the others as the client
		// wants them.
		results = make([]int16, r.ncols)
		for j := range results {
			results[j] = r.clientFormat(j)
			if r.shipped[j] >= 0 {
				results[j] = 1
			}
		}
	case r.merging() && len(r.TextCols) > 0:
		// Partial rows in binary but for the columns that go as text.
		results = make([]int16, r.RowCols)
		for j := range results {
			if _, ok := r.TextCols[j]; !ok {
				results[j] = 1
			}
		}
	case r.merging():
		results = []int16{1} // partial rows in binary
	case r.Bound != nil:
		results = r.Bound.Results
	}
	b := sc.Buf()
	if r.Bound == nil {
		if i == r.First && !r.described() {
			// The result as the client sees it: the statement on the first
			// shard, described.
			b, _ = (&pgproto3.Parse{Query: r.text(r.FirstSQL)}).Encode(b)
			b, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(b)
		}
		if p := r.Params; p != nil {
			st := p.Stmts[i]
			if !sc.Stmts.Has(st.Name, sc.StmtKey()) {
				b = addStmt(b, sc, st)
				r.parsed[i] = true
			}
			b, _ = (&pgproto3.Bind{PreparedStatement: st.Name, Parameters: p.Values, ResultFormatCodes: results}).Encode(b)
		} else {
			b, _ = (&pgproto3.Parse{Query: r.text(w.TextSQL())}).Encode(b)
			b, _ = (&pgproto3.Bind{ResultFormatCodes: results}).Encode(b)
		}
	} else {
		st := r.Bound.Stmts[i]
		if !sc.Stmts.Has(st.Name, sc.StmtKey()) {
			b = addStmt(b, sc, st)
			r.parsed[i] = true
		}
		bind := pgproto3.Bind{PreparedStatement: st.Name, ParameterFormatCodes: r.Bound.Formats,
			Parameters: r.Bound.Values, ResultFormatCodes: results}
		b, _ = bind.Encode(b)
	}
	if r.merging() || r.Bound != nil || r.Params != nil {
		// Extended protocol: the rows' description is checked against the
		// one the client was given.
		b, _ = (&pgproto3.Describe{ObjectType: 'P'}).Encode(b)
	}
	b, _ = (&pgproto3.Execute{}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
}

// addStmt appends the Parse of a statement the connection has not
// prepared (closing the one its cache evicts, or a stale one of the name).
func addStmt(b []byte, sc *pooling.ServerConn, st Stmt) []byte {
	ev, stale := sc.Stmts.Add(st.Name, sc.StmtKey())
	if ev != "" {
		b, _ = (&pgproto3.Close{ObjectType: 'S', Name: ev}).Encode(b)
	}
	if stale {
		b, _ = (&pgproto3.Close{ObjectType: 'S', Name: st.Name}).Encode(b)
	}
	return append(b, st.Parse...)
}

// read reads worker i's answer up to ReadyForQuery, streaming or gathering
// its rows; the first error is kept in r.err.
func (r *Scatter) read(i int) {
	sc := r.Conns[i]
	describing := r.Bound == nil && i == r.First && !r.described()
	// parses: ParseCompletes due before the prepared statement's own (the
	// description's); bound: its BindComplete came.
	parses, parsing, bound := 0, r.parsed[i], false
	if describing {
		parses = 1
	}
	err := Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 'T', 'n':
			if describing {
				describing = false
				if typ == 'T' {
					r.rowDesc = append([]byte(nil), body...)
					if !r.merging() && r.err == nil {
						r.Sink.Send('T', body)
					}
				}
				return
			}
			if typ == 'T' && r.partialDesc == nil {
				r.partialDesc = append([]byte(nil), body...)
			} else if typ == 'T' && r.merging() && !sameTypes(body, r.partialDesc) && r.err == nil {
				// Two workers' partial rows of other types: DDL committed
				// between their statements' starts (PostgreSQL orders a
				// reader wholly before or after it).
				r.err = ErrTableChanged
				if r.Bound != nil {
					r.err = ErrResultChanged // the client's statement was prepared before
				}
			}
			if typ == 'T' && r.Bound != nil && !r.merging() && !sameTypes(body, r.Bound.RowDesc) && r.err == nil {
				r.err = ErrResultChanged
			}
			if typ == 'T' && r.Params != nil && !r.merging() && !sameTypes(body, r.rowDesc) && r.err == nil {
				// The description kept from an earlier run is stale:
				// the caller runs the text, described anew.
				r.err, r.Unbound = ErrTableChanged, true
			}
		case 'D':
			if r.err != nil || r.Gone {
				return
			}
			if r.merging() {
				r.gather(body)
			} else {
				r.emit(body)
			}
		case 'E':
			switch {
			case parsing:
				sc.Stmts.Drop(r.stmtName(i)) // the Parse failed, or was skipped
			case r.Params != nil && !bound:
				// Refused at Bind (a value, or a result type changed
				// since): prepared afresh next time.
				sc.Stmts.Doubt(r.stmtName(i))
			}
			if r.err == nil {
				we := NewWorkerError(body)
				we.Addr = sc.Addr
				r.err = we
				if r.Params != nil && !bound && constantError(we.PG.Code) {
					r.Unbound, r.UnboundParse = true, parsing && parses == 0
				}
			}
			if FatalSeverity(body) {
				sc.MarkBroken()
			}
		case '1':
			if parses > 0 {
				parses--
			} else {
				parsing = false
			}
		case '2':
			bound = true
		case 'N':
			if r.err == nil {
				r.Sink.Send('N', body)
			}
		}
	})
	if err != nil {
		if r.err == nil {
			r.err = err
		}
		return
	}
	r.Pending[i] = false
}

// constantError reports whether an error at the Parse or Bind of a
// statement bound to a simple-protocol statement's constants (TextParams)
// may come of binding them: a data exception (class 22), an error of the
// statement's analysis (class 42), or a result type changed since the
// statement was prepared (0A000). Others (a cancel, a lock or statement
// timeout, a deadlock, a lost connection) are the statement's answer, as
// they would be the text's.
func constantError(code string) bool {
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "42") || code == pgerr.FeatureNotSupported
}

// stmtName is the name worker i's statement is prepared under.
func (r *Scatter) stmtName(i int) string {
	if r.Params != nil {
		return r.Params.Stmts[i].Name
	}
	return r.Bound.Stmts[i].Name
}

// emit sends a row of a concatenation, counting off OFFSET and LIMIT.
func (r *Scatter) emit(row []byte) {
	desc := r.rowDesc
	if r.Bound != nil {
		desc = r.Bound.RowDesc
	}
	if len(desc) >= 2 && len(row) >= 2 && binary.BigEndian.Uint16(desc) != binary.BigEndian.Uint16(row) {
		// A worker's rows are wider or narrower than the description:
		// a column was added or dropped between the workers' statements'
		// starts (PostgreSQL orders a reader wholly before or after it).
		r.err = ErrTableChanged
		if r.Bound != nil {
			r.err = ErrResultChanged
		}
		return
	}
	if r.skipped < r.Offset {
		r.skipped++
		return
	}
	if r.Limit >= 0 && r.sent >= r.Limit {
		return
	}
	r.sent++
	r.write('D', row)
}

// write sends a message for the client unless it went away.
func (r *Scatter) write(typ byte, body []byte) {
	if !r.Gone && !r.Sink.Send(typ, body) {
		r.Gone = true
	}
}

// layout finds, for a merge with row ids, how many columns the shards
// return and which of them the merge sees.
func (r *Scatter) layout() error {
	m := r.X.Merge
	switch {
	case m.Columns > 0:
		r.ncols = m.Columns
	case r.Bound != nil:
		r.ncols = r.Bound.NCols + m.Hidden
	default:
		rt := r.RT
		rt.Mu.Lock()
		r.ncols = rt.NCols
		rt.Mu.Unlock()
		if r.ncols == 0 {
			// The select list has a *: describe the worker statement once.
			sc := r.Conns[r.First]
			b, _ := (&pgproto3.Parse{Query: r.text(r.X.Workers[r.First].TextSQL())}).Encode(sc.Buf())
			b, _ = (&pgproto3.Describe{ObjectType: 'S'}).Encode(b)
			b, _ = (&pgproto3.Sync{}).Encode(b)
			sc.SetBuf(b)
			r.Pending[r.First] = true
			if err := sc.Flush(); err != nil {
				return LostWorker(sc.Addr, err)
			}
			var werr error
			err := Cycle(sc, func(typ byte, body []byte) {
				switch typ {
				case 'T':
					r.ncols = int(binary.BigEndian.Uint16(body))
				case 'E':
					if werr == nil {
						we := NewWorkerError(body)
						we.Addr = sc.Addr
						werr = we
					}
				}
			})
			if err != nil {
				return err
			}
			r.Pending[r.First] = false
			if werr != nil {
				return werr
			}
			rt.Mu.Lock()
			rt.NCols = r.ncols
			rt.Mu.Unlock()
		}
	}
	if r.ncols <= m.Hidden {
		return ErrCatalogMoved
	}
	r.shipped = make([]int, r.ncols)
	for j := range r.shipped {
		r.shipped[j] = -1
	}
	for k, c := range m.Shipped(r.ncols) {
		r.shipped[c-1] = k
	}
	return nil
}

// clientFormat is the format the client asked for output column j.
func (r *Scatter) clientFormat(j int) int16 {
	if r.Bound == nil {
		return 0
	}
	switch res := r.Bound.Results; {
	case len(res) == 1:
		return res[0]
	case j < len(res):
		return res[j]
	}
	return 0
}

var errBadRow = pgerr.New(pgerr.Internal, "invalid DataRow from a worker")

// gather adds a partial row's values to the column arrays (and keeps the
// row, with row ids).
func (r *Scatter) gather(row []byte) {
	if len(row) < 2 {
		r.err = errBadRow
		return
	}
	n := int(binary.BigEndian.Uint16(row))
	if r.shipped == nil {
		r.ncols = n
		r.shipped = make([]int, n)
		for j := range r.shipped {
			r.shipped[j] = j
		}
	}
	if n != r.ncols {
		r.err = r.changed()
		return
	}
	if r.cols == nil {
		k := len(r.X.Merge.Shipped(n))
		r.cols, r.nulls = make([][]byte, k), make([]bool, k)
	}
	b := row[2:]
	for j := 0; j < n; j++ {
		if len(b) < 4 {
			r.err = errBadRow
			return
		}
		l := int32(binary.BigEndian.Uint32(b))
		end := 4
		if l > 0 {
			end += int(l)
		}
		if end > len(b) {
			r.err = errBadRow
			return
		}
		if k := r.shipped[j]; k >= 0 {
			if l < 0 {
				r.nulls[k] = true
			}
			r.cols[k] = append(r.cols[k], b[:end]...)
			r.size += end
		}
		b = b[end:]
	}
	if r.X.Merge.RowIDs {
		r.offs = append(r.offs, len(r.kept))
		r.kept = append(r.kept, row...)
		r.size += len(row)
	}
	r.rows++
	if limit := r.Env.MaxGather; int64(r.size) > limit {
		switch {
		case r.X.Merge.Gather && len(r.X.Merge.Local) > 0:
			r.err = pgerr.New(codeProgramLimitExceeded,
				"this query reads %s, which only the default node has, so it runs there over all rows of %s, which exceed %s, more than the coordinator gathers (--max-gather)",
				strings.Join(r.X.Merge.Local, ", "), strings.Join(r.X.Merge.Tables, ", "), SizeText(limit)).
				WithHint("Read %s in a statement of its own, or make it a reference table (create_reference_table).", strings.Join(r.X.Merge.Local, ", "))
		case r.X.Merge.Gather:
			r.err = pgerr.New(codeProgramLimitExceeded,
				"this multi-shard query runs over all rows of %s, which exceed %s, more than the coordinator gathers (--max-gather)", strings.Join(r.X.Merge.Tables, ", "), SizeText(limit)).
				WithHint("Pin it to one shard with WHERE <distribution column> = <value>, or write it so that each shard's part can be aggregated on the shard.")
		default:
			r.err = pgerr.New(codeProgramLimitExceeded,
				"the shards' partial results of this multi-shard query exceed %s, more than the coordinator merges (--max-gather)", SizeText(limit)).
				WithHint("Add a filter or a LIMIT, aggregate on the shards (GROUP BY), or drop ORDER BY / DISTINCT so that rows stream.")
		}
		r.cols, r.kept, r.offs = nil, nil, nil
		if r.Cancel != nil {
			r.Cancel()
		}
	}
}

// complete ends the result with CommandComplete.
func (r *Scatter) complete(n int64) {
	r.Sink.Send('C', append(strconv.AppendInt([]byte("SELECT "), n, 10), 0))
}

// merge runs the plan's merge statement over the gathered partial rows on
// the first shard's connection and sends its rows.
func (r *Scatter) merge() error {
	m := r.X.Merge
	sc := r.Conns[r.First]
	want := r.rowDesc
	if r.Bound != nil {
		want = r.Bound.RowDesc
	}
	if r.partialDesc == nil || want == nil {
		return pgerr.New(pgerr.Internal, "no row description for a multi-shard merge")
	}
	var pd pgproto3.RowDescription
	if err := pd.Decode(r.partialDesc); err != nil {
		return pgerr.New(pgerr.Internal, "invalid row description from a worker")
	}
	n := len(pd.Fields)
	if r.shipped == nil {
		r.ncols = n
		r.shipped = make([]int, n)
		for j := range r.shipped {
			r.shipped[j] = j
		}
	}
	if n != r.ncols || r.Bound != nil && m.RowIDs && !samePrefix(&pd, want, n-m.Hidden) {
		return r.changed()
	}
	shipped := m.Shipped(n)
	if r.cols == nil {
		r.cols, r.nulls = make([][]byte, len(shipped)), make([]bool, len(shipped))
	}
	types, err := r.Env.Types(sc)
	if err != nil {
		if !IsWorkerError(err) {
			r.Pending[r.First] = true
		}
		return err
	}
	names := make([]string, n)
	var casts []string // a gathering's columns that come as text: their types
	var oids []uint32  // parameter types: the arrays, then the statement's
	var key strings.Builder
	if m.RowIDs {
		oids = append(oids, oidInt4Array)
	}
	if len(r.TextCols) > 0 {
		if n != r.RowCols {
			return r.changed()
		}
		casts = make([]string, n)
	}
	for _, c := range shipped {
		f := pd.Fields[c-1]
		if tc, ok := r.TextCols[c-1]; ok {
			if f.DataTypeOID != tc.OID {
				return r.changed()
			}
			names[c-1], casts[c-1] = "text", tc.Name
			oids = append(oids, oidTextArray)
			key.WriteString("t" + tc.Name + ",")
			continue
		}
		t, ok := types[f.DataTypeOID]
		// Anonymous records cannot be unnested without a column list.
		if !ok || f.DataTypeOID >= FirstNormalOID || t.Array == 0 || t.Name == "record" {
			what := "a user-defined type"
			if ok {
				what = "type " + t.Name
			}
			if m.Gather {
				return pgerr.New(pgerr.FeatureNotSupported,
					"this multi-shard query runs over the gathered rows of %s, whose column %s is of %s; gathering it is not supported yet", strings.Join(r.X.Merge.Tables, ", "), f.Name, what).
					WithHint("Pin the query to one shard with WHERE <distribution column> = <value>, or write it so that each shard's part can be aggregated on the shard.")
			}
			return &MergeLimit{pgerr.New(pgerr.FeatureNotSupported,
				"a multi-shard query that sorts, groups, dedupes or aggregates values of %s is not supported yet", what).
				WithHint("Multi-shard queries return arrays and user-defined types, but cannot merge by them.")}
		}
		names[c-1] = t.Name
		oids = append(oids, t.Array)
		key.WriteString(strconv.FormatUint(uint64(f.DataTypeOID), 10))
		key.WriteByte(',')
	}
	if ce, se := sc.Params["client_encoding"], sc.Params["server_encoding"]; !strings.EqualFold(ce, se) {
		// Text in binary is in the client's encoding both ways: a round
		// trip can change it (SJIS) or fail on characters the client's
		// encoding lacks, where PostgreSQL never converts them.
		for _, c := range shipped {
			if !EncodingFree[names[c-1]] {
				return pgerr.New(pgerr.FeatureNotSupported,
					"this multi-shard query merges values of type %s on the coordinator, which is not supported with client_encoding %s", names[c-1], ce).
					WithHint("Use client_encoding UTF8 for this query, or pin it to one shard with WHERE <distribution column> = <value>.")
			}
		}
	}
	var cols []string // a gathering merge's column names
	if m.Gather {
		cols = make([]string, n)
		for i, f := range pd.Fields {
			cols[i] = string(f.Name)
			key.WriteString(cols[i])
			key.WriteByte(0)
		}
	}
	rt := r.RT
	rt.Mu.Lock()
	if rt.BadTypes != nil {
		rt.Mu.Unlock()
		return rt.BadTypes
	}
	if rt.merges == nil {
		rt.merges = map[string]mergeStmt{}
	}
	ms, ok := rt.merges[key.String()]
	if !ok {
		if m.Gather {
			ms.sql, ms.err = m.RenderGather(names, cols, rt.Collations, casts, rt.Keys)
		} else {
			ms.sql, ms.err = m.Render(names)
		}
		rt.merges[key.String()] = ms
	}
	rt.Mu.Unlock()
	if ms.err != nil {
		return ms.err
	}
	arrays := len(oids)

	// The parameters: a row number array (with row ids), the gathered
	// columns as arrays in binary, then the statement's parameters the
	// merge uses, as the client sent them (extended protocol) or spliced
	// in as written (simple protocol).
	bind := pgproto3.Bind{ParameterFormatCodes: make([]int16, arrays), Parameters: make([][]byte, 0, arrays)}
	for j := range bind.ParameterFormatCodes {
		bind.ParameterFormatCodes[j] = 1
	}
	if m.RowIDs {
		ids := make([]byte, 0, 8*r.rows)
		for i := 0; i < r.rows; i++ {
			ids = append(ids, 0, 0, 0, 4)
			ids = binary.BigEndian.AppendUint32(ids, uint32(i))
		}
		bind.Parameters = append(bind.Parameters, arrayValue(oidInt4, r.rows, false, ids))
	}
	for k, c := range shipped {
		elem := pd.Fields[c-1].DataTypeOID
		if _, ok := r.TextCols[c-1]; ok {
			elem = oidText // it came as text
		}
		bind.Parameters = append(bind.Parameters, arrayValue(elem, r.rows, r.nulls[k], r.cols[k]))
	}
	r.cols = nil
	sql := ms.sql
	if r.Bound != nil {
		for _, k := range m.Params {
			if k > len(r.Bound.ParamOIDs) || k > len(r.Bound.Values) {
				return pgerr.New(pgerr.ProtocolViolation, "there is no parameter $%d", k)
			}
			oids = append(oids, WorkerParamOID(r.Bound.ParamOIDs[k-1], true))
			bind.Parameters = append(bind.Parameters, r.Bound.Values[k-1])
			bind.ParameterFormatCodes = append(bind.ParameterFormatCodes, r.Bound.Format(k-1))
		}
	} else if len(m.Params) > 0 {
		if sql, err = r.Text.SpliceParams(sql, m.Params, arrays+1); err != nil {
			return err
		}
	}
	switch {
	case m.RowIDs:
		// The row number in binary, the columns the merge returns as the
		// client wants them.
		bind.ResultFormatCodes = make([]int16, 1+len(m.Keys))
		bind.ResultFormatCodes[0] = 1
		for i, k := range m.Keys {
			bind.ResultFormatCodes[1+i] = r.clientFormat(k - 1)
		}
	case r.Bound != nil:
		bind.ResultFormatCodes = r.Bound.Results
	}

	if len(bind.Parameters) > math.MaxUint16 {
		return pgerr.New(codeProgramLimitExceeded, "the merge of this multi-shard query would take %d parameters, more than a statement can", len(bind.Parameters))
	}

	// Parse (unless prepared), Bind, Describe, Execute, Sync.
	b := sc.Buf()
	parsing := false
	if r.Bound != nil || len(m.Params) == 0 {
		st := r.Env.Prepared(append(append([]byte(sql), 0), ParamTail(oids)...))
		bind.PreparedStatement = st.Name
		if !sc.Stmts.Has(st.Name, sc.StmtKey()) {
			b = addStmt(b, sc, st)
			parsing = true
		}
	} else {
		b, _ = (&pgproto3.Parse{Query: sql, ParameterOIDs: oids}).Encode(b)
	}
	b, _ = bind.Encode(b) // (counted above: it encodes)
	b, _ = (&pgproto3.Describe{ObjectType: 'P'}).Encode(b)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		sc.MarkBroken()
		return LostWorker(sc.Addr, err)
	}
	r.Pending[r.First] = true
	var rows int64
	var merr error
	var out []byte
	err = Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 'T':
			if !r.mergeTypes(body, want) {
				merr = r.changed()
				// A description kept from an earlier run may be stale:
				// the caller runs the text, described anew.
				r.Unbound = r.described()
				return
			}
			if r.Bound == nil {
				r.write('T', want)
			}
		case 'D':
			if merr != nil || r.Gone {
				return
			}
			rows++
			if !m.RowIDs {
				r.write('D', body)
				return
			}
			var err error
			if out, err = r.assemble(out[:0], body); err != nil {
				merr = err
				return
			}
			r.write('D', out)
		case '1':
			parsing = false
		case 'N':
			// The statement's own notices (a gathering evaluates the
			// whole query here, functions that RAISE NOTICE included).
			if merr == nil && !r.Gone {
				r.write('N', body)
			}
		case 'E':
			if parsing {
				sc.Stmts.Drop(bind.PreparedStatement) // the Parse failed
				parsing = false
			}
			if merr == nil {
				we := NewWorkerError(body)
				we.Addr = sc.Addr
				merr = we
			}
		}
	})
	if err != nil && merr == nil {
		merr = err
	}
	if err == nil {
		r.Pending[r.First] = false
	}
	if r.Gone {
		return ErrClientGone
	}
	if merr != nil {
		return merr
	}
	r.complete(rows)
	return nil
}

// mergeTypes reports whether the merge statement's columns have the types
// the client was told of: all of them, or (with row ids) the row number
// and the Keys.
func (r *Scatter) mergeTypes(got, want []byte) bool {
	m := r.X.Merge
	if !m.RowIDs {
		return sameTypes(got, want)
	}
	var x, y pgproto3.RowDescription
	if x.Decode(got) != nil || y.Decode(want) != nil || len(x.Fields) != 1+len(m.Keys) || x.Fields[0].DataTypeOID != oidInt4 {
		return false
	}
	for i, k := range m.Keys {
		if k > len(y.Fields) || x.Fields[1+i].DataTypeOID != y.Fields[k-1].DataTypeOID {
			return false
		}
	}
	return true
}

// assemble makes an output row from a merge row (row number, Keys) and the
// kept shard row: the Keys from the merge, the other columns as kept.
func (r *Scatter) assemble(dst, mrow []byte) ([]byte, error) {
	m := r.X.Merge
	vals, ok := rowValues(mrow, nil)
	if !ok || len(vals) != 1+len(m.Keys) || len(vals[0]) != 8 {
		return nil, pgerr.New(pgerr.Internal, "invalid merge row")
	}
	id := int(binary.BigEndian.Uint32(vals[0][4:]))
	if id < 0 || id >= len(r.offs) {
		return nil, pgerr.New(pgerr.Internal, "invalid row number %d from a merge", id)
	}
	end := len(r.kept)
	if id+1 < len(r.offs) {
		end = r.offs[id+1]
	}
	kept, ok := rowValues(r.kept[r.offs[id]:end], nil)
	if !ok {
		return nil, pgerr.New(pgerr.Internal, "invalid kept row")
	}
	out := r.ncols - m.Hidden
	dst = binary.BigEndian.AppendUint16(dst, uint16(out))
	next := 0
	for j := 0; j < out; j++ {
		if next < len(m.Keys) && m.Keys[next] == j+1 {
			next++
			dst = append(dst, vals[next]...)
			continue
		}
		dst = append(dst, kept[j]...)
	}
	return dst, nil
}

// rowValues splits a DataRow body into its values, each with its length
// word.
func rowValues(row []byte, dst [][]byte) ([][]byte, bool) {
	if len(row) < 2 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(row))
	b := row[2:]
	for j := 0; j < n; j++ {
		if len(b) < 4 {
			return nil, false
		}
		l := int32(binary.BigEndian.Uint32(b))
		end := 4
		if l > 0 {
			end += int(l)
		}
		if end > len(b) {
			return nil, false
		}
		dst = append(dst, b[:end])
		b = b[end:]
	}
	return dst, true
}

// arrayValue is a one-dimensional array in binary: its header and the
// gathered elements (each with its length word).
func arrayValue(elem uint32, n int, hasNull bool, elems []byte) []byte {
	hdr := 12
	if n > 0 {
		hdr += 8
	}
	b := make([]byte, 0, hdr+len(elems))
	dims, nulls := uint32(0), uint32(0)
	if n > 0 {
		dims = 1
	}
	if hasNull {
		nulls = 1
	}
	b = binary.BigEndian.AppendUint32(b, dims)
	b = binary.BigEndian.AppendUint32(b, nulls)
	b = binary.BigEndian.AppendUint32(b, elem)
	if n > 0 {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = binary.BigEndian.AppendUint32(b, 1)
	}
	return append(b, elems...)
}

// SameShape reports whether two RowDescription bodies (nil: NoData) have
// the same column names, types and type modifiers.
func SameShape(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y pgproto3.RowDescription
	if x.Decode(a) != nil || y.Decode(b) != nil || len(x.Fields) != len(y.Fields) {
		return false
	}
	for i := range x.Fields {
		f, g := x.Fields[i], y.Fields[i]
		if !bytes.Equal(f.Name, g.Name) || f.DataTypeOID != g.DataTypeOID || f.TypeModifier != g.TypeModifier {
			return false
		}
	}
	return true
}

// samePrefix reports whether the first n columns of a row description have
// the types of want's columns, and want has n columns.
func samePrefix(pd *pgproto3.RowDescription, want []byte, n int) bool {
	var y pgproto3.RowDescription
	if y.Decode(want) != nil || len(y.Fields) != n || len(pd.Fields) < n {
		return false
	}
	for i := 0; i < n; i++ {
		if pd.Fields[i].DataTypeOID != y.Fields[i].DataTypeOID {
			return false
		}
	}
	return true
}

// sameTypes reports whether two RowDescription bodies have the same
// column types, read in place (it runs for every result of a run).
func sameTypes(a, b []byte) bool {
	if len(a) < 2 || len(b) < 2 || binary.BigEndian.Uint16(a) != binary.BigEndian.Uint16(b) {
		return false
	}
	n := int(binary.BigEndian.Uint16(a))
	a, b = a[2:], b[2:]
	for i := 0; i < n; i++ {
		var ta, tb uint32
		var ok bool
		if a, ta, ok = nextFieldType(a); !ok {
			return false
		}
		if b, tb, ok = nextFieldType(b); !ok {
			return false
		}
		if ta != tb {
			return false
		}
	}
	return true
}

// nextFieldType reads a field of a RowDescription body in place: its type
// OID, and the fields after it.
func nextFieldType(b []byte) (rest []byte, oid uint32, ok bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 || len(b) < i+1+18 { // table OID, attnum, type OID, size, modifier, format
		return nil, 0, false
	}
	f := b[i+1:]
	return f[18:], binary.BigEndian.Uint32(f[6:]), true
}

// EncodingFree are the types whose binary form the client_encoding does
// not touch.
var EncodingFree = map[string]bool{
	"int2": true, "int4": true, "int8": true, "float4": true, "float8": true, "numeric": true, "bool": true,
	"date": true, "time": true, "timetz": true, "timestamp": true, "timestamptz": true, "interval": true,
	"uuid": true, "bytea": true, "oid": true, "money": true, "char": true, "inet": true, "cidr": true,
	"macaddr": true, "macaddr8": true, "bit": true, "varbit": true, "pg_lsn": true,
}
