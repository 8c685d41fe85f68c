package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Commit records (twophase/record.go): a transaction block over several
// workers keeps its commit decision in a table of one of its own workers'
// database, written and committed with that worker's transaction, instead
// of in the metadata database after preparing every worker.

// recordsRetry is how long after failing to make a database's records
// table the coordinator tries again; meanwhile its transactions record
// their decisions in the metadata database.
const recordsRetry = time.Minute

// recordTable is a database of a node (its recordKey) where RecordsTable
// exists (ok), or where making it failed at failedAt.
type recordTable struct {
	ok       bool
	making   bool // a session is making it now
	failedAt time.Time
}

// recordTables are the databases of nodes this coordinator has kept
// commit records in, by node and database: recovery forgets old records
// there.
type recordTables struct {
	mu sync.Mutex
	m  map[recordKey]*recordTable
}

type recordKey struct {
	node int32
	db   string
}

// recordsReady reports whether node's database db has the records table,
// making it if this coordinator has not seen it yet (as the superuser, on
// a connection of its own: once per database and process). The commit
// that made it sure of the table records its decision in the metadata
// database all the same: its transaction began before, and may not see
// a table made since (name lookups in a transaction see another
// session's DDL only once they take a lock).
func (s *Server) recordsReady(n metadata.Node, db string) bool {
	k := recordKey{n.ID, db}
	s.records.mu.Lock()
	t := s.records.m[k]
	if t != nil && (t.ok || t.making || time.Since(t.failedAt) < recordsRetry) {
		// (While another session makes it, this one decides in the
		// metadata database.)
		s.records.mu.Unlock()
		return t.ok
	}
	if s.records.m == nil {
		s.records.m = map[recordKey]*recordTable{}
	}
	if t == nil {
		t = &recordTable{}
		s.records.m[k] = t
	}
	t.making = true
	s.records.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.makeRecordsTable(ctx, n, db)
	s.records.mu.Lock()
	defer s.records.mu.Unlock()
	t.making = false
	if err != nil {
		t.failedAt = time.Now()
		s.log.Warn("cannot make the commit records table; transactions over several workers record their decisions in the metadata database",
			"node", n.Addr(), "database", db, "err", err)
		return false
	}
	t.ok = true
	return false
}

func (s *Server) makeRecordsTable(ctx context.Context, n metadata.Node, db string) error {
	c, err := s.directConnDB(ctx, n.Addr(), db)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return makeRecordsTable(ctx, c)
}

// makeRecordsTable makes the records table on c's database unless it is
// there. The schema, table and function must be a superuser's, with no
// trigger or rule on the table and no one else allowed to create in the
// schema (recordsTrusted): otherwise a role that made them first would
// run its code as the superuser, or read and forge records. Two
// coordinators making them at once: one of them fails, and finds them
// there.
func makeRecordsTable(ctx context.Context, c *pgx.Conn) error {
	if _, err := c.Exec(ctx, catalogPath); err != nil {
		return err
	}
	switch err := recordsTrusted(ctx, c); {
	case err == nil:
		// An older version's function (LANGUAGE sql) is replaced by
		// the current one, which is faster. Should that fail, the old
		// one still records correctly.
		var current bool
		if c.QueryRow(ctx, twophase.RecordsCurrentSQL).Scan(&current) == nil && !current {
			_, _ = c.Exec(ctx, twophase.RecordFunctionDDL, pgx.QueryExecModeSimpleProtocol)
		}
		return nil
	case !errors.Is(err, errNoRecords):
		return err
	}
	_, err := c.Exec(ctx, twophase.RecordsDDL, pgx.QueryExecModeSimpleProtocol)
	if terr := recordsTrusted(ctx, c); !errors.Is(terr, errNoRecords) {
		return terr // (what a failed DDL left, or a coordinator made meanwhile, is checked)
	}
	return err
}

// errNoRecords: the database has no schema pgfleet_txn.
var errNoRecords = errors.New("no schema pgfleet_txn")

// recordsTrusted checks, as a superuser on c, that schema pgfleet_txn,
// its table commits and its function record are what pgfleet made:
// errNoRecords without the schema, an error saying what is wrong when
// something else is there. Recovery reads and writes the table as the
// superuser only after this check.
func recordsTrusted(ctx context.Context, c *pgx.Conn) error {
	var schema, ok bool
	err := c.QueryRow(ctx, recordsTrustedSQL).Scan(&schema, &ok)
	switch {
	case err != nil:
		return err
	case !schema:
		return errNoRecords
	case !ok:
		return errors.New("schema pgfleet_txn is not pgfleet's: its schema, table commits or function record is missing or not a superuser's, " +
			"the table has triggers, rules, policies or privileges for another role, or another role may create objects in the schema; drop the schema as a superuser and pgfleet makes it again")
	}
	return nil
}

// recordsTrustedSQL: whether schema pgfleet_txn exists, and whether it is
// as RecordsDDL makes it (everything owned by superusers, nothing that
// runs code on the table, no privilege on it for another role, no one
// else creating in the schema).
const recordsTrustedSQL = `SELECT n.oid IS NOT NULL, n.oid IS NOT NULL
	AND (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) n.nspowner)
	AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) a WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
		AND NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) a.grantee), false))
	AND EXISTS (SELECT FROM pg_catalog.pg_class t
		WHERE t.relnamespace OPERATOR(pg_catalog.=) n.oid AND t.relname OPERATOR(pg_catalog.=) 'commits' AND t.relkind OPERATOR(pg_catalog.=) 'r'
		AND (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) t.relowner)
		AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(t.relacl) a WHERE NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) a.grantee), false))
		AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) t.oid)
		AND NOT EXISTS (SELECT FROM pg_catalog.pg_rewrite w WHERE w.ev_class OPERATOR(pg_catalog.=) t.oid)
		AND NOT EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid OPERATOR(pg_catalog.=) t.oid))
	AND EXISTS (SELECT FROM pg_catalog.pg_proc f
		WHERE f.pronamespace OPERATOR(pg_catalog.=) n.oid AND f.proname OPERATOR(pg_catalog.=) 'record' AND f.prosecdef
		AND (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) f.proowner))
	FROM (SELECT NULL) x LEFT JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) 'pgfleet_txn'`

// recordAbort records an abort for a group decided by a record unless
// its commit record is there, on c (a superuser's connection to the
// record's node and database), and returns the decision that stands.
func recordAbort(ctx context.Context, c *pgx.Conn, base string) (byte, error) {
	_, hash, ok := twophase.RecordOf(base)
	if !ok {
		return 0, fmt.Errorf("%s is not decided by a commit record", base)
	}
	// Without the table no record could be written: it is made, so that
	// the abort record stands against a commit still to come.
	if err := makeRecordsTable(ctx, c); err != nil {
		return 0, err
	}
	var secret *string
	if err := c.QueryRow(ctx, twophase.RecordAbortSQL, hash).Scan(&secret); err != nil {
		return 0, err
	}
	return twophase.RecordDecision(hash, secret), nil
}

// recordStore settles, for a session, the decision of a group decided by
// a record whose last part's answer was lost (twophase.Decider).
type recordStore struct {
	s  *Server
	db string
}

func (r *recordStore) Decide(context.Context, string) error {
	return errors.New("a group decided by a commit record is decided by its last part")
}

func (r *recordStore) Abort(ctx context.Context, base string) (byte, error) {
	node, _, ok := twophase.RecordOf(base)
	if !ok {
		return 0, fmt.Errorf("%s is not decided by a commit record", base)
	}
	n := r.s.catalog.Load().Node(node)
	if n == nil {
		return 0, fmt.Errorf("node %d of the commit record is not in the catalog", node)
	}
	c, err := r.s.directConnDB(ctx, n.Addr(), r.db)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	return recordAbort(ctx, c, base)
}

// recordsLost forgets that node's database db has the records table, after
// a commit found it (or its function) missing: the next commit makes it
// again.
func (s *Server) recordsLost(node int32, db string) {
	s.records.mu.Lock()
	defer s.records.mu.Unlock()
	if t := s.records.m[recordKey{node, db}]; t != nil && t.ok {
		t.ok = false
		t.failedAt = time.Time{}
	}
}

// recordedGroup starts the two-phase commit of a transaction block over
// all: decided by a commit record on the lowest node that wrote, or on the
// lowest node when none is known to have written, but never on the
// default node. NOTIFY runs there, where the fleet's listeners are: it
// stays prepared, so that PostgreSQL refuses a NOTIFY or LISTEN in the
// block (committed in one phase, a notification would reach listeners
// before the other workers' parts are visible). ok is false when the block
// must record its decision in the metadata database: the session keeps
// state on its connections (pinned, temporary objects: a worker refuses
// to prepare those, and the last part would commit them), or the node's
// records table cannot be made.
func (ss *session) recordedGroup(all []txConn) (g *twophase.Group, last int, ok bool) {
	// A SET in the block or user code may have made the transaction read
	// only after its writes (SET TRANSACTION READ ONLY), where the record
	// cannot be written but PREPARE works.
	if len(all) < 2 || ss.pinned != "" || ss.tempObjects || ss.txSet || len(ss.pending) > 0 || ss.paramsUnsure || ss.verifyState {
		return nil, 0, false
	}
	def := ss.srv.defaultNode.Load()
	last = -1
	for i, c := range all {
		if c.node != def && (last < 0 || slices.Contains(ss.wroteOn, c.node) && !slices.Contains(ss.wroteOn, all[last].node)) {
			last = i
		}
	}
	n := ss.srv.catalog.Load().Node(all[last].node)
	if n == nil || !ss.srv.recordsReady(*n, ss.database) {
		return nil, 0, false
	}
	return twophase.NewRecorded(twophase.NewRecord(n.ID), &recordStore{s: ss.srv, db: ss.database}), last, true
}

// refuseOwnGID refuses a client's PREPARE TRANSACTION, COMMIT PREPARED or
// ROLLBACK PREPARED of a global id in pgfleet's namespace: one would pass
// for pgfleet's own with recovery (which resolves it by a record or
// decision that does not exist), the others would end one of pgfleet's
// parts behind its coordinator's back (a half commit). A text that does
// not parse is left to the worker, which gives the syntax error.
//
// The parse reads strings as standard_conforming_strings on does. When
// the session may read them otherwise (the setting off, or a string of
// several statements that may turn it off first), a backslash could spell
// the id another way: such a statement is refused.
func refuseOwnGID(sql string, scsUnsure bool) error {
	if scsUnsure && strings.IndexByte(sql, '\\') >= 0 {
		return pgerr.New(pgerr.FeatureNotSupported,
			"PREPARE TRANSACTION, COMMIT PREPARED and ROLLBACK PREPARED with a backslash are not supported with standard_conforming_strings off, or in a string of several statements").
			WithHint("Turn standard_conforming_strings on (the default), and send the statement on its own.")
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil
	}
	for _, raw := range tree.Stmts {
		ts := raw.GetStmt().GetTransactionStmt()
		if ts != nil && strings.HasPrefix(ts.Gid, twophase.GIDPrefix) {
			return pgerr.New(pgerr.ReservedName, "transaction identifier %q is reserved for pgfleet's own prepared transactions", ts.Gid).
				WithHint("Use a transaction identifier that does not start with %q.", twophase.GIDPrefix)
		}
	}
	return nil
}
