package coordinator

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Statements that run a query first (INSERT ... SELECT that does not push
// down, planner.SelectFirst; UPDATE and DELETE with subqueries over
// distributed tables, planner.SubqueryFirst), over the extended protocol:
// they are bridged (bridge.go, bridgeRowsFirst). PostgreSQL describes the
// statement at its Parse, on the default node, where every distributed
// table has its shell with the same columns: its analysis error is the
// Parse's answer, and its parameter types and result columns are the
// Describe's. At each Bind the default node analyses the statement again
// (a table may have changed since) and turns the parameters into text
// ($n::text, in the Bind's formats, in the session's settings: PostgreSQL's
// own input checks, at the Bind), and each $n becomes that text as a
// constant of the parameter's type. Execute runs the text through the
// simple query path, which runs the query first as it does for a simple
// Query.

// rowsDesc is a rows-first statement's description on the default node:
// its parameter types, and its RowDescription (nil: NoData).
type rowsDesc struct {
	params  []uint32
	rowDesc []byte
	// binaryOK: the session's settings and the result formats under which
	// rowsFirstResults last found the binary columns' text to read back.
	binaryOK string
}

// maxRowsDescs bounds the descriptions a session keeps.
const maxRowsDescs = 64

// mayRunRowsFirst is a cheap test of a statement's text: one that may plan
// as a rows-first write.
func mayRunRowsFirst(q string) bool {
	return (startsWithWord(q, "insert") || startsWithWord(q, "update") || startsWithWord(q, "delete") || startsWithWord(q, "with")) &&
		planner.ContainsFold(q, "select")
}

// plansRowsFirst reports whether st plans as a rows-first write.
func (ss *session) plansRowsFirst(st *Statement) bool {
	_, err := ss.stmtPlan(st)
	if err == nil {
		return false
	}
	var sf *planner.SelectFirst
	var qf *planner.SubqueryFirst
	return errors.As(err, &sf) || errors.As(err, &qf)
}

var errRowsFirstPipeline = pgerr.New(pgerr.FeatureNotSupported,
	"this statement, which the coordinator runs as a query first and then the write, is not supported over the extended protocol after other statements before the same Sync outside a transaction block").
	WithHint("Send Sync before it, or run it inside BEGIN ... COMMIT.")

// onStatementsNode runs f on a connection of the default node that sees the
// tables as the session's next statement does: the one the session holds
// there (its transaction's or its pinned one), after the worker has
// answered what the pipeline sent it; a parked one of its transaction; or,
// when the session has none there, a pooled one in the session's settings.
// errBatchFailed: a message of the pipeline failed before (the client has
// the worker's error).
func (ss *session) onStatementsNode(f func(sc *pooling.ServerConn) error) error {
	def := ss.srv.defaultNode.Load()
	if ss.implicitTxn {
		return errRowsFirstPipeline
	}
	if ss.sc != nil && ss.node == def && (ss.qhead < len(ss.queue) || ss.needSync || len(ss.sc.Buf()) > 0) {
		// Outside a block a Sync there would commit what the pipeline
		// ran; in one (its BEGIN maybe still the coordinator's), or when
		// only Parse and Describe used the connection, it ends nothing.
		if ss.batchWork && !ss.inTxn() && ss.txBegin == "" && ss.pendingBegin == "" {
			return errRowsFirstPipeline
		}
		if err := ss.settle(); err != nil {
			return err
		}
	}
	if ss.sc != nil && ss.node == def { // (still: the Sync may have released it)
		err := f(ss.sc)
		var werr *executor.WorkerError
		if err != nil && !errors.As(err, &werr) {
			return ss.lostServer(err)
		}
		return err
	}
	if i := ss.parkedOn(def); i >= 0 {
		sc := ss.parked[i].sc
		return ss.cancelable(sc, func() error { return f(sc) })
	}
	if ss.sc != nil && ss.pinned != "" || !ss.pooledAlike() {
		// A pooled connection would not see the session's own tables,
		// settings or changes.
		return pgerr.New(pgerr.FeatureNotSupported,
			"this statement, which the coordinator runs as a query first and then the write, is not supported over the extended protocol in a pinned session or after DDL or SET in the same transaction").
			WithHint("Send it with the simple query protocol.")
	}
	return ss.onDefaultNode(f)
}

// describeRowsFirst describes st on the default node and keeps the
// description for the session's Describe and Bind.
func (ss *session) describeRowsFirst(st *Statement) (*rowsDesc, error) {
	var d *rowsDesc
	err := ss.onStatementsNode(func(sc *pooling.ServerConn) (err error) {
		d, _, err = describeOn(sc, st.Query, st.paramTail, nil, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	if ss.rowsDescs == nil || len(ss.rowsDescs) >= maxRowsDescs {
		ss.rowsDescs = map[*Statement]*rowsDesc{}
	}
	ss.rowsDescs[st] = d
	return d, nil
}

// rowsFirstDesc is st's description: the one its Parse made, or a new one
// (a statement parsed before a table it names was distributed).
func (ss *session) rowsFirstDesc(st *Statement) (*rowsDesc, error) {
	if d := ss.rowsDescs[st]; d != nil {
		return d, nil
	}
	return ss.describeRowsFirst(st)
}

// describeOn has sc describe query (Parse with paramTail, the parameter
// types, and Describe) and, with types, read a Bind's values (params: the
// Bind after the statement's name) as parameters of those types and give
// them back as text (nil for NULL), in the same round trip. The worker's
// first error is err.
func describeOn(sc *pooling.ServerConn, query string, paramTail []byte, types []uint32, params []byte) (*rowsDesc, []*string, error) {
	const check, conv = "pgfleet.check", "pgfleet.params"
	d := &rowsDesc{}
	b := wire.AppendFrame(sc.Buf(), 'P', append(append(append([]byte(check+"\x00"), query...), 0), paramTail...))
	b, _ = (&pgproto3.Describe{ObjectType: 'S', Name: check}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'S', Name: check}).Encode(b)
	var row []*string
	if types != nil {
		nparams, results, ok := bindResults(params)
		if !ok || nparams != len(types) {
			return nil, nil, pgerr.New(pgerr.ProtocolViolation, "invalid Bind message")
		}
		cols := make([]string, len(types))
		for i := range types {
			cols[i] = "$" + strconv.Itoa(i+1) + "::pg_catalog.text"
		}
		// Closed first too: a Bind that failed skipped the last use's
		// Close.
		b, _ = (&pgproto3.Close{ObjectType: 'S', Name: conv}).Encode(b)
		b = wire.AppendFrame(b, 'P', append(append([]byte(conv+"\x00SELECT "+strings.Join(cols, ", ")), 0), executor.ParamTail(types)...))
		bind := append([]byte("\x00"+conv+"\x00"), params[:len(params)-len(results)]...)
		b = wire.AppendFrame(b, 'B', append(bind, 0, 0)) // results in text
		b, _ = (&pgproto3.Execute{}).Encode(b)
		b, _ = (&pgproto3.Close{ObjectType: 'S', Name: conv}).Encode(b)
	}
	sc.SetBuf(appendSync(b))
	if err := sc.Flush(); err != nil {
		sc.MarkBroken()
		return nil, nil, executor.LostWorker(sc.Addr, err)
	}
	var werr *executor.WorkerError
	err := executor.Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 't':
			var pd pgproto3.ParameterDescription
			if pd.Decode(body) == nil {
				d.params = pd.ParameterOIDs
			}
		case 'T':
			d.rowDesc = append([]byte(nil), body...)
		case 'D':
			row, _ = executor.TextRow(body) // (a bad one: the count check below)
		case 'E':
			if werr == nil {
				werr = executor.NewWorkerError(body)
			}
		}
	})
	switch {
	case err != nil:
		return nil, nil, err
	case werr != nil:
		return nil, nil, werr
	case types != nil && len(row) != len(types):
		return nil, nil, pgerr.New(pgerr.Internal, "the default node gave %d parameter values for %d", len(row), len(types))
	}
	return d, row, nil
}

// rowsFirstText is st's text with the Bind's values (params: the Bind
// after the statement's name) written in as constants of the parameters'
// types. As PostgreSQL checks a prepared statement at each Bind, the
// default node analyses st again with the parameter types its Describe
// gave (a table's change: the analysis error, or 0A000 when the result
// columns changed), reads each value as PostgreSQL reads a Bind's (its
// format, its type's input or receive function: 22P02 and the like) and
// writes it as text, which reads back as the same value under the
// session's settings for the types textColTypes allows.
func (ss *session) rowsFirstText(st *Statement, name string, d *rowsDesc, params []byte) (string, error) {
	formats, values, ok := bindValues(params)
	if !ok {
		return "", pgerr.New(pgerr.ProtocolViolation, "invalid Bind message")
	}
	if len(values) != len(d.params) {
		return "", pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d",
			len(values), name, len(d.params))
	}
	if len(formats) > 1 && len(formats) != len(values) {
		return "", pgerr.New(pgerr.ProtocolViolation, "bind message has %d parameter formats but %d parameters", len(formats), len(values))
	}
	var cols []textType
	if len(values) > 0 {
		typmods := make([]int32, len(d.params))
		for i := range typmods {
			typmods[i] = -1
		}
		var err error
		cols, err = ss.textColTypes(d.params, typmods, "a statement run as a query first over the extended protocol",
			"send it with the simple query protocol", true)
		if err != nil {
			return "", err
		}
	}
	var now *rowsDesc
	var texts []*string
	err := ss.onStatementsNode(func(sc *pooling.ServerConn) (err error) {
		now, texts, err = describeOn(sc, st.Query, executor.ParamTail(d.params), d.params, params)
		return err
	})
	if err != nil {
		return "", err
	}
	if !executor.SameShape(now.rowDesc, d.rowDesc) {
		return "", pgerr.New(pgerr.FeatureNotSupported, "cached plan must not change result type").
			WithHint("Prepare the statement again: a table it names changed since it was prepared.")
	}
	if len(values) == 0 {
		return st.Query, nil
	}
	var b strings.Builder
	last := 0
	for _, r := range paramRefs(st.Query) {
		b.WriteString(st.Query[last:r.at])
		last = r.end
		i := r.n - 1
		if i < 0 || i >= len(values) {
			return "", pgerr.New("42P02", "there is no parameter $%d", r.n)
		}
		// In parentheses: a constant followed by a subscript or a field
		// reads as $n's would ($1[2] is ('{...}'::int[])[2]).
		if texts[i] == nil {
			b.WriteString("(NULL::" + cols[i].name + ")")
		} else {
			b.WriteString("(" + quoteLiteral(*texts[i]) + "::" + cols[i].name + ")")
		}
	}
	b.WriteString(st.Query[last:])
	return b.String(), nil
}

// rowsFirstResults checks a Bind's result formats against the statement's
// columns (08P01 for a count that does not match) before the statement
// runs, so that nothing is written for an answer that cannot be sent. The
// simple path's rows are text: bool, text, int4 and int8 the bridge encodes
// in binary itself (binaryRow); for other columns asked in binary the
// default node reads the text back and sends the values in binary
// (serverFormats), so their text must read back as the same value under
// the session's settings (textColTypes), as a rows-first write's own
// values must.
func (ss *session) rowsFirstResults(d *rowsDesc, results []byte) error {
	if d.rowDesc == nil || len(results) < 2 {
		return nil
	}
	key := ss.cursorSettings() + "|" + string(results)
	if d.binaryOK == key {
		return nil
	}
	var rd pgproto3.RowDescription
	if rd.Decode(d.rowDesc) != nil {
		return pgerr.New(pgerr.Internal, "unreadable row description")
	}
	n := int(uint16(results[0])<<8 | uint16(results[1]))
	if n > 1 && n != len(rd.Fields) {
		return pgerr.New(pgerr.ProtocolViolation, "bind message has %d result formats but query has %d columns", n, len(rd.Fields))
	}
	var oids []uint32
	var typmods []int32
	for i, f := range rd.Fields {
		if byServer(results, i, f.DataTypeOID) {
			oids = append(oids, f.DataTypeOID)
			typmods = append(typmods, f.TypeModifier)
		}
	}
	if len(oids) == 0 {
		return nil
	}
	_, err := ss.textColTypes(oids, typmods, "a write run as a query first over the extended protocol, its RETURNING rows asked in binary,",
		"ask for that column in text format", false)
	if err == nil && !ss.settingsUnknown {
		d.binaryOK = key
	}
	return err
}

// serverFormatted: bp's RETURNING columns include one asked in binary that
// binaryRow cannot encode, which serverFormats has the default node give.
func (ss *session) serverFormatted(bp *bridgePortal) bool {
	d := ss.rowsDescs[bp.st]
	if d == nil || d.rowDesc == nil || len(bp.results) < 2 || !binaryResults(bp.results) {
		return false
	}
	return anyByServer(rowDescOIDs(d.rowDesc), bp.results) // (one that does not read was refused at the Bind)
}

// byServer: column i, of type oid, is asked in binary and binaryRow cannot
// encode it, so serverFormats has the default node give it.
func byServer(results []byte, i int, oid uint32) bool {
	return resultFormat(results, i) != 0 && !bridgeEncodes(oid)
}

// anyByServer: a column of the types oids is byServer.
func anyByServer(oids []uint32, results []byte) bool {
	for i, o := range oids {
		if byServer(results, i, o) {
			return true
		}
	}
	return false
}

// resultFormat is the format results (a Bind's result format count and
// codes) gives column i.
func resultFormat(results []byte, i int) uint16 {
	n := int(binary.BigEndian.Uint16(results))
	switch {
	case n == 1 && len(results) >= 4:
		return binary.BigEndian.Uint16(results[2:])
	case i < n && 2+2*i+2 <= len(results):
		return binary.BigEndian.Uint16(results[2+2*i:])
	}
	return 0
}

// bridgeEncodes: binaryRow encodes a value of the type in binary itself.
func bridgeEncodes(oid uint32) bool {
	switch oid {
	case oidBool, oidText, oidInt4, oidInt8, oidVoid:
		return true
	}
	return false
}

// serverFormats turns the text DataRows of a simple-path answer into
// results' formats where binaryRow cannot: the default node reads each
// row's values as parameters of the columns' types and sends them back in
// those formats, all rows in one round trip. ok false: nothing to do.
func (ss *session) serverFormats(answer, results []byte) (out []byte, ok bool, err error) {
	if len(results) < 2 || !binaryResults(results) {
		return nil, false, nil
	}
	var oids []uint32
	var rows [][]*string
	for typ, body := range frames(answer) {
		switch typ {
		case 'T':
			oids = rowDescOIDs(body)
		case 'D':
			r, rok := executor.TextRow(body)
			if !rok {
				return nil, false, pgerr.New(pgerr.Internal, "unreadable data row")
			}
			rows = append(rows, r)
		}
	}
	if !anyByServer(oids, results) || len(rows) == 0 {
		return nil, false, nil
	}
	var conv [][]byte
	err = ss.onStatementsNode(func(sc *pooling.ServerConn) (err error) {
		conv, err = formatsOn(sc, oids, rows, results)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	k := 0
	for typ, body := range frames(answer) {
		if typ == 'D' {
			body = conv[k]
			k++
		}
		out = wire.AppendFrame(out, typ, body)
	}
	return out, true, nil
}

// formatsOn has sc read rows (text values, nil for NULL) as values of the
// types oids and send them back in results' formats: a DataRow body for
// each row, in order. The rows go in parts of about formatsChunk bytes,
// each ending with a Sync whose answers are read before the next part is
// written (adversary: 300,000 rows written at once filled both sockets,
// each side waiting for the other to read). The worker's first error is
// err.
func formatsOn(sc *pooling.ServerConn, oids []uint32, rows [][]*string, results []byte) ([][]byte, error) {
	const conv = "pgfleet.results"
	cols := make([]string, len(oids))
	for i := range oids {
		cols[i] = "$" + strconv.Itoa(i+1)
	}
	b, _ := (&pgproto3.Close{ObjectType: 'S', Name: conv}).Encode(sc.Buf())
	b = wire.AppendFrame(b, 'P', append(append([]byte(conv+"\x00SELECT "+strings.Join(cols, ", ")), 0), executor.ParamTail(oids)...))
	out := make([][]byte, 0, len(rows))
	for i, r := range rows {
		bind := append([]byte("\x00"+conv+"\x00"), 0, 0) // values in text
		bind = binary.BigEndian.AppendUint16(bind, uint16(len(r)))
		for _, v := range r {
			if v == nil {
				bind = binary.BigEndian.AppendUint32(bind, ^uint32(0))
				continue
			}
			bind = binary.BigEndian.AppendUint32(bind, uint32(len(*v)))
			bind = append(bind, *v...)
		}
		b = wire.AppendFrame(b, 'B', append(bind, results...))
		b, _ = (&pgproto3.Execute{}).Encode(b)
		last := i == len(rows)-1
		if len(b) < formatsChunk && !last {
			continue
		}
		if last {
			b, _ = (&pgproto3.Close{ObjectType: 'S', Name: conv}).Encode(b)
		}
		sc.SetBuf(appendSync(b))
		if err := sc.Flush(); err != nil {
			sc.MarkBroken()
			return nil, executor.LostWorker(sc.Addr, err)
		}
		var werr *executor.WorkerError
		err := executor.Cycle(sc, func(typ byte, body []byte) {
			switch typ {
			case 'D':
				out = append(out, append([]byte(nil), body...))
			case 'E':
				if werr == nil {
					werr = executor.NewWorkerError(body)
				}
			}
		})
		switch {
		case err != nil:
			return nil, err
		case werr != nil:
			return nil, werr // (a statement left prepared: closed at the next use's start)
		}
		b = sc.Buf()[:0]
	}
	if len(out) != len(rows) {
		return nil, pgerr.New(pgerr.Internal, "the default node gave %d rows for %d", len(out), len(rows))
	}
	return out, nil
}

// formatsChunk is about how many bytes of Bind and Execute messages
// formatsOn writes before it reads their answers: well under what a
// socket's buffers hold.
const formatsChunk = 32 << 10

// formatsLost answers a rows-first Execute whose statement ran but whose
// RETURNING rows the default node could not give in binary (checked at the
// Bind, so a lost connection or the like): the client must know the write
// ran, committed outside a transaction block.
func (ss *session) formatsLost(err error) error {
	if pe := pgerr.Flatten(err); pe.Severity == "FATAL" {
		return err
	}
	where := "and committed"
	if ss.inTxn() {
		where = "in the transaction block"
	}
	ss.synthError(pgerr.New(pgerr.Internal, "the write ran %s, but its RETURNING rows could not be given in binary: %v", where, err).
		WithHint("Ask for the RETURNING columns in text format."))
	ss.skipping = true // the rest of the pipeline, to its Sync
	return nil
}
