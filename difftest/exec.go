package difftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// answer is what one side answered to a statement, in comparable form.
// Values are in text format, as the server sent them (client encoding).
type answer struct {
	fields   []field // RowDescription: name and type OID
	rows     []string
	tag      string
	sqlstate string
	message  string
	txStatus byte
	fatal    error // a non-SQL error (connection lost, timeout)

	// Prepared statements only: how many executions succeeded before an
	// error, and the transaction status after the last of them. The
	// answer's fields, rows and tag are theirs.
	execs   int
	execsTx byte
}

type field struct {
	name string
	oid  uint32
}

// rowNull marks NULL in an encoded row (a byte that text output of the
// generator's types never holds).
const rowNull = "\x00N"

// encodeRow joins a row's text values unambiguously.
func encodeRow(vals [][]byte) string {
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteString("\x00|")
		}
		if v == nil {
			b.WriteString(rowNull)
		} else {
			b.Write(v)
		}
	}
	return b.String()
}

// run sends st on conn and reads its answer. Statements time out after
// timeout; a timeout or a lost connection is a fatal answer.
func run(ctx context.Context, conn *pgconn.PgConn, st *stmt, latin1 bool, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sql := string(clientBytes(st.sql, latin1))
	var a answer
	switch st.proto {
	case simpleProto:
		results, err := conn.Exec(ctx, sql).ReadAll()
		for _, r := range results {
			a.add(r.FieldDescriptions, r.Rows, r.CommandTag)
		}
		a.setErr(err)
	case extendedProto:
		vals, oids, formats := bindValues(st.params, latin1)
		r := conn.ExecParams(ctx, sql, vals, oids, formats, resultFormats(st)).Read()
		a.add(r.FieldDescriptions, r.Rows, r.CommandTag)
		a.setErr(r.Err)
	case preparedProto:
		const name = "difftest_stmt"
		_, oids, _ := bindValues(st.params, latin1)
		_, err := conn.Prepare(ctx, name, sql, oids)
		a.setErr(err)
		for _, params := range append([][]param{st.params}, st.more...) {
			if err != nil {
				break
			}
			vals, _, formats := bindValues(params, latin1)
			r := conn.ExecPrepared(ctx, name, vals, formats, resultFormats(st)).Read()
			a.setErr(r.Err)
			if err = r.Err; err != nil {
				break
			}
			a.add(r.FieldDescriptions, r.Rows, r.CommandTag)
			a.execs++
			a.execsTx = conn.TxStatus()
		}
		if a.fatal == nil {
			// Dropping the statement can fail only in an aborted transaction
			// (25P02), which the answer already shows.
			_ = conn.Deallocate(ctx, name)
		}
	case copyProto:
		tag, err := conn.CopyFrom(ctx, bytes.NewReader(clientBytes(st.copy, latin1)), sql)
		a.tag = tag.String()
		a.setErr(err)
	}
	a.txStatus = conn.TxStatus()
	return a
}

// resultFormats are the result formats a Bind asks for: binary for every
// column for a third of the statements (drawn from the text, so that the
// generator's stream stays as it was), as pgx and JDBC ask for many types;
// text for the rest.
func resultFormats(st *stmt) []int16 {
	h := fnv.New32a()
	h.Write([]byte(st.sql))
	if h.Sum32()%3 == 0 {
		return []int16{1}
	}
	return nil
}

// bindValues encodes parameters for Bind.
func bindValues(params []param, latin1 bool) (vals [][]byte, oids []uint32, formats []int16) {
	vals = make([][]byte, len(params))
	oids = make([]uint32, len(params))
	formats = make([]int16, len(params))
	for i, p := range params {
		oids[i], formats[i] = p.oid, p.format
		switch {
		case p.val.null:
		case p.format == 1:
			vals[i], _ = encodeBinary(p.oid, p.val, latin1)
		default:
			vals[i] = clientBytes(p.val.s, latin1)
		}
	}
	return vals, oids, formats
}

func (a *answer) add(fds []pgconn.FieldDescription, rows [][][]byte, tag pgconn.CommandTag) {
	for _, fd := range fds {
		a.fields = append(a.fields, field{name: fd.Name, oid: fd.DataTypeOID})
	}
	for _, r := range rows {
		a.rows = append(a.rows, encodeRow(r))
	}
	if a.tag != "" {
		a.tag += "; "
	}
	a.tag += tag.String()
}

func (a *answer) setErr(err error) {
	if err == nil {
		return
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		a.sqlstate, a.message = pe.Code, pe.Message
		if pe.Hint != "" {
			a.message += " (hint: " + pe.Hint + ")"
		}
		return
	}
	a.fatal = err
}

// refused reports a 0A000 answer.
func (a answer) refused() bool { return a.sqlstate == "0A000" }

// diff compares the coordinator's answer with the oracle's and describes
// the first difference, or returns "".
func diff(st *stmt, coord, oracle answer) string {
	switch {
	case coord.fatal != nil || oracle.fatal != nil:
		return fmt.Sprintf("connection error: coordinator %v, oracle %v", coord.fatal, oracle.fatal)
	case coord.sqlstate != oracle.sqlstate:
		return fmt.Sprintf("SQLSTATE: coordinator %q, oracle %q", coord.sqlstate, oracle.sqlstate)
	case coord.txStatus != oracle.txStatus:
		return fmt.Sprintf("transaction status: coordinator %q, oracle %q", coord.txStatus, oracle.txStatus)
	case coord.sqlstate != "":
		return "" // same error; rows before an error are not compared
	case coord.tag != oracle.tag:
		return fmt.Sprintf("command tag: coordinator %q, oracle %q", coord.tag, oracle.tag)
	case !slices.Equal(coord.fields, oracle.fields):
		return fmt.Sprintf("RowDescription: coordinator %v, oracle %v", coord.fields, oracle.fields)
	}
	cr, or := coord.rows, oracle.rows
	if !st.ordered {
		cr, or = slices.Clone(cr), slices.Clone(or)
		slices.Sort(cr)
		slices.Sort(or)
	}
	if !slices.Equal(cr, or) {
		return "rows differ"
	}
	return ""
}

// describe prints an answer for a failure report.
func (a answer) describe(latin1 bool) string {
	var b strings.Builder
	if a.fatal != nil {
		fmt.Fprintf(&b, "fatal: %v\n", a.fatal)
	}
	if a.sqlstate != "" {
		fmt.Fprintf(&b, "ERROR %s: %s\n", a.sqlstate, a.message)
	}
	fmt.Fprintf(&b, "tag %q, tx status %q, fields %v\n", a.tag, a.txStatus, a.fields)
	for i, r := range a.rows {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d rows in all\n", len(a.rows))
			break
		}
		fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(strings.ReplaceAll(fromClient([]byte(r), latin1), "\x00|", " | "), rowNull, "NULL"))
	}
	return b.String()
}

// describeStmt prints a statement with its parameters.
func (st *stmt) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s, %s] %s", st.family, st.proto, st.sql)
	for i, p := range st.params {
		fmt.Fprintf(&b, "\n  $%d oid=%d format=%d value=%v", i+1, p.oid, p.format, p.val)
	}
	for n, params := range st.more {
		fmt.Fprintf(&b, "\n  execution %d:", n+2)
		for i, p := range params {
			fmt.Fprintf(&b, " $%d=%v/%d", i+1, p.val, p.format)
		}
	}
	if st.proto == copyProto {
		fmt.Fprintf(&b, "\n  data: %q", st.copy)
	}
	return b.String()
}
