package shards

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/coordinator/twophase"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// ObjectDDL recognises DDL on the objects tables' columns and queries are
// made of: CREATE TYPE (enum, composite, range), ALTER TYPE (an enum's
// values), CREATE DOMAIN, CREATE COLLATION, CREATE SCHEMA (without
// elements), CREATE [OR REPLACE] FUNCTION/PROCEDURE/AGGREGATE and DROP of these
// (without CASCADE). Functions are created on the other nodes with
// check_function_bodies off and where they can be (best effort). They run on
// every node (RunObjectDDL), so that shards and their queries find them
// everywhere. It returns the statement for the nodes other than the
// default one (where the object may exist already, made by
// create_distributed_table: ADD VALUE IF NOT EXISTS, DROP IF EXISTS,
// CREATE in a block that ignores duplicate_object), and ok false for any
// other statement, or several.
func ObjectDDL(sql string) (other string, ok bool) {
	other, err := ClassifyObjectDDL(sql, nil)
	return other, err == nil && other != ""
}

// objectTypes are the objects that must be the same on every worker: the
// types, domains and collations of shards' columns, the functions queries
// call on the shards, and the schemas of these.
var objectTypes = map[pg_query.ObjectType]bool{
	pg_query.ObjectType_OBJECT_TYPE: true, pg_query.ObjectType_OBJECT_DOMAIN: true,
	pg_query.ObjectType_OBJECT_DOMCONSTRAINT: true, pg_query.ObjectType_OBJECT_COLLATION: true,
	pg_query.ObjectType_OBJECT_SCHEMA: true, pg_query.ObjectType_OBJECT_FUNCTION: true,
	pg_query.ObjectType_OBJECT_PROCEDURE: true, pg_query.ObjectType_OBJECT_ROUTINE: true,
	pg_query.ObjectType_OBJECT_AGGREGATE: true, pg_query.ObjectType_OBJECT_EXTENSION: true,
}

// ClassifyObjectDDL is ObjectDDL for the coordinator: it returns the
// statement for the other nodes ("" for a statement on no such object),
// or a 0A000 error for DDL on these objects that cannot reach every
// worker: DROP ... CASCADE, a batch of several statements among which one
// changes or drops such an object, and (with snap) ALTER SCHEMA ... RENAME
// of a schema holding distributed or reference tables. In a batch, a plain
// CREATE of a new object (no OR REPLACE) passes: made on the default node
// only, it is missing elsewhere (an error there, or made by
// create_distributed_table), never different.
func ClassifyObjectDDL(sql string, snap *metadata.Snapshot) (other string, err error) {
	tree, perr := pg_query.Parse(sql)
	if perr != nil || len(tree.Stmts) == 0 {
		return "", nil
	}
	if len(tree.Stmts) > 1 {
		for _, st := range tree.Stmts {
			if NewObject(st.Stmt) {
				continue
			}
			one, _ := planner.Deparse(tree.Version, st.Stmt)
			if o, e := ClassifyObjectDDL(one, snap); o != "" || e != nil {
				return "", pgerr.New(pgerr.FeatureNotSupported,
					"DDL on types, domains, collations, schemas or functions in a batch of several statements is not supported").
					WithHint("Send it as a statement of its own, so that it reaches every worker.")
			}
		}
		return "", nil
	}
	n := tree.Stmts[0].Stmt
	if s := n.GetRenameStmt(); s != nil && s.RenameType == pg_query.ObjectType_OBJECT_SCHEMA && snap != nil {
		for _, name := range slices.Sorted(maps.Keys(snap.Tables)) {
			if holds(snap.Tables[name], s.Subname) {
				return "", unsupportedDDL("ALTER SCHEMA %s RENAME is not supported: it has %s", s.Subname, describeHeld(snap.Tables[name], s.Subname)).
					WithHint("Undistribute its distributed and reference tables first (undistribute_table), rename, then distribute them again.")
			}
		}
	}
	if d := cascadeDrop(n); d != nil {
		d.Behavior = pg_query.DropBehavior_DROP_RESTRICT // CascadeAsRestrict
	}
	if d := n.GetDropStmt(); d != nil && d.RemoveType == pg_query.ObjectType_OBJECT_SCHEMA && snap != nil {
		for _, o := range d.Objects {
			schema := o.GetString_().GetSval()
			for _, name := range slices.Sorted(maps.Keys(snap.Tables)) {
				if holds(snap.Tables[name], schema) {
					return "", unsupportedDDL("DROP SCHEMA %s is not supported: it has %s", schema, describeHeld(snap.Tables[name], schema)).
						WithHint("Drop its distributed and reference tables first.")
				}
			}
		}
	}
	other, ok := objectDDL(tree, n)
	if !ok {
		return "", nil
	}
	return other, nil
}

// holds says whether schema holds table t or its shards.
func holds(t *metadata.Table, schema string) bool {
	return t.Schema() == schema || t.ShardsIn() == schema
}

// RefuseSchemaRevoke refuses (0A000) REVOKE of USAGE (or ALL) on a schema
// from PUBLIC while the schema has distributed or reference tables: their
// shards, in the shards' schema, would not check it, and their privileges
// for other roles are given on the condition that every role may use the
// table's schema (checkSchemaUsage). Revoking it from one role changes
// nothing while PUBLIC has it.
func RefuseSchemaRevoke(sql string, snap *metadata.Snapshot) error {
	if snap == nil || len(snap.Tables) == 0 {
		return nil
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil
	}
	for _, raw := range tree.Stmts {
		g := raw.Stmt.GetGrantStmt()
		if g == nil || g.IsGrant || g.Objtype != pg_query.ObjectType_OBJECT_SCHEMA {
			continue
		}
		usage := len(g.Privileges) == 0 // ALL
		for _, p := range g.Privileges {
			usage = usage || strings.EqualFold(p.GetAccessPriv().GetPrivName(), "usage")
		}
		public := false
		for _, r := range g.Grantees {
			public = public || r.GetRoleSpec().GetRoletype() == pg_query.RoleSpecType_ROLESPEC_PUBLIC
		}
		if !usage || !public && g.Behavior != pg_query.DropBehavior_DROP_CASCADE {
			// (CASCADE also revokes what the role granted on: USAGE it
			// gave PUBLIC, adversary round 20.)
			continue
		}
		for _, o := range g.Objects {
			schema := o.GetString_().GetSval()
			for _, name := range slices.Sorted(maps.Keys(snap.Tables)) {
				if t := snap.Tables[name]; t.Schema() == schema {
					return unsupportedDDL("REVOKE USAGE ON SCHEMA %s FROM PUBLIC (or CASCADE) is not supported: it has %s, whose shards would not check it", schema, describeTable(t)).
						WithHint("Revoke the privileges on its tables instead (REVOKE ... ON ALL TABLES IN SCHEMA %s), or undistribute them first.", pgx.Identifier{schema}.Sanitize())
				}
			}
		}
	}
	return nil
}

// describeHeld names what schema holds of t: the table, or its shards.
func describeHeld(t *metadata.Table, schema string) string {
	if t.Schema() == schema {
		return describeTable(t)
	}
	return "the shards of " + describeTable(t)
}

// cascadeDrop is n if it is DROP ... CASCADE of a type, domain, collation,
// function or extension (a schema's runs as written: SchemaCascade).
func cascadeDrop(n *pg_query.Node) *pg_query.DropStmt {
	if d := n.GetDropStmt(); d != nil && d.Behavior == pg_query.DropBehavior_DROP_CASCADE && objectTypes[d.RemoveType] &&
		d.RemoveType != pg_query.ObjectType_OBJECT_SCHEMA {
		return d
	}
	return nil
}

// SchemaCascade is the schemas DROP SCHEMA ... CASCADE names (ok false for
// any other statement). It runs on every node as written (IF EXISTS on
// the others), after the caller made sure that nothing outside them
// depends on what they hold (the drop is then the same everywhere);
// schemas holding distributed or reference tables are refused before
// (ClassifyObjectDDL).
func SchemaCascade(sql string) ([]string, bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, false
	}
	d := tree.Stmts[0].Stmt.GetDropStmt()
	if d == nil || d.RemoveType != pg_query.ObjectType_OBJECT_SCHEMA || d.Behavior != pg_query.DropBehavior_DROP_CASCADE {
		return nil, false
	}
	var out []string
	for _, o := range d.Objects {
		out = append(out, o.GetString_().GetSval())
	}
	return out, true
}

// CascadeAsRestrict gives DROP ... CASCADE of a type, domain, collation,
// function or extension its RESTRICT form (ok false for any other
// statement). pgfleet runs that form on every node: what depends on the
// object differs from node to node (shards, local tables), so a cascade
// would drop different things on each. When nothing depends on the
// object both forms do the same; when something does, PostgreSQL's 2BP01
// becomes CascadeRefused's 0A000.
func CascadeAsRestrict(sql string) (string, bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return "", false
	}
	d := cascadeDrop(tree.Stmts[0].Stmt)
	if d == nil {
		return "", false
	}
	d.Behavior = pg_query.DropBehavior_DROP_RESTRICT
	s, err := planner.Deparse(tree.Version, tree.Stmts[0].Stmt)
	return s, err == nil
}

// CascadeRefused is the answer to DROP ... CASCADE run in its RESTRICT
// form (CascadeAsRestrict) when objects depend on what it drops: 0A000
// with PostgreSQL's detail, which lists them; other errors pass.
func CascadeRefused(err error) error {
	if err == nil {
		return nil
	}
	pe := pgerr.Flatten(err)
	if pe.Code != pgerr.DependentObjectsStillExist {
		return err
	}
	return &pgerr.Error{Severity: "ERROR", Code: pgerr.FeatureNotSupported,
		Message: "DROP ... CASCADE is not supported when other objects depend on what it drops: " + pe.Message,
		Detail:  pe.Detail,
		Hint:    "Drop the objects that depend on it first (the detail lists them), then drop it."}
}

// bodyCheckOff starts the other nodes' form of a function's DDL: their
// transaction is pgfleet's own outside a client's transaction block.
const bodyCheckOff = "SET LOCAL check_function_bodies = off; "

// InClientTxn is the other nodes' form of object DDL (ClassifyObjectDDL's
// other) for a client's transaction block, whose settings it must leave
// as they are: without turning check_function_bodies off, so a function
// whose body the node cannot check is left out there (best effort, as
// one that cannot be made at all).
func InClientTxn(other string) string {
	return strings.TrimPrefix(other, bodyCheckOff)
}

func objectDDL(tree *pg_query.ParseResult, n *pg_query.Node) (other string, ok bool) {
	deparse := func() (string, bool) {
		s, err := planner.Deparse(tree.Version, n)
		return s, err == nil
	}
	ignoreDuplicate := func() (string, bool) {
		s, ok := deparse()
		if !ok {
			return "", false
		}
		return "DO $pgfleet$ BEGIN " + s + "; EXCEPTION WHEN duplicate_object OR duplicate_schema THEN NULL; END $pgfleet$", true
	}
	// A comment on an object another node lacks stays missing there. (An
	// ALTER of such an object fails, all or nothing: an error inside it,
	// such as a domain CHECK's missing function, must not be ignored.)
	ignoreMissing := func() (string, bool) {
		s, ok := deparse()
		if !ok {
			return "", false
		}
		return "DO $pgfleet$ BEGIN " + s + "; EXCEPTION WHEN undefined_object OR undefined_function OR invalid_schema_name THEN NULL; END $pgfleet$", true
	}
	bestEffort := func() (string, bool) {
		s, ok := deparse()
		if !ok {
			return "", false
		}
		// A function whose signature or body names what only the default
		// node has (a local table's row type) stays missing where it cannot
		// be created, as before: queries calling it there fail.
		return bodyCheckOff + "DO $pgfleet$ BEGIN " + s +
			"; EXCEPTION WHEN OTHERS THEN NULL; END $pgfleet$", true
	}
	switch {
	case n.GetCreateFunctionStmt() != nil:
		return bestEffort()
	case n.GetGrantRoleStmt() != nil:
		// Membership decides what a role may do with the shards on each
		// worker: revoked on one only, a member kept reading them on the
		// others (adversary round 20). Roles are made on each worker; one
		// a worker lacks fails it, all or nothing.
		return deparse()
	case n.GetAlterRoleSetStmt() != nil, n.GetAlterDatabaseSetStmt() != nil:
		// A role's or database's settings apply at login on each
		// worker: set on one only, the rows of one query would be read
		// under different settings on different workers (adversary
		// finding). A role or database a worker lacks fails it, all or
		// nothing: roles are made on each worker.
		return deparse()
	case n.GetDefineStmt() != nil && n.GetDefineStmt().Kind == pg_query.ObjectType_OBJECT_AGGREGATE:
		return bestEffort() // as its state and final functions
	case n.GetCreateEnumStmt() != nil, n.GetCompositeTypeStmt() != nil, n.GetCreateRangeStmt() != nil,
		n.GetCreateDomainStmt() != nil:
		return ignoreDuplicate()
	case n.GetDefineStmt() != nil && n.GetDefineStmt().Kind == pg_query.ObjectType_OBJECT_COLLATION:
		return ignoreDuplicate()
	case n.GetCreateExtensionStmt() != nil:
		// Every worker needs the extension's types and functions (a
		// distributed table's hstore column, a query's function); one
		// that has it already keeps it.
		n.GetCreateExtensionStmt().IfNotExists = true
		return deparse()
	case n.GetAlterExtensionStmt() != nil, n.GetAlterExtensionContentsStmt() != nil:
		return deparse()
	case n.GetCreateSchemaStmt() != nil && len(n.GetCreateSchemaStmt().SchemaElts) == 0:
		n.GetCreateSchemaStmt().IfNotExists = true
		return deparse()
	case n.GetAlterEnumStmt() != nil:
		if a := n.GetAlterEnumStmt(); a.OldVal == "" {
			a.SkipIfNewValExists = true
		}
		return deparse()
	case n.GetAlterDomainStmt() != nil, n.GetAlterFunctionStmt() != nil, n.GetAlterCollationStmt() != nil,
		n.GetAlterTypeStmt() != nil:
		return deparse()
	case n.GetAlterTableStmt() != nil && n.GetAlterTableStmt().Objtype == pg_query.ObjectType_OBJECT_TYPE:
		return deparse() // ALTER TYPE composite ADD/DROP/ALTER ATTRIBUTE
	case n.GetRenameStmt() != nil:
		r := n.GetRenameStmt()
		if objectTypes[r.RenameType] || r.RenameType == pg_query.ObjectType_OBJECT_ATTRIBUTE {
			return deparse()
		}
		return "", false
	case n.GetAlterObjectSchemaStmt() != nil:
		if objectTypes[n.GetAlterObjectSchemaStmt().ObjectType] {
			return deparse()
		}
		return "", false
	case n.GetAlterOwnerStmt() != nil:
		if objectTypes[n.GetAlterOwnerStmt().ObjectType] {
			return deparse()
		}
		return "", false
	case n.GetCommentStmt() != nil:
		if objectTypes[n.GetCommentStmt().Objtype] {
			return ignoreMissing()
		}
		return "", false
	case n.GetGrantStmt() != nil:
		if objectTypes[n.GetGrantStmt().Objtype] {
			return deparse()
		}
		return "", false
	case n.GetDropStmt() != nil:
		d := n.GetDropStmt()
		if d.Behavior == pg_query.DropBehavior_DROP_CASCADE && d.RemoveType != pg_query.ObjectType_OBJECT_SCHEMA {
			return "", false
		}
		switch d.RemoveType {
		case pg_query.ObjectType_OBJECT_TYPE, pg_query.ObjectType_OBJECT_DOMAIN, pg_query.ObjectType_OBJECT_COLLATION,
			pg_query.ObjectType_OBJECT_SCHEMA, pg_query.ObjectType_OBJECT_EXTENSION:
			d.MissingOk = true
			return deparse()
		case pg_query.ObjectType_OBJECT_FUNCTION, pg_query.ObjectType_OBJECT_PROCEDURE:
			d.MissingOk = true
			return bestEffort()
		}
		return "", false
	}
	return "", false
}

// RunObjectDDL runs an ObjectDDL statement on the default node (sql, as
// the client wrote it) and on every other active node (other), all or
// nothing with two-phase commit, and returns the default node's command
// tag. An error on the default node comes back as PostgreSQL alone would
// have given it; one on another node names the node.
func RunObjectDDL(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	defaultNode int32, sql, other string) (string, error) {
	if store == nil {
		return "", errNoStore
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	for _, nd := range snap.Nodes {
		n.addrs[nd.ID] = nd.Addr()
	}
	g := newGroup("ddl", n, store)
	g.beginStmt = "BEGIN; " + opLockTimeout
	tx, err := g.begin(ctx, defaultNode)
	if err != nil {
		return "", err
	}
	res := tx.conn.PgConn().Exec(ctx, sql)
	results, err := res.ReadAll()
	if err != nil {
		g.rollback(ctx)
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return "", twophase.ToPgErr(err)
		}
		return "", n.wrap(err, "on node %s", n.describe(defaultNode))
	}
	tag := ""
	if len(results) > 0 {
		tag = results[len(results)-1].CommandTag.String()
	}
	for _, id := range ActiveNodes(snap) {
		if id == defaultNode {
			continue
		}
		tx, err := g.begin(ctx, id)
		if err != nil {
			g.rollback(ctx)
			return "", err
		}
		if _, err := tx.conn.Exec(ctx, other); err != nil {
			g.rollback(ctx)
			return "", n.wrap(err, "on node %s", n.describe(id))
		}
	}
	if err := g.prepare(ctx); err != nil {
		g.rollback(ctx)
		return "", err
	}
	if err := g.commit(ctx); err != nil {
		return "", err
	}
	if tag == "" {
		return "", pgerr.New(pgerr.Internal, "no command tag for %q", sql)
	}
	return tag, nil
}

// NewObject reports a CREATE of a new type, domain, collation, schema or
// function (no OR REPLACE).
func NewObject(n *pg_query.Node) bool {
	switch {
	case n.GetCreateFunctionStmt() != nil:
		return !n.GetCreateFunctionStmt().Replace
	case n.GetCreateEnumStmt() != nil, n.GetCompositeTypeStmt() != nil, n.GetCreateRangeStmt() != nil,
		n.GetCreateDomainStmt() != nil, n.GetCreateSchemaStmt() != nil:
		return true
	case n.GetDefineStmt() != nil:
		k := n.GetDefineStmt().Kind
		return (k == pg_query.ObjectType_OBJECT_COLLATION || k == pg_query.ObjectType_OBJECT_AGGREGATE) && !n.GetDefineStmt().Replace
	}
	return false
}

// NewRoutines are the names (unqualified) of the functions and aggregates
// that sql, one statement or several, creates as new objects (NewObject).
func NewRoutines(sql string) []string {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil
	}
	var names []string
	for _, st := range tree.Stmts {
		n := st.Stmt
		if !NewObject(n) {
			continue
		}
		var fn []*pg_query.Node
		switch {
		case n.GetCreateFunctionStmt() != nil:
			fn = n.GetCreateFunctionStmt().Funcname
		case n.GetDefineStmt() != nil && n.GetDefineStmt().Kind == pg_query.ObjectType_OBJECT_AGGREGATE:
			fn = n.GetDefineStmt().Defnames
		}
		if len(fn) > 0 {
			names = append(names, fn[len(fn)-1].GetString_().GetSval())
		}
	}
	return names
}

// NewObjectDDL reports whether sql is one statement that is a NewObject.
func NewObjectDDL(sql string) bool {
	tree, err := pg_query.Parse(sql)
	return err == nil && len(tree.Stmts) == 1 && NewObject(tree.Stmts[0].Stmt)
}
