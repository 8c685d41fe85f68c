package coordinator

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// INSERT ... SELECT that does not push down to the shards
// (planner.SelectFirst), in a simple query: the coordinator runs the
// SELECT as a query of its own, through the session like any query, with
// its answer kept from the client (a capture), then the INSERT with the
// rows as VALUES, planned and run as any INSERT ... VALUES (split by shard,
// sequence values drawn, RETURNING in row order). Both run in one
// transaction: the client's, or one the coordinator opens and commits, as
// for a query string of several statements, so the statement is all or
// nothing. The rows travel as text with the SELECT's column types
// ('value'::type), which reads back exactly for the built-in types whose
// text is their value under the session's settings; other types are
// refused. They are bounded by --max-gather (54000 past it). A large set
// of rows goes in INSERTs of a part each (insertBatches) where that means
// the same as one INSERT, so that no plan holds them all.

// capture keeps a statement's answer from the client: flush moves the
// frames written since start here instead of sending them.
type capture struct {
	start  int
	frames []byte
	limit  int64
	over   bool
}

// captureRun runs sql as a part of the query string ss.multi (which the
// caller set up) with its answer captured, up to limit bytes, instead of
// written for the client; stop and err as partRun's.
func (ss *session) captureRun(sql string, limit int64) (c *capture, stop bool, err error) {
	c = &capture{start: len(ss.out), limit: limit}
	ss.capture = c
	if stop, err = ss.partRun(sql, false); stop {
		ss.capture = nil
		return nil, true, err
	}
	ss.endCapture(c)
	return c, false, nil
}

// endCapture ends the capture c: the answer written since it started is
// c's, not the client's.
func (ss *session) endCapture(c *capture) {
	ss.capture = nil
	c.take(ss.out[c.start:])
	ss.out = ss.out[:c.start]
}

func (c *capture) take(b []byte) {
	if c.over || int64(len(c.frames)+len(b)) > c.limit {
		c.over = true
		return
	}
	c.frames = append(c.frames, b...)
}

// insertSelectRows runs an INSERT ... SELECT (sql) the planner answered
// with sf.
func (ss *session) insertSelectRows(sql string, sf *planner.SelectFirst) error {
	implicit, stop, err := ss.startRowsFirst(sf.Unwrap(), "Send the INSERT ... SELECT as a query of its own.")
	if stop {
		return err
	}
	defer func() { ss.multi = nil }()
	m := ss.multi
	failed := false
	c, stop, err := ss.captureRun(sf.Select, ss.srv.cfg.MaxGather)
	if stop {
		return err
	}
	m.start, m.scanned, m.failed = len(ss.out), len(ss.out), false
	var held []byte
	res, perr := ss.capturedRows(c, "the SELECT of an INSERT ... SELECT", "Insert the rows in smaller parts, or from tables colocated with the target.")
	switch {
	case perr != nil:
		failed = ss.partError(perr)
	case res.errBody != nil:
		// Its position would point into the SELECT as the coordinator
		// wrote it, not into the client's text.
		ss.out = wire.AppendFrame(ss.out, 'E', withoutPosition('E', res.errBody))
		m.start, m.scanned = len(ss.out), len(ss.out)
		failed = true
	default:
		begin, flushes := len(ss.out), m.flushes
		if failed, stop, err = ss.insertRows(sql, sf, res); stop {
			return err
		}
		if !failed && implicit {
			held = ss.holdLastTag(begin, flushes)
		}
	}
	return ss.endString(implicit, failed, held)
}

// startRowsFirst starts a statement that runs a query of its own first,
// its rows carried as text in the statement it runs then (INSERT ...
// SELECT, an UPDATE's subqueries): refused (why, the planner's refusal)
// where that is not possible; else a query string of its parts
// (ss.multi, which the caller clears unless stop), in the client's
// transaction or one it opens (implicit).
func (ss *session) startRowsFirst(why error, send string) (implicit, stop bool, err error) {
	msg := pgerr.Flatten(why).Message
	switch {
	case ss.multi != nil:
		return false, true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s; in a query string of several statements it is not supported either", msg).
			WithHint("%s", send))
	case ss.scsOff:
		return false, true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s; with standard_conforming_strings off it is not supported either", msg).
			WithHint("Turn standard_conforming_strings on (the default) for this statement."))
	case ss.foreignEnc:
		return false, true, ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s; the coordinator carries its rows as text only in the server's encoding", msg).
			WithHint("Use the server's client_encoding (UTF8) for this statement."))
	}
	ss.multi = &multiOut{start: len(ss.out), scanned: len(ss.out)}
	implicit = !ss.inTxn()
	if implicit {
		if stop, err := ss.partRun("BEGIN", true); stop {
			ss.multi = nil
			return implicit, true, err
		}
	}
	return implicit, false, nil
}

// selectRows is a captured SELECT's answer: its columns' types and rows
// as text (nil for NULL), or its error.
type selectRows struct {
	names   []string
	oids    []uint32
	typmods []int32
	rows    [][]*string
	errBody []byte
}

// capturedRows reads a captured SELECT's answer; its notices and
// parameter changes go to the client.
func (ss *session) capturedRows(c *capture, what, hint string) (*selectRows, error) {
	if c.over {
		return nil, pgerr.New(codeProgramLimitExceeded,
			"the rows of %s exceed %d bytes (--max-gather)", what, c.limit).
			WithHint("%s", hint)
	}
	res := &selectRows{}
	for f, body := range frames(c.frames) {
		switch f {
		case 'T':
			var rd pgproto3.RowDescription
			if err := rd.Decode(body); err != nil {
				return nil, pgerr.New(pgerr.Internal, "unreadable row description")
			}
			for _, fd := range rd.Fields {
				res.names = append(res.names, string(fd.Name))
				res.oids = append(res.oids, fd.DataTypeOID)
				res.typmods = append(res.typmods, fd.TypeModifier)
			}
		case 'D':
			row, ok := executor.TextRow(body)
			if !ok {
				return nil, pgerr.New(pgerr.Internal, "unreadable row")
			}
			res.rows = append(res.rows, row)
		case 'E':
			res.errBody = append([]byte(nil), body...)
		case 'N', 'S':
			ss.out = wire.AppendFrame(ss.out, f, body)
		}
	}
	return res, nil
}

// insertRows runs the INSERT with the SELECT's rows as its VALUES, or,
// without rows, has PostgreSQL check it (as it checks the statement when
// the SELECT gives nothing) and answers INSERT 0 0 with the RETURNING
// columns.
func (ss *session) insertRows(sql string, sf *planner.SelectFirst, res *selectRows) (failed, stop bool, err error) {
	if len(res.oids) == 0 && len(res.rows) > 0 {
		return ss.partError(pgerr.New(pgerr.FeatureNotSupported, "%s; a SELECT without columns is not supported this way", pgerr.Flatten(sf.Unwrap()).Message).
			WithHint("Insert DEFAULT VALUES as many times instead.")), false, nil
	}
	types, terr := ss.textTypes(res.oids, res.typmods, "an INSERT ... SELECT that does not push down to the shards", "insert from tables colocated with the target")
	if terr != nil {
		return ss.partError(terr), false, nil
	}
	untyped := func(i int) string {
		if i < len(sf.Untyped) {
			return sf.Untyped[i]
		}
		return ""
	}
	lit := func(v *string, i int) string {
		cast := "::" + types[i]
		if untyped(i) != "" {
			cast = "" // PostgreSQL reads it as the column's type
		}
		if v == nil {
			return "NULL" + cast
		}
		return quoteLiteral(*v) + cast
	}
	if len(res.rows) == 0 {
		// PostgreSQL still runs the INSERT: it checks the columns, the
		// constants (the SELECT's own, as written), the ON CONFLICT target
		// and a read-only transaction, and fires statement triggers. So
		// does the default node, in the statement's transaction, with
		// SELECT ... WHERE false; a catalog table's empty table there lets
		// pgfleet's own statement through its guard.
		exprs := make([]string, len(types))
		for i := range types {
			if exprs[i] = untyped(i); exprs[i] == "" {
				exprs[i] = lit(nil, i)
			}
		}
		q, err := planner.InsertWithNoRows(sql, exprs)
		if err != nil {
			return ss.partError(err), false, nil
		}
		node := ss.homeNode(q)
		if sf.Catalog {
			node = ss.srv.defaultNode.Load()
			q = "SET LOCAL pgfleet.internal = 'on'; " + q + "; SET LOCAL pgfleet.internal = 'off'"
		}
		if stop, err := ss.partRelay(q, node); stop {
			return false, true, err
		}
		return ss.multi.failed, false, nil
	}
	rows := make([][]string, len(res.rows))
	size := 0
	for r, vals := range res.rows {
		rows[r] = make([]string, len(vals))
		for i, v := range vals {
			rows[r][i] = lit(v, i)
			size += len(rows[r][i])
		}
		res.rows[r] = nil
	}
	if sf.Batchable && (len(rows) > batchRows || size > batchBytes) {
		self, err := ss.selfReferencing(sf.Target)
		if err != nil {
			return ss.partError(err), false, nil
		}
		if !self {
			return ss.insertBatches(sql, rows)
		}
	}
	q, err := planner.InsertWithRows(sql, rows)
	if err != nil {
		return ss.partError(err), false, nil
	}
	begin, flushes := len(ss.out), ss.multi.flushes
	if stop, err := ss.partRun(q, false); stop {
		return false, true, err
	}
	if ss.multi.flushes != flushes {
		begin = 0 // what came before went to the client
	}
	ss.out = stripPositions(ss.out, begin)
	ss.multi.start, ss.multi.scanned = len(ss.out), len(ss.out)
	return ss.multi.failed, false, nil
}

// The rows of an INSERT ... SELECT that may go in parts (Batchable) go in
// INSERTs of at most batchRows rows and about batchBytes of values each:
// the coordinator plans a statement's every row, and its plan of a large
// one takes memory many times the statement's size.
const (
	batchRows  = 1000
	batchBytes = 1 << 20
)

// selfReferencing reports whether catalog table table has a foreign key
// referencing itself, read on a pooled connection to the default node
// (its shell's keys as committed; taken to have one after DDL in the
// transaction): the rows of an INSERT into it go in one
// statement, as a row's referenced row may be among them (adversary: a
// self-referencing INSERT ... SELECT of 1,001 rows failed with 23503 in
// parts of 1,000).
func (ss *session) selfReferencing(table string) (bool, error) {
	if ss.ddlSent {
		// The transaction may have added such a key, which a pooled
		// connection does not see (adversary 141): one INSERT.
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return false, err
	}
	sc, err := ss.sideCheckout(ctx, pool)
	if err != nil {
		return false, err
	}
	defer ss.sideRelease(pool, sc)
	schema, rel, _ := strings.Cut(table, ".")
	row, err := ss.askOwn(sc, "SELECT EXISTS (SELECT FROM pg_catalog.pg_constraint WHERE contype = 'f' AND conrelid = confrelid AND conrelid = pg_catalog.to_regclass("+
		escapedLiteral(pgx.Identifier{schema, rel}.Sanitize())+"))")
	if err != nil {
		return false, err
	}
	return len(row) == 1 && string(row[0]) == "t", nil
}

// insertBatches runs the INSERT (sql) with rows as its VALUES in parts,
// each in the session's transaction, and answers as one INSERT: the first
// part's RETURNING description, every part's rows in order, and one
// command tag with their total. As PostgreSQL, which runs an INSERT ...
// RETURNING to its end before it sends a row, it sends nothing before the
// last part has succeeded: the RETURNING rows wait, up to --max-gather
// (54000 past it).
func (ss *session) insertBatches(sql string, rows [][]string) (failed, stop bool, err error) {
	var total int64
	described := false
	begin := len(ss.out)
	for len(rows) > 0 {
		n, size := 0, 0
		for n < len(rows) && n < batchRows && (n == 0 || size < batchBytes) {
			for _, v := range rows[n] {
				size += len(v)
			}
			n++
		}
		q, err := planner.InsertWithRows(sql, rows[:n])
		if err != nil {
			return ss.partError(err), false, nil
		}
		clear(rows[:n]) // planned: their text can go
		rows = rows[n:]
		c, stop, err := ss.captureRun(q, ss.srv.cfg.MaxGather)
		if stop {
			return false, true, err
		}
		if c.over {
			return ss.partError(pgerr.New(codeProgramLimitExceeded,
				"the RETURNING rows of a part of an INSERT ... SELECT exceed %d bytes (--max-gather)", c.limit).
				WithHint("Insert the rows in smaller parts, or without RETURNING.")), false, nil
		}
		for typ, body := range frames(c.frames) {
			switch typ {
			case 'T':
				if described {
					continue
				}
				described = true
			case 'C':
				_, count, _ := strings.Cut(strings.TrimSuffix(string(body), "\x00"), "INSERT 0 ")
				k, err := strconv.ParseInt(count, 10, 64)
				if err != nil {
					return ss.partError(pgerr.New(pgerr.Internal, "unexpected command tag %q of a part of an INSERT ... SELECT", body)), false, nil
				}
				total += k
				continue
			case 'E':
				body, failed = withoutPosition(typ, body), true
			}
			ss.out = wire.AppendFrame(ss.out, typ, body)
		}
		ss.multi.start, ss.multi.scanned = len(ss.out), len(ss.out)
		if failed {
			// The parts' RETURNING rows before it never reach the client.
			ss.out = rewriteFrames(ss.out, begin, func(typ byte, body []byte) ([]byte, bool) {
				return body, typ != 'T' && typ != 'D'
			})
			ss.multi.start, ss.multi.scanned = len(ss.out), len(ss.out)
			return true, false, nil
		}
		if int64(len(ss.out)-begin) > ss.srv.cfg.MaxGather {
			ss.out = ss.out[:begin]
			ss.multi.start, ss.multi.scanned = len(ss.out), len(ss.out)
			return ss.partError(pgerr.New(codeProgramLimitExceeded,
				"the RETURNING rows of an INSERT ... SELECT exceed %d bytes (--max-gather), which the coordinator holds until the last row is in", ss.srv.cfg.MaxGather).
				WithHint("Insert the rows in smaller parts, or without RETURNING.")), false, nil
		}
	}
	ss.out = wire.AppendFrame(ss.out, 'C', append(strconv.AppendInt([]byte("INSERT 0 "), total, 10), 0))
	ss.multi.start, ss.multi.scanned = len(ss.out), len(ss.out)
	return false, false, nil
}

// partRelay sends sql, pgfleet's own, to node in the session's transaction
// and keeps of its answer what the client's statement answers: the SETs'
// tags and the ReadyForQuery go.
func (ss *session) partRelay(sql string, node int32) (stop bool, err error) {
	m := ss.multi
	if err := ss.relayCycle('Q', append([]byte(sql), 0), nil, node); err != nil || ss.lost != nil {
		return true, err
	}
	m.scan(ss.out)
	ss.out = rewriteFrames(ss.out, m.start, func(typ byte, body []byte) ([]byte, bool) {
		return withoutPosition(typ, body), typ != 'Z' && !(typ == 'C' && string(body) == "SET\x00")
	})
	m.start, m.scanned = len(ss.out), len(ss.out)
	return false, nil
}

// stripPositions takes the statement positions out of the ErrorResponses
// in out[from:]: they point into the coordinator's statement, not into the
// client's text.
func stripPositions(out []byte, from int) []byte {
	return rewriteFrames(out, from, func(typ byte, body []byte) ([]byte, bool) {
		return withoutPosition(typ, body), true
	})
}

// withoutPosition is a frame's body, an ErrorResponse's without its
// statement position.
func withoutPosition(typ byte, body []byte) []byte {
	var er pgproto3.ErrorResponse
	if typ != 'E' || er.Decode(body) != nil || er.Position == 0 {
		return body
	}
	er.Position = 0
	b, err := er.Encode(nil)
	if err != nil {
		return body
	}
	return b[5:]
}

// textTypes names the types of a SELECT's columns for its rows' text
// ('value'::name), or refuses a type whose text, under the session's
// settings, may not read back as the same value: types that are not
// built in (their OIDs differ from worker to worker), geometric, range,
// composite and XML values, floats under extra_float_digits below 1,
// date/time values under a DateStyle other than ISO, intervals under
// IntervalStyle sql_standard; arrays as their elements.
func (ss *session) textTypes(oids []uint32, typmods []int32, what, instead string) ([]string, error) {
	cols, err := ss.textColTypes(oids, typmods, what, instead, false)
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return names, err
}

// textType is a column type that textColTypes found to read back from
// its text: its name with the column's modifier, whether it is an array
// and whether it has a collation.
type textType struct {
	name              string
	array, collatable bool
}

// textColTypes is textTypes with each type's textType. params: the types
// are a Bind's parameters', not a SELECT's columns.
func (ss *session) textColTypes(oids []uint32, typmods []int32, what, instead string, params bool) ([]textType, error) {
	values, value, cast := "the SELECT's values", "column", "Cast the column to %s in the SELECT"
	if params {
		values, value, cast = "the Bind's values", "parameter", "Cast the parameter to %s"
	}
	if len(oids) == 0 {
		return nil, nil
	}
	list := make([]string, len(oids))
	pairs := make([]string, len(oids))
	notBuiltIn := func(i int) error {
		return pgerr.New(pgerr.FeatureNotSupported,
			"%s carries %s through the coordinator, which does not support the type of %s %d yet (only built-in types, enums, and domains without constraints over built-in types)", what, values, value, i+1).
			WithHint(cast+", or %s.", "a built-in type (text)", instead)
	}
	for i, o := range oids {
		list[i] = strconv.FormatUint(uint64(o), 10)
		pairs[i] = "(" + strconv.Itoa(i) + ", " + list[i] + "::pg_catalog.oid, " + strconv.Itoa(int(typmods[i])) + ")"
	}
	var rows [][]*string
	err := ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
		// The type with the column's modifier: char(5) or bit(3) alone
		// would be char(1) and bit(1). A domain's (or an array of
		// domains') text is its base type's; an enum's is its label.
		rows, err = executor.QueryText(sc, `SELECT c.i::text, pg_catalog.format_type(t.oid, c.m), tb.typname::text, tb.typcategory::text,
				coalesce(eb.typname::text, ''), coalesce(eb.typcategory::text, ''),
				pg_catalog.current_setting('extra_float_digits'), pg_catalog.current_setting('DateStyle'),
				pg_catalog.current_setting('IntervalStyle'), (t.typcollation <> 0)::text,
				(`+plainDomain("t")+` AND (tb.oid < 16384 OR tb.typtype = 'e' OR tb.typcategory = 'A' AND e.oid IS NOT NULL))::text,
				(e.oid IS NULL OR `+plainDomain("e")+` AND (eb.oid < 16384 OR eb.typtype = 'e'))::text
			FROM (VALUES `+strings.Join(pairs, ", ")+`) c(i, o, m) JOIN pg_catalog.pg_type t ON t.oid = c.o
			JOIN pg_catalog.pg_type tb ON tb.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
			LEFT JOIN pg_catalog.pg_type e ON e.oid = tb.typelem AND tb.typcategory = 'A'
			LEFT JOIN pg_catalog.pg_type eb ON eb.oid = CASE WHEN e.typtype = 'd' THEN e.typbasetype ELSE e.oid END`)
		return err
	})
	if err != nil {
		return nil, err
	}
	byCol := map[string][]string{}
	for _, r := range rows {
		vals := make([]string, len(r))
		for i, v := range r {
			if v != nil {
				vals[i] = *v
			}
		}
		if len(vals) == 12 {
			byCol[vals[0]] = vals
		}
	}
	out := make([]textType, len(oids))
	for i, o := range list {
		r := byCol[strconv.Itoa(i)]
		if r == nil {
			return nil, pgerr.New(pgerr.Internal, "no type with OID %s", o)
		}
		if r[10] != "true" || r[11] != "true" {
			return nil, notBuiltIn(i)
		}
		name, typ, cat, etyp, ecat, efd, dateStyle, intervalStyle := r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]
		out[i] = textType{name: name, array: cat == "A", collatable: r[9] == "true"}
		if cat == "A" {
			typ, cat = etyp, ecat
		}
		if why := textLossy(typ, cat, efd, dateStyle, intervalStyle); why != "" {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"%s carries %s through the coordinator as text, and a value of type %s %s", what, values, name, why).
				WithHint(cast+", use the default settings, or %s.", "text or numeric", instead)
		}
	}
	return out, nil
}

// plainDomain is a condition on the pg_type row alias: it is not a domain,
// or one without NOT NULL or constraints. A value carried as text is
// written back as a constant of its type, so a domain's checks would run
// again where PostgreSQL, copying a value of the same type, runs none
// (adversary: a NULL from an outer join into a NOT NULL domain, a value
// kept under a NOT VALID check, were refused where PostgreSQL copies them).
func plainDomain(alias string) string {
	return "(" + alias + ".typtype <> 'd' OR NOT " + alias + ".typnotnull AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint k WHERE k.contypid = " + alias + ".oid))"
}

// textLossy says why a built-in type's text (typname, typcategory) may
// not read back as its value under the settings given, "" if it does.
func textLossy(typ, cat, efd, dateStyle, intervalStyle string) string {
	switch {
	case typ == "xml" || typ == "aclitem":
		return "does not read back exactly"
	case typ == "float4" || typ == "float8":
		if n, err := strconv.Atoi(efd); err != nil || n < 1 {
			return "is rounded under extra_float_digits " + efd
		}
	case cat == "D":
		if !strings.HasPrefix(dateStyle, "ISO") {
			return "may not read back under DateStyle " + dateStyle
		}
	case cat == "T":
		if intervalStyle == "sql_standard" {
			return "may not read back under IntervalStyle sql_standard"
		}
	case cat == "E":
		// An enum's text is its label, which reads back as itself.
	case cat == "G" || cat == "R" || cat == "C" || cat == "P" || cat == "X" || cat == "Z" || cat == "A":
		return "is not supported this way yet"
	}
	return ""
}
