package coordinator

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
)

// multiShardWrite runs an UPDATE or DELETE on every shard of its table
// (planner.MultiShardWrite): each worker runs its shards' statements in
// one transaction, and the workers commit with two-phase commit, all or
// nothing, as InsertSplit's rows do. The command tag counts the rows of
// every shard.
func (ss *session) multiShardWrite(p *planner.Plan, lits []literal, text string) error {
	what, _, _ := strings.Cut(p.ShardSQL[0], " ") // UPDATE, DELETE or INSERT
	if ss.inTxn() {                               // its two-phase commit would not be undone by ROLLBACK
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard %s of %s is not supported inside a transaction block yet", what, p.DistTable).
			WithHint("Run it outside BEGIN ... COMMIT (it commits on every shard or on none), or add WHERE <distribution column> = <value>."))
	}
	for _, l := range lits {
		if planner.TimeWord(l.value) {
			// A lifted 'now': each worker would read its own moment.
			return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
				"a multi-shard %s of %s reading '%s' is not supported: each worker would give its own value", what, p.DistTable, l.value).
				WithHint("Pass the moment as a timestamp constant, or add WHERE <distribution column> = <value>."))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := ss.sameOnEveryCopy(ctx, p, lits, nil, nil, nil); err != nil {
		return ss.queryError(err)
	}
	snap := ss.srv.catalog.Load()
	all := snap.Shards[p.DistTable]
	if len(all) != len(p.ShardSQL) {
		return ss.queryError(errCatalogMoved)
	}
	byNode := map[int32][]string{}
	for i, sql := range p.ShardSQL {
		if len(all[i].Nodes) == 0 {
			return ss.queryError(errCatalogMoved)
		}
		if lits != nil {
			sql, _ = spliceLiterals(sql, lits)
		}
		byNode[all[i].Nodes[0]] = append(byNode[all[i].Nodes[0]], sql)
	}
	conns, done, err := ss.nodeConns(ctx)
	defer done()
	if err != nil {
		return ss.queryError(err)
	}
	n, err := shards.ExecGroups(ctx, ss.srv.store, snap, conns, byNode)
	if err != nil {
		return ss.queryError(ss.analysisFirst(text, err))
	}
	tag := what + " " + strconv.FormatInt(n, 10)
	if what == "INSERT" {
		tag = "INSERT 0 " + strconv.FormatInt(n, 10)
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte(tag)}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = append(ss.out, 'Z', 0, 0, 0, 5, 'I')
	return nil
}
