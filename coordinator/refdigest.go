package coordinator

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// Every write to a reference table runs, on each copy, in a form that
// reports what the copy wrote (planner.RefDigestSQL): the number of rows
// and a digest of them, or, when the client asked for RETURNING, the whole
// row as a hidden last column. The coordinator compares the copies'
// reports before anything commits and, if they differ, rolls back every
// copy and answers 0A000. This catches every cause of divergent copies
// (volatile or catalog-dependent values, system columns, LIMIT without
// ORDER BY, a function redefined through another coordinator) without
// having to recognise it; the volatility checks (sameOnEveryCopy) stay as
// a first line that answers before anything runs.

// refDigest is the reporting form of a reference-table write.
type refDigest struct {
	sql       string
	verb      string
	returning bool // the client asked for RETURNING; the row is the last column
}

func refDigestOf(sql, table string) (refDigest, error) {
	if v, ok := refDigests.m.Load(sql); ok {
		return v.(refDigest), refDigestErr(v.(refDigest), table)
	}
	out, verb, ret, ok := planner.RefDigestSQL(sql)
	d := refDigest{}
	if ok {
		// The copies marker (metadata.CopiesMarker), which deparsing drops,
		// goes with the statement: the copies' guard reads it.
		if i := strings.Index(sql, " /* pgfleet:copies="); i >= 0 && verb != "" {
			if j := strings.Index(sql[i+3:], "*/"); j >= 0 {
				out += sql[i : i+3+j+2]
			}
		}
		d = refDigest{sql: out, verb: verb, returning: ret}
	}
	if refDigests.n.Add(1) <= maxRefDigests {
		refDigests.m.Store(sql, d)
	}
	return d, refDigestErr(d, table)
}

// refDigests keeps the reporting forms of the statements met (a pure
// function of the text, which parsing and deparsing make costly: half a
// coordinator's CPU in pgbench's tpcb-like before), up to maxRefDigests
// texts. Statements carry placeholders, not constants (refWriteInTxn
// splices the constants into the reporting form), so the texts are the
// application's statement shapes.
var refDigests struct {
	m sync.Map // text -> refDigest (sql "": the write cannot be checked)
	n atomic.Int64
}

const maxRefDigests = 4096

func refDigestErr(d refDigest, table string) error {
	if d.sql != "" {
		return nil
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"this write to reference table %s cannot be checked to store the same rows on every copy", table).
		WithHint("Write it as a single INSERT, UPDATE or DELETE, without MERGE or a data-modifying WITH.")
}

func errRefDiffer(table string) error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"this write to reference table %s would store different rows on its copies; nothing was written", table).
		WithHint("The statement depends on something that differs between workers (a volatile or catalog-dependent value, a system column, LIMIT without ORDER BY, ...): " +
			"compute the values first and write them as constants, or make the statement deterministic.")
}

// digest sums up one copy's report (its rows, text format).
func (d refDigest) digest(rows [][][]byte) string {
	if !d.returning {
		var b bytes.Buffer
		for _, r := range rows {
			for _, v := range r {
				b.Write(v)
				b.WriteByte(0)
			}
		}
		return b.String()
	}
	vals := make([]string, 0, len(rows))
	for _, r := range rows {
		if len(r) > 0 {
			vals = append(vals, string(r[len(r)-1]))
		}
	}
	slices.Sort(vals)
	var b bytes.Buffer
	for _, v := range vals {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String()
}

// check compares two copies' results (for shards.ExecAllParams).
func (d refDigest) check(table string) func(first, res *pgconn.Result) error {
	if d.verb == "" {
		return nil
	}
	return func(first, res *pgconn.Result) error {
		if d.digest(first.Rows) != d.digest(res.Rows) {
			return errRefDiffer(table)
		}
		return nil
	}
}

// tag is the client's command tag for a report without RETURNING (res's
// own for a statement that writes no rows).
func (d refDigest) tag(res *pgconn.Result) string {
	if d.verb == "" || d.returning {
		return res.CommandTag.String()
	}
	rows := res.Rows
	n := "0"
	if len(rows) == 1 && len(rows[0]) > 0 && rows[0][0] != nil {
		n = string(rows[0][0])
	}
	if d.verb == "INSERT" {
		return "INSERT 0 " + n
	}
	return d.verb + " " + n
}

// clientTag is the command tag the client gets for a copy's answer.
func (d refDigest) clientTag(c *refCapture) string {
	if d.verb == "" || d.returning {
		return c.tag
	}
	return d.tag(&pgconn.Result{Rows: c.rows})
}

// strip removes the hidden last column from a result with RETURNING.
func (d refDigest) strip(res *pgconn.Result) {
	if !d.returning || len(res.FieldDescriptions) == 0 {
		return
	}
	res.FieldDescriptions = res.FieldDescriptions[:len(res.FieldDescriptions)-1]
	for i, r := range res.Rows {
		if len(r) > 0 {
			res.Rows[i] = r[:len(r)-1]
		}
	}
}

// refCapture is one copy's answer to a reference write's reporting form
// run on the held connection inside a transaction block.
type refCapture struct {
	rd   []byte     // RowDescription body; nil if none
	rows [][][]byte // DataRow values
	tag  string
	werr []byte // the worker's ErrorResponse body, if it failed
	msgs []byte // notices and parameter status frames, in order
	// parses counts the ParseCompletes (a Parse sent ran).
	parses int
}

// refCaptureRun sends b (a Query, or Parse/Bind/Execute/Sync) on the held
// connection and reads the answer up to ReadyForQuery. err is a lost
// connection.
func (ss *session) refCaptureRun(b []byte) (*refCapture, error) {
	sc := ss.sc
	sc.SetBuf(append(sc.Buf(), b...))
	if err := sc.Flush(); err != nil {
		return nil, err
	}
	c := &refCapture{}
	for {
		f, err := sc.Next()
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case 'T':
			c.rd = slices.Clone(f.Body)
		case 'D':
			var dr pgproto3.DataRow
			if err := dr.Decode(f.Body); err != nil {
				sc.MarkBroken()
				return nil, err
			}
			vals := make([][]byte, len(dr.Values))
			for i, v := range dr.Values {
				if v != nil {
					vals[i] = slices.Clone(v)
				}
			}
			c.rows = append(c.rows, vals)
		case '1':
			c.parses++
		case 'C':
			c.tag = string(bytes.TrimSuffix(f.Body, []byte{0}))
		case 'E':
			if executor.FatalSeverity(f.Body) {
				sc.MarkBroken()
				return nil, errors.New(executor.NewWorkerError(f.Body).Error())
			}
			if c.werr == nil {
				c.werr = slices.Clone(f.Body)
			}
		case 'S':
			sc.NoteParameterStatus(f.Body)
			if ss.ready {
				c.msgs = wire.AppendFrame(c.msgs, 'S', f.Body)
			}
		case 'N':
			c.msgs = wire.AppendFrame(c.msgs, 'N', f.Body)
		case 'Z':
			if len(f.Body) != 1 {
				sc.MarkBroken()
				return nil, errors.New("invalid ReadyForQuery")
			}
			sc.TxStatus = f.Body[0]
			return c, nil
		}
	}
}

// refInTxn runs reference write d on every copy's worker (nodes, in
// order), each joined into the transaction block, with the messages build
// makes for the worker's connection (and the name of the statement whose
// Parse they carry, "" if none), of the extended protocol when ahead (a
// BEGIN goes before them); it compares the copies' reports and returns the last
// copy's answer. A worker's error or a difference fails the transaction
// block: werr is what the client gets then (an ErrorResponse body, or
// FATAL-free pgerr), err a lost connection.
// takeIn makes node the current worker of the client's transaction block
// (simple protocol): taken in if it is not yet, its BEGIN sent if the
// block has not reached a worker.
func (ss *session) takeIn(node int32) error {
	if err := ss.acquire(context.Background(), node); err != nil {
		return err
	}
	if ss.pendingBegin != "" {
		return ss.startPending()
	}
	return nil
}

func (ss *session) refInTxn(d refDigest, table string, nodes []int32, build func(ahead bool) (b []byte, parse string)) (last *refCapture, fail error, err error) {
	var first string
	for i, node := range nodes {
		// A worker the transaction takes in here gets its BEGIN with the
		// write, in one round trip (joinPipe).
		var begin []byte
		ss.joinPipe = &begin
		err := ss.takeIn(node)
		ss.joinPipe = nil
		if err != nil {
			return nil, err, nil
		}
		b, parse := build(begin != nil)
		c, err := ss.refCaptureRun(append(begin, b...))
		if err != nil {
			return nil, nil, err
		}
		ahead := 0
		if begin != nil {
			ahead = 1
		}
		if parse != "" && c.parses <= ahead {
			ss.sc.Stmts.Drop(parse) // the Parse failed, or never ran
		}
		if begin != nil {
			if ss.sc.TxStatus != 'T' && ss.sc.TxStatus != 'E' {
				// The BEGIN failed there (the write did not run): the
				// worker leaves the transaction, which fails. The Close
				// and Parse after the BEGIN were skipped too, so the
				// connection's statement cache may be wrong: closed.
				ss.sc.MarkBroken()
				ss.unjoin()
				ss.txFailed = true
				if c.werr != nil {
					return c, nil, nil
				}
				return nil, pgerr.New(pgerr.InvalidTransactionState, "worker %s did not start the transaction", ss.srv.nodeAddr(node)), nil
			}
		}
		if !slices.Contains(ss.wroteOn, node) {
			ss.wroteOn = append(ss.wroteOn, node)
		}
		if c.werr != nil {
			return c, nil, nil
		}
		if dg := d.digest(c.rows); i == 0 {
			first = dg
		} else if d.verb != "" && dg != first {
			ss.txFailed = true
			return nil, errRefDiffer(table), nil
		}
		last = c
	}
	return last, nil, nil
}

// answer appends a copy's answer for the client to out: its notices, then
// rows (the hidden column stripped) and its command tag as the client's
// statement would have them.
func (d refDigest) answer(out []byte, c *refCapture) []byte {
	out = append(out, c.msgs...)
	if d.verb == "" || d.returning {
		if c.rd != nil {
			var rd pgproto3.RowDescription
			if err := rd.Decode(c.rd); err == nil {
				if d.returning && len(rd.Fields) > 0 {
					rd.Fields = rd.Fields[:len(rd.Fields)-1]
				}
				out, _ = rd.Encode(out)
			}
		}
		for _, r := range c.rows {
			if d.returning && len(r) > 0 {
				r = r[:len(r)-1]
			}
			dr := pgproto3.DataRow{Values: r}
			out, _ = dr.Encode(out)
		}
	}
	return commandComplete(out, d.clientTag(c))
}
