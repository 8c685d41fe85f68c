package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestClientTwoPhase: a client's own PREPARE TRANSACTION, COMMIT PREPARED
// and ROLLBACK PREPARED give what PostgreSQL gives, over both protocols,
// the statements side by side with a plain table's: the prepared
// transaction is found from another session whichever worker it is on
// (COMMIT PREPARED went to one worker: 42704 for a transaction prepared on
// the other, its rows in limbo), the session is not pinned after it (a
// later multi-shard SELECT was refused), an id prepared on another worker
// is refused as PostgreSQL refuses one in use (42710), and a block that
// declared a WITH HOLD cursor over a distributed table cannot be prepared
// (0A000), each refusal ending the block rolled back.
func TestClientTwoPhase(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	p := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "ctp_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('ctp_t', 'k', shard_count => 8)")
	exec(t, p, "DROP TABLE IF EXISTS ctp_plain")
	exec(t, p, "CREATE TABLE ctp_plain (k int PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS ctp_plain") })
	sides := []tpSide{
		{c, connect(t, srv.Addr()), "ctp_t", "ctpc"},
		{p, connect(t, cl.Servers[1].Addr()), "ctp_plain", "ctpp"},
	}
	t.Cleanup(func() { rollbackPrepared(t, cl, "ctp") })
	step := func(other bool, q string, mode pgx.QueryExecMode) {
		t.Helper()
		tpStep(t, sides, other, q, mode)
	}
	simple, ext := pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec
	for _, mode := range []pgx.QueryExecMode{simple, ext} {
		base := 0
		if mode == ext {
			base = 100
		}
		// Keys on every worker, each prepared in its own block; another
		// session commits the odd ones and rolls back the even ones.
		for k := base + 1; k <= base+8; k++ {
			step(false, "BEGIN", simple)
			step(false, fmt.Sprintf("INSERT INTO {t} VALUES (%d, %d)", k, k), mode)
			step(false, "SET work_mem = '7MB'", mode)
			step(false, fmt.Sprintf("PREPARE TRANSACTION '{g}%d'", k), mode)
			step(false, "SHOW work_mem", mode)
			step(false, fmt.Sprintf("SELECT count(*) FROM {t} WHERE k = %d", k), mode)
			step(false, "RESET work_mem", mode)
		}
		step(false, "SELECT count(*) FROM {t}", mode) // not pinned: multi-shard
		for k := base + 1; k <= base+8; k++ {
			end := "COMMIT"
			if k%2 == 0 {
				end = "ROLLBACK"
			}
			step(true, fmt.Sprintf("%s PREPARED '{g}%d'", end, k), mode)
			step(true, fmt.Sprintf("%s PREPARED '{g}%d'", end, k), mode) // gone: 42704
		}
		step(false, "SELECT string_agg(k::text, ',' ORDER BY k) FROM {t}", mode)
		// One id, then the same id from blocks on every worker: 42710,
		// the block rolled back and ended.
		for k := base + 20; k <= base+27; k++ {
			step(false, "BEGIN", simple)
			step(false, fmt.Sprintf("INSERT INTO {t} VALUES (%d, 0)", k), mode)
			step(false, fmt.Sprintf("PREPARE TRANSACTION '{g}dup%d'", base), mode)
			step(false, fmt.Sprintf("SELECT count(*) FROM {t} WHERE k = %d", k), mode)
		}
		step(true, fmt.Sprintf("COMMIT PREPARED '{g}dup%d'", base), mode)
		step(false, fmt.Sprintf("SELECT string_agg(k::text, ',' ORDER BY k) FROM {t} WHERE k >= %d", base+20), mode)
		// A WITH HOLD cursor declared in the block: 0A000, rolled back.
		step(false, "BEGIN", simple)
		step(false, "DECLARE cur CURSOR WITH HOLD FOR SELECT k FROM {t} ORDER BY k", simple)
		step(false, fmt.Sprintf("INSERT INTO {t} VALUES (%d, 0)", base+30), mode)
		step(false, fmt.Sprintf("PREPARE TRANSACTION '{g}h%d'", base), mode)
		step(false, "FETCH ALL cur", simple)
		step(false, fmt.Sprintf("SELECT count(*) FROM {t} WHERE k = %d", base+30), mode)
		step(true, fmt.Sprintf("COMMIT PREPARED '{g}h%d'", base), mode)
		// In a block PostgreSQL refuses COMMIT PREPARED (25001).
		step(false, "BEGIN", simple)
		step(false, "INSERT INTO {t} VALUES (0, 0) ON CONFLICT DO NOTHING", mode)
		step(false, fmt.Sprintf("COMMIT PREPARED '{g}%d'", base+1), mode)
		step(false, "ROLLBACK", simple)
	}
	for i, w := range cl.Servers {
		wc := connect(t, w.Addr())
		if n := queryString(t, wc, "SELECT count(*)::text FROM pg_prepared_xacts WHERE gid LIKE 'ctpc%'"); n != "0" {
			t.Errorf("worker %d: %s of the client's prepared transactions left", i, n)
		}
	}
}

// TestClientTwoPhaseEdges: adversary findings on a client's two-phase
// commit. Message for message beside plain PostgreSQL: PREPARE TRANSACTION
// over the extended protocol in a failed block is its ROLLBACK (it was
// 25P02, the block left failed); COMMIT PREPARED parsed in a failed block
// is 25P02 and is not defined (it was accepted, and a later Execute
// committed); COMMIT PREPARED first in a pipeline commits and the rest
// runs (0A000 before), after another statement it is 25001. Refused:
// PREPARE TRANSACTION in a string of several statements (its checks are
// for one of its own: it prepared a block that had declared a WITH HOLD
// cursor). A block the coordinator failed before any worker saw it ends
// with ROLLBACK at PREPARE TRANSACTION, as PostgreSQL's failed block.
func TestClientTwoPhaseEdges(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	p := connect(t, cl.Servers[1].Addr())
	simple := pgx.QueryExecModeSimpleProtocol
	testTable(t, c, "ctpe_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('ctpe_t', 'k', shard_count => 8)")
	exec(t, p, "DROP TABLE IF EXISTS ctpe_plain, ctpe_plain_local")
	exec(t, p, "CREATE TABLE ctpe_plain (k int PRIMARY KEY, v int)")
	exec(t, p, "CREATE TABLE ctpe_plain_local (k int)")
	exec(t, c, "DROP TABLE IF EXISTS ctpe_t_local", simple)
	exec(t, c, "CREATE TABLE ctpe_t_local (k int)", simple) // not distributed: on the default worker
	t.Cleanup(func() {
		rollbackPrepared(t, cl, "ctpe")
		_, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS ctpe_plain, ctpe_plain_local")
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS ctpe_t_local", simple)
	})
	fleet := protoDial(t, srv.Addr(), "pgfleet")
	oracle := protoDial(t, cl.Servers[1].Addr(), "postgres")
	q := func(sql string) pgproto3.FrontendMessage { return &pgproto3.Query{String: sql} }
	run := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	sync := &pgproto3.Sync{}
	steps := [][]pgproto3.FrontendMessage{
		// PREPARE TRANSACTION over the extended protocol in a failed block.
		{q("BEGIN"), q("INSERT INTO {t} VALUES (1, 1), (2, 2)"), q("SELECT 1/0")},
		append(run("PREPARE TRANSACTION '{g}a'"), sync),
		{q("SELECT count(*) FROM {t}")},
		{q("BEGIN"), q("SELECT 1/0")},
		{&pgproto3.Parse{Query: "PREPARE TRANSACTION '{g}a'"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, sync},
		{q("SELECT 1")},
		// COMMIT PREPARED parsed in a failed block, bound after it.
		{q("BEGIN"), q("INSERT INTO {t} VALUES (3, 3)"), q("PREPARE TRANSACTION '{g}b'")},
		{q("BEGIN"), q("SELECT 1/0")},
		{&pgproto3.Parse{Name: "s9", Query: "COMMIT PREPARED '{g}b'"}, sync},
		{q("ROLLBACK")},
		{&pgproto3.Bind{PreparedStatement: "s9"}, &pgproto3.Execute{}, sync},
		{q("SELECT count(*) FROM {t}")},
		// COMMIT PREPARED first in a pipeline, then another statement.
		append(append(run("COMMIT PREPARED '{g}b'"), run("SELECT count(*) FROM {t}")...), sync),
		// After another statement: 25001.
		{q("BEGIN"), q("INSERT INTO {t} VALUES (4, 4)"), q("PREPARE TRANSACTION '{g}c'")},
		append(append(run("SELECT 1"), run("ROLLBACK PREPARED '{g}c'")...), sync),
		append(run("ROLLBACK PREPARED '{g}c'"), sync),
		// Outside a block, in a pipeline: a warning and ROLLBACK, the
		// pipeline's write kept (it was refused and lost).
		append(append(append(run("INSERT INTO {t} VALUES (5, 5)"), run("PREPARE TRANSACTION '{g}d'")...), run("SELECT 1")...), sync),
		{q("SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM {t}")},
	}
	// One id prepared from blocks on every worker, each PREPARE in the
	// pipeline of the block's write: 42710 but for the first (adversary:
	// the check was skipped, the id prepared on two workers).
	for k := 40; k < 48; k++ {
		steps = append(steps, []pgproto3.FrontendMessage{q("BEGIN")},
			append(append(run(fmt.Sprintf("INSERT INTO {t} VALUES (%d, 0)", k)), run("PREPARE TRANSACTION '{g}px'")...), sync))
	}
	steps = append(steps, append(run("COMMIT PREPARED '{g}px'"), sync),
		[]pgproto3.FrontendMessage{q("SELECT string_agg(k::text, ',' ORDER BY k) FROM {t} WHERE k >= 40")})
	// An id prepared on one worker, then a block on the default worker
	// (a table that is not distributed) whose PREPARE was parsed before
	// its BEGIN in the same pipeline (adversary round 5: not checked, the
	// id prepared on two workers).
	for k := 50; k < 54; k++ {
		steps = append(steps, []pgproto3.FrontendMessage{q("BEGIN"), q(fmt.Sprintf("INSERT INTO {t} VALUES (%d, 0)", k)), q("PREPARE TRANSACTION '{g}py'")})
	}
	msgs := append([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "pt", Query: "PREPARE TRANSACTION '{g}py'"}}, run("BEGIN")...)
	msgs = append(append(msgs, run("INSERT INTO {l} VALUES (1)")...),
		&pgproto3.Bind{DestinationPortal: "pp", PreparedStatement: "pt"}, &pgproto3.Execute{Portal: "pp"}, sync)
	steps = append(steps, msgs, []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "pt"}, sync},
		[]pgproto3.FrontendMessage{q("SELECT count(*) FROM {l}")})
	steps = append(steps, append(run("COMMIT PREPARED '{g}py'"), sync),
		[]pgproto3.FrontendMessage{q("SELECT string_agg(k::text, ',' ORDER BY k) FROM {t} WHERE k >= 50")})
	for i, msgs := range steps {
		var got [2][]string
		for j, side := range []struct {
			c        *protoClient
			table, g string
		}{{fleet, "ctpe_t", "ctpec"}, {oracle, "ctpe_plain", "ctpep"}} {
			r := strings.NewReplacer("{t}", side.table, "{g}", side.g, "{l}", side.table+"_local")
			out := make([]pgproto3.FrontendMessage, len(msgs))
			zs := 0
			for k, m := range msgs {
				switch v := m.(type) {
				case *pgproto3.Query:
					m = &pgproto3.Query{String: r.Replace(v.String)}
					zs++
				case *pgproto3.Parse:
					m = &pgproto3.Parse{Name: v.Name, Query: r.Replace(v.Query)}
				case *pgproto3.Sync:
					zs++
				}
				out[k] = m
			}
			got[j] = pipeRaw(t, side.c, zs, out...)
		}
		if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
			t.Errorf("step %d: got %q, PostgreSQL %q", i, got[0], got[1])
		}
	}
	// Refused: PREPARE TRANSACTION in a string of several statements;
	// nothing prepared.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "INSERT INTO ctpe_t VALUES (20, 20)", simple)
	_, err := c.Exec(context.Background(), "SELECT 1; PREPARE TRANSACTION 'ctpec_m'", simple)
	wantRefusal(t, "PREPARE TRANSACTION in a string", err)
	exec(t, c, "ROLLBACK", simple)
	// A block the coordinator failed before a worker saw it.
	exec(t, c, "BEGIN", simple)
	_, err = c.Exec(context.Background(), "SELECT name FROM pg_prepared_statements", simple)
	wantRefusal(t, "pg_prepared_statements", err)
	tag, err := c.PgConn().Exec(context.Background(), "PREPARE TRANSACTION 'ctpec_f'").ReadAll()
	if err != nil || len(tag) != 1 || tag[0].CommandTag.String() != "ROLLBACK" {
		t.Errorf("PREPARE TRANSACTION in a block the coordinator failed: %v %v, want ROLLBACK", tag, err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM ctpe_t WHERE k = 20"); got != "0" {
		t.Errorf("after the refusals: %s rows of k = 20, want 0", got)
	}
	// Bound before the block's BEGIN (its Bind went to a worker):
	// refused, the block failed, nothing prepared.
	exec(t, c, "SELECT 1", simple)
	got := pipeRaw(t, fleet, 3, &pgproto3.Parse{Name: "pb", Query: "PREPARE TRANSACTION 'ctpec_b'"}, &pgproto3.Bind{DestinationPortal: "pbp", PreparedStatement: "pb"},
		&pgproto3.Parse{Query: "BEGIN"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "INSERT INTO ctpe_t_local VALUES (2)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync,
		&pgproto3.Execute{Portal: "pbp"}, sync, &pgproto3.Query{String: "ROLLBACK"})
	if fmt.Sprint(got) != fmt.Sprint([]string{"C BEGIN", "C INSERT 0 1", "Z T", "error 0A000", "Z E", "C ROLLBACK", "Z I"}) {
		t.Errorf("PREPARE TRANSACTION bound before BEGIN: %q, want the refusal and the block rolled back", got)
	}
	for i, w := range cl.Servers {
		if n := queryString(t, connect(t, w.Addr()), "SELECT count(*)::text FROM pg_prepared_xacts WHERE gid LIKE 'ctpec%'"); n != "0" {
			t.Errorf("worker %d: %s prepared transactions left", i, n)
		}
	}
}

// rollbackPrepared rolls back the prepared transactions left on the
// cluster's servers whose ids start with prefix.
func rollbackPrepared(t *testing.T, cl *pgcluster.Cluster, prefix string) {
	for _, w := range cl.Servers {
		wc := connect(t, w.Addr())
		rows, _ := wc.Query(context.Background(), "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1)", prefix)
		gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, g := range gids {
			_, _ = wc.Exec(context.Background(), "ROLLBACK PREPARED '"+g+"'")
		}
	}
}

// tpSide is one side of a two-phase test: two sessions, through the
// coordinator or on a worker as plain PostgreSQL, the table they use, and
// the prefix of their ids (the plain side is one of the workers: ids
// differ).
type tpSide struct {
	a, b  *pgx.Conn
	table string
	gid   string
}

// tpStep runs q ({t}: the side's table, {g}: its id prefix) on each side,
// by its first session or the other, and compares the rows, tags and
// SQLSTATEs.
func tpStep(t *testing.T, sides []tpSide, other bool, q string, mode pgx.QueryExecMode) {
	t.Helper()
	var out []string
	for _, s := range sides {
		conn := s.a
		if other {
			conn = s.b
		}
		q := strings.NewReplacer("{t}", s.table, "{g}", s.gid).Replace(q)
		rows, err := conn.Query(context.Background(), q, mode)
		o := ""
		if err == nil {
			for rows.Next() {
				v, _ := rows.Values()
				o += fmt.Sprint(v)
			}
			rows.Close()
			err = rows.Err()
			o += rows.CommandTag().String()
		}
		if err != nil {
			o += " E" + sqlState(err)
		}
		out = append(out, o)
	}
	if out[0] != out[1] {
		t.Errorf("%s (other session %v, mode %v): got %q, PostgreSQL %q", q, other, mode, out[0], out[1])
	}
}

// TestClientTwoPhaseSpanning: PREPARE TRANSACTION of a block over several
// workers that wrote on at most one of them (a multi-shard read, or a
// table-less SELECT 1 on the default worker, then writes; it was refused
// with 0A000) gives what PostgreSQL gives, beside a plain table: prepared
// on one worker, found there by COMMIT and ROLLBACK PREPARED from another
// session, rows invisible until then; read-only blocks; a failed block
// (ROLLBACK); NOTIFY and a function's WITH HOLD cursor (0A000), an id in
// use (42710). Writes on two workers are refused with 0A000 and rolled
// back. No prepared transaction of pgfleet's is left behind.
func TestClientTwoPhaseSpanning(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	p := connect(t, cl.Servers[1].Addr())
	testTable(t, c, "ctps_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('ctps_t', 'k', shard_count => 8)")
	exec(t, p, "DROP TABLE IF EXISTS ctps_plain")
	exec(t, p, "CREATE TABLE ctps_plain (k int PRIMARY KEY, v int)")
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS ctps_plain") })
	sides := []tpSide{
		{c, connect(t, srv.Addr()), "ctps_t", "ctpsc"},
		{p, connect(t, cl.Servers[1].Addr()), "ctps_plain", "ctpsp"},
	}
	t.Cleanup(func() { rollbackPrepared(t, cl, "ctps") })
	step := func(other bool, q string, mode pgx.QueryExecMode) {
		t.Helper()
		tpStep(t, sides, other, q, mode)
	}
	simple, ext := pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec
	step(false, "INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 40) g", simple)
	// Keys by worker: a table-less SELECT 1 runs on the first (the
	// default node), so a block that then writes a key of the second's
	// spans both.
	near, far := keysOn(t, cl.Servers[0].Addr(), "ctps_t", "k"), keysOn(t, cl.Servers[1].Addr(), "ctps_t", "k")
	if len(near) < 8 || len(far) < 8 {
		t.Fatalf("keys on the workers: %v and %v, want 8 on each", near, far)
	}
	for m, mode := range []pgx.QueryExecMode{simple, ext} {
		near, far := near[4*m:], far[4*m:]
		g := fmt.Sprintf("{g}%d_", m)
		for i, k := range far[:4] {
			step(false, "BEGIN", simple)
			if i%2 == 0 {
				step(false, "SELECT 1", mode)
			} else {
				step(false, "SELECT count(*) FROM {t} WHERE k = "+near[i], mode) // a read there
			}
			step(false, "UPDATE {t} SET v = v + 10 WHERE k = "+k, mode)
			step(false, "SET work_mem = '9MB'", mode)
			step(false, "PREPARE TRANSACTION '"+g+k+"'", mode)
			step(false, "SHOW work_mem", mode)
			step(true, "SELECT v FROM {t} WHERE k = "+k, mode)
			step(false, "RESET work_mem", mode)
		}
		// A write on the default node, a read on the other.
		step(false, "BEGIN", simple)
		step(false, "UPDATE {t} SET v = v + 20 WHERE k = "+near[0], mode)
		step(false, "SELECT v FROM {t} WHERE k = "+far[0], mode)
		step(false, "PREPARE TRANSACTION '"+g+"w'", mode)
		for i, k := range far[:4] {
			end := "COMMIT"
			if i == 3 {
				end = "ROLLBACK"
			}
			step(true, end+" PREPARED '"+g+k+"'", mode)
		}
		step(true, "COMMIT PREPARED '"+g+"w'", mode)
		step(false, "SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM {t}", mode)
		// Read-only on both; a failed block; an id in use.
		step(false, "BEGIN", simple)
		step(false, "SELECT 1", mode)
		step(false, "SELECT v FROM {t} WHERE k = "+far[1], mode)
		step(false, "PREPARE TRANSACTION '"+g+"ro'", mode)
		step(true, "ROLLBACK PREPARED '"+g+"ro'", mode)
		step(false, "BEGIN", simple)
		step(false, "SELECT 1", mode)
		step(false, "SELECT v FROM {t} WHERE k = "+far[1], mode)
		step(false, "SELECT 1/0", mode)
		step(false, "PREPARE TRANSACTION '"+g+"f'", mode)
		step(false, "SELECT 1", mode)
		step(false, "BEGIN", simple)
		step(false, "UPDATE {t} SET v = 5 WHERE k = "+near[1], mode)
		step(false, "PREPARE TRANSACTION '"+g+"dup'", mode)
		step(false, "BEGIN", simple)
		step(false, "SELECT 1", mode)
		step(false, "UPDATE {t} SET v = 6 WHERE k = "+far[2], mode)
		step(false, "PREPARE TRANSACTION '"+g+"dup'", mode)
		step(false, "SELECT v FROM {t} WHERE k = "+far[2], mode)
		step(true, "COMMIT PREPARED '"+g+"dup'", mode)
		// What PostgreSQL refuses to prepare, wherever it ran.
		step(false, "BEGIN", simple)
		step(false, "SELECT 1", mode)
		step(false, "NOTIFY ctps_chan", simple)
		step(false, "UPDATE {t} SET v = 7 WHERE k = "+far[3], mode)
		step(false, "PREPARE TRANSACTION '"+g+"n'", mode)
		step(false, "SELECT v FROM {t} WHERE k = "+far[3], mode)
		// A WITH HOLD cursor the block declared (the coordinator keeps
		// it): 0A000, rolled back, the cursor gone (adversary: prepared,
		// the cursor dropped).
		step(false, "BEGIN", simple)
		step(false, "SELECT 1", mode)
		step(false, "DECLARE hc CURSOR WITH HOLD FOR SELECT k FROM {t} ORDER BY k", simple)
		step(false, "UPDATE {t} SET v = 9 WHERE k = "+far[3], mode)
		step(false, "PREPARE TRANSACTION '"+g+"h'", mode)
		step(false, "FETCH hc", simple)
		step(false, "SELECT v FROM {t} WHERE k = "+far[3], mode)
	}

	// Writes on two workers: refused, rolled back, the session goes on.
	exec(t, c, "BEGIN", pgx.QueryExecModeSimpleProtocol)
	exec(t, c, "UPDATE ctps_t SET v = 800 WHERE k IN ("+near[0]+", "+far[0]+")", pgx.QueryExecModeSimpleProtocol)
	_, err := c.Exec(context.Background(), "PREPARE TRANSACTION 'ctpsc_two'", pgx.QueryExecModeSimpleProtocol)
	if sqlState(err) != "0A000" {
		t.Errorf("PREPARE TRANSACTION after writes on two workers: %v, want 0A000", err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM ctps_t WHERE v = 800"); got != "0" {
		t.Errorf("after the refused PREPARE TRANSACTION, %s rows have the block's value, want 0", got)
	}
	// Locks a read does not take, on the worker that did not write: they
	// would end at the PREPARE, where PostgreSQL keeps them: refused.
	exec(t, c, "DROP TABLE IF EXISTS ctps_local", pgx.QueryExecModeSimpleProtocol)
	exec(t, c, "CREATE TABLE ctps_local (a int)", pgx.QueryExecModeSimpleProtocol) // (on the default node)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS ctps_local", pgx.QueryExecModeSimpleProtocol)
	})
	for _, lock := range []string{"SELECT pg_advisory_xact_lock(4242)", "LOCK TABLE ctps_local IN EXCLUSIVE MODE"} {
		exec(t, c, "BEGIN", pgx.QueryExecModeSimpleProtocol)
		exec(t, c, lock, pgx.QueryExecModeSimpleProtocol)
		exec(t, c, "UPDATE ctps_t SET v = 801 WHERE k = "+far[0], pgx.QueryExecModeSimpleProtocol)
		_, err := c.Exec(context.Background(), "PREPARE TRANSACTION 'ctpsc_lock'", pgx.QueryExecModeSimpleProtocol)
		if sqlState(err) != "0A000" {
			t.Errorf("PREPARE TRANSACTION after %s and a write on the other worker: %v, want 0A000", lock, err)
		}
		if got := queryString(t, c, "SELECT count(*)::text FROM ctps_t WHERE v = 801"); got != "0" {
			t.Errorf("after the refused PREPARE TRANSACTION (%s), %s rows have the block's value, want 0", lock, got)
		}
	}
	for i, w := range cl.Servers {
		wc := connect(t, w.Addr())
		if n := queryString(t, wc, "SELECT count(*)::text FROM pg_prepared_xacts WHERE gid LIKE 'pgfleet%' OR gid LIKE 'ctpsc%'"); n != "0" {
			t.Errorf("worker %d: %s prepared transactions left", i, n)
		}
	}
}

// TestClientTwoPhaseSameIDAtOnce: two sessions preparing one id at the
// same moment, their blocks on different workers: one prepares it, the
// other gets 42710, as on one PostgreSQL. Both used to pass the search of
// the workers for the id before either prepared, leaving it prepared on
// two workers (COMMIT PREPARED of it then refused).
func TestClientTwoPhaseSameIDAtOnce(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	testTable(t, c, "ctpr_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('ctpr_t', 'k', shard_count => 4)")
	exec(t, c, "INSERT INTO ctpr_t SELECT g, 0 FROM generate_series(1, 40) g", simple)
	t.Cleanup(func() { rollbackPrepared(t, cl, "ctpr") })
	var keys [2]string // a key on each worker
	for i, s := range cl.Servers[:2] {
		if k := keysOn(t, s.Addr(), "ctpr_t", "k"); len(k) > 0 {
			keys[i] = k[0]
		}
	}
	if keys[0] == "" || keys[1] == "" {
		t.Fatalf("keys on the workers: %v", keys)
	}
	a, b := connect(t, srv.Addr()), connect(t, srv.Addr())
	for round := range 10 {
		gid := fmt.Sprintf("ctpr%d", round)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, conn := range []*pgx.Conn{a, b} {
			exec(t, conn, "BEGIN", simple)
			exec(t, conn, "UPDATE ctpr_t SET v = v + 1 WHERE k = "+keys[i], simple)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = conn.Exec(context.Background(), "PREPARE TRANSACTION '"+gid+"'", simple)
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) || sqlState(errs[0])+sqlState(errs[1]) != "42710" {
			t.Errorf("round %d: the two PREPARE TRANSACTION '%s' answered %v and %v, want one success and one 42710", round, gid, errs[0], errs[1])
		}
		prepared := 0
		for _, s := range cl.Servers {
			w := connect(t, s.Addr())
			if queryString(t, w, "SELECT count(*)::text FROM pg_prepared_xacts WHERE gid = $1", gid) == "1" {
				prepared++
			}
		}
		if prepared != 1 {
			t.Errorf("round %d: id %s prepared on %d workers, want 1", round, gid, prepared)
		}
		exec(t, c, "ROLLBACK PREPARED '"+gid+"'", simple)
	}
}

// keysOn returns the values of column col in the shards of a distributed
// table that the worker at addr holds.
func keysOn(t *testing.T, addr, table, col string) []string {
	t.Helper()
	w := connect(t, addr)
	var out []string
	for _, tb := range queryStrings(t, w, "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE tablename ~ '^"+table+"_[0-9]+$'") {
		out = append(out, queryStrings(t, w, "SELECT "+col+"::text FROM "+tb+" ORDER BY 1")...)
	}
	return out
}

// TestClientTwoPhaseIDLockOutlivesIdleTimeout: the lock a PREPARE
// TRANSACTION holds on its id while it runs is not lost to the first
// worker's idle_in_transaction_session_timeout (adversary: the lock's
// connection was ended while a deferred check made the PREPARE wait, and
// another session prepared the same id on the other worker).
func TestClientTwoPhaseIDLockOutlivesIdleTimeout(t *testing.T) {
	cl := pgtest.Start(t, 2)
	srv := pgtest.Coordinator(t, cl, nil)
	simple := pgx.QueryExecModeSimpleProtocol
	c := connect(t, srv.Addr())
	exec(t, c, "CREATE TABLE ctpi_t (k int, CONSTRAINT ctpi_pk PRIMARY KEY (k) DEFERRABLE INITIALLY DEFERRED)", simple)
	exec(t, c, "SELECT create_distributed_table('ctpi_t', 'k', shard_count => 4)", simple)
	exec(t, c, "INSERT INTO ctpi_t SELECT generate_series(1, 20)", simple)
	near, far := keysOn(t, cl.Servers[0].Addr(), "ctpi_t", "k"), keysOn(t, cl.Servers[1].Addr(), "ctpi_t", "k")
	if len(near) == 0 || len(far) == 0 {
		t.Fatalf("keys on the workers: %v and %v", near, far)
	}
	// The timeout is the postgres role's, as whose the coordinator holds
	// the lock; the clients log in as another role.
	for _, s := range cl.Servers {
		exec(t, connect(t, s.Addr()), "CREATE ROLE ctpi LOGIN SUPERUSER")
	}
	as := func() *pgx.Conn {
		conn, err := pgx.Connect(context.Background(), "postgres://ctpi@"+srv.Addr()+"/postgres?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	w0 := connect(t, cl.Servers[0].Addr())
	exec(t, w0, "ALTER ROLE postgres SET idle_in_transaction_session_timeout = '500ms'")
	// (The coordinator's connections as postgres open again, with it.)
	exec(t, w0, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
	for i := 0; ; i++ { // (until the coordinator has replaced them)
		if _, err := as().Exec(context.Background(), "SELECT count(*) FROM ctpi_t", simple); err == nil {
			break
		} else if i == 50 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// x deletes a key of the second worker's and commits later: a block
	// inserting that key again waits for it at PREPARE (the deferred
	// check), with the id's lock held.
	x, a, b := as(), as(), as()
	exec(t, x, "BEGIN", simple)
	exec(t, x, "DELETE FROM ctpi_t WHERE k = "+far[0], simple)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	exec(t, a, "BEGIN", simple)
	exec(t, a, "SELECT 1", simple) // (the first worker: the block spans both)
	exec(t, a, "INSERT INTO ctpi_t VALUES ("+far[0]+")", simple)
	go func() {
		defer wg.Done()
		_, errs[0] = a.Exec(context.Background(), "PREPARE TRANSACTION 'ctpi'", simple)
	}()
	time.Sleep(1500 * time.Millisecond) // (the lock's connection idle past the timeout)
	exec(t, b, "BEGIN", simple)
	exec(t, b, "DELETE FROM ctpi_t WHERE k = "+near[0], simple)
	go func() {
		defer wg.Done()
		_, errs[1] = b.Exec(context.Background(), "PREPARE TRANSACTION 'ctpi'", simple)
	}()
	time.Sleep(500 * time.Millisecond)
	exec(t, x, "COMMIT", simple)
	wg.Wait()
	if errs[0] != nil || sqlState(errs[1]) != "42710" {
		t.Errorf("PREPARE TRANSACTION 'ctpi' waiting at its check, then the same id from another block: %v and %v, want success and 42710", errs[0], errs[1])
	}
	prepared := 0
	for _, s := range cl.Servers {
		prepared += len(queryStrings(t, connect(t, s.Addr()), "SELECT gid FROM pg_prepared_xacts WHERE gid = 'ctpi'"))
	}
	if prepared != 1 {
		t.Errorf("id ctpi prepared on %d workers, want 1", prepared)
	}
	exec(t, c, "ROLLBACK PREPARED 'ctpi'", simple)
}

// TestClientTwoPhasePinnedElsewhere: a session pinned to its worker
// connection (a temporary table) commits and rolls back a transaction
// prepared on another worker, in both protocols, as PostgreSQL does (it
// used to be refused, 0A000); one pinned where pgfleet cannot know its
// role (SET ROLE) is still refused, and the transaction stays prepared.
func TestClientTwoPhasePinnedElsewhere(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	simple := pgx.QueryExecModeSimpleProtocol
	ctx := context.Background()
	c := connect(t, srv.Addr())
	testTable(t, c, "ctpx_t", "(k int PRIMARY KEY, v int)", "SELECT create_distributed_table('ctpx_t', 'k', shard_count => 4)")
	exec(t, c, "INSERT INTO ctpx_t SELECT g, 0 FROM generate_series(1, 40) g", simple)
	t.Cleanup(func() { rollbackPrepared(t, cl, "ctpx") })
	far := keysOn(t, cl.Servers[1].Addr(), "ctpx_t", "k")
	if len(far) < 6 {
		t.Fatalf("keys on the second worker: %v", far)
	}
	prepare := func(k string) string {
		s := connect(t, srv.Addr())
		gid := "ctpx_" + k
		for _, q := range []string{"BEGIN", "UPDATE ctpx_t SET v = 1 WHERE k = " + k, "PREPARE TRANSACTION '" + gid + "'"} {
			exec(t, s, q, simple)
		}
		return gid
	}
	pinned := connect(t, srv.Addr())
	exec(t, pinned, "CREATE TEMP TABLE ctpx_tmp (a int)", simple)
	i := 0
	for _, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec} {
		for _, end := range []string{"COMMIT PREPARED", "ROLLBACK PREPARED"} {
			k := far[i]
			i++
			gid := prepare(k)
			tag, err := pinned.Exec(ctx, end+" '"+gid+"'", mode)
			if err != nil || tag.String() != end {
				t.Fatalf("%v: %s in a pinned session: %q, %v", mode, end, tag, err)
			}
			want := "1"
			if end == "ROLLBACK PREPARED" {
				want = "0"
			}
			if g := queryStrings(t, c, "SELECT v FROM ctpx_t WHERE k = "+k); len(g) != 1 || g[0] != want {
				t.Errorf("%v: %s: v = %v, want %s", mode, end, g, want)
			}
			if g := queryStrings(t, c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '"+gid+"'"); g[0] != "0" {
				t.Errorf("%v: %s: still prepared", mode, end)
			}
		}
	}
	// The temporary table is the session's still.
	exec(t, pinned, "INSERT INTO ctpx_tmp VALUES (1)", simple)
	// A role user code set in the pinned session, which pgfleet does not
	// follow there: not committed as the login role (adversary: committed
	// where PostgreSQL refuses, 42501).
	exec(t, c, "DROP ROLE IF EXISTS ctpx_r", simple)
	exec(t, c, "CREATE ROLE ctpx_r", simple)
	exec(t, c, "CREATE OR REPLACE FUNCTION ctpx_become() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM set_config('role', 'ctpx_r', false); END $$", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS ctpx_become()", simple)
		_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS ctpx_r", simple)
	})
	exec(t, pinned, "SELECT ctpx_become()", simple)
	if g := queryStrings(t, pinned, "SELECT current_user"); len(g) != 1 || g[0] != "ctpx_r" {
		t.Fatalf("the pinned session's role: %v", g)
	}
	gid := prepare(far[i])
	i++
	if _, err := pinned.Exec(ctx, "COMMIT PREPARED '"+gid+"'", simple); sqlState(err) != "0A000" && sqlState(err) != "42501" {
		t.Errorf("COMMIT PREPARED as another role: %v, want 0A000 (or PostgreSQL's 42501)", err)
	}
	if g := queryStrings(t, c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '"+gid+"'"); g[0] != "1" {
		t.Errorf("after COMMIT PREPARED as another role: %v prepared, want 1", g)
	}
	exec(t, c, "ROLLBACK PREPARED '"+gid+"'", simple)
	// A role pgfleet cannot follow: refused, nothing ended.
	role := connect(t, srv.Addr())
	exec(t, role, "SET ROLE postgres", simple)
	gid = prepare(far[i])
	if _, err := role.Exec(ctx, "COMMIT PREPARED '"+gid+"'", simple); sqlState(err) != "0A000" {
		t.Errorf("after SET ROLE: %v, want 0A000", err)
	}
	if g := queryStrings(t, c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '"+gid+"'"); g[0] != "1" {
		t.Errorf("after the refusal: %v prepared", g)
	}
}
