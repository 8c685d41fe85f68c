package shards

import (
	"maps"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Maintenance is how VACUUM or ANALYZE reaches the shards of the catalog
// tables it names: the statement as written runs on the default node (its
// shells and local tables there, and PostgreSQL's own errors for what it
// names), then on each node the same command with the same options over
// that node's shards of those tables (PerNode). A bare VACUUM or ANALYZE,
// which names no table and means every table of the database, runs as
// written on every node (Everywhere). Neither runs in a transaction: the
// caller runs each on a connection of its own, outside any block
// (VACUUM cannot run in one).
type Maintenance struct {
	Kind       string           // "VACUUM" or "ANALYZE"
	PerNode    map[int32]string // the command over each node's shards
	Everywhere bool             // a bare command: as written on every node
}

// Nodes are the nodes PerNode names, in order.
func (m *Maintenance) Nodes() []int32 { return slices.Sorted(maps.Keys(m.PerNode)) }

// PlanMaintenance reads a VACUUM or ANALYZE statement: nil when text is
// something else, or names no catalog table (and is not bare). A
// statement of several commands is refused.
func PlanMaintenance(text string, snap *metadata.Snapshot) (*Maintenance, error) {
	if snap == nil || len(snap.Tables) == 0 {
		return nil, nil
	}
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) == 0 {
		return nil, nil // (the default node reports the syntax error)
	}
	var v *pg_query.VacuumStmt
	for i, s := range tree.Stmts {
		if vs := s.Stmt.GetVacuumStmt(); vs != nil {
			if len(tree.Stmts) > 1 {
				return nil, unsupportedDDL("%s of distributed or reference tables together with other statements is not supported", command(vs)).
					WithHint("Send it as a statement of its own.")
			}
			v = vs
		} else if i == 0 {
			return nil, nil
		}
	}
	if v == nil {
		return nil, nil
	}
	m := &Maintenance{Kind: command(v), PerNode: map[int32]string{}}
	if len(v.Rels) == 0 {
		m.Everywhere = true
		return m, nil
	}
	rels := map[int32][]*pg_query.Node{}
	for _, r := range v.Rels {
		vr := r.GetVacuumRelation()
		if vr == nil {
			continue
		}
		t := catalogTable(snap, vr.Relation)
		if t == nil {
			continue // a local table: the default node's statement has it
		}
		_, rel, _ := strings.Cut(t.Name, ".")
		for _, sh := range snap.Shards[t.Name] {
			for _, node := range sh.Nodes {
				rels[node] = append(rels[node], &pg_query.Node{Node: &pg_query.Node_VacuumRelation{VacuumRelation: &pg_query.VacuumRelation{
					Relation: &pg_query.RangeVar{Schemaname: t.ShardsIn(), Relname: metadata.ShardName(rel, sh.ID), Inh: vr.Relation.Inh, Relpersistence: "p"},
					VaCols:   vr.VaCols,
				}}})
			}
		}
	}
	if len(rels) == 0 {
		return nil, nil
	}
	for node, rs := range rels {
		stmt := &pg_query.VacuumStmt{Options: v.Options, Rels: rs, IsVacuumcmd: v.IsVacuumcmd}
		sql, err := pg_query.Deparse(&pg_query.ParseResult{Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_VacuumStmt{VacuumStmt: stmt}}}}})
		if err != nil {
			return nil, pgerr.New(pgerr.Internal, "cannot write %s for node %d: %v", m.Kind, node, err)
		}
		m.PerNode[node] = sql
	}
	return m, nil
}

func command(v *pg_query.VacuumStmt) string {
	if v.IsVacuumcmd {
		return "VACUUM"
	}
	return "ANALYZE"
}
