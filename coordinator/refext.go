package coordinator

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"time"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/pooling"
)

// Reference-table writes over the extended query protocol. A Bind of a
// write to a table copied to several workers (routeBind's onCopies) is
// kept in the session as a portal (a scatterPortal with ref set) and runs
// at Execute on every copy: outside a transaction block in one two-phase
// commit group, as writeAllNodes does for the simple protocol; inside one
// on every worker holding a copy, each joined into the transaction in node
// order, as refWriteInTxn does. Only this path parses the Bind's
// parameters; routed statements never come here.

// refBind answers Bind of a reference-table write.
func (ss *session) refBind(portal string, st *Statement, params []byte) {
	sp, err := ss.stmtPlan(st)
	if err != nil {
		ss.synthError(err)
		return
	}
	switch {
	case sp.plan.Explain != nil:
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"EXPLAIN of a reference-table write with the extended query protocol is not supported yet").
			WithHint("Run EXPLAIN with the simple query protocol."))
		return
	case ss.pinned != "" && ss.inTxn():
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"this session is pinned to one worker connection (%s); a write to reference table %s inside its transaction block cannot reach every copy",
			ss.pinned, sp.plan.Tables[0]).WithHint("Write reference tables outside the transaction block, or reconnect."))
		return
	case ss.sc != nil && ss.sc.TxStatus == 'E' && !ss.needSync:
		ss.synthError(pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block"))
		return
	}
	if d, err := refDigestOf(sp.plan.ShardSQL()[0], sp.plan.Tables[0]); err == nil && d.returning {
		ss.returningBind(portal, st, sp, params, true)
		return
	}
	ss.keepWritePortal(portal, st, sp, params, true)
}

// keepWritePortal keeps the Bind of a write that runs at Execute on every
// copy (ref) or every shard (a multi-shard write) as a portal of the
// session. The write returns no rows: one result format at the most.
func (ss *session) keepWritePortal(portal string, st *Statement, sp *stmtPlan, params []byte, ref bool) {
	_, results, ok := bindResults(params)
	if !ok {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "invalid Bind message"))
		return
	}
	if nr := int(binary.BigEndian.Uint16(results)); nr > 1 {
		ss.synthError(pgerr.New(pgerr.ProtocolViolation, "bind message has %d result formats but query has 0 columns", nr))
		return
	}
	if ss.scatterPortals == nil {
		ss.scatterPortals = map[string]*scatterPortal{}
	}
	cp := append([]byte(nil), params[:len(params)-len(results)]...)
	ss.scatterPortals[portal] = &scatterPortal{st: st, sp: sp, params: cp, results: []byte{0, 0}, ref: ref, write: !ref, depth: len(ss.savepoints)}
	delete(ss.portals, portal)
	ss.push(expect{kind: eSynth, synth: msgBindComplete})
}

var errRefPipeline = pgerr.New(pgerr.FeatureNotSupported,
	"a reference-table or multi-shard write after other statements in the same pipeline is not supported yet").
	WithHint("Send Sync before it.")

// freshPortalPlan brings a write portal's plan up to the current catalog
// at Execute: a catalog change since its Bind (any table's: another
// client's DDL) plans the statement again; false if it no longer plans
// as the same kind of write to the same table (40001 for the caller).
func (ss *session) freshPortalPlan(sp *scatterPortal) bool {
	cur, err := ss.stmtPlan(sp.st)
	if err != nil {
		return false
	}
	if cur.version == sp.sp.version {
		return true
	}
	old, p := sp.sp.plan, cur.plan
	if p.Kind() != old.Kind() || p.DistTable() != old.DistTable() || !slices.Equal(p.Tables, old.Tables) {
		return false
	}
	sp.sp = cur
	return true
}

// errWriteBeforeMore refuses, before it runs, a reference-table or
// multi-shard write outside a transaction block that the client sent with
// more statements before the Sync (a pipeline, a driver's batch): it would
// commit on its own where PostgreSQL commits the pipeline's statements
// together, or none of them. Nothing of the pipeline runs.
var errWriteBeforeMore = pgerr.New(pgerr.FeatureNotSupported,
	"a reference-table or multi-shard write followed by other statements in the same pipeline outside a transaction block is not supported yet (it would commit before them, on its own)").
	WithHint("Send Sync after the write, or wrap the statements in BEGIN ... COMMIT.")

// moreBeforeSync reports whether the client has sent, after the message
// being handled, another statement's messages before a Sync (Flush
// messages aside). Only what is already read is looked at: a client that
// waits for an answer before it sends more is not a pipeline yet.
func (ss *session) moreBeforeSync() bool {
	types := ss.r.BufferedTypes(8)
	if q := ss.replay.queue; len(q) > 0 {
		// Running a request again (replay.go): its messages come first.
		types = types[:0:0]
		for _, f := range q[:min(len(q), 8)] {
			types = append(types, f.Type)
		}
	}
	for _, t := range types {
		switch t {
		case 'H':
			continue
		case 'S':
			return false
		}
		return true
	}
	return false
}

var errAfterRefWrite = pgerr.New(pgerr.FeatureNotSupported,
	"statements after a reference-table or multi-shard write in the same pipeline outside a transaction block are not supported yet (the write commits on its own)").
	WithHint("Send Sync after the write, or wrap the statements in BEGIN ... COMMIT.")

// refExecute runs a reference-table write portal.
func (ss *session) refExecute(sp *scatterPortal, body []byte) error {
	if ss.inParts(sp, body) {
		return nil
	}
	if ss.portalRan(sp) {
		return nil
	}
	if err := ss.implicitPipeline(); err != nil {
		ss.synthError(err)
		return nil
	}
	if ss.inTxn() {
		return ss.refExecuteInTxn(sp)
	}
	if ok, err := ss.writePortalReady(false); !ok {
		return err
	}
	if ss.moreBeforeSync() {
		ss.synthError(errWriteBeforeMore)
		return nil
	}
	formats, values, ok := bindValues(sp.params)
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if !ss.freshPortalPlan(sp) {
		ss.synthError(errCatalogMoved)
		return nil
	}
	if err := ss.sameOnEveryCopy(ctx, sp.sp.plan, nil, values, formats, paramOIDs(sp.st.paramTail)); err != nil {
		if err = ss.frozenPortal(ctx, sp, err, values, formats, paramOIDs(sp.st.paramTail)); err != nil {
			ss.synthError(err)
			return nil
		}
	}
	ss.lentUserCode = ss.stVerify(sp.st)
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		ss.synthError(err)
		return nil
	}
	snap := ss.srv.catalog.Load()
	if len(snap.Shards[sp.sp.plan.Tables[0]]) == 0 {
		ss.synthError(errCatalogMoved)
		return nil
	}
	d, err := refDigestOf(sp.sp.plan.ShardSQL()[0], sp.sp.plan.Tables[0])
	if err != nil {
		ss.synthError(err)
		return nil
	}
	res, err := shards.ExecAllParams(ctx, ss.srv.store, snap, conns, snap.Shards[sp.sp.plan.Tables[0]][0].Nodes,
		d.sql, paramOIDs(sp.st.paramTail), formats, values, sp.refResults(d), d.check(sp.sp.plan.Tables[0]))
	if err != nil {
		ss.synthError(err)
		return nil
	}
	ss.refDone = true
	c := &refCapture{rows: res.Rows, tag: res.CommandTag.String()}
	sp.tag = []byte(d.clientTag(c))
	ss.push(expect{kind: eSynth, synth: d.answer(nil, c)})
	return nil
}

// refResults are the result formats of a reference write portal's
// reporting form: with RETURNING, the client's for its columns and text
// for the hidden last one, which the copies' reports compare (a binary
// record would carry each worker's own type OIDs).
func (sp *scatterPortal) refResults(d refDigest) []int16 {
	if !d.returning || sp.desc == nil {
		return nil
	}
	codes := resultFormats(sp.results)
	out := make([]int16, sp.desc.ncols+1)
	for i := 0; i < sp.desc.ncols; i++ {
		switch {
		case len(codes) == 1:
			out[i] = codes[0]
		case i < len(codes):
			out[i] = codes[i]
		}
	}
	return out
}

// inParts refuses an Execute with a row limit of a write portal that
// returns rows (RETURNING): its rows are made at once, on every copy or
// shard, and are not kept to be fetched in parts.
func (ss *session) inParts(sp *scatterPortal, body []byte) bool {
	if sp.desc == nil || sp.desc.rowDesc == nil || sp.done {
		return false
	}
	if _, rest, _ := wire.CBytes(body); len(rest) < 4 || binary.BigEndian.Uint32(rest) == 0 {
		return false
	}
	sp.done = true
	ss.synthError(pgerr.New(pgerr.FeatureNotSupported, "fetching the RETURNING rows of a multi-shard or reference-table write in parts (Execute with a row limit) is not supported yet").
		WithHint("Fetch the whole result (no fetch size / row limit)."))
	return true
}

// refExecuteInTxn runs a reference-table write portal inside a transaction
// block: on every worker holding a copy, in node order, each joined into
// the transaction.
func (ss *session) refExecuteInTxn(sp *scatterPortal) error {
	if ok, err := ss.writePortalReady(true); !ok {
		return err
	}
	if !ss.freshPortalPlan(sp) {
		ss.synthError(errCatalogMoved)
		return nil
	}
	snap := ss.srv.catalog.Load()
	if len(snap.Shards[sp.sp.plan.Tables[0]]) == 0 {
		ss.synthError(errCatalogMoved)
		return nil
	}
	formats, values, ok := bindValues(sp.params)
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	if err := ss.sameOnEveryCopy(context.Background(), sp.sp.plan, nil, values, formats, paramOIDs(sp.st.paramTail)); err != nil {
		ss.txFailed = true
		ss.synthError(err)
		return nil
	}
	nodes := slices.Clone(snap.Shards[sp.sp.plan.Tables[0]][0].Nodes)
	slices.Sort(nodes)
	// Every copy runs the write's reporting form; the copies' reports
	// must agree (refdigest.go). Without RETURNING its result is a count
	// and a digest whatever the table's columns, so it is prepared once
	// per worker connection under a name every session shares (parsed
	// and planned once, not at every execution); with RETURNING its
	// columns follow the table's, and a statement prepared before an
	// ALTER TABLE would fail ("cached plan must not change result type")
	// for a client that prepared its own after: parsed every time then.
	d, err := refDigestOf(sp.sp.plan.ShardSQL()[0], sp.sp.plan.Tables[0])
	if err != nil {
		ss.txFailed = true
		ss.synthError(err)
		return nil
	}
	rest := append(append([]byte(d.sql), 0), sp.st.paramTail...)
	if len(sp.st.paramTail) == 0 {
		rest = append(rest, 0, 0)
	}
	st := &Statement{parse: wire.AppendFrame(nil, 'P', append([]byte{0}, rest...))} // unnamed
	if !d.returning {
		st = ss.srv.stmts.intern(rest)
	}
	bind := append(append([]byte{0}, st.Name...), 0)
	bind = append(append(bind, sp.params...), formatCodes(sp.refResults(d))...)
	build := func(bool) ([]byte, string) {
		sc, key := ss.sc, ss.stmtKey()
		if ss.ddlSent {
			// After DDL in this block the statement another session
			// prepared on the connection may mean something else (a new
			// overload of a function it calls, which PostgreSQL does not
			// invalidate plans for; column types a ROLLBACK TO SAVEPOINT
			// put back): parsed afresh until the block ends and the
			// epoch moves (ddlDone). Its result, a count and a digest,
			// does not change with the table.
			key = pooling.UnknownKey
		}
		var b []byte
		parse := ""
		if st.Name == "" {
			b = append(b, st.parse...) // unnamed
		} else if !sc.Stmts.Has(st.Name, key) {
			ev, stale := sc.Stmts.Add(st.Name, key)
			if ev != "" {
				b = wire.AppendFrame(b, 'C', append(append([]byte{'S'}, ev...), 0))
			}
			if stale {
				b = wire.AppendFrame(b, 'C', append(append([]byte{'S'}, st.Name...), 0))
			}
			b, parse = append(b, st.parse...), st.Name
		}
		b = wire.AppendFrame(b, 'B', bind)
		return appendSync(appendExecute(b)), parse
	}
	last, fail, err := ss.refInTxn(d, sp.sp.plan.Tables[0], nodes, build)
	switch {
	case err != nil:
		return ss.lostServer(err)
	case fail != nil:
		if pe := pgerr.Flatten(fail); pe.Severity == "FATAL" {
			return fail
		}
		ss.synthError(fail)
		return nil
	case last.werr != nil:
		// The worker's transaction failed: so does the client's.
		ss.txFailed = true
		ss.push(expect{kind: eSynth, synth: append(slices.Clone(last.msgs), wire.AppendFrame(nil, 'E', userNamesBody(ss.srv.catalog.Load(), ss.victimBody(last.werr)))...)})
		ss.skipping = true
		return nil
	}
	sp.tag = []byte(d.clientTag(last))
	ss.push(expect{kind: eSynth, synth: d.answer(nil, last)})
	return nil
}

// portalRan answers an Execute of a write portal that ran to completion
// (as PostgreSQL: its tag with no rows) and reports whether it did; else
// the portal is marked as run.
func (ss *session) portalRan(sp *scatterPortal) bool {
	if sp.done {
		ss.push(expect{kind: eSynth, synth: commandComplete(nil, string(zeroRows(sp.tag)))})
		return true
	}
	sp.done = true
	return false
}

// writePortalReady readies the session to run a write portal on every
// copy or shard at Execute: what only Parse or Describe used the held
// connection for in this batch is answered with a hidden Sync (outside a
// transaction block that gives the connection back; inside, the block
// stays open); other work in the same pipeline, or a failed transaction,
// is answered with an error instead (ok false). Then the answers so far
// go out. err is a lost connection.
func (ss *session) writePortalReady(inTxn bool) (ok bool, err error) {
	if inTxn {
		if ss.sc != nil && ss.needSync {
			// Statements of this pipeline ran there: answered first
			// (the block stays open).
			if err := ss.settle(); err == errBatchFailed {
				return false, nil
			} else if err != nil {
				return false, err
			}
		}
		if ss.sc != nil && ss.sc.TxStatus != 'T' {
			ss.synthError(pgerr.New(pgerr.InFailedSQLTransaction,
				"current transaction is aborted, commands ignored until end of transaction block"))
			return false, nil
		}
	} else {
		if ss.sc != nil && !ss.batchWork && (ss.sc.TxStatus == 'I' || ss.needSync) {
			// A Parse or Describe that failed there fails the batch: the
			// write is skipped, as PostgreSQL skips it.
			if err := ss.settle(); err == errBatchFailed {
				return false, nil
			} else if err != nil {
				return false, err
			}
		}
		if ss.sc != nil && (ss.needSync || ss.batchWork) {
			ss.synthError(errRefPipeline)
			return false, nil
		}
	}
	// Nothing is queued for a server now (a pinned session may still hold
	// its idle connection).
	ss.emitSynth()
	return true, nil
}

// zeroRows is a command tag with its row count made 0.
func zeroRows(tag []byte) []byte {
	i := bytes.LastIndexByte(tag, ' ')
	if i < 0 {
		return slices.Clone(tag)
	}
	return append(slices.Clone(tag[:i+1]), '0')
}

// formatCodes is the result-format part of a Bind: the count, then each
// code.
func formatCodes(codes []int16) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(codes)))
	for _, c := range codes {
		b = binary.BigEndian.AppendUint16(b, uint16(c))
	}
	return b
}

// bindValues splits a Bind's parameter formats and values (the part after
// the statement name, without the result formats).
func bindValues(b []byte) (formats []int16, values [][]byte, ok bool) {
	bd, err := executor.DecodeBind(b, []byte{0, 0})
	if err != nil {
		return nil, nil, false
	}
	return bd.Formats, bd.Values, true
}

// paramOIDs are the parameter types of a Parse's tail (count, then types).
func paramOIDs(tail []byte) []uint32 {
	if len(tail) < 2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(tail))
	tail = tail[2:]
	oids := make([]uint32, 0, n)
	for i := 0; i < n && len(tail) >= 4; i++ {
		oids = append(oids, binary.BigEndian.Uint32(tail))
		tail = tail[4:]
	}
	return oids
}
