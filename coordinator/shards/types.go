package shards

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// userType is an enum type, a domain or a collation that a table's columns
// use and that a node must have before a shard of the table can be created
// there.
type userType struct {
	kind   byte // 'e' enum, 'd' domain, 'C' collation
	schema string
	name   string
	labels []string // enum
	create string   // CREATE statement, without its name's schema check
}

func (u userType) ident() string { return pgx.Identifier{u.schema, u.name}.Sanitize() }

// columnTypes reads, on the node holding the table (oid), the enum types,
// domains (over any of them, arrays too) and collations its columns use
// outside pg_catalog, in the order they must be created.
func columnTypes(ctx context.Context, home *pgx.Conn, oid uint32) ([]userType, error) {
	rows, err := home.Query(ctx, `WITH RECURSIVE deps(oid, depth) AS (
			SELECT a.atttypid, 0 FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
			UNION
			SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END, d.depth + 1
			FROM deps d JOIN pg_catalog.pg_type t ON t.oid = d.oid
			WHERE (t.typtype = 'd' OR t.typcategory = 'A') AND d.depth < 16)
		SELECT n.nspname::text, t.typname::text, t.typtype::text,
			CASE t.typtype WHEN 'e' THEN ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e
				WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) END,
			CASE t.typtype WHEN 'd' THEN pg_catalog.format_type(t.typbasetype, t.typtypmod) END,
			t.typnotnull, pg_catalog.pg_get_expr(t.typdefaultbin, 0),
			ARRAY(SELECT 'CONSTRAINT ' || pg_catalog.quote_ident(c.conname) || ' ' || pg_catalog.pg_get_constraintdef(c.oid)
				FROM pg_catalog.pg_constraint c WHERE c.contypid = t.oid ORDER BY c.conname)
		FROM deps d JOIN pg_catalog.pg_type t ON t.oid = d.oid
		JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND t.typtype IN ('e', 'd')
		GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY max(d.depth) DESC, 1, 2`, oid)
	if err != nil {
		return nil, err
	}
	var out []userType
	for rows.Next() {
		var u userType
		var typtype string
		var base, def *string
		var notNull bool
		var checks []string
		if err := rows.Scan(&u.schema, &u.name, &typtype, &u.labels, &base, &notNull, &def, &checks); err != nil {
			rows.Close()
			return nil, err
		}
		u.kind = typtype[0]
		if u.kind == 'e' {
			q := make([]string, len(u.labels))
			for i, l := range u.labels {
				q[i] = sqlLiteral(l)
			}
			u.create = "CREATE TYPE " + u.ident() + " AS ENUM (" + strings.Join(q, ", ") + ")"
		} else {
			var b strings.Builder
			b.WriteString("CREATE DOMAIN " + u.ident() + " AS " + *base)
			if def != nil {
				b.WriteString(" DEFAULT " + *def)
			}
			if notNull {
				b.WriteString(" NOT NULL")
			}
			for _, c := range checks {
				b.WriteString(" " + c)
			}
			u.create = b.String()
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = home.Query(ctx, `SELECT DISTINCT n.nspname::text, c.collname::text, c.collprovider::text,
			c.collcollate, c.collctype, c.colliculocale, c.collisdeterministic
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
		JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND n.nspname <> 'pg_catalog'`, oid)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		u := userType{kind: 'C'}
		var provider string
		var collate, ctype, icu *string
		var det bool
		if err := rows.Scan(&u.schema, &u.name, &provider, &collate, &ctype, &icu, &det); err != nil {
			rows.Close()
			return nil, err
		}
		opts := []string{"deterministic = " + map[bool]string{true: "true", false: "false"}[det]}
		switch {
		case provider == "i" && icu != nil:
			opts = append(opts, "provider = icu", "locale = "+sqlLiteral(*icu))
		case collate != nil && ctype != nil:
			opts = append(opts, "provider = libc", "lc_collate = "+sqlLiteral(*collate), "lc_ctype = "+sqlLiteral(*ctype))
		default:
			continue // the default collation's alias: the node has it
		}
		u.create = "CREATE COLLATION " + u.ident() + " (" + strings.Join(opts, ", ") + ")"
		out = append(out, u)
	}
	return out, rows.Err()
}

// ensureTypes creates, in the node's open transaction, the enum types,
// domains and collations of types that the node lacks (and their schemas).
// An enum type the node has with other labels fails with 42710: its rows
// would not mean the same there.
func ensureTypes(ctx context.Context, conn *pgx.Conn, types []userType) error {
	for _, u := range types {
		if err := ensureSchema(ctx, conn, u.schema); err != nil {
			return err
		}
		var exists bool
		var labels []string
		var err error
		if u.kind == 'C' {
			err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_collation c
				JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace WHERE n.nspname = $1 AND c.collname = $2)`,
				u.schema, u.name).Scan(&exists)
		} else {
			err = conn.QueryRow(ctx, `SELECT true, ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e
					WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)
				FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
				WHERE n.nspname = $1 AND t.typname = $2`, u.schema, u.name).Scan(&exists, &labels)
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
		if exists {
			if u.kind == 'e' && !slices.Equal(labels, u.labels) {
				return pgerr.New(pgerr.DuplicateObject, "type %s exists with the labels %v, not %v", u.ident(), labels, u.labels).
					WithHint("Make the enum type the same on every worker (ALTER TYPE ... ADD VALUE), or drop it where no table uses it.")
			}
			continue
		}
		if _, err := conn.Exec(ctx, u.create); err != nil {
			return err
		}
	}
	return nil
}

// sqlLiteral quotes s as a string constant that reads the same under any
// standard_conforming_strings.
func sqlLiteral(s string) string {
	if strings.Contains(s, `\`) {
		return `E'` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `''`) + `'`
	}
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}
