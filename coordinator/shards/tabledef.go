package shards

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// Def is what a shard of a table needs of the table's definition, read from
// pg_catalog: its columns, constraints, indexes and foreign keys. Features a
// shard cannot reproduce faithfully (sequence defaults other than a
// column's own, triggers, row-level security, inheritance, partitioning)
// make TableDef fail with SQLSTATE 0A000 rather than be left out silently.
type Def struct {
	OID         uint32
	Schema      string // as PostgreSQL spells it, unquoted
	Name        string // relation name, unquoted
	Unlogged    bool
	Options     string // storage parameters as "fillfactor=70, ...", or ""
	Columns     []Column
	Constraints []Constraint // primary key, unique, check and exclusion constraints
	Indexes     []Index      // indexes that back no constraint
	// ForeignKeys are the table's own foreign keys. CreateSQL leaves them
	// out: they reference other tables, which ForeignKeySQL names, and are
	// added once every table of an operation has its rows.
	ForeignKeys []ForeignKey
	// Owner is the table's owner, quoted; "" leaves a shard its
	// creator's. Shards take the table's owner and privileges, so that
	// a role reads and writes them as it may the table (and the owner's
	// GRANT and REVOKE, sent on to them, do the same there).
	Owner string
	// Privileges: the table's ACL is not the default one (relacl not
	// NULL): a shard gets Grants exactly, its owner's own privileges
	// included. Column privileges are in Grants either way.
	Privileges bool
	Grants     []Grant
}

// Grant is one privilege of one grantee on the table or one column of it,
// as GRANT spells it (quoted names; Grantee PUBLIC for everyone).
type Grant struct {
	Privilege string // SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER
	Column    string // quoted column name, or "" for the table
	Grantee   string
}

// Column is one column of a table, in order.
type Column struct {
	Name          string
	Type          string // format_type: "bigint", "character varying(20)"
	TypeName      string // pg_type.typname: "int8", "varchar"
	NotNull       bool
	Default       string // the DEFAULT expression, "" if none
	Generated     string // the expression of GENERATED ALWAYS AS (...) STORED, "" if none
	Collation     string // quoted, qualified collation when it is not the type's default, else ""
	Deterministic bool   // the column's collation is deterministic (true for types without one)
	// Sequence: the column takes its values from its own sequence, as a
	// serial column ('s') or an identity column BY DEFAULT ('d') or ALWAYS
	// ('a'); 0 otherwise. Shards get the column without a default: the
	// coordinator draws the values (metadata.SeqColumn) from the sequence
	// SequenceOID.
	Sequence    byte
	SequenceOID uint32
}

// Constraint is a table constraint a shard gets under its own name.
type Constraint struct {
	Name       string
	Type       byte     // 'p' primary key, 'u' unique, 'x' exclusion, 'c' check
	Definition string   // pg_get_constraintdef: "PRIMARY KEY (id)", "CHECK ((n > 0))"
	Columns    []string // the columns it constrains (conkey)
}

// ForeignKey is a foreign key of the table and the table it references.
type ForeignKey struct {
	Name       string
	Definition string // pg_get_constraintdef: "FOREIGN KEY (a) REFERENCES r(id) ON DELETE CASCADE"
	RefSchema  string // the referenced table, unquoted
	RefName    string
}

// Index is an index that backs no constraint.
type Index struct {
	Name       string
	Unique     bool
	Columns    []string // key columns that are plain columns; expressions are left out
	Definition string   // pg_get_indexdef
	tail       string   // Definition from " USING " on
}

// CatalogName is the table's name as the catalog (metadata.Table.Name)
// keeps it: "schema.relname", unquoted.
func (d *Def) CatalogName() string { return d.Schema + "." + d.Name }

// Ident is the table's quoted, schema-qualified name for SQL.
func (d *Def) Ident() string { return pgx.Identifier{d.Schema, d.Name}.Sanitize() }

// Sequences are the columns that take their values from their own
// sequence, for the catalog.
func (d *Def) Sequences() []metadata.SeqColumn {
	var out []metadata.SeqColumn
	for _, c := range d.Columns {
		switch c.Sequence {
		case 's':
			out = append(out, metadata.SeqColumn{Column: c.Name, Sequence: c.SequenceOID})
		case 'a', 'd':
			out = append(out, metadata.SeqColumn{Column: c.Name, Identity: c.Sequence, Sequence: c.SequenceOID})
		}
	}
	return out
}

// Column returns the column named name, or nil.
func (d *Def) Column(name string) *Column {
	for i := range d.Columns {
		if d.Columns[i].Name == name {
			return &d.Columns[i]
		}
	}
	return nil
}

// copyColumns is the quoted list of the columns a copy of the rows carries:
// every column but generated ones, which the target computes itself.
func (d *Def) copyColumns() string {
	var b strings.Builder
	for _, c := range d.Columns {
		if c.Generated != "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c.Name}.Sanitize())
	}
	return b.String()
}

// CreateSQL returns the statements that create an equivalent table named
// shardName in schema. The first creates the table with its
// columns (types, collations, defaults, generated expressions, NOT NULL);
// the others add its constraints and create its indexes, and may run after
// the table has been filled, which is faster and does not re-check
// constraints marked NOT VALID. Constraint and index names get the suffix
// shardName adds to the table's name (accounts_102008 makes accounts_pkey
// accounts_pkey_102008), or "_"+shardName if shardName does not start with
// the table's name; a name that would be longer than 63 bytes is shortened
// and made unique with a hash of the original, as Citus does.
func (d *Def) CreateSQL(schema, shardName string) []string {
	suffix := nameSuffix(d.Name, shardName)
	target := pgx.Identifier{schema, shardName}.Sanitize()

	var b strings.Builder
	b.WriteString("CREATE ")
	if d.Unlogged {
		b.WriteString("UNLOGGED ")
	}
	b.WriteString("TABLE ")
	b.WriteString(target)
	b.WriteString(" (")
	for i, c := range d.Columns {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n\t")
		b.WriteString(pgx.Identifier{c.Name}.Sanitize())
		b.WriteString(" ")
		b.WriteString(c.Type)
		if c.Collation != "" {
			b.WriteString(" COLLATE ")
			b.WriteString(c.Collation)
		}
		if c.Generated != "" {
			b.WriteString(" GENERATED ALWAYS AS (")
			b.WriteString(c.Generated)
			b.WriteString(") STORED")
		} else if c.Default != "" {
			b.WriteString(" DEFAULT ")
			b.WriteString(c.Default)
		}
		if c.NotNull {
			b.WriteString(" NOT NULL")
		}
	}
	if len(d.Columns) > 0 {
		b.WriteString("\n")
	}
	b.WriteString(")")
	if d.Options != "" {
		b.WriteString(" WITH (")
		b.WriteString(d.Options)
		b.WriteString(")")
	}
	out := []string{b.String()}

	for _, c := range d.Constraints {
		out = append(out, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s", target,
			pgx.Identifier{suffixed(c.Name, suffix)}.Sanitize(), c.Definition))
	}
	for _, ix := range d.Indexes {
		unique := ""
		if ix.Unique {
			unique = "UNIQUE "
		}
		out = append(out, fmt.Sprintf("CREATE %sINDEX %s ON %s%s", unique,
			pgx.Identifier{suffixed(ix.Name, suffix)}.Sanitize(), target, ix.tail))
	}
	return append(out, d.privilegeSQL(target)...)
}

// ForeignKeySQL returns the statements that add the table's foreign keys
// to its copy shardName in schema, under the copy's constraint names (as
// CreateSQL names constraints), each referencing the table ref gives for
// the table it references (schema and name, unquoted): the referenced
// table's shard or copy on the same node.
func (d *Def) ForeignKeySQL(schema, shardName string, ref func(schema, name string) (string, string, error)) ([]string, error) {
	suffix := nameSuffix(d.Name, shardName)
	var out []string
	for _, fk := range d.ForeignKeys {
		refSchema, refName, err := ref(fk.RefSchema, fk.RefName)
		if err != nil {
			return nil, err
		}
		tree, c, err := fk.parse()
		if err != nil {
			return nil, err
		}
		tree.Stmts[0].Stmt.GetAlterTableStmt().Relation = &pg_query.RangeVar{Schemaname: schema, Relname: shardName, Inh: true, Relpersistence: "p"}
		c.Conname = suffixed(fk.Name, suffix)
		c.Pktable = &pg_query.RangeVar{Schemaname: refSchema, Relname: refName, Inh: true, Relpersistence: "p"}
		sql, err := planner.Deparse(tree.Version, tree.Stmts[0].Stmt)
		if err != nil {
			return nil, pgerr.New(pgerr.Internal, "cannot write foreign key %q for %s: %v", fk.Name, shardName, err)
		}
		out = append(out, sql)
	}
	return out, nil
}

// parse reads the key's definition as the statement that adds it to a
// table ("ALTER TABLE t ADD CONSTRAINT c ..."), and its constraint.
func (fk ForeignKey) parse() (*pg_query.ParseResult, *pg_query.Constraint, error) {
	tree, err := pg_query.Parse("ALTER TABLE t ADD CONSTRAINT c " + fk.Definition)
	if err == nil && len(tree.Stmts) == 1 {
		if cmds := tree.Stmts[0].Stmt.GetAlterTableStmt().GetCmds(); len(cmds) == 1 {
			if c := cmds[0].GetAlterTableCmd().GetDef().GetConstraint(); c.GetPktable() != nil {
				return tree, c, nil
			}
		}
	}
	return nil, nil, pgerr.New(pgerr.Internal, "cannot read the definition of foreign key %q: %s", fk.Name, fk.Definition)
}

// privilegeSQL gives the shard target the table's owner and privileges,
// the owner first (its GRANTs are then the owner's, as on the table).
// Whatever the new shard got besides (its creator's default privileges,
// ALTER DEFAULT PRIVILEGES on the worker: an adversary read a table
// through them) is revoked first, so that the shard's ACL is the
// table's: the default one when the table has it.
func (d *Def) privilegeSQL(target string) []string {
	if d.Owner == "" {
		return nil
	}
	lit := quoteLiteral(target)
	reset := "EXECUTE 'GRANT ALL ON TABLE ' || " + lit + " || ' TO ' || " + quoteLiteral(d.Owner) + ";"
	if d.Privileges {
		reset = ""
	}
	out := []string{"ALTER TABLE " + target + " OWNER TO " + d.Owner,
		"DO $pgfleet$ DECLARE g pg_catalog.oid; BEGIN " +
			"IF (SELECT relacl FROM pg_catalog.pg_class WHERE oid = " + lit + "::pg_catalog.regclass) IS NOT NULL THEN " +
			"FOR g IN SELECT DISTINCT a.grantee FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a WHERE c.oid = " + lit + "::pg_catalog.regclass LOOP " +
			"EXECUTE 'REVOKE ALL ON TABLE ' || " + lit + " || ' FROM ' || CASE WHEN g = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g)) END; " +
			"END LOOP; " + reset + " END IF; END $pgfleet$"}
	if d.Privileges {
		// From the default ACL (or none) to none, then the table's items.
		out = append(out, "REVOKE ALL ON TABLE "+target+" FROM "+d.Owner)
	}
	for _, g := range d.Grants {
		col := ""
		if g.Column != "" {
			col = " (" + g.Column + ")"
		}
		out = append(out, "GRANT "+g.Privilege+col+" ON TABLE "+target+" TO "+g.Grantee)
	}
	return out
}

// nameSuffix is what the names of a shard's constraints and indexes get
// appended: the part shardName adds to the table's name ("_102008" for
// accounts_102008), or "_"+shardName if it does not start with it;
// nothing when shardName is the table's own name.
func nameSuffix(table, shardName string) string {
	if shardName == table {
		return "" // a copy of a shard under its own name (a shard move)
	}
	if len(shardName) > len(table) && strings.HasPrefix(shardName, table) {
		return shardName[len(table):]
	}
	return "_" + shardName
}

// suffixed appends suffix to name within PostgreSQL's identifier length
// (metadata.Suffixed).
func suffixed(name, suffix string) string { return metadata.Suffixed(name, suffix) }

// relation is what pg_class says of a table.
type relation struct {
	oid         uint32
	schema      string
	name        string
	kind        string // relkind
	persistence string // relpersistence
	partition   bool
	rowSecurity bool
	options     string
}

// lookup resolves a table name as the session's search_path would, with
// PostgreSQL's own parsing of quoted and qualified names.
func lookup(ctx context.Context, conn *pgx.Conn, table string) (*relation, error) {
	if strings.TrimSpace(table) == "" {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "table name is required")
	}
	r := &relation{}
	err := conn.QueryRow(ctx, `SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text,
			c.relpersistence::text, c.relispartition, c.relrowsecurity,
			coalesce(array_to_string(c.reloptions, ', '), '')
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = pg_catalog.to_regclass($1)`, table).Scan(&r.oid, &r.schema, &r.name, &r.kind,
		&r.persistence, &r.partition, &r.rowSecurity, &r.options)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, pgerr.New(pgerr.UndefinedTable, "relation %q does not exist", table)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// TableDef reads the definition of a table (resolved through the
// connection's search_path) from pg_catalog. It fails with 42P01 if there is
// no such relation, 42809 if it is not an ordinary table, and 0A000 for
// features shards cannot have yet: sequence defaults other than a column's
// own sequence, triggers, row-level security, inheritance, partitioning and
// temporary tables. It reads the table's foreign keys (ForeignKeys);
// distributing a table refuses them (foreignKeysRefused), shards copied
// from shards keep them.
func TableDef(ctx context.Context, conn *pgx.Conn, table string) (*Def, error) {
	r, err := lookup(ctx, conn, table)
	if err != nil {
		return nil, err
	}
	name := r.schema + "." + r.name
	switch {
	case r.kind == "p" || r.partition:
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s is partitioned or a partition; distributing partitioned tables is not supported yet", name).
			WithHint("Distribute a plain table (shards already split it by hash).")
	case r.kind != "r":
		return nil, pgerr.New(pgerr.WrongObjectType, "%q is not a table", name)
	case r.persistence == "t":
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s is a temporary table, which cannot be distributed", name).
			WithHint("Create it without TEMPORARY to distribute it.")
	case r.rowSecurity:
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s has row-level security enabled; row-level security on distributed tables is not supported yet", name).
			WithHint("Disable row-level security on it (ALTER TABLE ... DISABLE ROW LEVEL SECURITY) to distribute it.")
	}
	d := &Def{OID: r.oid, Schema: r.schema, Name: r.name, Unlogged: r.persistence == "u", Options: r.options}

	var other string
	err = conn.QueryRow(ctx, `SELECT inhparent::regclass::text FROM pg_catalog.pg_inherits WHERE inhrelid = $1
		UNION ALL SELECT inhrelid::regclass::text FROM pg_catalog.pg_inherits WHERE inhparent = $1 LIMIT 1`,
		r.oid).Scan(&other)
	if err == nil {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s takes part in inheritance (with %s); distributing inheritance hierarchies is not supported yet", name, other).
			WithHint("Distribute a table without INHERITS.")
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	err = conn.QueryRow(ctx, `SELECT tgname::text FROM pg_catalog.pg_trigger
		WHERE tgrelid = $1 AND NOT tgisinternal AND tgname NOT IN ('pgfleet_distributed_guard', 'pgfleet_references_guard')
		ORDER BY tgname LIMIT 1`, r.oid).Scan(&other)
	if err == nil {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "%s has trigger %q; triggers on distributed tables are not supported yet", name, other).
			WithHint("Drop the trigger first.")
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if err := readColumns(ctx, conn, d); err != nil {
		return nil, err
	}
	if err := readConstraints(ctx, conn, d); err != nil {
		return nil, err
	}
	if err := readIndexes(ctx, conn, d); err != nil {
		return nil, err
	}
	if err := readForeignKeys(ctx, conn, d); err != nil {
		return nil, err
	}
	if err := readPrivileges(ctx, conn, d); err != nil {
		return nil, err
	}
	return d, nil
}

// readPrivileges reads the table's owner and ACL, of the table and of its
// columns. An item granted by a role other than the owner, or with GRANT
// OPTION, fails with 0A000: a shard's privileges are granted by its owner
// (the creator cannot grant as another role), and pgfleet keeps them the
// table's by sending GRANT and REVOKE on to the shards, which only the
// owner's grants keep equal (analyzeGrant refuses the rest).
func readPrivileges(ctx context.Context, conn *pgx.Conn, d *Def) error {
	var privileged bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner)), c.relacl IS NOT NULL
		FROM pg_catalog.pg_class c WHERE c.oid = $1`, d.OID).Scan(&d.Owner, &privileged); err != nil {
		return err
	}
	d.Privileges = privileged
	rows, err := conn.Query(ctx, `SELECT a.privilege_type, g.col,
			CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
			a.grantor <> c.relowner OR a.is_grantable
		FROM pg_catalog.pg_class c,
			LATERAL (SELECT '' AS col, c.relacl AS acl, 0 AS n
				UNION ALL SELECT pg_catalog.quote_ident(t.attname), t.attacl, t.attnum FROM pg_catalog.pg_attribute t
				WHERE t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped AND t.attacl IS NOT NULL) g,
			pg_catalog.aclexplode(g.acl) a
		WHERE c.oid = $1 ORDER BY g.n`, d.OID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var g Grant
		var other bool
		if err := rows.Scan(&g.Privilege, &g.Column, &g.Grantee, &other); err != nil {
			return err
		}
		if other {
			return pgerr.New(pgerr.FeatureNotSupported, "%s has a privilege granted WITH GRANT OPTION or by a role other than its owner; shards of such a table are not supported yet",
				d.CatalogName()).
				WithHint("Revoke it (REVOKE GRANT OPTION FOR ..., or REVOKE ... as the role that granted it) and grant it again as the table's owner.")
		}
		d.Grants = append(d.Grants, g)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	return checkSchemaUsage(ctx, conn, d.Ident())
}

// schemaUsageSQL: the table $1 gives privileges to roles other than its
// owner (on itself or a column) while not every role may use its schema
// (no USAGE for PUBLIC). A shard lives in the shards' schema, which every
// role may use, so the worker never checks the table's schema: privileges
// of other roles are given to shards only where that check could not
// refuse anyone (an adversary read a table through a schema it had no
// USAGE on).
const schemaUsageSQL = `SELECT n.nspname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = pg_catalog.to_regclass($1)
   AND (EXISTS (SELECT FROM pg_catalog.aclexplode(c.relacl) a WHERE a.grantee <> c.relowner)
        OR EXISTS (SELECT FROM pg_catalog.pg_attribute t, pg_catalog.aclexplode(t.attacl) a
                    WHERE t.attrelid = c.oid AND t.attnum > 0 AND a.grantee <> c.relowner))
   AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) a WHERE a.grantee = 0 AND a.privilege_type = 'USAGE')`

// checkSchemaUsage fails with 0A000 when schemaUsageSQL finds table
// (quoted, qualified) so.
func checkSchemaUsage(ctx context.Context, conn *pgx.Conn, table string) error {
	var schema string
	err := conn.QueryRow(ctx, schemaUsageSQL, table).Scan(&schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return schemaUsageError(table, schema)
}

func schemaUsageError(table, schema string) error {
	return pgerr.New(pgerr.FeatureNotSupported,
		"privileges of roles other than its owner on distributed or reference table %s are not supported while not every role may use schema %s: its shards, in another schema, would not check that",
		table, schema).
		WithHint("GRANT USAGE ON SCHEMA %s TO PUBLIC, or keep the table's privileges to its owner.", pgx.Identifier{schema}.Sanitize())
}

func readColumns(ctx context.Context, conn *pgx.Conn, d *Def) error {
	rows, err := conn.Query(ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
			t.typname::text, a.attnotnull,
			coalesce(pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), ''),
			a.attgenerated::text, a.attidentity::text,
			CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
				THEN pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(co.collname) ELSE '' END,
			coalesce(co.collisdeterministic, true),
			EXISTS (SELECT FROM pg_catalog.pg_depend dep JOIN pg_catalog.pg_class s ON s.oid = dep.refobjid
				WHERE dep.classid = 'pg_catalog.pg_attrdef'::regclass AND dep.objid = ad.oid
				AND dep.refclassid = 'pg_catalog.pg_class'::regclass AND s.relkind = 'S'),
			coalesce((SELECT dep.objid FROM pg_catalog.pg_depend dep JOIN pg_catalog.pg_class s ON s.oid = dep.objid
				WHERE dep.classid = 'pg_catalog.pg_class'::regclass AND dep.refclassid = 'pg_catalog.pg_class'::regclass
				AND dep.refobjid = a.attrelid AND dep.refobjsubid = a.attnum AND dep.deptype IN ('a', 'i')
				AND s.relkind = 'S' LIMIT 1), 0),
			coalesce((SELECT dep.refobjid FROM pg_catalog.pg_depend dep JOIN pg_catalog.pg_class s ON s.oid = dep.refobjid
				WHERE dep.classid = 'pg_catalog.pg_attrdef'::regclass AND dep.objid = ad.oid
				AND dep.refclassid = 'pg_catalog.pg_class'::regclass AND s.relkind = 'S' LIMIT 1), 0)
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
		LEFT JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, d.OID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c Column
		var expr, generated, identity string
		var sequence bool
		var owned, used uint32
		if err := rows.Scan(&c.Name, &c.Type, &c.TypeName, &c.NotNull, &expr, &generated, &identity,
			&c.Collation, &c.Deterministic, &sequence, &owned, &used); err != nil {
			return err
		}
		switch {
		case identity != "" && owned != 0:
			c.Sequence, c.SequenceOID = identity[0], owned
		case sequence && owned != 0 && used == owned && ownSequenceDefault(expr):
			c.Sequence, c.SequenceOID = 's', owned
		case sequence:
			return pgerr.New(pgerr.FeatureNotSupported,
				"column %q of %s takes its default from a sequence (%s) other than its own serial sequence; such defaults on distributed and reference tables are not supported yet",
				c.Name, d.CatalogName(), expr).
				WithHint("Make the default nextval() of a sequence the column owns (ALTER SEQUENCE ... OWNED BY), as serial columns have, or drop the default.")
		case generated == "s":
			c.Generated = expr
		case generated != "":
			return pgerr.New(pgerr.FeatureNotSupported, "column %q of %s is a generated column of kind %q, which is not supported",
				c.Name, d.CatalogName(), generated).
				WithHint("Use a stored generated column (GENERATED ALWAYS AS (...) STORED).")
		default:
			c.Default = expr
		}
		d.Columns = append(d.Columns, c)
	}
	return rows.Err()
}

// ownSequenceDefault reports whether a column default is the plain next
// value of a sequence, as a serial column's: nextval('name'::regclass).
func ownSequenceDefault(expr string) bool {
	rest, ok := strings.CutPrefix(expr, "nextval('")
	if !ok {
		return false
	}
	rest, ok = strings.CutSuffix(rest, "'::regclass)")
	return ok && !strings.Contains(strings.ReplaceAll(rest, "''", ""), "'")
}

func readConstraints(ctx context.Context, conn *pgx.Conn, d *Def) error {
	rows, err := conn.Query(ctx, `SELECT k.conname::text, k.contype::text, pg_catalog.pg_get_constraintdef(k.oid),
			ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY AS u(attnum, i)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum ORDER BY u.i)
		FROM pg_catalog.pg_constraint k
		WHERE k.conrelid = $1 AND k.contype IN ('p', 'u', 'x', 'c')
		ORDER BY strpos('puxc', k.contype::text), k.conname`, d.OID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c Constraint
		var typ string
		if err := rows.Scan(&c.Name, &typ, &c.Definition, &c.Columns); err != nil {
			return err
		}
		c.Type = typ[0]
		d.Constraints = append(d.Constraints, c)
	}
	return rows.Err()
}

func readForeignKeys(ctx context.Context, conn *pgx.Conn, d *Def) error {
	rows, err := conn.Query(ctx, `SELECT k.conname::text, pg_catalog.pg_get_constraintdef(k.oid), n.nspname::text, c.relname::text
		FROM pg_catalog.pg_constraint k
		JOIN pg_catalog.pg_class c ON c.oid = k.confrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE k.conrelid = $1 AND k.contype = 'f'
		ORDER BY k.conname`, d.OID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var fk ForeignKey
		if err := rows.Scan(&fk.Name, &fk.Definition, &fk.RefSchema, &fk.RefName); err != nil {
			return err
		}
		d.ForeignKeys = append(d.ForeignKeys, fk)
	}
	return rows.Err()
}

// foreignKeysRefused fails with 0A000 if the table has a foreign key, or
// another table has one referencing it (undistribute_table: its rows would
// come back into a table whose keys reference, or are referenced by, empty
// shells).
func foreignKeysRefused(ctx context.Context, conn *pgx.Conn, oid uint32, name string) error {
	var fk, fkTable string
	var outgoing bool
	err := conn.QueryRow(ctx, `SELECT conname::text, conrelid::regclass::text, conrelid = $1
		FROM pg_catalog.pg_constraint
		WHERE contype = 'f' AND (conrelid = $1 OR confrelid = $1) ORDER BY conrelid <> $1, conname LIMIT 1`,
		oid).Scan(&fk, &fkTable, &outgoing)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	e := pgerr.New(pgerr.FeatureNotSupported, "cannot undistribute %s: it has foreign keys", name).
		WithHint("Drop the foreign keys (ALTER TABLE ... DROP CONSTRAINT) first.")
	if outgoing {
		e.Detail = fmt.Sprintf("%s has foreign key %q.", name, fk)
	} else {
		e.Detail = fmt.Sprintf("%s is referenced by foreign key %q of %s.", name, fk, fkTable)
	}
	return e
}

// ReferencesGuard is the trigger that keeps a table which is neither
// distributed nor a reference table, and has a foreign key to one, from
// taking rows: its key would be checked against the empty shell on the
// default node. Distributing the table drops it.
const ReferencesGuard = "pgfleet_references_guard"

// ReferencesGuardSQL adds the guard to a table (ident as the statement
// that made it spelled it).
func ReferencesGuardSQL(ident string) string {
	return "CREATE OR REPLACE TRIGGER " + ReferencesGuard + " BEFORE INSERT OR UPDATE ON " + ident +
		" FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.references_guard()"
}

func readIndexes(ctx context.Context, conn *pgx.Conn, d *Def) error {
	rows, err := conn.Query(ctx, `SELECT i.relname::text, x.indisunique, pg_catalog.pg_get_indexdef(x.indexrelid),
			pg_catalog.quote_ident(i.relname),
			pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname),
			ARRAY(SELECT a.attname::text FROM generate_series(0, x.indnkeyatts - 1) AS g(i)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[g.i]
				ORDER BY g.i)
		FROM pg_catalog.pg_index x
		JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
		JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE x.indrelid = $1 AND x.indisvalid
		AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint k
			WHERE k.conrelid = x.indrelid AND k.conindid = x.indexrelid AND k.contype IN ('p', 'u', 'x'))
		ORDER BY i.relname`, d.OID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ix Index
		var quotedIndex, quotedTable string
		if err := rows.Scan(&ix.Name, &ix.Unique, &ix.Definition, &quotedIndex, &quotedTable, &ix.Columns); err != nil {
			return err
		}
		tail, ok := indexTail(ix.Definition, ix.Unique, quotedIndex, quotedTable)
		if !ok {
			return pgerr.New(pgerr.Internal, "cannot take apart the definition of index %q: %s", ix.Name, ix.Definition)
		}
		ix.tail = tail
		d.Indexes = append(d.Indexes, ix)
	}
	return rows.Err()
}

// indexTail returns the part of pg_get_indexdef's output after the table's
// name: " USING method (columns) [INCLUDE ...] [WITH ...] [WHERE ...]".
// pg_get_indexdef writes "CREATE [UNIQUE ]INDEX <index> ON [ONLY ]<table>
// USING ..." with both names quoted as quote_ident does and the table
// qualified; anything else is refused rather than guessed at.
func indexTail(def string, unique bool, quotedIndex, quotedTable string) (string, bool) {
	head := "CREATE INDEX "
	if unique {
		head = "CREATE UNIQUE INDEX "
	}
	head += quotedIndex + " ON "
	if !strings.HasPrefix(def, head) {
		return "", false
	}
	rest := strings.TrimPrefix(def[len(head):], "ONLY ")
	if !strings.HasPrefix(rest, quotedTable+" USING ") {
		return "", false
	}
	return rest[len(quotedTable):], true
}
