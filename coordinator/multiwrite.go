package coordinator

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// multiShardWrite runs an UPDATE or DELETE on every shard of its table
// (planner.MultiShardWrite): each worker runs its shards' statements in
// one transaction, and the workers commit with two-phase commit, all or
// nothing, as InsertSplit's rows do. The command tag counts the rows of
// every shard.
func (ss *session) multiShardWrite(p *planner.Plan, lits []literal, text string) error {
	what, _, _ := strings.Cut(p.ShardSQL[0], " ") // UPDATE, DELETE or INSERT
	if ss.inTxn() && ss.pinned != "" {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"a multi-shard %s of %s is not supported in a transaction block of a session pinned to one worker connection (%s)", what, p.DistTable, ss.pinned).
			WithHint("Run it outside BEGIN ... COMMIT, or reconnect."))
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
	if ss.inTxn() && ss.txStatus() == 'E' {
		return ss.queryError(pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block"))
	}
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
	if ss.inTxn() {
		return ss.multiShardWriteInTxn(what, byNode)
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

// multiShardWriteInTxn runs a multi-shard write inside a transaction block:
// every worker holding a shard is joined into the transaction (in node
// order, its BEGIN replayed there) and runs its shards' statements; the
// transaction's COMMIT commits them all (two-phase commit across its
// workers), its ROLLBACK undoes them, and an error on any shard fails it,
// as on PostgreSQL. Under REPEATABLE READ or SERIALIZABLE it is refused:
// each worker would read its own snapshot, taken at another moment.
func (ss *session) multiShardWriteInTxn(what string, byNode map[int32][]string) error {
	ctx := context.Background()
	var total int64
	var msgs []byte
	for k, node := range slices.Sorted(maps.Keys(byNode)) {
		if err := ss.acquire(ctx, node); err != nil {
			return ss.queryError(err)
		}
		if ss.pendingBegin != "" {
			if err := ss.startPending(); err != nil {
				return ss.queryError(err)
			}
		}
		if k == 0 {
			rows, err := queryText(ss.sc, "SELECT pg_catalog.current_setting('transaction_isolation')")
			if err != nil {
				return ss.queryError(err)
			}
			level := ""
			if len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil {
				level = *rows[0][0]
			}
			if level == "" || !readCommitted(level) {
				return ss.queryError(errTxnIsolation(level))
			}
		}
		for _, sql := range byNode[node] {
			c, err := ss.refCaptureRun(wire.AppendFrame(nil, 'Q', append([]byte(sql), 0)))
			if err != nil {
				return ss.lostServer(err)
			}
			msgs = append(msgs, c.msgs...)
			if c.werr != nil {
				// The worker's transaction failed: so does the client's.
				ss.txFailed = true
				ss.out = append(ss.out, msgs...)
				ss.out = wire.AppendFrame(ss.out, 'E', c.werr)
				ss.out = append(ss.out, 'Z', 0, 0, 0, 5, ss.sc.TxStatus)
				return nil
			}
			if i := strings.LastIndexByte(c.tag, ' '); i >= 0 {
				n, _ := strconv.ParseInt(c.tag[i+1:], 10, 64)
				total += n
			}
		}
	}
	tag := what + " " + strconv.FormatInt(total, 10)
	if what == "INSERT" {
		tag = "INSERT 0 " + strconv.FormatInt(total, 10)
	}
	ss.out = append(ss.out, msgs...)
	ss.out = wire.AppendFrame(ss.out, 'C', append([]byte(tag), 0))
	ss.out = append(ss.out, 'Z', 0, 0, 0, 5, ss.sc.TxStatus)
	return nil
}
