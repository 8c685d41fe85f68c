package coordinator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// multiShardWrite runs an UPDATE or DELETE on every shard of its table
// (planner.MultiShardWrite): each worker runs its shards' statements in
// one transaction, and the workers commit with two-phase commit, all or
// nothing, as InsertSplit's rows do. The command tag counts the rows of
// every shard.
func (ss *session) multiShardWrite(p *planner.Plan, lits []literal, text string) error {
	what, _, _ := strings.Cut(p.ShardSQL()[0], " ") // UPDATE, DELETE or INSERT
	if err := ss.txnWriteRefusal(what, p.DistTable()); err != nil {
		return ss.queryError(err)
	}
	for _, l := range lits {
		if planner.TimeWord(l.value) {
			// A lifted 'now': each worker would read its own moment.
			return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
				"a multi-shard %s of %s reading '%s' is not supported: each worker would give its own value", what, p.DistTable(), l.value).
				WithHint("Pass the moment as a timestamp constant, or add WHERE <distribution column> = <value>."))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := ss.sameOnEveryCopy(ctx, p, lits, nil, nil, nil); err != nil {
		return ss.runFrozen(p.Mutability(), text, err)
	}
	snap := ss.srv.catalog.Load()
	byNode, err := writeGroups(p, snap, lits)
	if err != nil {
		return ss.queryError(err)
	}
	if ss.inTxn() {
		return ss.writeInTxnSimple(text, what, byNode, nil)
	}
	return ss.writeGroupsSimple(ctx, snap, byNode, text, what, p.Returning(), nil)
}

// txnWriteRefusal is why a write over several shards cannot join the
// client's transaction block (nil outside one): the session is pinned to
// one worker connection, or the transaction failed (25P02, before the
// statement is looked at, as PostgreSQL answers).
func (ss *session) txnWriteRefusal(what, table string) error {
	switch {
	case !ss.inTxn():
		return nil
	case ss.txStatus() == 'E':
		return pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block")
	case ss.pinned != "":
		return pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard %s of %s is not supported in a transaction block of a session pinned to one worker connection (%s)", what, table, ss.pinned).
			WithHint("Run it outside BEGIN ... COMMIT, or reconnect.")
	}
	return nil
}

// writeInTxnSimple runs the statements of a simple Query (text) by node
// inside the client's transaction block (writeInTxn) and answers the
// client; order as for writeInTxn. A worker's error is the client's unless
// PostgreSQL would have failed the whole statement's analysis first
// (analysisFirst: a bad constant in another shard's rows, before the
// read-only check of default_transaction_read_only).
func (ss *session) writeInTxnSimple(text, what string, byNode map[int32][]string, order []int) error {
	tag, msgs, werr, fail, err := ss.writeInTxn(what, byNode, func(sql string) []byte {
		return appendQuery(nil, sql)
	}, order)
	switch {
	case err != nil:
		return ss.lostServer(err)
	case fail != nil:
		return ss.queryError(fail)
	}
	ss.out = append(ss.out, msgs...)
	if werr != nil {
		// The worker's transaction failed: so does the client's.
		ss.txFailed = true
		// Only a data exception (class 22): the side connection does not
		// see the transaction's own work, whose absence it could report.
		var we *executor.WorkerError
		if errors.As(ss.analysisFirst(text, nil), &we) && strings.HasPrefix(we.PG.Code, "22") {
			werr = we.Body
		}
		ss.out = wire.AppendFrame(ss.out, 'E', userNamesBody(ss.srv.catalog.Load(), ss.victimBody(werr)))
	} else {
		ss.out = commandComplete(ss.out, tag)
	}
	ss.out = readyForQuery(ss.out, ss.sc.TxStatus)
	return nil
}

// inOrder puts the RETURNING rows of several statements, read in the
// order they ran, back in the order of the rows that made them: order[k]
// is the place of the k-th row read (a multi-row INSERT over several
// shards, whose statements each return one row per VALUES row, in order).
func inOrder(rows [][][]byte, order []int) ([][][]byte, error) {
	if order == nil {
		return rows, nil
	}
	if len(rows) != len(order) {
		return nil, pgerr.New(pgerr.Internal, "the shards returned %d rows for %d inserted", len(rows), len(order))
	}
	out := make([][][]byte, len(rows))
	for k, r := range rows {
		out[order[k]] = r
	}
	return out, nil
}

// writeGroupsSimple runs statements of a simple Query (text) outside a
// transaction block, by node, in one two-phase commit group of their own,
// and answers the client with a tag for what (INSERT, UPDATE, DELETE)
// counting their rows; order (if not nil) puts RETURNING rows in order
// (inOrder).
func (ss *session) writeGroupsSimple(ctx context.Context, snap *metadata.Snapshot, byNode map[int32][]string, text, what string, returning bool, order []int) error {
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		return ss.queryError(err)
	}
	limit := int64(0)
	if returning {
		limit = ss.srv.cfg.MaxGather
	}
	r, err := shards.ExecGroupsRows(ctx, ss.srv.store, snap, conns, byNode, nil, limit)
	if err != nil {
		return ss.queryError(ss.analysisFirst(text, err))
	}
	if returning {
		// Every shard's RETURNING rows, under the first one's columns.
		rows, err := inOrder(r.Rows, order)
		if err != nil {
			return ss.queryError(err)
		}
		ss.appendRows(r.FieldsNode, r.Fields, rows)
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte(writeTag(what, r.Affected))}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, 'I')
	return nil
}

// writeTag is a multi-shard write's command tag.
func writeTag(what string, n int64) string {
	if what == "INSERT" {
		return "INSERT 0 " + strconv.FormatInt(n, 10)
	}
	return what + " " + strconv.FormatInt(n, 10)
}

// writeInTxn runs a multi-shard write inside a transaction block: every
// worker holding a shard is joined into the transaction (in node order,
// its BEGIN replayed there) and runs its shards' statements (msgs makes
// the messages that run one, up to ReadyForQuery); the transaction's
// COMMIT commits them all (two-phase commit across its workers), its
// ROLLBACK undoes them, and an error on a shard fails it, as on
// PostgreSQL. Under REPEATABLE READ or SERIALIZABLE it is refused: each
// worker would read its own snapshot, taken at another moment. It returns
// the command tag and the workers' notices, or the worker's error (werr,
// an ErrorResponse body: the transaction failed), or the coordinator's
// refusal or a worker it could not join (fail: the caller fails the
// transaction, so that what ran on other workers is rolled back with it),
// or a lost connection (err).
func (ss *session) writeInTxn(what string, byNode map[int32][]string, msgs func(sql string) []byte, order []int) (tag string, notices, werr []byte, fail, err error) {
	ctx := context.Background()
	var total int64
	var rd []byte       // RETURNING: the first shard's columns
	var rows [][][]byte // and every shard's rows
	var size int64      // their size
	for k, node := range slices.Sorted(maps.Keys(byNode)) {
		if err := ss.acquire(ctx, node); err != nil {
			return "", notices, nil, err, nil
		}
		if ss.pendingBegin != "" {
			if err := ss.startPending(); err != nil {
				return "", notices, nil, err, nil
			}
		}
		if k == 0 {
			rows, err := executor.QueryText(ss.sc, "SELECT pg_catalog.current_setting('transaction_isolation')")
			if err != nil {
				return "", notices, nil, err, nil
			}
			level := ""
			if len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil {
				level = *rows[0][0]
			}
			if level == "" || !readCommitted(level) {
				return "", notices, nil, errTxnIsolation(level), nil
			}
		}
		for _, sql := range byNode[node] {
			c, err := ss.refCaptureRun(msgs(sql))
			if err != nil {
				return "", notices, nil, nil, err
			}
			notices = append(notices, c.msgs...)
			if c.werr != nil {
				return "", notices, c.werr, nil, nil
			}
			if c.rd != nil && rd == nil {
				rd = c.rd
			}
			for _, r := range c.rows {
				for _, v := range r {
					size += int64(len(v)) + 4
				}
			}
			rows = append(rows, c.rows...)
			if limit := ss.srv.cfg.MaxGather; size > limit {
				return "", notices, nil, pgerr.New(codeProgramLimitExceeded,
					"the rows this statement returns exceed %s, more than the coordinator holds (--max-gather)", executor.SizeText(limit)).
					WithHint("Return fewer rows (a narrower WHERE or fewer columns), or write without RETURNING."), nil
			}
			if i := strings.LastIndexByte(c.tag, ' '); i >= 0 {
				n, _ := strconv.ParseInt(c.tag[i+1:], 10, 64)
				total += n
			}
		}
	}
	if rd != nil || len(rows) > 0 {
		// RETURNING: its rows go out before the tag, after the notices
		// (and its RowDescription, which the extended protocol's
		// statements, run without Describe, leave to the portal's).
		if rows, err = inOrder(rows, order); err != nil {
			return "", notices, nil, err, nil
		}
		if rd != nil {
			notices = wire.AppendFrame(notices, 'T', rd)
		}
		for _, r := range rows {
			dr := pgproto3.DataRow{Values: r}
			notices, _ = dr.Encode(notices)
		}
	}
	return writeTag(what, total), notices, nil, nil, nil
}

// writeGroups are a multi-shard write's statements by node.
func writeGroups(p *planner.Plan, snap *metadata.Snapshot, lits []literal) (map[int32][]string, error) {
	if x, ok := p.Root.(*planner.MultiShardWrite); ok && x.TimeFrozen {
		return nil, pgerr.New(pgerr.Internal, "a multi-shard write planned with a placeholder moment reached execution")
	}
	all := snap.Shards[p.DistTable()]
	if len(all) != len(p.ShardSQL()) {
		return nil, errCatalogMoved
	}
	byNode := map[int32][]string{}
	for i, sql := range p.ShardSQL() {
		if len(all[i].Nodes) == 0 {
			return nil, errCatalogMoved
		}
		if lits != nil {
			sql, _ = spliceLiterals(sql, lits)
		}
		byNode[all[i].Nodes[0]] = append(byNode[all[i].Nodes[0]], sql)
	}
	return byNode, nil
}

// multiWriteBind answers Bind of a multi-shard write over the extended
// protocol: the portal is kept in the session and runs at Execute, as a
// reference-table write's does (refext.go).
func (ss *session) multiWriteBind(portal string, st *Statement, params []byte) {
	sp, err := ss.stmtPlan(st)
	if err != nil {
		ss.synthError(err)
		return
	}
	switch {
	case ss.pinned != "" && ss.inTxn():
		ss.synthError(pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard write to %s is not supported in a transaction block of a session pinned to one worker connection (%s)", sp.plan.DistTable(), ss.pinned).
			WithHint("Run it outside BEGIN ... COMMIT, or reconnect."))
		return
	case ss.sc != nil && ss.sc.TxStatus == 'E' && !ss.needSync:
		ss.synthError(pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block"))
		return
	}
	if sp.plan.Returning() {
		ss.returningBind(portal, st, sp, params, false)
		return
	}
	ss.keepWritePortal(portal, st, sp, params, false)
}

// multiWriteExecute runs a multi-shard write portal: outside a
// transaction block in one two-phase commit group of its own, inside one
// joined into the transaction (writeInTxn). Its parameters go to every
// shard's statement as the client bound them (a multi-row INSERT's:
// insertParts).
func (ss *session) multiWriteExecute(sp *scatterPortal, body []byte) error {
	if ss.inParts(sp, body) {
		return nil
	}
	if ss.portalRan(sp) {
		return nil
	}
	p := sp.sp.plan
	what := "INSERT" // a multi-row INSERT's statements are made at Execute
	if len(p.ShardSQL()) > 0 {
		what, _, _ = strings.Cut(p.ShardSQL()[0], " ")
	}
	if err := ss.implicitPipeline(); err != nil {
		ss.synthError(err)
		return nil
	}
	inTxn := ss.inTxn()
	if ok, err := ss.writePortalReady(inTxn); !ok {
		return err
	}
	if !inTxn && ss.moreBeforeSync() {
		ss.synthError(errWriteBeforeMore)
		return nil
	}
	formats, values, ok := bindValues(sp.params)
	if !ok {
		return pgerr.Fatal(pgerr.ProtocolViolation, "invalid Bind message")
	}
	oids := paramOIDs(sp.st.paramTail)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if !ss.freshPortalPlan(sp) {
		ss.synthError(errCatalogMoved)
		return nil
	}
	p = sp.sp.plan
	if x, ok := p.Root.(*planner.MultiShardWrite); ok && x.TimeFrozen {
		// Planned with a placeholder moment: planned again with the
		// moment it runs at, or refused (in a transaction block).
		if err := ss.frozenPortal(ctx, sp, sp.sp.timeRead, values, formats, oids); err != nil {
			ss.txFailed = ss.txFailed || inTxn
			ss.synthError(err)
			return nil
		}
		p = sp.sp.plan
	}
	snap := ss.srv.catalog.Load()
	if err := ss.sameOnEveryCopy(ctx, p, nil, values, formats, oids); err != nil {
		if err = ss.frozenPortal(ctx, sp, err, values, formats, oids); err != nil {
			ss.txFailed = ss.txFailed || inTxn
			ss.synthError(err)
			return nil
		}
		p = sp.sp.plan
	}
	var byNode map[int32][]string
	var parts map[string]*insertPart // a multi-row INSERT's, by statement
	var err error
	if p.Kind() == planner.KindInsertSplit {
		byNode, parts, err = ss.insertParts(sp.sp, sp.st, sp.params, oids, formats, values, resultFormats(sp.results))
	} else {
		byNode, err = writeGroups(p, snap, nil)
	}
	if err != nil {
		ss.synthError(err)
		return nil
	}
	var order []int // RETURNING: the VALUES row of each row the shards return, in the order they run
	if p.Returning() && parts != nil {
		order = rowOrder(byNode, parts)
	}
	if inTxn {
		tag, notices, werr, fail, err := ss.writeInTxn(what, byNode, func(sql string) []byte {
			if parts != nil {
				return parts[sql].messages(sql)
			}
			parse := append(append([]byte{0}, sql...), 0)
			parse = append(parse, sp.st.paramTail...)
			if len(sp.st.paramTail) == 0 {
				parse = append(parse, 0, 0)
			}
			b := wire.AppendFrame(nil, 'P', parse)
			b = wire.AppendFrame(b, 'B', append(append([]byte{0, 0}, sp.params...), sp.results...))
			b = appendExecute(b)
			return appendSync(b)
		}, order)
		switch {
		case err != nil:
			return ss.lostServer(err)
		case fail != nil:
			ss.txFailed = true
			ss.synthError(fail)
			return nil
		case werr != nil:
			ss.txFailed = true
			// PostgreSQL's analysis error first (a data exception only:
			// the side connection does not see the transaction's work).
			var we *executor.WorkerError
			if errors.As(ss.analysisFirstBound(sp.st, formats, values, nil), &we) && strings.HasPrefix(we.PG.Code, "22") {
				werr = we.Body
			}
			ss.push(expect{kind: eSynth, synth: append(notices, wire.AppendFrame(nil, 'E', userNamesBody(ss.srv.catalog.Load(), ss.victimBody(werr)))...)})
			ss.skipping = true
			return nil
		}
		sp.tag = []byte(tag)
		ss.push(expect{kind: eSynth, synth: append(notices, commandComplete(nil, tag)...)})
		return nil
	}
	ss.lentUserCode = ss.stVerify(sp.st)
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		ss.synthError(err)
		return nil
	}
	params := &shards.Params{OIDs: oids, Formats: formats, Values: values, Results: resultFormats(sp.results)}
	if parts != nil {
		params.By = map[string]*shards.Params{}
		for sql, part := range parts {
			params.By[sql] = part.params
		}
	}
	var limit int64
	if p.Returning() {
		limit = ss.srv.cfg.MaxGather
	}
	res, err := shards.ExecGroupsRows(ctx, ss.srv.store, snap, conns, byNode, params, limit)
	if err != nil {
		ss.synthError(ss.analysisFirstBound(sp.st, formats, values, err))
		return nil
	}
	ss.refDone = true // it committed on its own: see errAfterRefWrite
	var out []byte
	if p.Returning() {
		rows, err := inOrder(res.Rows, order)
		if err != nil {
			ss.synthError(err)
			return nil
		}
		for _, r := range rows {
			out, _ = (&pgproto3.DataRow{Values: r}).Encode(out)
		}
	}
	sp.tag = []byte(writeTag(what, res.Affected))
	ss.push(expect{kind: eSynth, synth: commandComplete(out, string(sp.tag))})
	return nil
}
