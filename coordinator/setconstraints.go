package coordinator

import (
	"context"
	"strings"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/metadata"
)

// madeHere is the constraint names that sql, a simple Query, makes on
// tables that are none of pgfleet's before each SET CONSTRAINTS of named
// constraints in it, and whether every such SET CONSTRAINTS names only
// those (Django's AddField of a foreign key: ALTER TABLE t ADD COLUMN ...
// CONSTRAINT n REFERENCES ... DEFERRABLE INITIALLY DEFERRED; SET
// CONSTRAINTS n IMMEDIATE). A table is none of pgfleet's when no
// distributed or reference table has its name in any schema.
func madeHere(sql string, cat *metadata.Snapshot) ([]string, bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || cat == nil {
		return nil, false
	}
	ours := func(rv *pg_query.RangeVar) bool {
		if rv == nil {
			return true
		}
		for name := range cat.Tables {
			if name == rv.Relname || strings.HasSuffix(name, "."+rv.Relname) {
				return true
			}
		}
		return false
	}
	made := map[string]bool{}
	var names []string
	add := func(c *pg_query.Node) {
		if k := c.GetConstraint(); k != nil && k.Conname != "" {
			made[k.Conname] = true
		}
	}
	named := false
	for _, raw := range tree.Stmts {
		s := raw.Stmt
		switch {
		case s.GetAlterTableStmt() != nil:
			at := s.GetAlterTableStmt()
			if ours(at.Relation) {
				continue
			}
			for _, c := range at.Cmds {
				d := c.GetAlterTableCmd().GetDef()
				if d == nil {
					continue
				}
				add(d)
				for _, k := range d.GetColumnDef().GetConstraints() {
					add(k)
				}
			}
		case s.GetCreateStmt() != nil:
			cs := s.GetCreateStmt()
			if ours(cs.Relation) {
				continue
			}
			for _, e := range cs.TableElts {
				add(e)
				for _, k := range e.GetColumnDef().GetConstraints() {
					add(k)
				}
			}
		case s.GetConstraintsSetStmt() != nil:
			cs := s.GetConstraintsSetStmt()
			if len(cs.Constraints) == 0 {
				return nil, false // ALL
			}
			for _, c := range cs.Constraints {
				rv := c.GetRangeVar()
				if rv == nil || rv.Schemaname != "" || !made[rv.Relname] {
					return nil, false
				}
				names = append(names, rv.Relname)
			}
			named = true
		}
	}
	return names, named
}

// constraintsOfOurs reports whether a distributed or reference table has
// a constraint of one of names (its shell on the default node does; its
// shards' have names of their own, which SET CONSTRAINTS of the name
// would not reach).
func (s *Server) constraintsOfOurs(names []string, cat *metadata.Snapshot) (bool, error) {
	if s.metaPool == nil {
		return true, nil
	}
	tables := make([]string, 0, len(cat.Tables))
	for name := range cat.Tables {
		tables = append(tables, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var any bool
	err := s.askMeta(ctx, func() error {
		return s.metaPool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_constraint c
		JOIN pg_catalog.pg_class r ON r.oid = c.conrelid JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace
		WHERE c.conname = ANY($1) AND n.nspname || '.' || r.relname = ANY($2))`, names, tables).Scan(&any)
	})
	return any || err != nil, err
}
