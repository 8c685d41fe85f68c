package shards_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/metadata"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var dbSeq atomic.Int64

// env is one test's world: a fresh database of the same name on both
// workers of the shared cluster, a metadata store in the first one's
// database with both workers as nodes, and a connection per node.
type env struct {
	t     *testing.T
	ctx   context.Context
	cl    *pgcluster.Cluster
	store *metadata.Store
	ids   []int32             // node id of worker i
	w     []*pgx.Conn         // connection to worker i
	conns map[int32]*pgx.Conn // by node id
	home  int32               // the default node: worker 0
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cl := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	name := fmt.Sprintf("pgfleet_shards_%d_%d", os.Getpid(), dbSeq.Add(1))
	for _, srv := range cl.Servers {
		admin, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
		admin.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, srv.URL())
			if err != nil {
				t.Errorf("dropping %s: %v", name, err)
				return
			}
			defer c.Close(ctx)
			if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
				t.Errorf("dropping %s: %v", name, err)
			}
		})
	}
	e := &env{t: t, ctx: ctx, cl: cl, conns: map[int32]*pgx.Conn{}}
	url := func(srv *pgcluster.Server) string {
		return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", srv.User, srv.Host, srv.Port, name)
	}
	pool, err := pgxpool.New(ctx, url(cl.Servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.store = metadata.NewStore(pool)
	if err := e.store.Init(ctx); err != nil {
		t.Fatal(err)
	}
	for _, srv := range cl.Servers {
		snap, err := e.store.AddNode(ctx, srv.Host, srv.Port)
		if err != nil {
			t.Fatal(err)
		}
		var id int32
		for _, n := range snap.Nodes {
			if n.Host == srv.Host && n.Port == srv.Port {
				id = n.ID
			}
		}
		conn, err := pgx.Connect(ctx, url(srv))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		e.ids = append(e.ids, id)
		e.w = append(e.w, conn)
		e.conns[id] = conn
	}
	if e.ids[0] >= e.ids[1] {
		t.Fatalf("node ids %v are not increasing with the workers", e.ids)
	}
	e.home = e.ids[0]
	return e
}

// exec runs SQL on worker i.
func (e *env) exec(i int, sql string, args ...any) {
	e.t.Helper()
	if _, err := e.w[i].Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("worker %d: %s: %v", i, sql, err)
	}
}

// int runs a query returning one integer on worker i.
func (e *env) int(i int, sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.w[i].QueryRow(e.ctx, sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("worker %d: %s: %v", i, sql, err)
	}
	return n
}

// strings runs a query returning one text column on worker i.
func (e *env) strings(i int, sql string, args ...any) []string {
	e.t.Helper()
	rows, err := e.w[i].Query(e.ctx, sql, args...)
	if err != nil {
		e.t.Fatalf("worker %d: %s: %v", i, sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatalf("worker %d: %s: %v", i, sql, err)
	}
	return out
}

// exists reports whether a relation exists on worker i.
func (e *env) exists(i int, qualified string) bool {
	e.t.Helper()
	return e.int(i, "SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)", qualified) == 1
}

// worker returns the index of the worker that is node id.
func (e *env) worker(id int32) int {
	e.t.Helper()
	i := slices.Index(e.ids, id)
	if i < 0 {
		e.t.Fatalf("no worker is node %d", id)
	}
	return i
}

// rowsOf returns "key|row" for every row of a table on worker i, sorted.
func (e *env) rowsOf(i int, qualified, key string) []string {
	e.t.Helper()
	rows := e.strings(i, fmt.Sprintf("SELECT %s::text || '|' || t::text FROM %s t", key, qualified))
	slices.Sort(rows)
	return rows
}

// relations lists the tables of a schema on worker i whose names start with
// prefix.
func (e *env) relations(i int, schema, prefix string) []string {
	e.t.Helper()
	return e.strings(i, `SELECT relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE nspname = $1 AND relkind = 'r' AND starts_with(relname, $2) ORDER BY 1`, schema, prefix)
}

// noPreparedXacts checks that no prepared transaction is left on a worker.
func (e *env) noPreparedXacts() {
	e.t.Helper()
	for i := range e.w {
		if n := e.int(i, "SELECT count(*) FROM pg_prepared_xacts"); n != 0 {
			e.t.Errorf("worker %d has %d prepared transactions left", i, n)
		}
	}
}

// unlocked checks that nothing holds a lock on a table on worker 0: a
// write does not wait.
func (e *env) unlocked(qualified string) {
	e.t.Helper()
	tx, err := e.w[0].Begin(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	if _, err := tx.Exec(e.ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(e.ctx, "LOCK TABLE "+qualified+" IN ROW EXCLUSIVE MODE"); err != nil {
		e.t.Errorf("%s is still locked: %v", qualified, err)
	}
}

func wantCode(t *testing.T, err error, code string, contains ...string) *pgerr.Error {
	t.Helper()
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("error = %v, want a *pgerr.Error with SQLSTATE %s", err, code)
	}
	for _, s := range contains {
		if !strings.Contains(pe.Message, s) {
			t.Errorf("error message %q does not contain %q", pe.Message, s)
		}
	}
	return pe
}
