package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/pooling"
)

// firstShardID is where the catalog's shard ids start (metadata/store.go).
const firstShardID = 102008

// staleShard returns, for a worker's 42P01 "relation "t_102050" does not
// exist" on a shard name pgfleet generated that the current catalog no
// longer has, or no longer has on the worker it was routed to (a
// concurrent undistribute_table, create_distributed_table or shard move
// dropped it between routing and running), the error as a
// serialization failure (40001) the client can retry; nil for any other
// error. Rare path: it runs only on a 42P01.
func staleShard(msg string, snap *metadata.Snapshot) *pgerr.Error {
	const pre, post = `relation "`, `" does not exist`
	if !strings.HasPrefix(msg, pre) || !strings.HasSuffix(msg, post) {
		return nil
	}
	rel := msg[len(pre) : len(msg)-len(post)]
	bare := rel[strings.LastIndexByte(rel, '.')+1:]
	i := strings.LastIndexByte(bare, '_')
	if i <= 0 {
		return nil
	}
	id, err := strconv.ParseInt(bare[i+1:], 10, 64)
	if err != nil || id < firstShardID {
		return nil
	}
	if snap != nil {
		for table, shards := range snap.Shards {
			for _, sh := range shards {
				if sh.ID == id && bare != metadata.ShardName(table[strings.IndexByte(table, '.')+1:], id) {
					return nil // another relation with a shard's id
				}
			}
		}
	}
	// A shard of the catalog that is not where the statement was routed
	// was moved since (citus_move_shard_placement); one the catalog no
	// longer has was dropped with its table's distribution.
	return pgerr.New(pgerr.SerializationFailure, "shard %s%s", rel, staleShardSuffix).
		WithHint("Retry the statement (or the transaction): it will use the table as it is now.")
}

// staleShardSuffix ends staleShard's message, by which a request that met
// a moved shard is known (replay.go).
const staleShardSuffix = " was moved or dropped by a concurrent change of its table's distribution"

// staleShardBody maps a worker's ErrorResponse body with staleShard; it
// returns body unchanged when it does not apply.
func (ss *session) staleShardBody(body []byte) []byte {
	if errCode(body) != pgerr.UndefinedTable {
		return body
	}
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil {
		return body
	}
	ss.srv.refreshCatalog(context.Background())
	e := staleShard(er.Message, ss.srv.catalog.Load())
	if e == nil {
		return body
	}
	er.Code, er.Message, er.Hint = e.Code, e.Message, e.Hint
	b, err := er.Encode(nil)
	if err != nil {
		return body
	}
	return b[5:]
}

// staleShardErr is staleShard for errors of coordinator-driven writes.
func (ss *session) staleShardErr(err error) error {
	er := pgerr.Flatten(err)
	if er == nil || er.Code != pgerr.UndefinedTable {
		return err
	}
	ss.srv.refreshCatalog(context.Background())
	msg := er.Message
	if i := strings.LastIndex(msg, `relation "`); i > 0 {
		msg = msg[i:]
	}
	if e := staleShard(msg, ss.srv.catalog.Load()); e != nil {
		return e
	}
	return err
}

// defaultOnly maps a worker's 42P01 on a relation that is not a shard, or
// 42883 on a function, sent by a worker other than the default node, to
// 0A000 when the default node has that relation, or a function of the
// call's name and argument types. The statement ran where its shards are, and something in it the
// planner does not see (a function, a trigger, a regclass in a string, a
// function made on the default node only) read a local table, view or
// sequence, or called such a function: on the default node it reads it,
// so PostgreSQL's answer would depend on where the shards are
// (TestSequenceStateInUserCode met 42P01 after a shard move). What exists
// nowhere keeps PostgreSQL's error. It returns body unchanged when it does
// not apply. Rare path: it runs only on those errors, after
// staleShardBody.
func (ss *session) defaultOnly(body []byte, addr string) []byte {
	code := errCode(body)
	if addr == "" || code != pgerr.UndefinedTable && code != pgerr.UndefinedFunction || addr == ss.srv.nodeAddr(ss.srv.defaultNode.Load()) {
		return body
	}
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil {
		return body
	}
	var what, lookup string
	if code == pgerr.UndefinedTable {
		rel, ok := strings.CutPrefix(er.Message, `relation "`)
		if rel, ok = strings.CutSuffix(rel, `" does not exist`); !ok || staleShard(er.Message, nil) != nil {
			return body // not PostgreSQL's message, or a shard's name
		}
		what = fmt.Sprintf("relation %q", rel)
		lookup = "SELECT pg_catalog.to_regclass(" + quoteLiteral(qualifiedName(rel)) + ") IS NOT NULL"
	} else {
		sig, ok := strings.CutPrefix(er.Message, "function ")
		if sig, ok = strings.CutSuffix(sig, " does not exist"); !ok || !strings.HasSuffix(sig, ")") {
			return body
		}
		fn, args, _ := strings.Cut(sig, "(")
		what = "function " + fn + "()"
		// Whether the default node resolves the call, as PostgreSQL
		// would (implicit casts, defaults, unknown literals; adversary:
		// gb(bigint) called with an integer): its Parse of a call with
		// NULLs of the argument types the worker gave, which runs
		// nothing. length(integer) resolves nowhere: PostgreSQL's 42883.
		var nulls []string
		if args = strings.TrimSuffix(args, ")"); args != "" {
			for _, t := range strings.Split(args, ", ") {
				if t == "unknown" {
					nulls = append(nulls, "NULL")
				} else {
					nulls = append(nulls, "NULL::"+t)
				}
			}
		}
		call := "SELECT " + qualifiedName(fn) + "(" + strings.Join(nulls, ", ") + ")"
		var werr *executor.WorkerError
		err := ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
			werr, err = parseOnly(sc, call, nil)
			return err
		})
		if err != nil || werr != nil {
			return body // not there either: PostgreSQL's error
		}
		return defaultOnlyError(body, er, what, addr)
	}
	var rows [][]*string
	err := ss.onDefaultNode(func(sc *pooling.ServerConn) (err error) {
		rows, err = executor.QueryText(sc, lookup)
		return err
	})
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] == nil || *rows[0][0] != "t" {
		return body // not there either: PostgreSQL's error
	}
	return defaultOnlyError(body, er, what, addr)
}

// defaultOnlyError is defaultOnly's 0A000 for er (body), what the worker
// lacked.
func defaultOnlyError(body []byte, er pgproto3.ErrorResponse, what, addr string) []byte {
	er.Detail = er.Message + " on that worker."
	er.Code = pgerr.FeatureNotSupported
	er.Message = fmt.Sprintf("%s is on the default node only, and the statement ran over shards on worker %s", what, addr)
	er.Hint = "A function, trigger or regclass value in the statement reads a local table, view or sequence, or calls a function made on the default node only; over distributed tables that is not supported. Read it in a statement of its own, or make the table a reference table (create_reference_table)."
	er.Position = 0
	b, err := er.Encode(nil)
	if err != nil {
		return body
	}
	return b[5:]
}

// qualifiedName quotes each dotted part of a relation's name as an error
// message gives it (as the statement resolved it, case and all).
func qualifiedName(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = quoteIdent(p)
	}
	return strings.Join(parts, ".")
}
