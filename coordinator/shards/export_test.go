package shards

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/metadata"
)

// TestGroup lets tests drive a distributed transaction step by step, to
// stop it where a crash would.
type TestGroup struct{ g *group }

// NewTestGroup starts a distributed transaction over conns whose decisions
// go to store.
func NewTestGroup(store *metadata.Store, conns map[int32]*pgx.Conn) *TestGroup {
	g := newGroup("test", &nodes{conns: conns, addrs: map[int32]string{}}, store)
	g.beginStmt = "BEGIN"
	return &TestGroup{g: g}
}

// Base is the common start of the group's global ids.
func (t *TestGroup) Base() string { return t.g.tp.Base }

// Exec runs sql in the node's transaction, beginning it if needed.
func (t *TestGroup) Exec(ctx context.Context, node int32, sql string) error {
	tx, err := t.g.begin(ctx, node)
	if err != nil {
		return err
	}
	_, err = tx.conn.Exec(ctx, sql)
	return err
}

func (t *TestGroup) Prepare(ctx context.Context) error     { return t.g.prepare(ctx) }
func (t *TestGroup) Commit(ctx context.Context) error      { return t.g.commit(ctx) }
func (t *TestGroup) Rollback(ctx context.Context) []string { return t.g.rollback(ctx) }
