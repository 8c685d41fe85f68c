package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// create_distributed_table and create_reference_table inside a transaction
// block (or a query string of several statements, whose implicit
// transaction is one), as migration tools send them: CREATE TABLE t ...;
// SELECT create_distributed_table('t', 'id'); CREATE INDEX ON t ...
//
// The call checks what it can at once (the table, the column, the catalog;
// an error fails the block, as PostgreSQL's would), locks the table against
// other writers in the block, takes every worker into the block and
// answers; the move itself waits for the block's COMMIT. Until then the
// table is the default node's, in the block's own transaction there, so
// later statements of the block read and write it there, and DDL on it
// (an index, a constraint) is part of the definition the shards get. At
// COMMIT the calls run in order on the block's connections
// (shards.DistributeInTxn: shards created and filled, the table emptied
// and guarded), each table fenced on every coordinator, and the block
// commits with two-phase commit on every worker, all or nothing: an error
// of a call (a unique constraint without the distribution column added
// after it, say) is the COMMIT's, and nothing of the block remains. As
// outside a block, the catalog change commits just before the shards do;
// it is removed again if the block does not commit (kept while the
// outcome is in doubt: recovery may commit it). ROLLBACK forgets the
// calls. The COMMIT finds each table by its OID and the distribution
// column by its number: the block may have renamed them since the call
// (or dropped the table: nothing to move).

// citusCall is a create_distributed_table or create_reference_table call's
// arguments.
type citusCall struct {
	fn       string // create_distributed_table or create_reference_table
	table    string // the table as the call names it
	name     string // its catalog name, once checked
	column   string // the distribution column ("" for a reference table)
	count    int    // shard_count (0: the default or the colocated table's)
	colocate string // colocate_with ("" for the default)
	oid      uint32 // the table, found again at COMMIT (it may be renamed)
	attnum   int16  // the distribution column, likewise (0: none)
	// The table's fence on the fleet, from the call to the block's end:
	// a reader that waited on a lock the block took could otherwise read
	// the emptied table after the COMMIT (found by an adversary). The
	// block itself passes it (ownFences).
	release func(done bool)
	token   uint64
}

// catalogPending reports whether the transaction block changes pgfleet's
// catalog when it commits (create_distributed_table or
// create_reference_table called in it, or DROP TABLE of a catalog table):
// its COMMIT is then multiEnd's, with two-phase commit decided in the
// metadata database, even on one worker.
func (ss *session) catalogPending() bool {
	return len(ss.citusPending) > 0 || len(ss.dropPending) > 0
}

// blockVersions numbers the catalogs sessions see while their blocks have
// dropped tables (negative, so that no plan made over one is taken for the
// coordinator's catalog's).
var blockVersions atomic.Int64

// catalog is the catalog as the session's statements see it: the
// coordinator's, less the tables its transaction block dropped, whose
// entries go at the block's COMMIT (multiEnd). A table of such a name made
// again in the block is then the plain table it is.
func (ss *session) catalog() *metadata.Snapshot {
	cur := ss.srv.catalog.Load()
	if len(ss.dropPending) == 0 || cur == nil {
		return cur
	}
	if ss.blockSnap != nil && ss.blockBase == cur && ss.blockDrops == len(ss.dropPending) {
		return ss.blockSnap
	}
	d := &metadata.Snapshot{Version: -blockVersions.Add(1), Nodes: cur.Nodes,
		Tables: maps.Clone(cur.Tables), Shards: maps.Clone(cur.Shards)}
	for _, name := range ss.dropPending {
		delete(d.Tables, name)
		delete(d.Shards, name)
	}
	ss.blockSnap, ss.blockBase, ss.blockDrops = d, cur, len(ss.dropPending)
	return d
}

// droppedInBlock refuses (0A000) create_distributed_table or
// create_reference_table of the table name (the catalog's spelling) when
// the block dropped a catalog table of that name: the COMMIT records the
// new table before it removes the old one.
func (ss *session) droppedInBlock(name string) error {
	if slices.Contains(ss.dropPending, name) {
		return pgerr.New(pgerr.FeatureNotSupported,
			"table %s was dropped earlier in this transaction block; distributing a table of that name in the same block is not supported", name).
			WithHint("COMMIT the DROP TABLE first, then distribute the new table.")
	}
	return nil
}

// releaseCitus lifts the fences of calls (done: the block committed).
func releaseCitus(calls []citusCall, done bool) {
	for _, c := range calls {
		if c.release != nil {
			c.release(done)
		}
	}
}

// ownFences are the tokens of the fences the session's block holds, nil
// when none.
func (ss *session) ownFences() map[uint64]bool {
	if len(ss.citusPending) == 0 {
		return nil
	}
	own := map[uint64]bool{}
	for _, c := range ss.citusPending {
		own[c.token] = true
	}
	return own
}

// funcArg is a Citus function's argument i, or the one named name, or def.
func funcArg(fn *planner.Function, i int, name, def string) string {
	if v, ok := fn.NamedArgs[name]; ok {
		return v
	}
	if i < len(fn.Args) {
		return fn.Args[i]
	}
	return def
}

// parseCitusCall reads the arguments of create_distributed_table or
// create_reference_table.
func parseCitusCall(fn *planner.Function) (citusCall, error) {
	c := citusCall{fn: fn.Name, table: funcArg(fn, 0, "table_name", "")}
	if c.table == "" {
		return c, pgerr.New(pgerr.InvalidParameterValue, "%s needs a table name", fn.Name)
	}
	if fn.Name != "create_distributed_table" {
		return c, nil
	}
	c.column = funcArg(fn, 1, "distribution_column", "")
	if t := funcArg(fn, 2, "distribution_type", "hash"); t != "hash" {
		return c, pgerr.New(pgerr.FeatureNotSupported, "distribution_type %q is not supported; only hash", t).
			WithHint("Leave distribution_type out (or say 'hash').")
	}
	if v := funcArg(fn, 4, "shard_count", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return c, pgerr.New(pgerr.InvalidParameterValue, "shard_count must be a positive integer")
		}
		c.count = n
	}
	if c.colocate = funcArg(fn, 3, "colocate_with", "default"); c.colocate == "default" {
		c.colocate = ""
	}
	return c, nil
}

// citusInTxn answers create_distributed_table or create_reference_table
// called in a transaction block: checked and recorded, to run at COMMIT.
func (ss *session) citusInTxn(fn *planner.Function) error {
	call, err := parseCitusCall(fn)
	if err == nil && fn.Name == "create_distributed_table" && call.column == "" {
		err = pgerr.New(pgerr.InvalidParameterValue, "create_distributed_table needs a distribution column")
	}
	switch {
	case ss.txStatus() == 'E':
		return ss.queryError(pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block"))
	case err != nil:
		ss.failBlock()
		return ss.queryError(err)
	case !ss.canTakeInAll() || len(ss.savepoints) > 0:
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"%s is not supported in a transaction block that has set transaction modes, savepoints or session settings only its worker knows", fn.Name).
			WithHint("Call it right after BEGIN (before SAVEPOINT, SET LOCAL or SET ROLE), or outside the block."))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	snap := ss.catalog() // (a table the block dropped is not in it)
	conns, giveBack, err := ss.borrowAll(ctx, snap)
	if giveBack == nil {
		return ss.queryError(err)
	}
	if err == nil {
		home := conns[ss.srv.defaultNode.Load()]
		var pending []string // (they are distributed first at COMMIT)
		for _, p := range ss.citusPending {
			pending = append(pending, p.name)
		}
		call.name, call.oid, err = shards.CheckInTxn(ctx, home, snap, pending, call.table, call.column)
		if err == nil {
			err = ss.droppedInBlock(call.name)
		}
		if err == nil && call.column != "" {
			err = home.QueryRow(ctx, "SELECT attnum FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attname = $2",
				call.oid, call.column).Scan(&call.attnum)
		}
	}
	if lost := giveBack(); lost != nil {
		return lost
	}
	for _, p := range ss.citusPending {
		if err == nil && p.oid == call.oid {
			err = pgerr.New(pgerr.DuplicateObject, "table %s is already distributed in this transaction", call.name)
		}
	}
	if err == nil {
		call.release, call.token, err = ss.srv.fenceFleetToken(ctx, call.name)
	}
	if err != nil {
		ss.failBlock()
		return ss.queryError(err)
	}
	ss.citusPending = append(ss.citusPending, call)
	rd := pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte(fn.Name), DataTypeOID: oidVoid,
		DataTypeSize: 4, TypeModifier: -1}}}
	ss.out, _ = rd.Encode(ss.out)
	ss.out, _ = (&pgproto3.DataRow{Values: [][]byte{{}}}).Encode(ss.out)
	ss.out = commandComplete(ss.out, "SELECT 1")
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// citusMoves is what citusRun did for a block's COMMIT: the catalog it
// left, the tables it recorded there, and the fences it holds.
type citusMoves struct {
	snap     *metadata.Snapshot
	recorded []string
	releases []func(done bool)
}

// citusRun runs the block's pending calls on its connections, in order,
// before its two-phase commit (see above). On error what it recorded is
// undone and the caller rolls the block back.
func (ss *session) citusRun(calls []citusCall) (*citusMoves, error) {
	s := ss.srv
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	m := &citusMoves{}
	conns, giveBack, err := ss.borrowAll(ctx, s.catalog.Load())
	if giveBack == nil {
		return nil, err
	}
	def := s.defaultNode.Load()
	for _, c := range calls {
		if err != nil {
			break
		}
		// The table as it is now: the block may have renamed it (or its
		// column) since the call, or dropped it (nothing to move).
		var table, name string
		var column *string
		qerr := conns[def].QueryRow(ctx, `SELECT c.oid::pg_catalog.regclass::text, n.nspname || '.' || c.relname,
				(SELECT a.attname::text FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = $2 AND NOT a.attisdropped)
			FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`,
			c.oid, c.attnum).Scan(&table, &name, &column)
		switch {
		case errors.Is(qerr, pgx.ErrNoRows):
			continue
		case qerr != nil:
			err = qerr
			continue
		case c.fn == "create_distributed_table" && column == nil:
			err = pgerr.New(pgerr.FeatureNotSupported, "the distribution column of %s was dropped after %s in this transaction", name, c.fn).
				WithHint("Call %s again with another column, or keep the column.", c.fn)
			continue
		}
		release, ferr := s.fenceFleet(ctx, name)
		if ferr != nil {
			err = ferr
			continue
		}
		m.releases = append(m.releases, release)
		s.ensureShardsSchema(ctx, ss.database, nodeAddrs(s.catalog.Load())...)
		var snap *metadata.Snapshot
		if c.fn == "create_reference_table" {
			snap, err = shards.CreateReferenceInTxn(ctx, s.store, conns, def, table)
		} else {
			snap, err = shards.DistributeInTxn(ctx, s.store, conns, def, table, *column, c.count, c.colocate)
		}
		if err == nil {
			m.snap, m.recorded = snap, append(m.recorded, name)
		}
	}
	if lost := giveBack(); lost != nil {
		m.end(s, false, false)
		return nil, lost
	}
	if err != nil {
		return nil, withCleanup(err, m.end(s, false, false))
	}
	return m, nil
}

// end follows the block's two-phase commit: committed, the new catalog is
// the coordinator's (and the fleet's); not, the tables recorded leave the
// catalog again, unless the outcome is in doubt (recovery may commit the
// shards). The fences go either way.
// It returns what it could not undo.
func (m *citusMoves) end(s *Server, committed, inDoubt bool) (problems []string) {
	ctx, cancel := context.WithTimeout(context.Background(), txCleanupTimeout)
	defer cancel()
	switch {
	case committed && m.snap == nil: // every table was dropped in the block
	case committed:
		s.changedCatalog(m.snap)
	case !inDoubt:
		for i := len(m.recorded) - 1; i >= 0; i-- {
			if _, err := s.store.DropTable(ctx, m.recorded[i]); err != nil {
				problems = append(problems, fmt.Sprintf("table %s could not be removed from the catalog: %v", m.recorded[i], err))
			}
		}
		fallthrough
	default:
		s.refreshCatalog(ctx)
	}
	for _, r := range m.releases {
		r(committed)
	}
	return problems
}
