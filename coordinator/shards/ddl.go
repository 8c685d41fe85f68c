package shards

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// ErrIndexLookup is DDLTables' answer for DROP INDEX, ALTER INDEX and
// ALTER INDEX ... RENAME, and for a foreign key that references a
// distributed table's primary key without naming its columns, when it was
// given no connection to the default node: which table an index belongs to,
// and a table's primary key, only the default node knows. Call DDLTables
// again with a connection to the default node.
var ErrIndexLookup = errors.New("shards: the statement names indexes; finding their tables needs a connection to the default node")

// TableExistsError is DDLTables' answer to CREATE TABLE of a distributed
// or reference table's name: the table exists, so PostgreSQL says so (an
// error, or a notice with IF NOT EXISTS) and creates nothing.
type TableExistsError struct {
	Table       string // schema.relname
	Relname     string
	IfNotExists bool
	Unqualified bool // named without its schema (resolved as public)
}

func (e *TableExistsError) Error() string {
	return fmt.Sprintf("relation %q already exists", e.Relname)
}

// DDLTables parses a statement and returns the catalog tables (as
// metadata.Table.Name spells them, "schema.relname") it changes, in the
// order it names them, or none: a statement that names no distributed or
// reference table, or that is not DDL at all (SELECT, INSERT, UPDATE,
// DELETE, MERGE, COPY, EXPLAIN, PREPARE, ...: the planner's business), or
// that does not parse (the default node will say why) gives nil and no
// error.
//
// DDL that RunDDL runs on every shard:
//
//   - CREATE [UNIQUE] INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON t ...
//     A unique index on a distributed table must include its distribution
//     column. CONCURRENTLY is dropped: the index is built inside the
//     distributed transaction, where it cannot be built concurrently, so it
//     blocks writes to the table while it is built.
//   - DROP INDEX [CONCURRENTLY] [IF EXISTS] i[, ...] of indexes of catalog
//     tables (CONCURRENTLY dropped likewise). This needs home, a connection
//     to the default node, to find the indexes' tables: without one,
//     DDLTables returns ErrIndexLookup for it when the catalog has tables.
//   - ALTER TABLE [IF EXISTS] [ONLY] t with any number of: ADD COLUMN, DROP
//     COLUMN, ALTER COLUMN ... TYPE, SET DEFAULT, DROP DEFAULT, SET NOT NULL,
//     DROP NOT NULL, ADD CONSTRAINT (CHECK, UNIQUE, PRIMARY KEY; unique and
//     primary keys of a distributed table must include its distribution
//     column; FOREIGN KEY as checkForeignKey allows), DROP CONSTRAINT,
//     VALIDATE CONSTRAINT, ALTER CONSTRAINT (a foreign key's DEFERRABLE).
//   - ALTER TABLE t RENAME COLUMN a TO b, ALTER TABLE t RENAME CONSTRAINT.
//   - TRUNCATE t[, ...].
//   - DROP TABLE [IF EXISTS] t[, ...] (RESTRICT only), which also removes
//     the catalog entries.
//
// Anything else that names a catalog table fails with 0A000 and a message
// naming the statement and the table: other ALTER TABLE subcommands
// (RENAME TO, SET SCHEMA, OWNER TO, storage parameters, ...), changing the
// type of, renaming or dropping a distribution column, foreign keys
// between a catalog table and another table, exclusion constraints, identity and serial columns
// and sequence defaults, DROP TABLE ... CASCADE, ALTER INDEX of their
// indexes, DROP SCHEMA of a schema that has them, CREATE TRIGGER, GRANT,
// VACUUM, LOCK, CREATE VIEW over them, and a DDL statement in a query
// string with several statements.
//
// Unqualified table names are taken to be in schema public, as the planner
// takes them.
func DDLTables(ctx context.Context, home *pgx.Conn, stmt string, snap *metadata.Snapshot) ([]string, error) {
	d, err := parseDDL(ctx, home, stmt, snap)
	if err != nil || d == nil {
		return nil, err
	}
	return d.tableNames(), nil
}

// RunDDL runs a DDL statement DDLTables recognises on every placement of
// every shard of every catalog table it changes, and the statement itself
// on the default node, where it changes the shell tables (so psql's \d
// shows the change), all or nothing: one transaction per node, made atomic
// with two-phase commit across all nodes, the default node included.
//
// Each shard gets the statement rewritten on its parse tree and deparsed:
// the table becomes the shard (schema.relname_<shardid>), and index and
// constraint names get the shard's suffix as Distribute gives them
// (TableDef.CreateSQL's naming, 63-byte shortening included). An index or
// constraint the statement leaves unnamed is named by PostgreSQL on the
// shell first (the statement runs there before the shards, in the default
// node's transaction), and the shards get that name with their suffix, so
// that a later DROP INDEX or DROP CONSTRAINT of it reaches them too. For
// DROP TABLE, the catalog entries are removed after every node has
// prepared and before any commits.
//
// It returns the command tag the default node gave the statement ("CREATE
// INDEX", "ALTER TABLE", "TRUNCATE TABLE", "DROP TABLE", "DROP INDEX") and
// the catalog after it: snap unchanged, or the catalog as DROP TABLE left
// it. On failure every node's transaction is rolled back and the error
// keeps the worker's SQLSTATE; an error on a shard names it and its node
// ("ALTER TABLE failed on shard public.t_102011 on node 2 (host:port):
// ..."); an error on the shell table is the default node's, unchanged, as
// PostgreSQL alone would have said it. Unsupported statements fail with
// 0A000 before anything changes. snap nil loads the catalog from store.
//
// RunDDL uses the connections it is given, outside any transaction of the
// client's: it cannot take part in a transaction block. shellDone, if not
// nil, is called once the shell's statement ran (as for RunDDLInTxn). A statement that
// names no catalog table (the catalog may have changed since DDLTables)
// simply runs on the default node in the same way.
func RunDDL(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	defaultNode int32, stmt string, shellDone func()) (tag string, newSnap *metadata.Snapshot, err error) {
	if store == nil {
		return "", nil, pgerr.New(pgerr.Internal, "shards: no metadata store")
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	home, err := n.conn(defaultNode)
	if err != nil {
		return "", nil, pgerr.New(pgerr.ConnectionFailure, "no open connection to the default node %d", defaultNode)
	}
	if snap == nil {
		if snap, err = store.Load(ctx); err != nil {
			return "", nil, err
		}
	}
	o := &op{store: store, nodes: n, home: defaultNode, g: newGroup("ddl", n, store), schemas: map[int32]bool{}}
	o.g.beginStmt = "BEGIN; SET LOCAL pgfleet.internal = 'on'; " + opLockTimeout
	o.learn(snap)

	// The default node's transaction first: DROP INDEX finds its tables
	// there.
	if _, err := o.g.begin(ctx, o.home); err != nil {
		return "", nil, o.fail(ctx, err)
	}
	d, err := parseDDL(ctx, home, stmt, snap)
	if err != nil {
		return "", nil, o.fail(ctx, err)
	}
	if d == nil {
		d = &ddl{text: stmt}
	}
	var placed []int32
	for _, tg := range d.targets {
		for _, sh := range snap.Shards[tg.table.Name] {
			placed = append(placed, sh.Nodes...)
		}
	}
	if err := o.checkNodes(ctx, placed); err != nil {
		return "", nil, o.fail(ctx, err)
	}

	tag, err = d.run(ctx, snap, home, n, defaultNode, shellDone, func(node int32) (*pgx.Conn, error) {
		tx, err := o.g.begin(ctx, node)
		if err != nil {
			return nil, err
		}
		return tx.conn, nil
	})
	if err != nil {
		return "", nil, o.fail(ctx, err)
	}

	if err := o.g.prepare(ctx); err != nil {
		return "", nil, o.fail(ctx, err)
	}
	newSnap = snap
	if d.drop {
		for i, tg := range d.targets {
			if i == 0 {
				// The first catalog change is the commit decision.
				after, err := store.DropTable(metadata.WithDecision(ctx, o.g.tp.Base), tg.table.Name)
				if err != nil {
					// Its answer may have been lost after it committed: settle.
					if err := o.g.settle(ctx, err); err != nil {
						return "", nil, o.fail(ctx, err)
					}
					if after, err = o.reload(ctx); err != nil {
						if len(d.targets) > 1 {
							return "", nil, o.partlyDropped(ctx, d.targets[1:], err)
						}
						if cerr := o.g.commit(ctx); cerr != nil {
							return "", nil, cerr
						}
						return "", nil, err
					}
				}
				o.g.tp.Decided = true
				newSnap = after
				continue
			}
			after, err := store.DropTable(ctx, tg.table.Name)
			if err != nil {
				// The catalog's answer may have been lost after it committed: look.
				now, lerr := store.Load(ctx)
				if lerr != nil || now.Table(tg.table.Name) != nil {
					return "", nil, o.partlyDropped(ctx, d.targets[i:], err)
				}
				after = now
			}
			newSnap = after
		}
		return tag, newSnap, o.g.commit(ctx)
	}
	if err := o.g.commit(ctx); err != nil {
		return "", nil, err
	}
	return tag, newSnap, nil
}

// partlyDropped ends a DROP TABLE whose catalog entries could be removed
// for some tables but not for the rest: those are gone from the catalog
// already, so the drop is committed on the nodes, and the error names the
// tables still in the catalog, whose shards and shells are gone.
func (o *op) partlyDropped(ctx context.Context, left []ddlTarget, cause error) error {
	var names []string
	for _, tg := range left {
		names = append(names, tg.table.Name)
	}
	cerr := o.g.commit(ctx)
	e := twophase.ToPgErr(cause)
	e.Message = fmt.Sprintf("the tables were dropped, but %s could not be removed from the catalog: %s",
		strings.Join(names, ", "), e.Message)
	e.Hint = fmt.Sprintf("Run DROP TABLE IF EXISTS %s again to remove them from the catalog.", strings.Join(names, ", "))
	if cerr != nil {
		e.Detail = strings.TrimSpace(e.Detail + "\n" + cerr.Error())
	}
	return e
}

// run runs d: the statement on the shell (home, the default node homeID's
// connection, inside a transaction), naming what it leaves unnamed, then
// each shard's statement on every placement, on conn(node) (inside a
// transaction of the same outcome). It returns the shell's command tag.
func (d *ddl) run(ctx context.Context, snap *metadata.Snapshot, home *pgx.Conn, n *nodes, homeID int32,
	shellDone func(), conn func(node int32) (*pgx.Conn, error)) (tag string, err error) {
	// The shell first: its errors are the user's, as PostgreSQL says them,
	// it takes the table's lock before any shard does, and it names what
	// the statement leaves unnamed.
	shellSQL, err := d.shellSQL()
	if err != nil {
		return "", err
	}
	var before []shellName
	if d.naming() {
		if before, err = d.shellNames(ctx, home); err != nil {
			return "", n.wrap(err, "cannot read the indexes and constraints of %s on node %s",
				d.targets[0].table.Name, n.describe(homeID))
		}
	}
	guard, err := d.guardFirst(ctx, home)
	if err != nil {
		return "", err
	}
	if d.cascade {
		only, err := d.keysOnly(ctx, home)
		if err != nil {
			return "", n.wrap(err, "cannot read what depends on %s on node %s", d.targets[0].table.Name, n.describe(homeID))
		}
		if only {
			// The shell's cascade drops the keys of other tables (with
			// PostgreSQL's notices), each shard's and copy's those on
			// its node, which are theirs (Django's DROP TABLE ... CASCADE).
			d.stmt.GetDropStmt().Behavior = pg_query.DropBehavior_DROP_CASCADE
			if shellSQL, err = d.deparse(d.stmt); err != nil {
				return "", err
			}
		}
	}
	ct, err := home.Exec(ctx, shellSQL)
	if err != nil {
		return "", twophase.ToPgErr(err)
	}
	tag = ct.String()
	if d.late != nil {
		return "", d.late
	}
	if guard != "" {
		if _, err := home.Exec(ctx, ReferencesGuardSQL(guard)); err != nil {
			return "", n.wrap(err, "cannot guard %s on node %s", guard, n.describe(homeID))
		}
	}
	if d.kind == "GRANT" {
		for _, tg := range d.targets {
			if err := checkSchemaUsage(ctx, home, pgx.Identifier{tg.schema, tg.rel}.Sanitize()); err != nil {
				return "", err
			}
		}
	}
	if shellDone != nil {
		shellDone()
	}
	if d.naming() {
		after, err := d.shellNames(ctx, home)
		if err != nil {
			return "", n.wrap(err, "cannot read the indexes and constraints of %s on node %s",
				d.targets[0].table.Name, n.describe(homeID))
		}
		if err := d.nameUnnamed(before, after); err != nil {
			return "", err
		}
	}

	if (d.drop || d.kind == "TRUNCATE") && len(d.targets) > 1 {
		return tag, d.runPerNode(ctx, snap, n, conn)
	}
	for _, tg := range d.targets {
		for _, sh := range snap.Shards[tg.table.Name] {
			shardQual := tg.table.ShardsIn() + "." + metadata.ShardName(tg.rel, sh.ID)
			sql, err := d.shardSQL(tg, sh.ID, func(rv *pg_query.RangeVar) (*pg_query.RangeVar, error) {
				return referencedShard(snap, rv, sh)
			})
			var pe *pgerr.Error
			if errors.As(err, &pe) {
				return "", err
			}
			if err != nil {
				return "", pgerr.New(pgerr.Internal, "cannot rewrite %s for shard %s: %v", d.kind, shardQual, err)
			}
			if tg.table.Kind == metadata.Reference {
				sql += metadata.CopiesMarker(len(sh.Nodes)) // TRUNCATE is a write every copy must get
			}
			for _, node := range sh.Nodes {
				c, err := conn(node)
				if err != nil {
					return "", err
				}
				if _, err := c.Exec(ctx, sql); err != nil {
					return "", n.wrap(err, "%s failed on shard %s on node %s",
						d.kind, shardQual, n.describe(node))
				}
			}
		}
	}
	return tag, nil
}

// keysOnly reports whether what depends on the tables a DROP TABLE ...
// CASCADE names (on the default node, as pg_depend has it for their
// shells) is foreign keys of other tables only, which their shards have
// too: nothing else (a view, a function's body) that the shards' cascade
// would not find.
func (d *ddl) keysOnly(ctx context.Context, home *pgx.Conn) (bool, error) {
	var names []string
	for _, tg := range d.targets {
		names = append(names, pgx.Identifier{tg.schema, tg.rel}.Sanitize())
	}
	var only bool
	err := home.QueryRow(ctx, `SELECT NOT EXISTS (
		SELECT FROM pg_catalog.pg_depend dep
		LEFT JOIN pg_catalog.pg_constraint k ON dep.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND k.oid = dep.objid
		WHERE dep.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND dep.deptype = 'n'
		  AND dep.refobjid = ANY (SELECT pg_catalog.to_regclass(x) FROM unnest($1::text[]) AS x)
		  AND (k.oid IS NULL OR k.contype <> 'f'))`, names).Scan(&only)
	return only, err
}

// guardFirst returns the table d guards, quoted as the statement names it,
// if the statement is to guard one ("" otherwise): a table CREATE TABLE
// makes (not one that exists: IF NOT EXISTS), or one ALTER TABLE changes,
// which must have no rows (0A000), read under the lock the statement takes.
func (d *ddl) guardFirst(ctx context.Context, home *pgx.Conn) (string, error) {
	if d.guard == nil {
		return "", nil
	}
	if !d.guardEmpty {
		// The table CREATE TABLE makes, in its schema or the first of the
		// search_path (current_schema: where it is made, whatever a
		// temporary table of that name would make the name resolve to).
		var rel *string
		var exists bool
		if err := home.QueryRow(ctx, `SELECT pg_catalog.quote_ident(s) || '.' || pg_catalog.quote_ident($2),
				pg_catalog.to_regclass(pg_catalog.quote_ident(s) || '.' || pg_catalog.quote_ident($2)) IS NOT NULL
			FROM coalesce(nullif($1, ''), pg_catalog.current_schema()) AS s`, d.guard.Schemaname, d.guard.Relname).Scan(&rel, &exists); err != nil {
			return "", twophase.ToPgErr(err)
		}
		if rel == nil || exists {
			return "", nil // (PostgreSQL's error, or IF NOT EXISTS of a table there)
		}
		return *rel, nil
	}
	rel := pgx.Identifier(rangeVarNames(d.guard)).Sanitize()
	var kind *string
	if err := home.QueryRow(ctx, "SELECT relkind::text FROM pg_catalog.pg_class WHERE oid = pg_catalog.to_regclass($1)", rel).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", twophase.ToPgErr(err)
	}
	if kind == nil {
		return "", nil // (IF EXISTS, or PostgreSQL's error)
	}
	if *kind != "r" && *kind != "p" {
		return "", nil // (PostgreSQL's error)
	}
	if *kind == "p" {
		// A partition's rows do not pass its parent's statement trigger.
		return "", unsupportedDDL("a foreign key from %s, which is partitioned and neither distributed nor a reference table, to %s is not supported", rel, describeTable(d.refs[0])).
			WithHint("Keep the key on tables that are distributed or reference tables.")
	}
	if _, err := home.Exec(ctx, "LOCK TABLE "+rel+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		return "", twophase.ToPgErr(err)
	}
	var rows bool
	if err := home.QueryRow(ctx, "SELECT EXISTS (SELECT FROM ONLY "+rel+")").Scan(&rows); err != nil {
		return "", twophase.ToPgErr(err)
	}
	if rows {
		return "", unsupportedDDL("a foreign key from %s, which has rows and is neither distributed nor a reference table, to %s is not supported",
			rel, describeTable(d.refs[0])).
			WithHint("Distribute %s first (create_distributed_table colocated with %s, or create_reference_table), then add the key.", rel, d.refs[0].Name)
	}
	return rel, nil
}

// runPerNode runs DROP TABLE or TRUNCATE of several catalog tables as one
// statement per node naming every shard and copy of theirs there, as the
// shells got it: PostgreSQL lets a TRUNCATE or DROP take a table that
// another of the statement's tables references by a foreign key (a
// distributed table's shards and the reference table's copy they
// reference), and refuses them one by one.
func (d *ddl) runPerNode(ctx context.Context, snap *metadata.Snapshot, n *nodes, conn func(node int32) (*pgx.Conn, error)) error {
	rels := map[int32][]*pg_query.Node{}
	markers := map[int32]map[string]bool{}
	for _, tg := range d.targets {
		for _, sh := range snap.Shards[tg.table.Name] {
			shard := metadata.ShardName(tg.rel, sh.ID)
			for _, node := range sh.Nodes {
				var rel *pg_query.Node
				if d.drop {
					rel = pg_query.MakeListNode([]*pg_query.Node{pg_query.MakeStrNode(tg.table.ShardsIn()), pg_query.MakeStrNode(shard)})
				} else {
					rel = &pg_query.Node{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{
						Schemaname: tg.table.ShardsIn(), Relname: shard, Inh: true, Relpersistence: "p"}}}
				}
				rels[node] = append(rels[node], rel)
				if tg.table.Kind == metadata.Reference {
					if markers[node] == nil {
						markers[node] = map[string]bool{}
					}
					markers[node][metadata.CopiesMarker(len(sh.Nodes))] = true
				}
			}
		}
	}
	for _, node := range slices.Sorted(maps.Keys(rels)) {
		var stmt *pg_query.Node
		if d.drop {
			stmt = &pg_query.Node{Node: &pg_query.Node_DropStmt{DropStmt: &pg_query.DropStmt{
				Objects: rels[node], RemoveType: pg_query.ObjectType_OBJECT_TABLE, Behavior: d.stmt.GetDropStmt().GetBehavior()}}}
		} else {
			t := d.stmt.GetTruncateStmt()
			stmt = &pg_query.Node{Node: &pg_query.Node_TruncateStmt{TruncateStmt: &pg_query.TruncateStmt{
				Relations: rels[node], RestartSeqs: t.RestartSeqs, Behavior: t.Behavior}}}
		}
		sql, err := d.deparse(stmt)
		if err != nil {
			return pgerr.New(pgerr.Internal, "cannot write %s for node %d: %v", d.kind, node, err)
		}
		for _, m := range slices.Sorted(maps.Keys(markers[node])) {
			sql += m
		}
		c, err := conn(node)
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, sql); err != nil {
			return n.wrap(err, "%s failed on node %s", d.kind, n.describe(node))
		}
	}
	return nil
}

// RunDDLInTxn runs a DDL statement DDLTables recognises inside a client's
// transaction block, as RunDDL runs it (the shell on the default node, the
// statement rewritten for every placement of every shard), on conns: the
// transaction's connections, one per active node, each inside the block.
// It begins, prepares and commits nothing: the client's COMMIT makes the
// change on every node (two-phase commit) or on none. DROP TABLE drops the
// shells and shards in the block and returns the catalog names of the
// tables it dropped: their catalog entries are the COMMIT's to remove,
// with its commit decision (store.DropTables under metadata.WithDecision).
// Without dropOK (the block has savepoints) DROP TABLE is refused (0A000).
// Everything DDLTables refuses is refused (0A000) before anything runs.
// The shell's TRUNCATE passes its guard trigger as pgfleet's own write, for
// that statement only. shellDone, if not nil, is called once the shell's
// statement ran (its notices are the client's; the shards' that follow are
// not).
func RunDDLInTxn(ctx context.Context, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	defaultNode int32, stmt string, dropOK bool, shellDone func()) (tag string, dropped []string, err error) {
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	for _, nd := range snap.Nodes {
		n.addrs[nd.ID] = nd.Addr()
	}
	home, err := n.conn(defaultNode)
	if err != nil {
		return "", nil, err
	}
	d, err := parseDDL(ctx, home, stmt, snap)
	if err != nil {
		return "", nil, err
	}
	if d == nil {
		d = &ddl{text: stmt}
	}
	if d.concurrent {
		// The analysis dropped CONCURRENTLY, which PostgreSQL refuses
		// in a transaction block.
		return "", nil, pgerr.New(pgerr.ActiveSQLTransaction, "%s CONCURRENTLY cannot run inside a transaction block", d.kind)
	}
	if d.drop && !dropOK {
		// A ROLLBACK TO an earlier savepoint would bring the tables back
		// on the workers while the COMMIT removed them from the catalog.
		return "", nil, pgerr.New(pgerr.FeatureNotSupported,
			"DROP TABLE of a distributed or reference table after a SAVEPOINT in a transaction block is not supported").
			WithHint("Drop it before the block's first SAVEPOINT, or outside BEGIN ... COMMIT.")
	}
	if d.kind == "TRUNCATE" {
		if _, err := home.Exec(ctx, "SELECT pg_catalog.set_config('pgfleet.internal', 'on', true)"); err != nil {
			return "", nil, err
		}
	}
	tag, err = d.run(ctx, snap, home, n, defaultNode, shellDone, n.conn)
	if err == nil && d.kind == "TRUNCATE" {
		_, err = home.Exec(ctx, "SELECT pg_catalog.set_config('pgfleet.internal', '', true)")
	}
	if err == nil && d.drop {
		for _, tg := range d.targets {
			dropped = append(dropped, tg.table.Name)
		}
	}
	return tag, dropped, err
}

// ddl is a DDL statement on catalog tables, analysed.
type ddl struct {
	kind    string // for messages: "CREATE INDEX", "ALTER TABLE", ...
	text    string // the statement as the client sent it
	version int32  // the parse tree's PostgreSQL version, for Deparse
	stmt    *pg_query.Node
	targets []ddlTarget
	drop    bool // DROP TABLE: the catalog entries go too
	// concurrent: the statement said CONCURRENTLY, which the analysis
	// dropped (so reshell too). DROP TABLE ... CASCADE is reshelled as
	// RESTRICT without it.
	concurrent bool
	// reshell: the shell gets the statement deparsed (CONCURRENTLY
	// dropped), not the text as sent.
	reshell bool
	// cascade: DROP TABLE ... CASCADE, run as RESTRICT unless what depends
	// on the tables are foreign keys only (keysOnly).
	cascade bool
	// late: the statement's refusal (a foreign key the shards could not
	// check), given once the shell's statement ran without PostgreSQL's
	// own error.
	late error
	// unnamedIndex: CREATE INDEX without a name; unnamed: constraints
	// without a name. The shell names them.
	unnamedIndex bool
	unnamed      []unnamedConstraint
	// index: ALTER INDEX ... RENAME's index, by its name on the default
	// node.
	index string
	// guard: CREATE TABLE or ALTER TABLE of a table that is neither
	// distributed nor a reference table, giving it foreign keys to refs,
	// which are. It gets the references guard (ReferencesGuardSQL), so it
	// takes no rows until it is distributed too; guardEmpty (ALTER TABLE):
	// it must have none already, for the key is checked against the empty
	// shells.
	guard      *pg_query.RangeVar
	guardEmpty bool
	refs       []*metadata.Table
}

// ddlTarget is one catalog table a statement changes (for DROP INDEX, one
// index of it).
type ddlTarget struct {
	table  *metadata.Table
	schema string
	rel    string
	index  string // DROP INDEX: the index's name, in the table's schema
}

// unnamedConstraint is a constraint the statement adds without a name, with
// what identifies the one PostgreSQL makes of it on the shell.
type unnamedConstraint struct {
	c    *pg_query.Constraint
	typ  string   // pg_constraint.contype: "p", "u", "c", "f"
	cols []string // its columns (conkey), sorted
}

func (d *ddl) tableNames() []string {
	var out []string
	for _, tg := range d.targets {
		if !slices.Contains(out, tg.table.Name) {
			out = append(out, tg.table.Name)
		}
	}
	for _, t := range d.refs {
		if !slices.Contains(out, t.Name) {
			out = append(out, t.Name)
		}
	}
	return out
}

// referencedOnly returns the catalog tables a statement names, and whether
// it names them only as the tables foreign keys reference.
func referencedOnly(n *pg_query.Node, snap *metadata.Snapshot) ([]*metadata.Table, bool) {
	pk := map[*pg_query.RangeVar]bool{}
	planner.Walk(n, func(m proto.Message) {
		if c, ok := m.(*pg_query.Constraint); ok && c.Contype == pg_query.ConstrType_CONSTR_FOREIGN && c.Pktable != nil {
			pk[c.Pktable] = true
		}
	})
	var refs []*metadata.Table
	only := true
	planner.Walk(n, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok {
			if t := catalogTable(snap, rv); t != nil {
				only = only && pk[rv]
				if !slices.Contains(refs, t) {
					refs = append(refs, t)
				}
			}
		}
	})
	return refs, only
}

// guardable reports whether a CREATE TABLE makes a plain table that may
// reference catalog tables (guarded): not temporary, inherited,
// partitioned or typed.
func guardable(cs *pg_query.CreateStmt) bool {
	return cs.Relation != nil && cs.Relation.Relpersistence != "t" && len(cs.InhRelations) == 0 &&
		cs.Partbound == nil && cs.Partspec == nil && cs.OfTypename == nil
}

func (d *ddl) addTarget(t *metadata.Table, index string) {
	for _, tg := range d.targets {
		if tg.table == t && tg.index == index {
			return
		}
	}
	schema, rel, _ := strings.Cut(t.Name, ".")
	d.targets = append(d.targets, ddlTarget{table: t, schema: schema, rel: rel, index: index})
}

// parseDDL parses and analyses a statement; nil if it changes no catalog
// table.
func parseDDL(ctx context.Context, home *pgx.Conn, text string, snap *metadata.Snapshot) (*ddl, error) {
	if snap == nil || len(snap.Tables) == 0 {
		return nil, nil
	}
	tree, err := pg_query.Parse(text)
	if err != nil {
		return nil, nil // the default node reports the syntax error
	}
	var found *ddl
	for _, raw := range tree.Stmts {
		d, err := analyzeDDL(ctx, home, raw.Stmt, snap)
		var exists *TableExistsError
		if errors.As(err, &exists) && len(tree.Stmts) > 1 {
			err = pgerr.New(pgerr.FeatureNotSupported,
				"CREATE TABLE of %s in a query string with several statements is not supported", exists.Table).
				WithHint("Send the statement on its own.")
		}
		if err != nil {
			return nil, err
		}
		if d != nil && len(tree.Stmts) > 1 && d.guard != nil {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"%s with a foreign key to %s in a query string with several statements is not supported", d.kind, describeTable(d.refs[0])).
				WithHint("Send the statement on its own.")
		}
		if d != nil && len(tree.Stmts) > 1 {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"%s on %s in a query string with several statements is not supported", d.kind, describeTable(d.targets[0].table)).
				WithHint("Send the statement on its own.")
		}
		found = d
	}
	if found != nil {
		found.text = text
		found.version = tree.Version
	}
	return found, nil
}

// analyzeDDL analyses one statement: nil if it changes no catalog table, an
// error if it names one in a way that is not supported.
func analyzeDDL(ctx context.Context, home *pgx.Conn, n *pg_query.Node, snap *metadata.Snapshot) (*ddl, error) {
	switch n.Node.(type) {
	case *pg_query.Node_SelectStmt, *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt, *pg_query.Node_DeleteStmt,
		*pg_query.Node_MergeStmt, *pg_query.Node_ExplainStmt, *pg_query.Node_CopyStmt, *pg_query.Node_DeclareCursorStmt,
		*pg_query.Node_PrepareStmt, *pg_query.Node_ExecuteStmt, *pg_query.Node_CallStmt, *pg_query.Node_DoStmt,
		*pg_query.Node_TransactionStmt, *pg_query.Node_VariableSetStmt, *pg_query.Node_VariableShowStmt:
		return nil, nil
	case *pg_query.Node_IndexStmt:
		return analyzeIndex(n, snap)
	case *pg_query.Node_AlterTableStmt:
		return analyzeAlter(ctx, home, n, snap)
	case *pg_query.Node_RenameStmt:
		return analyzeRename(ctx, home, n, snap)
	case *pg_query.Node_TruncateStmt:
		d := &ddl{kind: "TRUNCATE", stmt: n}
		for _, r := range n.GetTruncateStmt().Relations {
			if t := catalogTable(snap, r.GetRangeVar()); t != nil {
				d.addTarget(t, "")
			}
		}
		if len(d.targets) == 0 {
			return nil, refuseNamed(n, snap, "TRUNCATE")
		}
		return d, nil
	case *pg_query.Node_DropStmt:
		return analyzeDrop(ctx, home, n, snap)
	case *pg_query.Node_GrantStmt:
		return analyzeGrant(n, snap)
	case *pg_query.Node_CreateStmt:
		cs := n.GetCreateStmt()
		if cs.Relation != nil && cs.Relation.Relpersistence != "t" && len(cs.InhRelations) == 0 && cs.Partbound == nil {
			if t := catalogTable(snap, cs.Relation); t != nil {
				return nil, &TableExistsError{Table: t.Name, Relname: cs.Relation.Relname,
					IfNotExists: cs.IfNotExists, Unqualified: cs.Relation.Schemaname == ""}
			}
		}
		if refs, only := referencedOnly(n, snap); only && len(refs) > 0 && guardable(cs) {
			return &ddl{kind: "CREATE TABLE", stmt: n, guard: cs.Relation, refs: refs}, nil
		}
	}
	return nil, refuseNamed(n, snap, planner.StatementName(n))
}

// analyzeGrant: GRANT or REVOKE of table privileges on catalog tables,
// named or ALL TABLES IN SCHEMA, runs on the shell and every shard, so a
// shard's privileges stay its table's (Def.privilegeSQL gave it them).
// WITH GRANT OPTION is refused: a grant-option holder's grants would be
// recorded as its own, which a shard copied by a later move could not
// reproduce (its creator grants as the owner).
func analyzeGrant(n *pg_query.Node, snap *metadata.Snapshot) (*ddl, error) {
	s := n.GetGrantStmt()
	kind := "REVOKE"
	if s.IsGrant {
		kind = "GRANT"
	}
	d := &ddl{kind: kind, stmt: n}
	if s.Objtype == pg_query.ObjectType_OBJECT_TABLE {
		switch s.Targtype {
		case pg_query.GrantTargetType_ACL_TARGET_OBJECT:
			for _, o := range s.Objects {
				if t := catalogTable(snap, o.GetRangeVar()); t != nil {
					d.addTarget(t, "")
				}
			}
		case pg_query.GrantTargetType_ACL_TARGET_ALL_IN_SCHEMA:
			for _, o := range s.Objects {
				schema := o.GetString_().GetSval()
				for _, name := range slices.Sorted(maps.Keys(snap.Tables)) {
					if t := snap.Tables[name]; t.Schema() == schema {
						d.addTarget(t, "")
					}
				}
			}
		}
	}
	if len(d.targets) == 0 {
		return nil, refuseNamed(n, snap, planner.StatementName(n))
	}
	if s.IsGrant && s.GrantOption {
		return nil, unsupportedDDL("GRANT ... WITH GRANT OPTION on %s is not supported", describeTable(d.targets[0].table)).
			WithHint("Grant the privileges without GRANT OPTION, as the table's owner; its shards take the owner's grants.")
	}
	return d, nil
}

func analyzeIndex(n *pg_query.Node, snap *metadata.Snapshot) (*ddl, error) {
	s := n.GetIndexStmt()
	t := catalogTable(snap, s.Relation)
	if t == nil {
		return nil, refuseNamed(n, snap, "CREATE INDEX")
	}
	kind := "CREATE INDEX"
	if s.Unique {
		kind = "CREATE UNIQUE INDEX"
	}
	if s.Unique && t.Kind == metadata.Distributed && !indexIncludes(s.IndexParams, t.DistColumn) {
		return nil, unsupportedDDL("%s on %s must include its distribution column %q", kind, describeTable(t), t.DistColumn).
			WithHint("Shards can enforce uniqueness only over columns that include the distribution column.")
	}
	d := &ddl{kind: "CREATE INDEX", stmt: n}
	d.addTarget(t, "")
	if s.Concurrent {
		s.Concurrent = false
		d.reshell, d.concurrent = true, true
	}
	d.unnamedIndex = s.Idxname == ""
	return d, nil
}

// indexIncludes reports whether an index's key columns include column.
func indexIncludes(params []*pg_query.Node, column string) bool {
	for _, p := range params {
		e := p.GetIndexElem()
		if e == nil {
			continue
		}
		if e.Name == column {
			return true
		}
		if cr := e.Expr.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_().GetSval() == column {
			return true
		}
	}
	return false
}

func analyzeAlter(ctx context.Context, home *pgx.Conn, n *pg_query.Node, snap *metadata.Snapshot) (*ddl, error) {
	s := n.GetAlterTableStmt()
	if s.Objtype == pg_query.ObjectType_OBJECT_INDEX {
		return nil, refuseIndex(ctx, home, snap, "ALTER INDEX", [][]string{rangeVarNames(s.Relation)})
	}
	t := catalogTable(snap, s.Relation)
	if t == nil && s.Objtype == pg_query.ObjectType_OBJECT_TABLE {
		if refs, only := referencedOnly(n, snap); only && len(refs) > 0 {
			return &ddl{kind: "ALTER TABLE", stmt: n, guard: s.Relation, guardEmpty: true, refs: refs}, nil
		}
	}
	if t == nil || s.Objtype != pg_query.ObjectType_OBJECT_TABLE {
		return nil, refuseNamed(n, snap, "ALTER "+objectName(s.Objtype))
	}
	d := &ddl{kind: "ALTER TABLE", stmt: n}
	d.addTarget(t, "")
	for _, c := range s.Cmds {
		cmd := c.GetAlterTableCmd()
		if cmd == nil {
			return nil, unsupportedDDL("ALTER TABLE on %s: unexpected command", describeTable(t)).
				WithHint("Report it to pgfleet's developers with the statement.")
		}
		isDist := t.Kind == metadata.Distributed && cmd.Name == t.DistColumn && cmd.Name != ""
		switch cmd.Subtype {
		case pg_query.AlterTableType_AT_AddColumn:
			cd := cmd.Def.GetColumnDef()
			if cd == nil {
				return nil, unsupportedDDL("ALTER TABLE ... ADD COLUMN on %s: unexpected definition", describeTable(t)).
					WithHint("Report it to pgfleet's developers with the statement.")
			}
			if err := d.checkColumn(ctx, home, snap, t, cd); err != nil {
				return nil, err
			}
		case pg_query.AlterTableType_AT_DropColumn:
			if t.Sequence(cmd.Name) != nil {
				return nil, seqColumnDDL(t, cmd.Name, "dropping")
			}
			if isDist {
				return nil, unsupportedDDL("dropping the distribution column %q of %s is not supported", cmd.Name, describeTable(t)).
					WithHint("Undistribute the table first: SELECT undistribute_table('%s').", t.Name)
			}
		case pg_query.AlterTableType_AT_AlterColumnType:
			if isDist {
				return nil, unsupportedDDL("changing the type of the distribution column %q of %s is not supported", cmd.Name, describeTable(t)).
					WithHint("Undistribute the table first: SELECT undistribute_table('%s').", t.Name)
			}
		case pg_query.AlterTableType_AT_ColumnDefault:
			if t.Sequence(cmd.Name) != nil {
				return nil, seqColumnDDL(t, cmd.Name, "changing the default of")
			}
			if hasNextval(cmd.Def) {
				return nil, sequenceDefault(t, cmd.Name)
			}
		case pg_query.AlterTableType_AT_SetNotNull, pg_query.AlterTableType_AT_DropNotNull,
			pg_query.AlterTableType_AT_DropConstraint, pg_query.AlterTableType_AT_ValidateConstraint,
			pg_query.AlterTableType_AT_AlterConstraint:
		case pg_query.AlterTableType_AT_AddConstraint:
			c := cmd.Def.GetConstraint()
			if c == nil {
				return nil, unsupportedDDL("ALTER TABLE ... ADD CONSTRAINT on %s: unexpected definition", describeTable(t)).
					WithHint("Report it to pgfleet's developers with the statement.")
			}
			if err := d.checkConstraint(ctx, home, snap, t, c, ""); err != nil {
				return nil, err
			}
		default:
			return nil, unsupportedDDL("ALTER TABLE ... %s on %s is not supported", alterName(cmd.Subtype), describeTable(t)).
				WithHint("undistribute_table(), make the change, then distribute the table again.")
		}
	}
	return d, nil
}

// checkColumn checks a column ADD COLUMN adds to t.
func (d *ddl) checkColumn(ctx context.Context, home *pgx.Conn, snap *metadata.Snapshot, t *metadata.Table, cd *pg_query.ColumnDef) error {
	if names := cd.TypeName.GetNames(); len(names) == 1 {
		switch typ := names[0].GetString_().GetSval(); typ {
		case "serial", "serial4", "bigserial", "serial8", "smallserial", "serial2":
			return unsupportedDDL("ADD COLUMN %q %s on %s is not supported yet: a sequence column is taken on when the table is distributed",
				cd.Colname, typ, describeTable(t)).WithHint("undistribute_table(), add the column, then distribute the table again; or give the column a type without a sequence.")
		}
	}
	if cd.Identity != "" {
		return unsupportedDDL("adding identity column %q to %s is not supported yet: a sequence column is taken on when the table is distributed", cd.Colname, describeTable(t)).
			WithHint("undistribute_table(), add the column, then distribute the table again; or add a plain column.")
	}
	if hasNextval(cd.RawDefault) {
		return sequenceDefault(t, cd.Colname)
	}
	for _, cn := range cd.Constraints {
		c := cn.GetConstraint()
		if c == nil {
			continue
		}
		if err := d.checkConstraint(ctx, home, snap, t, c, cd.Colname); err != nil {
			return err
		}
	}
	return nil
}

// checkConstraint checks a constraint added to t: a table constraint, or
// one of column col's. It notes unnamed ones for the shell to name.
func (d *ddl) checkConstraint(ctx context.Context, home *pgx.Conn, snap *metadata.Snapshot, t *metadata.Table, c *pg_query.Constraint, col string) error {
	var typ string
	var cols []string
	switch c.Contype {
	case pg_query.ConstrType_CONSTR_NULL, pg_query.ConstrType_CONSTR_NOTNULL, pg_query.ConstrType_CONSTR_GENERATED,
		pg_query.ConstrType_CONSTR_ATTR_DEFERRABLE, pg_query.ConstrType_CONSTR_ATTR_NOT_DEFERRABLE,
		pg_query.ConstrType_CONSTR_ATTR_DEFERRED, pg_query.ConstrType_CONSTR_ATTR_IMMEDIATE:
		return nil
	case pg_query.ConstrType_CONSTR_DEFAULT:
		if hasNextval(c.RawExpr) {
			return sequenceDefault(t, col)
		}
		return nil
	case pg_query.ConstrType_CONSTR_IDENTITY:
		return unsupportedDDL("identity column %q on %s is not supported", col, describeTable(t)).
			WithHint("Keep the column plain and give its values explicitly.")
	case pg_query.ConstrType_CONSTR_FOREIGN:
		typ = "f"
		var err error
		cols, err = checkForeignKey(ctx, home, snap, t, c, col)
		var pe *pgerr.Error
		if errors.As(err, &pe) && pe.Code == pgerr.FeatureNotSupported {
			// Refused after the shell's statement, whose errors are
			// PostgreSQL's (a missing column, 42703; no unique key, 42830).
			if d.late == nil {
				d.late = err
			}
			return nil
		}
		if err != nil {
			return err
		}
	case pg_query.ConstrType_CONSTR_EXCLUSION:
		return unsupportedDDL("adding an exclusion constraint to %s is not supported", describeTable(t)).
			WithHint("undistribute_table(), add the constraint, then distribute the table again.")
	case pg_query.ConstrType_CONSTR_CHECK:
		typ = "c"
		planner.Walk(c.RawExpr, func(m proto.Message) {
			if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) > 0 {
				if name := cr.Fields[len(cr.Fields)-1].GetString_().GetSval(); name != "" && !slices.Contains(cols, name) {
					cols = append(cols, name)
				}
			}
		})
	case pg_query.ConstrType_CONSTR_PRIMARY, pg_query.ConstrType_CONSTR_UNIQUE:
		what := "UNIQUE"
		typ = "u"
		if c.Contype == pg_query.ConstrType_CONSTR_PRIMARY {
			what, typ = "PRIMARY KEY", "p"
		}
		if c.Indexname != "" {
			return unsupportedDDL("%s ... USING INDEX on %s is not supported", what, describeTable(t)).
				WithHint("Add the constraint with its columns instead.")
		}
		if col != "" {
			cols = []string{col}
		} else {
			for _, k := range c.Keys {
				cols = append(cols, k.GetString_().GetSval())
			}
		}
		if t.Kind == metadata.Distributed && !slices.Contains(cols, t.DistColumn) {
			return unsupportedDDL("%s constraint on %s must include its distribution column %q", what, describeTable(t), t.DistColumn).
				WithHint("Shards can enforce uniqueness only over columns that include the distribution column.")
		}
	default:
		return unsupportedDDL("constraint of kind %s on %s is not supported", strings.TrimPrefix(c.Contype.String(), "CONSTR_"), describeTable(t)).
			WithHint("Use CHECK, NOT NULL, UNIQUE or PRIMARY KEY constraints (unique ones including the distribution column).")
	}
	if c.Conname == "" {
		slices.Sort(cols)
		d.unnamed = append(d.unnamed, unnamedConstraint{c: c, typ: typ, cols: cols})
	}
	return nil
}

// checkForeignKey checks a foreign key added to t (a table constraint, or
// column col's REFERENCES) and returns its columns. A shard checks its rows
// against the tables on its own node, so the referenced table must be
// there whole for every shard: a reference table (from a distributed or a
// reference table), or a distributed table colocated with t whose
// distribution column the key pairs with t's (each shard then references
// the shard of the same hash range, on the same node). An action that
// would change t's distribution column in place (ON UPDATE CASCADE, SET
// NULL or SET DEFAULT of it; ON DELETE SET NULL or SET DEFAULT of it) is
// refused, as is SET DEFAULT on a reference table (each copy would compute
// its own default).
func checkForeignKey(ctx context.Context, home *pgx.Conn, snap *metadata.Snapshot, t *metadata.Table, c *pg_query.Constraint, col string) ([]string, error) {
	var cols []string
	if col != "" {
		cols = []string{col}
	} else {
		for _, k := range c.FkAttrs {
			cols = append(cols, k.GetString_().GetSval())
		}
	}
	pk := catalogTable(snap, c.Pktable)
	if pk == nil {
		name := strings.Join(rangeVarNames(c.Pktable), ".")
		if home == nil {
			return nil, ErrIndexLookup // (whether the table exists)
		}
		var missing bool
		if err := home.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NULL",
			pgx.Identifier(rangeVarNames(c.Pktable)).Sanitize()).Scan(&missing); err != nil {
			return nil, twophase.ToPgErr(err)
		}
		if missing {
			return cols, nil // PostgreSQL's 42P01, on the shell
		}
		return nil, unsupportedDDL("foreign key from %s to %s, which is neither a distributed nor a reference table, is not supported", describeTable(t), name).
			WithHint("Make %s a reference table first (SELECT create_reference_table('%s')), or distribute it colocated with %s.", name, name, t.Name)
	}
	if t.Kind == metadata.Reference && pk.Kind != metadata.Reference {
		return nil, unsupportedDDL("foreign key from %s to %s is not supported", describeTable(t), describeTable(pk)).
			WithHint("A reference table's copies can reference reference tables only: the rows of a distributed table are spread over the nodes.")
	}
	if c.FkUpdAction == "d" || c.FkDelAction == "d" {
		if t.Kind == metadata.Reference {
			return nil, unsupportedDDL("ON DELETE or ON UPDATE SET DEFAULT on foreign keys of %s is not supported", describeTable(t)).
				WithHint("Each copy would compute the default on its own; use SET NULL, CASCADE, RESTRICT or NO ACTION.")
		}
	}
	if t.Kind != metadata.Distributed {
		return cols, nil
	}
	if pk.Kind == metadata.Distributed {
		if pk.ColocationID != t.ColocationID {
			return nil, unsupportedDDL("foreign key from %s to %s, which is not colocated with it, is not supported", describeTable(t), describeTable(pk)).
				WithHint("Distribute %s colocated with %s (create_distributed_table(..., colocate_with => '%s')), or make %s a reference table.", t.Name, pk.Name, pk.Name, pk.Name)
		}
		pkCols, err := referencedColumns(ctx, home, pk, c)
		if err != nil {
			return nil, err
		}
		i := slices.Index(cols, t.DistColumn)
		if len(pkCols) == len(cols) && (i < 0 || pkCols[i] != pk.DistColumn) {
			return nil, unsupportedDDL("foreign key from %s to %s must pair their distribution columns %q and %q", describeTable(t), describeTable(pk), t.DistColumn, pk.DistColumn).
				WithHint("Include %q in the key, referencing %q: each shard then references the shard of the same hash range, on its node.", t.DistColumn, pk.DistColumn)
		}
	}
	if slices.Contains(cols, t.DistColumn) {
		setCols := cols
		if len(c.FkDelSetCols) > 0 {
			setCols = nil
			for _, k := range c.FkDelSetCols {
				setCols = append(setCols, k.GetString_().GetSval())
			}
		}
		if c.FkUpdAction == "c" || c.FkUpdAction == "n" || c.FkUpdAction == "d" ||
			(c.FkDelAction == "n" || c.FkDelAction == "d") && slices.Contains(setCols, t.DistColumn) {
			return nil, unsupportedDDL("a foreign key action that changes the distribution column %q of %s is not supported", t.DistColumn, describeTable(t)).
				WithHint("The row would stay in the shard of its old value. Use ON UPDATE NO ACTION or RESTRICT, and ON DELETE CASCADE, RESTRICT or NO ACTION.")
		}
	}
	return cols, nil
}

// referencedColumns are the columns a foreign key references in pk: its
// own list, or pk's primary key, read on the default node (home; without
// it, ErrIndexLookup asks for it).
func referencedColumns(ctx context.Context, home *pgx.Conn, pk *metadata.Table, c *pg_query.Constraint) ([]string, error) {
	var cols []string
	for _, k := range c.PkAttrs {
		cols = append(cols, k.GetString_().GetSval())
	}
	if len(cols) > 0 {
		return cols, nil
	}
	if home == nil {
		return nil, ErrIndexLookup
	}
	schema, rel, _ := strings.Cut(pk.Name, ".")
	err := home.QueryRow(ctx, `SELECT ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY AS u(attnum, i)
			JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum ORDER BY u.i)
		FROM pg_catalog.pg_constraint k WHERE k.conrelid = pg_catalog.to_regclass($1) AND k.contype = 'p'`,
		pgx.Identifier{schema, rel}.Sanitize()).Scan(&cols)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil // PostgreSQL says there is no primary key
	}
	if err != nil {
		return nil, twophase.ToPgErr(err)
	}
	return cols, nil
}

// seqColumnDDL refuses a change to a column whose values the coordinator
// draws from its sequence (the catalog would no longer say so).
func seqColumnDDL(t *metadata.Table, col, what string) error {
	return unsupportedDDL("%s column %q of %s, whose values come from a sequence, is not supported yet", what, col, describeTable(t)).
		WithHint("undistribute_table(), make the change, then distribute the table again.")
}

func sequenceDefault(t *metadata.Table, col string) error {
	return unsupportedDDL("a new sequence default (nextval) for column %q of %s is not supported yet: a sequence column is taken on when the table is distributed",
		col, describeTable(t)).WithHint("undistribute_table(), set the default, then distribute the table again; or give the column's values explicitly.")
}

// hasNextval reports whether an expression calls nextval().
func hasNextval(n *pg_query.Node) bool {
	found := false
	planner.Walk(n, func(m proto.Message) {
		if fc, ok := m.(*pg_query.FuncCall); ok && len(fc.Funcname) > 0 &&
			fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval() == "nextval" {
			found = true
		}
	})
	return found
}

func analyzeRename(ctx context.Context, home *pgx.Conn, n *pg_query.Node, snap *metadata.Snapshot) (*ddl, error) {
	s := n.GetRenameStmt()
	switch s.RenameType {
	case pg_query.ObjectType_OBJECT_INDEX:
		// Each shard's index has the index's name with the shard's
		// suffix (shardSQL), and gets the new name so (Rails renames
		// the indexes named after a column it renames).
		if home == nil {
			return nil, ErrIndexLookup
		}
		t, index, err := indexTable(ctx, home, snap, rangeVarNames(s.Relation))
		if err != nil || t == nil {
			return nil, err
		}
		d := &ddl{kind: "ALTER INDEX", stmt: n, index: index}
		d.addTarget(t, "")
		return d, nil
	case pg_query.ObjectType_OBJECT_COLUMN, pg_query.ObjectType_OBJECT_TABCONSTRAINT:
		t := catalogTable(snap, s.Relation)
		if t == nil {
			break
		}
		if s.RenameType == pg_query.ObjectType_OBJECT_COLUMN {
			if s.RelationType != pg_query.ObjectType_OBJECT_TABLE {
				break
			}
			if t.Kind == metadata.Distributed && s.Subname == t.DistColumn {
				return nil, unsupportedDDL("renaming the distribution column %q of %s is not supported", s.Subname, describeTable(t)).
					WithHint("undistribute_table(), rename the column, then distribute the table again.")
			}
			if t.Sequence(s.Subname) != nil {
				return nil, seqColumnDDL(t, s.Subname, "renaming")
			}
		}
		d := &ddl{kind: "ALTER TABLE", stmt: n}
		d.addTarget(t, "")
		return d, nil
	case pg_query.ObjectType_OBJECT_TABLE:
		if t := catalogTable(snap, s.Relation); t != nil {
			return nil, unsupportedDDL("ALTER TABLE ... RENAME TO on %s is not supported", describeTable(t)).
				WithHint("undistribute_table(), rename the table, then distribute it again.")
		}
	}
	return nil, refuseNamed(n, snap, "ALTER "+objectName(s.RenameType)+" ... RENAME")
}

func analyzeDrop(ctx context.Context, home *pgx.Conn, n *pg_query.Node, snap *metadata.Snapshot) (*ddl, error) {
	s := n.GetDropStmt()
	var objects [][]string
	for _, o := range s.Objects {
		objects = append(objects, planner.ListNames(o.GetList()))
	}
	switch s.RemoveType {
	case pg_query.ObjectType_OBJECT_TABLE:
		d := &ddl{kind: "DROP TABLE", stmt: n, drop: true}
		for _, names := range objects {
			if t := tableByNames(snap, names); t != nil {
				if s.Behavior == pg_query.DropBehavior_DROP_CASCADE {
					// Run as RESTRICT (TableCascade): what depends on the
					// table differs between its shell and its shards;
					// unless only foreign keys do (keysOnly, at run).
					s.Behavior = pg_query.DropBehavior_DROP_RESTRICT
					d.reshell, d.cascade = true, true
				}
				d.addTarget(t, "")
			}
		}
		if len(d.targets) == 0 {
			return nil, nil
		}
		return d, nil
	case pg_query.ObjectType_OBJECT_INDEX:
		if home == nil {
			return nil, ErrIndexLookup
		}
		d := &ddl{kind: "DROP INDEX", stmt: n}
		for _, names := range objects {
			t, index, err := indexTable(ctx, home, snap, names)
			if err != nil {
				return nil, err
			}
			if t != nil {
				d.addTarget(t, index)
			}
		}
		if len(d.targets) == 0 {
			return nil, nil
		}
		if s.Concurrent {
			s.Concurrent = false
			d.reshell, d.concurrent = true, true
		}
		return d, nil
	case pg_query.ObjectType_OBJECT_SCHEMA:
		// Dropping a schema would drop the shells of its catalog tables.
		for _, o := range s.Objects {
			schema := o.GetString_().GetSval()
			for _, name := range slices.Sorted(maps.Keys(snap.Tables)) {
				if strings.HasPrefix(name, schema+".") {
					return nil, unsupportedDDL("DROP SCHEMA %s is not supported: it has %s", schema, describeTable(snap.Tables[name])).
						WithHint("Drop its distributed and reference tables first.")
				}
			}
		}
	case pg_query.ObjectType_OBJECT_TRIGGER, pg_query.ObjectType_OBJECT_POLICY, pg_query.ObjectType_OBJECT_RULE:
		// The objects are [schema.]table.name.
		for _, names := range objects {
			if len(names) > 1 {
				if t := tableByNames(snap, names[:len(names)-1]); t != nil {
					return nil, unsupportedDDL("DROP %s on %s is not supported", objectName(s.RemoveType), describeTable(t)).
						WithHint("Drop the table itself, or undistribute_table() first.")
				}
			}
		}
	}
	return nil, refuseNamed(n, snap, "DROP "+objectName(s.RemoveType))
}

// refuseIndex fails with 0A000 if one of the indexes is on a catalog table.
func refuseIndex(ctx context.Context, home *pgx.Conn, snap *metadata.Snapshot, kind string, indexes [][]string) error {
	if home == nil {
		return ErrIndexLookup
	}
	for _, names := range indexes {
		t, index, err := indexTable(ctx, home, snap, names)
		if err != nil {
			return err
		}
		if t != nil {
			return unsupportedDDL("%s of index %q of %s is not supported", kind, index, describeTable(t)).
				WithHint("Drop and create the index instead.")
		}
	}
	return nil
}

// indexTable finds the catalog table of an index on the default node
// (resolving the name through home's search_path); nil if the index does
// not exist there or is not on a catalog table.
func indexTable(ctx context.Context, home *pgx.Conn, snap *metadata.Snapshot, names []string) (*metadata.Table, string, error) {
	if len(names) == 0 {
		return nil, "", nil
	}
	var schema, table, index string
	err := home.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text, i.relname::text
		FROM pg_catalog.pg_index x
		JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
		JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE x.indexrelid = pg_catalog.to_regclass($1)`, pgx.Identifier(names).Sanitize()).Scan(&schema, &table, &index)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", twophase.ToPgErr(err)
	}
	return snap.Table(schema + "." + table), index, nil
}

// refuseNamed fails with 0A000 if a statement names a catalog table.
func refuseNamed(n *pg_query.Node, snap *metadata.Snapshot, kind string) error {
	ctes := planner.CTEScope(n)
	var refused error
	planner.Walk(n, func(m proto.Message) {
		switch m := m.(type) {
		case *pg_query.Constraint:
			// A foreign key of another table may reference a catalog table.
			if pt := catalogTable(snap, m.Pktable); pt != nil && refused == nil && m.Contype == pg_query.ConstrType_CONSTR_FOREIGN {
				refused = unsupportedDDL("foreign keys referencing %s from a table that is neither distributed nor a reference table are not supported", describeTable(pt)).
					WithHint("Create the table without the key, distribute it (create_distributed_table colocated with %s, or create_reference_table), then add the key with ALTER TABLE ... ADD FOREIGN KEY.", pt.Name)
			}
		}
	})
	if refused != nil {
		return refused
	}
	var t *metadata.Table
	planner.Walk(n, func(m proto.Message) {
		if rv, ok := m.(*pg_query.RangeVar); ok && t == nil && !ctes.Refers(rv) {
			t = catalogTable(snap, rv)
		}
	})
	if t == nil {
		return nil
	}
	hint := "The statement would run on one worker, which holds only part of the table (or none): undistribute_table() first if it must run."
	switch {
	case strings.HasPrefix(kind, "CREATE TABLE AS"), strings.HasPrefix(kind, "SELECT INTO"):
		hint = "Create the new table and distribute it colocated with the source (create_distributed_table(..., colocate_with => ...)), then fill it with INSERT INTO ... SELECT."
	case strings.Contains(kind, "VIEW"):
		hint = "Query the tables directly (views over distributed tables are not supported yet)."
	}
	return unsupportedDDL("%s on %s is not supported", kind, describeTable(t)).WithHint("%s", hint)
}

func unsupportedDDL(format string, args ...any) *pgerr.Error {
	return pgerr.New(pgerr.FeatureNotSupported, format, args...)
}

func describeTable(t *metadata.Table) string {
	if t.Kind == metadata.Reference {
		return "reference table " + t.Name
	}
	return "distributed table " + t.Name
}

// catalogTable returns the catalog table a range variable names, taking an
// unqualified name to be in schema public as the planner does.
func catalogTable(snap *metadata.Snapshot, rv *pg_query.RangeVar) *metadata.Table {
	if rv == nil {
		return nil
	}
	return tableByNames(snap, rangeVarNames(rv))
}

func rangeVarNames(rv *pg_query.RangeVar) []string {
	if rv == nil {
		return nil
	}
	if rv.Schemaname == "" {
		return []string{rv.Relname}
	}
	return []string{rv.Schemaname, rv.Relname}
}

// tableByNames returns the catalog table named by [schema.]relname.
func tableByNames(snap *metadata.Snapshot, names []string) *metadata.Table {
	switch len(names) {
	case 1:
		return snap.Table("public." + names[0])
	case 2:
		return snap.Table(names[0] + "." + names[1])
	}
	return nil
}

// objectName is an object type as SQL spells it: OBJECT_MATVIEW becomes
// "MATVIEW", OBJECT_FOREIGN_TABLE "FOREIGN TABLE".
func objectName(t pg_query.ObjectType) string {
	return strings.ReplaceAll(strings.TrimPrefix(t.String(), "OBJECT_"), "_", " ")
}

// alterName is an ALTER TABLE subcommand for messages: AT_SetRelOptions
// becomes "SET REL OPTIONS".
func alterName(t pg_query.AlterTableType) string {
	switch t {
	case pg_query.AlterTableType_AT_ChangeOwner:
		return "OWNER TO"
	case pg_query.AlterTableType_AT_SetRelOptions:
		return "SET (...)"
	case pg_query.AlterTableType_AT_ResetRelOptions:
		return "RESET (...)"
	}
	var b strings.Builder
	for i, r := range strings.TrimPrefix(t.String(), "AT_") {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// shellSQL is what the default node's shell gets: the statement as sent,
// or deparsed when CONCURRENTLY was dropped from it.
func (d *ddl) shellSQL() (string, error) {
	if !d.reshell {
		return d.text, nil
	}
	return d.deparse(d.stmt)
}

func (d *ddl) deparse(n *pg_query.Node) (string, error) {
	return planner.Deparse(d.version, n)
}

// naming reports whether the statement leaves indexes or constraints for
// PostgreSQL to name.
func (d *ddl) naming() bool { return len(d.targets) > 0 && (d.unnamedIndex || len(d.unnamed) > 0) }

// shellName is an index or constraint of the shell table.
type shellName struct {
	name string
	typ  string   // contype, or "i" for an index
	cols []string // conkey's columns, sorted
}

// shellNames lists the indexes and constraints of the statement's table on
// the default node.
func (d *ddl) shellNames(ctx context.Context, home *pgx.Conn) ([]shellName, error) {
	tg := d.targets[0]
	rows, err := home.Query(ctx, `SELECT i.relname::text, 'i', '{}'::text[]
		FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = pg_catalog.to_regclass($1)
		UNION ALL
		SELECT k.conname::text, k.contype::text,
			ARRAY(SELECT a.attname::text FROM unnest(k.conkey) AS u(attnum)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum ORDER BY 1)
		FROM pg_catalog.pg_constraint k
		WHERE k.conrelid = pg_catalog.to_regclass($1) AND k.contype IN ('p', 'u', 'c', 'f')`,
		pgx.Identifier{tg.schema, tg.rel}.Sanitize())
	if err != nil {
		return nil, err
	}
	var out []shellName
	for rows.Next() {
		var s shellName
		if err := rows.Scan(&s.name, &s.typ, &s.cols); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// nameUnnamed gives the statement's unnamed index and constraints the
// names PostgreSQL gave them on the shell: what is new there after the
// statement, matched by kind and columns. One that cannot be matched
// exactly stays unnamed, for PostgreSQL to name on each shard.
func (d *ddl) nameUnnamed(before, after []shellName) error {
	old := map[string]bool{}
	for _, s := range before {
		old[s.typ+"\x00"+s.name] = true
	}
	var added []shellName
	for _, s := range after {
		if !old[s.typ+"\x00"+s.name] {
			added = append(added, s)
		}
	}
	if d.unnamedIndex {
		var names []string
		for _, s := range added {
			if s.typ == "i" {
				names = append(names, s.name)
			}
		}
		if len(names) == 1 {
			d.stmt.GetIndexStmt().Idxname = names[0]
		}
	}
	named := map[string]bool{}
	planner.Walk(d.stmt, func(m proto.Message) {
		if c, ok := m.(*pg_query.Constraint); ok && c.Conname != "" {
			named[c.Conname] = true
		}
	})
	for _, u := range d.unnamed {
		match := -1
		for i, s := range added {
			if s.typ == u.typ && !named[s.name] && (u.typ == "p" || slices.Equal(s.cols, u.cols)) {
				if match >= 0 {
					match = -2 // ambiguous
					break
				}
				match = i
			}
		}
		if match == -2 {
			// Which of PostgreSQL's names is which constraint cannot be
			// told: the shards could get them swapped.
			return unsupportedDDL("%s adds several unnamed constraints of one kind on the same columns", d.kind).
				WithHint("Name each constraint (ADD CONSTRAINT name CHECK ...), or add them in statements of their own.")
		}
		if match >= 0 {
			u.c.Conname = added[match].name
			named[added[match].name] = true
		}
	}
	return nil
}

// referencedShard is the table a foreign key of shard sh references on
// sh's nodes in place of rv, a catalog table: its shard of the same hash
// range (a colocated distributed table), or its copy (a reference table).
func referencedShard(snap *metadata.Snapshot, rv *pg_query.RangeVar, sh metadata.Shard) (*pg_query.RangeVar, error) {
	pk := catalogTable(snap, rv)
	if pk == nil {
		return nil, pgerr.New(pgerr.Internal, "foreign key of shard %d references %s, which is not in the catalog", sh.ID, rv.Relname)
	}
	var ref *metadata.Shard
	for i, r := range snap.Shards[pk.Name] {
		if pk.Kind == metadata.Reference || r.MinHash == sh.MinHash && r.MaxHash == sh.MaxHash {
			ref = &snap.Shards[pk.Name][i]
			break
		}
	}
	if ref == nil {
		return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "%s has no shard of the hash range of shard %d", pk.Name, sh.ID).
			WithHint("Run the statement again; a shard split may have been under way.")
	}
	for _, node := range sh.Nodes {
		if !slices.Contains(ref.Nodes, node) {
			return nil, pgerr.New(pgerr.ObjectNotInPrerequisite, "shard %d of %s is not on node %d, where shard %d is", ref.ID, pk.Name, node, sh.ID).
				WithHint("Run the statement again; a shard move may have been under way.")
		}
	}
	_, rel, _ := strings.Cut(pk.Name, ".")
	return &pg_query.RangeVar{Schemaname: pk.ShardsIn(), Relname: metadata.ShardName(rel, ref.ID), Inh: true, Relpersistence: "p"}, nil
}

// shardSQL rewrites the statement for one shard of a target: the table
// becomes the shard, index and constraint names get the shard's suffix,
// and the table a foreign key references becomes ref's answer for it.
func (d *ddl) shardSQL(tg ddlTarget, shardID int64, ref func(*pg_query.RangeVar) (*pg_query.RangeVar, error)) (string, error) {
	shard := metadata.ShardName(tg.rel, shardID)
	suffix := nameSuffix(tg.rel, shard)
	name := func(s string) string {
		if s == "" {
			return ""
		}
		return suffixed(s, suffix)
	}
	toShard := func(rv *pg_query.RangeVar) {
		rv.Catalogname, rv.Schemaname, rv.Relname = "", tg.table.ShardsIn(), shard
	}
	var refErr error
	constraint := func(k *pg_query.Constraint) {
		k.Conname = name(k.Conname)
		if k.Contype != pg_query.ConstrType_CONSTR_FOREIGN || refErr != nil {
			return
		}
		if ref == nil {
			refErr = errors.New("a foreign key with no table to reference")
			return
		}
		k.Pktable, refErr = ref(k.Pktable)
	}
	var out *pg_query.Node
	switch s := d.stmt.Node.(type) {
	case *pg_query.Node_IndexStmt:
		c := proto.Clone(s.IndexStmt).(*pg_query.IndexStmt)
		toShard(c.Relation)
		c.Idxname = name(c.Idxname)
		c.Concurrent = false
		out = &pg_query.Node{Node: &pg_query.Node_IndexStmt{IndexStmt: c}}
	case *pg_query.Node_AlterTableStmt:
		c := proto.Clone(s.AlterTableStmt).(*pg_query.AlterTableStmt)
		toShard(c.Relation)
		c.MissingOk = false // (see below)
		for _, n := range c.Cmds {
			cmd := n.GetAlterTableCmd()
			switch cmd.Subtype {
			case pg_query.AlterTableType_AT_AddColumn:
				for _, cn := range cmd.Def.GetColumnDef().GetConstraints() {
					if k := cn.GetConstraint(); k != nil {
						constraint(k)
					}
				}
			case pg_query.AlterTableType_AT_AddConstraint:
				constraint(cmd.Def.GetConstraint())
			case pg_query.AlterTableType_AT_DropConstraint, pg_query.AlterTableType_AT_ValidateConstraint:
				cmd.Name = name(cmd.Name)
			case pg_query.AlterTableType_AT_AlterConstraint:
				if k := cmd.Def.GetConstraint(); k != nil {
					k.Conname = name(k.Conname)
				}
			}
		}
		if refErr != nil {
			return "", refErr
		}
		out = &pg_query.Node{Node: &pg_query.Node_AlterTableStmt{AlterTableStmt: c}}
	case *pg_query.Node_RenameStmt:
		c := proto.Clone(s.RenameStmt).(*pg_query.RenameStmt)
		toShard(c.Relation)
		c.MissingOk = false
		switch {
		case c.RenameType == pg_query.ObjectType_OBJECT_TABCONSTRAINT:
			c.Subname, c.Newname = name(c.Subname), name(c.Newname)
		case d.index != "": // ALTER INDEX
			c.Relation.Relname, c.Newname = name(d.index), name(c.Newname)
		}
		out = &pg_query.Node{Node: &pg_query.Node_RenameStmt{RenameStmt: c}}
	case *pg_query.Node_GrantStmt:
		c := proto.Clone(s.GrantStmt).(*pg_query.GrantStmt)
		c.Targtype = pg_query.GrantTargetType_ACL_TARGET_OBJECT
		c.Objects = []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{
			Schemaname: tg.table.ShardsIn(), Relname: shard, Inh: true, Relpersistence: "p"}}}}
		out = &pg_query.Node{Node: &pg_query.Node_GrantStmt{GrantStmt: c}}
	case *pg_query.Node_TruncateStmt:
		out = &pg_query.Node{Node: &pg_query.Node_TruncateStmt{TruncateStmt: &pg_query.TruncateStmt{
			Relations: []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{
				Schemaname: tg.table.ShardsIn(), Relname: shard, Inh: true, Relpersistence: "p"}}}},
			RestartSeqs: s.TruncateStmt.RestartSeqs,
			Behavior:    s.TruncateStmt.Behavior,
		}}}
	case *pg_query.Node_DropStmt:
		obj := []*pg_query.Node{pg_query.MakeStrNode(tg.table.ShardsIn()), pg_query.MakeStrNode(shard)}
		if s.DropStmt.RemoveType == pg_query.ObjectType_OBJECT_INDEX {
			obj[1] = pg_query.MakeStrNode(name(tg.index))
		}
		out = &pg_query.Node{Node: &pg_query.Node_DropStmt{DropStmt: &pg_query.DropStmt{
			Objects:    []*pg_query.Node{pg_query.MakeListNode(obj)},
			RemoveType: s.DropStmt.RemoveType,
			Behavior:   s.DropStmt.Behavior,
			// IF EXISTS is the user's table's (its shell's), and a target
			// exists only where the table, or its index, does. A shard of
			// it that is missing has moved since the targets were taken
			// (a shard move's cut-over): the statement must fail there
			// (42P01, which the client gets as 40001 to retry), not skip
			// the shard's new placement (found by an adversary: an ALTER
			// TABLE IF EXISTS left a moved shard without its column).
			MissingOk: false,
		}}}
	default:
		return "", fmt.Errorf("unexpected statement %s", planner.StatementName(d.stmt))
	}
	return d.deparse(out)
}

// TableCascade reports whether sql is DROP TABLE ... CASCADE, which runs
// as RESTRICT on a distributed or reference table (analyzeDrop): the
// same when nothing depends on the table, PostgreSQL's 2BP01 (made 0A000
// by CascadeRefused) when something does.
func TableCascade(sql string) bool {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return false
	}
	d := tree.Stmts[0].Stmt.GetDropStmt()
	return d != nil && d.RemoveType == pg_query.ObjectType_OBJECT_TABLE && d.Behavior == pg_query.DropBehavior_DROP_CASCADE
}
