package shards

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// errNoStore: an operation was called without the metadata store that
// records its commit decision.
var errNoStore = pgerr.New(pgerr.Internal, "shards: no metadata store")

// ExecAll runs one statement (a write to a reference table, already
// rewritten to the shard's name) on every given node in one distributed
// transaction with two-phase commit, and returns the first node's result:
// every copy got the same statement, so every copy answers alike. store
// records the commit decision.
func ExecAll(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	nodeIDs []int32, sql string) (*pgconn.Result, error) {
	return ExecAllParams(ctx, store, snap, conns, nodeIDs, sql, nil, nil, nil, nil, nil)
}

// ExecAllParams is ExecAll of a statement with parameters ($n), given as
// in the extended query protocol: their types (0 or missing: the worker
// infers them), format codes (none, one for all, or one each) and values
// (nil: NULL), and the result formats of the rows it returns (none: text).
// check, if not nil, compares each later copy's result with
// the first's before anything commits: an error from it rolls back every
// copy and is returned.
func ExecAllParams(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	nodeIDs []int32, sql string, paramOIDs []uint32, paramFormats []int16, paramValues [][]byte, resultFormats []int16,
	check func(first, res *pgconn.Result) error) (*pgconn.Result, error) {
	if store == nil {
		return nil, errNoStore
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	for _, nd := range snap.Nodes {
		n.addrs[nd.ID] = nd.Addr()
	}
	g := newGroup("write", n, store)
	g.beginStmt = "BEGIN"
	var first *pgconn.Result
	for _, id := range nodeIDs {
		tx, err := g.begin(ctx, id)
		if err != nil {
			g.rollback(ctx)
			return nil, err
		}
		res := readAll(tx.conn.PgConn().ExecParams(ctx, sql, paramValues, paramOIDs, paramFormats, resultFormats))
		if res.Err != nil {
			g.rollback(ctx)
			return nil, n.stmtErr(res.Err, "on node %s", n.describe(id))
		}
		if first == nil {
			first = res
		} else if res.CommandTag.RowsAffected() != first.CommandTag.RowsAffected() {
			g.rollback(ctx)
			return nil, fmt.Errorf("copies of a reference table differ: %d rows changed on node %s, %d on the first",
				res.CommandTag.RowsAffected(), n.describe(id), first.CommandTag.RowsAffected())
		} else if check != nil {
			if err := check(first, res); err != nil {
				g.rollback(ctx)
				return nil, err
			}
		}
	}
	if err := g.prepare(ctx); err != nil {
		g.rollback(ctx)
		return nil, err
	}
	if err := g.commit(ctx); err != nil {
		return nil, err
	}
	return first, nil
}

// ExecGroups runs statements on several nodes (each node's in order) in one
// distributed transaction with two-phase commit, and returns the rows they
// affected in all. store records the commit decision.
func ExecGroups(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	byNode map[int32][]string) (int64, error) {
	return ExecGroupsParams(ctx, store, snap, conns, byNode, nil)
}

// Params are the parameters of the statements ExecGroupsParams runs, as a
// client's Bind gave them.
type Params struct {
	OIDs    []uint32
	Formats []int16
	Values  [][]byte
	// Results: the result formats of the rows statements return
	// (RETURNING), as ExecParams takes them (none: text).
	Results []int16
	// By: statements that take other parameters than the rest (a
	// multi-row INSERT's shards' statements, each with its rows').
	By map[string]*Params
}

// ExecGroupsParams is ExecGroups for statements with parameters ($1 ...),
// every statement given the same ones.
func ExecGroupsParams(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	byNode map[int32][]string, params *Params) (int64, error) {
	r, err := ExecGroupsRows(ctx, store, snap, conns, byNode, params, 0)
	if err != nil {
		return 0, err
	}
	return r.Affected, nil
}

// GroupsResult is what the statements of ExecGroupsRows did: the rows
// they affected in all and the rows they returned (RETURNING; in text),
// with the first statement's columns.
type GroupsResult struct {
	Affected   int64
	Fields     []pgconn.FieldDescription
	FieldsNode int32 // the node that described Fields
	Rows       [][][]byte
}

// ExecGroupsRows is ExecGroupsParams that keeps the rows the statements
// return, up to limit bytes of values (0: none kept); past it, everything
// is rolled back and the error is 54000.
func ExecGroupsRows(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn,
	byNode map[int32][]string, params *Params, limit int64) (*GroupsResult, error) {
	if params == nil {
		params = &Params{}
	}
	if store == nil {
		return nil, errNoStore
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	for _, nd := range snap.Nodes {
		n.addrs[nd.ID] = nd.Addr()
	}
	g := newGroup("write", n, store)
	g.beginStmt = "BEGIN"
	out := &GroupsResult{}
	var size int64
	// Workers in one order, so that two of these writes over the same
	// rows wait for each other instead of deadlocking across workers.
	for _, id := range slices.Sorted(maps.Keys(byNode)) {
		stmts := byNode[id]
		tx, err := g.begin(ctx, id)
		if err != nil {
			g.rollback(ctx)
			return nil, err
		}
		for _, sql := range stmts {
			ps := params
			if q := params.By[sql]; q != nil {
				ps = q
			}
			res := readAll(tx.conn.PgConn().ExecParams(ctx, sql, ps.Values, ps.OIDs, ps.Formats, ps.Results))
			if res.Err != nil {
				g.rollback(ctx)
				return nil, n.stmtErr(res.Err, "on node %s", n.describe(id))
			}
			out.Affected += res.CommandTag.RowsAffected()
			if out.Fields == nil {
				out.Fields, out.FieldsNode = res.FieldDescriptions, id
			}
			for _, row := range res.Rows {
				for _, v := range row {
					size += int64(len(v)) + 4
				}
			}
			if size > limit && len(res.Rows) > 0 {
				g.rollback(ctx)
				return nil, pgerr.New("54000", "the rows this statement returns exceed %d bytes, more than the coordinator holds (--max-gather)", limit).
					WithHint("Return fewer rows (a narrower WHERE or fewer columns), or write without RETURNING.")
			}
			out.Rows = append(out.Rows, res.Rows...)
		}
	}
	if err := g.prepare(ctx); err != nil {
		g.rollback(ctx)
		return nil, err
	}
	if err := g.commit(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// readAll reads a statement's result as pgconn's Read does, but keeps its
// columns when it has no rows (Read takes them from the first row): a
// write with RETURNING that returns nothing still describes its columns,
// as PostgreSQL does.
func readAll(rr *pgconn.ResultReader) *pgconn.Result {
	fields := slices.Clone(rr.FieldDescriptions())
	res := rr.Read()
	if res.FieldDescriptions == nil {
		res.FieldDescriptions = fields
	}
	return res
}
