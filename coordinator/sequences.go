package coordinator

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Sequence columns (serial, identity) of distributed and reference tables
// (planner/sequences.go): the values an INSERT leaves to the sequence are
// drawn on the default node, where the sequences live with the tables'
// shells, in one round trip (nextval of the column's own sequence, as
// pg_get_serial_sequence names it, in the session's role and settings),
// and the statement runs with them in place: as constants in a simple
// query, as parameters the coordinator binds after the client's in the
// extended protocol. nextval is outside transactions in PostgreSQL too, so
// drawing on another connection gives what PostgreSQL gives: unique values
// in the order the rows take them, lost on rollback.

// seqBind is a prepared INSERT's sequence values, bound at each Bind after
// the client's base parameters.
type seqBind struct {
	table string
	need  []planner.SeqNeed
	base  int // the parameters the client's statement takes
	count int // the values drawn per execution
}

// seqReady refuses to draw values where the session's own state would
// draw them otherwise: its role or settings live on a pinned connection,
// or its transaction has failed (PostgreSQL draws none then).
func (ss *session) seqReady(table string, need []planner.SeqNeed) error {
	if ss.txStatus() == 'E' {
		return errFailedTxn
	}
	if !slices.ContainsFunc(need, func(n planner.SeqNeed) bool { return !n.Random }) {
		return nil // random UUIDs, made here
	}
	for _, n := range need {
		if n.Sequence != 0 {
			continue
		}
		// nextval('name'): the name is resolved by the session's
		// search_path, which a pooled connection has as of the session's
		// last transaction.
		switch {
		case ss.pathTouched && !strings.Contains(n.Name, "."):
			return pgerr.New(pgerr.FeatureNotSupported,
				"nextval('%s') in an INSERT into %s is not supported after a change of search_path in this transaction", n.Name, table).
				WithHint("Write the sequence with its schema (nextval('public.s')), or draw the value first.")
		case strings.IndexByte(n.Name, '\\') >= 0:
			return pgerr.New(pgerr.FeatureNotSupported, "nextval() of a sequence name with a backslash in an INSERT into %s is not supported", table).
				WithHint("Draw the value first (SELECT nextval(...)) and pass it as a parameter.")
		}
	}
	if ss.settingsUnknown || ss.pinned != "" {
		why := ss.pinned
		if why == "" {
			why = "its role or settings changed in ways pgfleet cannot follow"
		}
		return pgerr.New(pgerr.FeatureNotSupported,
			"an INSERT into %s leaving a column to its sequence is not supported in a session pinned to one worker connection (%s)", table, why).
			WithHint("Give the column its value, or run the INSERT in a session that has not used SET ROLE, temporary tables or the like.")
	}
	return nil
}

// drawSequences draws the values need asks for, per column in row order,
// as SQL integer constants: on the transaction's own connection to the
// default node when it has one (it may hold a lock on the sequence, from
// ALTER SEQUENCE, that another connection would wait for), else on a
// pooled one.
func (ss *session) drawSequences(table string, need []planner.SeqNeed) ([][]string, error) {
	if slices.ContainsFunc(need, func(n planner.SeqNeed) bool { return n.Random }) {
		// Random UUIDs are made here, one per row; the sequences drawn.
		var seqs []planner.SeqNeed
		for _, n := range need {
			if !n.Random {
				seqs = append(seqs, n)
			}
		}
		var drawn [][]string
		if len(seqs) > 0 {
			var err error
			if drawn, err = ss.drawSequences(table, seqs); err != nil {
				return nil, err
			}
		}
		vals := make([][]string, len(need))
		for k, n := range need {
			if !n.Random {
				vals[k], drawn = drawn[0], drawn[1:]
				continue
			}
			for range n.Rows {
				vals[k] = append(vals[k], randomUUID())
			}
		}
		return vals, nil
	}
	var q strings.Builder
	// nextval('name') is PostgreSQL's only where no function of that name
	// is the user's (one taking text would be called instead): then the
	// first row says so, and nothing is drawn.
	const userNextval = "EXISTS (SELECT FROM pg_catalog.pg_proc WHERE proname = 'nextval' AND pronamespace <> 'pg_catalog'::pg_catalog.regnamespace)"
	named := slices.ContainsFunc(need, func(n planner.SeqNeed) bool { return n.Sequence == 0 })
	if named {
		q.WriteString("SELECT -1, " + userNextval + "::int, NULL::bigint, 0::pg_catalog.oid UNION ALL ")
	}
	for k, n := range need {
		if k > 0 {
			q.WriteString(" UNION ALL ")
		}
		seq := strconv.FormatUint(uint64(n.Sequence), 10) + "::pg_catalog.oid"
		if n.Sequence == 0 {
			seq = "'" + strings.ReplaceAll(n.Name, "'", "''") + "'"
		}
		q.WriteString("SELECT " + strconv.Itoa(k) + ", i, pg_catalog.nextval(" + seq + "::pg_catalog.regclass), " +
			seq + "::pg_catalog.regclass::pg_catalog.oid FROM pg_catalog.generate_series(1, " + strconv.Itoa(len(n.Rows)) + ") i")
		if named {
			q.WriteString(" WHERE NOT " + userNextval)
		}
	}
	var rows [][]*string
	own, err := ss.txnConnOn(ss.srv.defaultNode.Load())
	switch {
	case err != nil:
		return nil, err
	case own != nil:
		draw := func() (err error) {
			rows, err = executor.QueryText(own, q.String())
			return err
		}
		if own == ss.sc {
			err = draw() // the session's cancel target already
		} else {
			err = ss.cancelable(own, draw) // a parked one of the transaction
		}
		if err != nil && !errors.As(err, new(*executor.WorkerError)) {
			own.MarkBroken()
			return nil, executor.LostWorker(own.Addr, err)
		}
	default:
		err = ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
			rows, err = executor.QueryText(sc, q.String())
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	vals := make([][]string, len(need))
	seqs := make([]string, len(need))
	for _, r := range rows {
		if len(r) != 4 || r[0] == nil || r[1] == nil || r[3] == nil {
			return nil, pgerr.New(pgerr.Internal, "unreadable sequence values")
		}
		k, _ := strconv.Atoi(*r[0])
		i, _ := strconv.Atoi(*r[1])
		if k == -1 {
			if i != 0 {
				return nil, pgerr.New(pgerr.FeatureNotSupported,
					"an INSERT into %s calling nextval() where a function nextval of the database's own exists is not supported", table).
					WithHint("Draw the value first (SELECT nextval(...)) and give it as a constant or parameter.")
			}
			continue
		}
		if k < 0 || k >= len(need) || i != len(vals[k])+1 {
			return nil, pgerr.New(pgerr.Internal, "sequence values out of order")
		}
		if seqs[k] = *r[3]; slices.Index(seqs, seqs[k]) != k {
			// PostgreSQL draws row by row, each in column order: the
			// values would not be the ones it gives (the drawn ones are
			// lost, as a failed INSERT's are).
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"an INSERT into %s that draws from one sequence for two columns is not supported", table).
				WithHint("Draw the values first (SELECT nextval(...)) and give them as constants or parameters.")
		}
		if r[2] == nil {
			return nil, pgerr.New(pgerr.Internal, "no value from the sequence of column %q of %s", need[k].Column, table)
		}
		vals[k] = append(vals[k], *r[2])
	}
	for k, n := range need {
		if len(vals[k]) != len(n.Rows) {
			return nil, pgerr.New(pgerr.Internal, "%d sequence values for %d rows", len(vals[k]), len(n.Rows))
		}
	}
	return vals, nil
}

// withSequences is a simple query's INSERT with the values it leaves to
// sequences drawn and in place.
func (ss *session) withSequences(sql string, sn *planner.SequencesNeeded) (string, error) {
	if err := ss.seqReady(sn.Table, sn.Need); err != nil {
		return "", err
	}
	vals, err := ss.drawSequences(sn.Table, sn.Need)
	if err != nil {
		return "", err
	}
	for k, n := range sn.Need {
		if n.Random {
			for j, v := range vals[k] {
				vals[k][j] = "'" + v + "'" // (a constant of the column's type)
			}
		}
	}
	return planner.WithSequenceValues(sql, sn.Need, vals)
}

// seqPlan plans a prepared INSERT (sql: st's, or st's with its column
// list) that leaves sequence columns to their default, with their values
// as parameters after the client's; cache keeps the plan on st for the
// catalog's version.
func (ss *session) seqPlan(st *Statement, sql string, sn *planner.SequencesNeeded, cache bool) (*stmtPlan, error) {
	base := max(planner.MaxParam(st.Query), len(paramOIDs(st.paramTail)))
	need := sn.Need
	filled, err := planner.WithSequenceParams(sql, need, base)
	if err != nil {
		return nil, err
	}
	snap := ss.srv.catalog.Load()
	p, err := ss.srv.planIn(filled, ss.catalog())
	var dn *planner.DefaultNeeded
	if errors.As(err, &dn) && !slices.ContainsFunc(need, func(n planner.SeqNeed) bool { return n.Random }) {
		// The sequences filled, the distribution column left to a random
		// UUID default too: both made at each Bind.
		var rn *planner.SequencesNeeded
		if rn, err = ss.randomNeed(dn); err != nil {
			return nil, err
		}
		need = append(slices.Clone(need), rn.Need...)
		if filled, err = planner.WithSequenceParams(sql, need, base); err != nil {
			return nil, err
		}
		p, err = ss.srv.planIn(filled, ss.catalog())
	}
	if err != nil {
		return nil, err
	}
	if p.Kind() != planner.KindRouter && p.Kind() != planner.KindReferenceWrite && p.Kind() != planner.KindInsertSplit {
		return nil, pgerr.New(pgerr.FeatureNotSupported,
			"this INSERT into %s leaving a column to its sequence needs the simple query protocol", sn.Table).
			WithHint("In psql, run it as a plain statement; from a driver, use its simple-protocol mode; or give the column its value.")
	}
	sb := &seqBind{table: sn.Table, need: need, base: base}
	for _, n := range need {
		sb.count += len(n.Rows)
	}
	n := len(p.ShardSQL())
	if p.Kind() == planner.KindInsertSplit {
		n = len(snap.Shards[p.DistTable()]) // made as Binds need them (insertShardStmt)
	}
	sp := &stmtPlan{version: snap.Version, plan: p, shards: make([]shardSlot, n), seq: sb}
	if cache {
		st.plan.Store(sp)
	}
	return sp, nil
}

// bindSequences is a Bind's parameters section (params) with the drawn
// sequence values appended as text parameters.
func (ss *session) bindSequences(sb *seqBind, name []byte, params []byte) ([]byte, error) {
	if len(params) < 2 {
		return nil, pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	nf := int(binary.BigEndian.Uint16(params))
	if len(params) < 2+2*nf+2 {
		return nil, pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	formats := params[2 : 2+2*nf]
	np := int(binary.BigEndian.Uint16(params[2+2*nf:]))
	if np != sb.base {
		return nil, pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d", np, name, sb.base)
	}
	if nf > 1 && nf != np {
		return nil, pgerr.New(pgerr.ProtocolViolation, "bind message has %d parameter formats but %d parameters", nf, np)
	}
	nparams, results, ok := bindResults(params)
	if !ok || nparams != np {
		return nil, pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	values := params[2+2*nf+2 : len(params)-len(results)]
	if err := ss.seqReady(sb.table, sb.need); err != nil {
		return nil, err
	}
	vals, err := ss.drawSequences(sb.table, sb.need)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(params)+2*(np+sb.count)+16*sb.count)
	switch {
	case nf == 0 || nf == 1 && binary.BigEndian.Uint16(formats) == 0:
		out = append(out, params[:2+2*nf]...) // every parameter in text
	case nf == 1:
		out = binary.BigEndian.AppendUint16(out, uint16(np+sb.count))
		for range np {
			out = append(out, formats...)
		}
		out = append(out, make([]byte, 2*sb.count)...)
	default:
		out = binary.BigEndian.AppendUint16(out, uint16(np+sb.count))
		out = append(out, formats...)
		out = append(out, make([]byte, 2*sb.count)...)
	}
	out = binary.BigEndian.AppendUint16(out, uint16(np+sb.count))
	out = append(out, values...)
	for _, vs := range vals {
		for _, v := range vs {
			out = binary.BigEndian.AppendUint32(out, uint32(len(v)))
			out = append(out, v...)
		}
	}
	return append(out, results...), nil
}

// hideSeqParams is a ParameterDescription body without the last n
// parameters (the coordinator's sequence values).
func hideSeqParams(body []byte, n int) []byte {
	var pd pgproto3.ParameterDescription
	if pd.Decode(body) != nil || len(pd.ParameterOIDs) < n {
		return body
	}
	pd.ParameterOIDs = pd.ParameterOIDs[:len(pd.ParameterOIDs)-n]
	b, err := pd.Encode(nil)
	if err != nil {
		return body
	}
	return b[5:]
}

// txnConnOn is the session's transaction's connection to node, idle
// between statements, or nil: outside a transaction block, or when the
// transaction has none there. A connection with a pipeline still running
// on it cannot take a statement in between: refused.
func (ss *session) txnConnOn(node int32) (*pooling.ServerConn, error) {
	if !ss.inTxn() {
		return nil, nil
	}
	if ss.sc != nil && ss.node == node {
		if len(ss.sc.Buf()) > 0 || slices.ContainsFunc(ss.queue[ss.qhead:], func(e expect) bool { return e.kind != eSynth }) {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"an INSERT leaving a column to its sequence after other statements of the same pipeline in a transaction block is not supported").
				WithHint("Send Sync before the INSERT, or give the column its value.")
		}
		return ss.sc, nil
	}
	if k := ss.parkedOn(node); k >= 0 {
		return ss.parked[k].sc, nil
	}
	return nil, nil
}
