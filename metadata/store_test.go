package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"sync"
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

// storeDB creates a fresh database on the shared cluster's first server,
// dropped when the test ends, and returns a pool on it and the cluster.
func storeDB(t *testing.T) (*pgxpool.Pool, *pgcluster.Cluster) {
	t.Helper()
	cl := pgtest.Shared(t)
	srv := cl.Servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("pgfleet_store_%d_%d", os.Getpid(), dbSeq.Add(1))
	admin, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
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
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", srv.User, srv.Host, srv.Port, name)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // runs before the drop
	return pool, cl
}

func wantCode(t *testing.T, err error, code string) *pgerr.Error {
	t.Helper()
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("error = %v, want a *pgerr.Error with SQLSTATE %s", err, code)
	}
	return pe
}

// stepper checks that every change bumps the version by exactly one and
// failed ones leave it alone.
type stepper struct {
	t     *testing.T
	st    *metadata.Store
	ctx   context.Context
	v     int64
	final *metadata.Snapshot
}

func (s *stepper) ok(what string) func(*metadata.Snapshot, error) *metadata.Snapshot {
	return func(snap *metadata.Snapshot, err error) *metadata.Snapshot {
		s.t.Helper()
		return s.check(what, snap, err)
	}
}

func (s *stepper) check(what string, snap *metadata.Snapshot, err error) *metadata.Snapshot {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
	if snap.Version != s.v+1 {
		s.t.Fatalf("%s: version %d, want %d", what, snap.Version, s.v+1)
	}
	s.v = snap.Version
	s.same(what)
	s.final = snap
	return snap
}

func (s *stepper) failed(what string, err error, code string) *pgerr.Error {
	s.t.Helper()
	pe := wantCode(s.t, err, code)
	s.same(what)
	return pe
}

func (s *stepper) same(what string) {
	s.t.Helper()
	v, err := s.st.Version(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	if v != s.v {
		s.t.Fatalf("after %s: stored version %d, want %d", what, v, s.v)
	}
}

func TestStoreCatalog(t *testing.T) {
	pool, cl := storeDB(t)
	ctx := context.Background()
	st := metadata.NewStore(pool)
	for i := 0; i < 2; i++ {
		if err := st.Init(ctx); err != nil {
			t.Fatalf("Init #%d: %v", i+1, err)
		}
	}
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 1 || len(snap.Nodes) != 0 || len(snap.Tables) != 0 || len(snap.Shards) != 0 {
		t.Fatalf("new catalog = %+v", snap)
	}
	s := &stepper{t: t, st: st, ctx: ctx, v: snap.Version}

	w1, w2 := cl.Servers[0], cl.Servers[1]
	_, _, err = st.CreateDistributedTable(ctx, metadata.Table{Name: "public.early", DistColumn: "id", DistType: "int8"}, "")
	s.failed("distribute without nodes", err, pgerr.ObjectNotInPrerequisite)

	s.ok("add node 1")(st.AddNode(ctx, w1.Host, w1.Port))
	snap = s.ok("add node 2")(st.AddNode(ctx, w2.Host, w2.Port))
	if len(snap.Nodes) != 2 {
		t.Fatalf("nodes = %+v", snap.Nodes)
	}
	n1, n2 := snap.Nodes[0], snap.Nodes[1]
	if n1.Addr() != w1.Addr() || n2.Addr() != w2.Addr() || !n1.Active || !n2.Active || n1.ID >= n2.ID {
		t.Fatalf("nodes = %+v", snap.Nodes)
	}
	snap = s.ok("re-add node 1")(st.AddNode(ctx, w1.Host, w1.Port))
	if !reflect.DeepEqual(snap.Nodes, []metadata.Node{n1, n2}) {
		t.Fatalf("re-adding changed nodes: %+v", snap.Nodes)
	}

	// Default shard count, a new colocation group, round-robin placement.
	snap, shardsA, err := st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.a", DistColumn: "id", DistType: "int8"}, "")
	s.ok("distribute a")(snap, err)
	ta := snap.Table("public.a")
	if ta == nil || ta.Kind != metadata.Distributed || ta.DistColumn != "id" || ta.DistType != "int8" ||
		ta.ShardCount != 32 || ta.ColocationID == 0 {
		t.Fatalf("table a = %+v", ta)
	}
	ranges := metadata.HashRanges(32)
	if len(shardsA) != 32 || !reflect.DeepEqual(shardsA, snap.Shards["public.a"]) {
		t.Fatalf("shards of a = %+v", shardsA)
	}
	for i, sh := range shardsA {
		want := metadata.Shard{ID: 102008 + int64(i), Table: "public.a", MinHash: ranges[i][0], MaxHash: ranges[i][1],
			Nodes: []int32{[]int32{n1.ID, n2.ID}[i%2]}}
		if !reflect.DeepEqual(sh, want) {
			t.Fatalf("shard %d of a = %+v, want %+v", i, sh, want)
		}
	}
	if sh := snap.ShardFor("public.a", 0); sh == nil || sh.MinHash > 0 || sh.MaxHash < 0 {
		t.Fatalf("ShardFor(a, 0) = %+v", sh)
	}

	// An explicit shard count makes a new group.
	snap, shardsB, err := st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.b", DistColumn: "k", DistType: "int8", ShardCount: 4}, "")
	s.ok("distribute b")(snap, err)
	tb := snap.Table("public.b")
	if tb.ShardCount != 4 || tb.ColocationID == ta.ColocationID {
		t.Fatalf("table b = %+v (a is in group %d)", tb, ta.ColocationID)
	}
	for i, sh := range shardsB {
		r := metadata.HashRanges(4)[i]
		if sh.ID != 102040+int64(i) || sh.MinHash != r[0] || sh.MaxHash != r[1] ||
			!reflect.DeepEqual(sh.Nodes, []int32{[]int32{n1.ID, n2.ID}[i%2]}) {
			t.Fatalf("shard %d of b = %+v", i, sh)
		}
	}
	if len(shardsB) != 4 || shardsB[0].MinHash != math.MinInt32 || shardsB[3].MaxHash != math.MaxInt32 {
		t.Fatalf("shards of b = %+v", shardsB)
	}

	// Same shard count and type: Citus' default colocation joins a's group.
	snap, shardsC, err := st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.c", DistColumn: "a_id", DistType: "int8", ShardCount: 32}, "")
	s.ok("distribute c")(snap, err)
	if g := snap.Table("public.c").ColocationID; g != ta.ColocationID {
		t.Fatalf("c is in group %d, want a's %d", g, ta.ColocationID)
	}
	for i := range shardsC {
		if !reflect.DeepEqual(shardsC[i].Nodes, shardsA[i].Nodes) || shardsC[i].MinHash != shardsA[i].MinHash {
			t.Fatalf("shard %d of c = %+v, a's = %+v", i, shardsC[i], shardsA[i])
		}
	}

	// A different type makes a new group; "none" always does.
	snap, _, err = st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.d", DistColumn: "name", DistType: "text"}, "")
	s.ok("distribute d")(snap, err)
	td := snap.Table("public.d")
	if td.ColocationID == ta.ColocationID || td.ColocationID == tb.ColocationID {
		t.Fatalf("d shares a group: %+v", td)
	}
	snap, _, err = st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.e", DistColumn: "id", DistType: "int8"}, "none")
	s.ok("distribute e")(snap, err)
	for _, other := range []*metadata.Table{ta, tb, td} {
		if snap.Table("public.e").ColocationID == other.ColocationID {
			t.Fatalf("e shares %s's group", other.Name)
		}
	}

	// colocate_with a table: its shard count is the default; mismatches fail.
	snap, shardsF, err := st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.f", DistColumn: "b_k", DistType: "int8"}, "public.b")
	s.ok("distribute f with b")(snap, err)
	if tf := snap.Table("public.f"); tf.ShardCount != 4 || tf.ColocationID != tb.ColocationID {
		t.Fatalf("f = %+v, b = %+v", tf, tb)
	}
	for i := range shardsF {
		if !reflect.DeepEqual(shardsF[i].Nodes, shardsB[i].Nodes) || shardsF[i].MaxHash != shardsB[i].MaxHash {
			t.Fatalf("shard %d of f = %+v, b's = %+v", i, shardsF[i], shardsB[i])
		}
	}
	_, _, err = st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.g", DistColumn: "id", DistType: "int8", ShardCount: 8}, "public.a")
	s.failed("colocate with a different shard count", err, pgerr.InvalidParameterValue)
	_, _, err = st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.g", DistColumn: "id", DistType: "int4"}, "public.a")
	s.failed("colocate with a different type", err, pgerr.InvalidParameterValue)
	_, _, err = st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.g", DistColumn: "id", DistType: "int8"}, "public.nosuch")
	s.failed("colocate with an unknown table", err, pgerr.InvalidParameterValue)

	// Reference table: one shard over the whole range, on every node.
	snap, ref, err := st.CreateReferenceTable(ctx, "public.r")
	s.ok("reference r")(snap, err)
	want := metadata.Shard{ID: 102008 + 32 + 4 + 32 + 32 + 32 + 4, Table: "public.r",
		MinHash: math.MinInt32, MaxHash: math.MaxInt32, Nodes: []int32{n1.ID, n2.ID}}
	if !reflect.DeepEqual(ref, want) {
		t.Fatalf("reference shard = %+v, want %+v", ref, want)
	}
	if tr := snap.Table("public.r"); tr == nil || tr.Kind != metadata.Reference || tr.ShardCount != 1 {
		t.Fatalf("table r = %+v", tr)
	}
	_, _, err = st.CreateDistributedTable(ctx,
		metadata.Table{Name: "public.g", DistColumn: "id", DistType: "int8"}, "public.r")
	s.failed("colocate with a reference table", err, pgerr.InvalidParameterValue)

	// Duplicates.
	_, _, err = st.CreateDistributedTable(ctx, metadata.Table{Name: "public.a", DistColumn: "id", DistType: "int8"}, "")
	s.failed("distribute a again", err, pgerr.DuplicateObject)
	_, _, err = st.CreateDistributedTable(ctx, metadata.Table{Name: "public.r", DistColumn: "id", DistType: "int8"}, "")
	s.failed("distribute reference r", err, pgerr.DuplicateObject)
	_, _, err = st.CreateReferenceTable(ctx, "public.a")
	s.failed("reference distributed a", err, pgerr.DuplicateObject)

	// A node with placements cannot go; one without can.
	_, err = st.RemoveNode(ctx, w2.Host, w2.Port)
	pe := s.failed("remove node 2", err, pgerr.ObjectNotInPrerequisite)
	if !strings.Contains(pe.Message, "public.a_102009") {
		t.Fatalf("message does not name the shards: %q", pe.Message)
	}
	_, err = st.RemoveNode(ctx, "127.0.0.1", 1)
	s.failed("remove unknown node", err, pgerr.UndefinedObject)
	snap = s.ok("add node 3")(st.AddNode(ctx, "127.0.0.1", 1))
	if len(snap.Nodes) != 3 || snap.Nodes[2].ID <= n2.ID {
		t.Fatalf("nodes = %+v", snap.Nodes)
	}
	snap = s.ok("remove node 3")(st.RemoveNode(ctx, "127.0.0.1", 1))
	if !reflect.DeepEqual(snap.Nodes, []metadata.Node{n1, n2}) {
		t.Fatalf("nodes = %+v", snap.Nodes)
	}

	// Drop.
	snap = s.ok("drop e")(st.DropTable(ctx, "public.e"))
	if snap.Table("public.e") != nil || snap.Shards["public.e"] != nil {
		t.Fatalf("e is still there: %+v", snap.Table("public.e"))
	}
	_, err = st.DropTable(ctx, "public.e")
	s.failed("drop e again", err, pgerr.UndefinedTable)
	var placements int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfleet.placements`).Scan(&placements); err != nil {
		t.Fatal(err)
	}
	if want := 32 + 4 + 32 + 32 + 4 + 2; placements != want { // a b c d f r
		t.Fatalf("%d placements, want %d", placements, want)
	}

	// The last change's snapshot is what a new store loads.
	again, err := metadata.NewStore(pool).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, s.final) {
		t.Fatalf("loaded snapshot differs from the last change's:\n%+v\n%+v", again, s.final)
	}
	if len(again.Tables) != 6 || len(again.Shards) != 6 {
		t.Fatalf("loaded %d tables, %d shard lists", len(again.Tables), len(again.Shards))
	}
}

func TestStoreConcurrentInit(t *testing.T) {
	pool, _ := storeDB(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = metadata.NewStore(pool).Init(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Init in goroutine %d: %v", i, err)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfleet.catalog_version`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("catalog_version has %d rows", rows)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO pgfleet.catalog_version VALUES (7)`); err == nil {
		t.Fatal("catalog_version took a second row")
	}
	if v, err := metadata.NewStore(pool).Version(ctx); err != nil || v != 1 {
		t.Fatalf("Version = %d, %v", v, err)
	}
}

// Changes from several coordinators at once are serialized: each gets its
// own version and default colocation finds the group made by another.
func TestStoreConcurrentChanges(t *testing.T) {
	pool, cl := storeDB(t)
	ctx := context.Background()
	st := metadata.NewStore(pool)
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range cl.Servers {
		if _, err := st.AddNode(ctx, w.Host, w.Port); err != nil {
			t.Fatal(err)
		}
	}
	v0, err := st.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = metadata.NewStore(pool).CreateDistributedTable(ctx,
				metadata.Table{Name: fmt.Sprintf("public.t%d", i), DistColumn: "id", DistType: "int8", ShardCount: 8}, "")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("table %d: %v", i, err)
		}
	}
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != v0+n {
		t.Fatalf("version %d, want %d", snap.Version, v0+n)
	}
	group := snap.Table("public.t0").ColocationID
	ids := map[int64]bool{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("public.t%d", i)
		if g := snap.Table(name).ColocationID; g != group {
			t.Fatalf("%s is in group %d, t0 in %d", name, g, group)
		}
		for j, sh := range snap.Shards[name] {
			if ids[sh.ID] {
				t.Fatalf("shard id %d used twice", sh.ID)
			}
			ids[sh.ID] = true
			if !reflect.DeepEqual(sh.Nodes, snap.Shards["public.t0"][j].Nodes) {
				t.Fatalf("shard %d of %s on %v, of t0 on %v", j, name, sh.Nodes, snap.Shards["public.t0"][j].Nodes)
			}
		}
	}
}

// TestMovePlacements: a move's catalog change moves every placement of its
// group or none, only while the move holds its lock; a second move of the
// group is refused while the first holds it, and a move whose lock
// connection ended cannot switch the placements.
func TestMovePlacements(t *testing.T) {
	pool, _ := storeDB(t)
	ctx := context.Background()
	st := metadata.NewStore(pool)
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := st.AddNode(ctx, "h1", 5432)
	if err != nil {
		t.Fatal(err)
	}
	if snap, err = st.AddNode(ctx, "h2", 5432); err != nil {
		t.Fatal(err)
	}
	snap, shards, err := st.CreateDistributedTable(ctx, metadata.Table{Name: "public.m", Kind: metadata.Distributed,
		DistColumn: "id", DistType: "int8", ShardCount: 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	sh := shards[0]
	from := sh.Nodes[0]
	to := snap.Nodes[0].ID
	if to == from {
		to = snap.Nodes[1].ID
	}
	lock, err := st.HoldMoveLock(ctx, snap.Tables["public.m"].ColocationID, sh.MinHash)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.HoldMoveLock(ctx, snap.Tables["public.m"].ColocationID, sh.MinHash); err == nil {
		t.Fatal("a second move of the group got the lock")
	} else {
		wantCode(t, err, "55006")
	}
	// A shard not on from: nothing moves.
	if _, err := st.MovePlacements(ctx, lock, []int64{sh.ID, shards[1].ID}, from, to); shards[1].Nodes[0] != from {
		wantCode(t, err, "55000")
	}
	after, err := st.MovePlacements(ctx, lock, []int64{sh.ID}, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Shards["public.m"][0].Nodes; len(got) != 1 || got[0] != to {
		t.Fatalf("placements after the move: %v, want [%d]", got, to)
	}
	// A table that joins the group while it moves: the move of the shards
	// it copied would split the group.
	if _, _, err := st.CreateDistributedTable(ctx, metadata.Table{Name: "public.m2", Kind: metadata.Distributed,
		DistColumn: "id", DistType: "int8"}, "public.m"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MovePlacements(ctx, lock, []int64{sh.ID}, to, from); err == nil {
		t.Fatal("a move of a group that changed switched the placements")
	} else {
		wantCode(t, err, "55000")
	}
	lock.Release()

	// A lock whose connection ended no longer lets its move decide.
	lock, err = st.HoldMoveLock(ctx, snap.Tables["public.m"].ColocationID, sh.MinHash)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := st.MovePlacements(ctx, lock, []int64{sh.ID}, to, from); err == nil {
		t.Fatal("a move whose lock was lost switched the placements")
	} else {
		wantCode(t, err, "55000")
	}
	final, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := final.Shards["public.m"][0].Nodes; len(got) != 1 || got[0] != to || final.Shards["public.m2"][0].Nodes[0] != to {
		t.Fatalf("placements after the refused move: %v, want [%d]", got, to)
	}
}

// A move lock given back is free at once: the next move of the group gets
// it, not 55006 while the holder's backend is still exiting (a move run
// again right after one that failed got 55006 in a full suite run).
func TestMoveLockFreeOnRelease(t *testing.T) {
	pool, _ := storeDB(t)
	ctx := context.Background()
	st := metadata.NewStore(pool)
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		lock, err := st.HoldMoveLock(ctx, 7, 0)
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		lock.Release()
		var held int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("take %d: the lock is still held when Release returns", i)
		}
	}
}
