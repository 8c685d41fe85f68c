package coordinator_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/metadata"
)

// TestRecoverPrepared leaves prepared transactions on both workers as a
// coordinator that died between PREPARE TRANSACTION and COMMIT PREPARED
// would, in a database other than the one recovery lists them from, and
// runs one recovery round: a transaction with a commit decision is
// committed on both, one without is rolled back on both and recorded as
// aborted, so that its coordinator, should it wake up, cannot commit it.
func TestRecoverPrepared(t *testing.T) {
	cl := pgtest.Shared(t)
	reg := prometheus.NewRegistry()
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.RecoveryInterval = -1 // only the rounds this test runs
		c.Registry = reg
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conns := scratchDB(t, cl, fmt.Sprintf("pgfleet_recovery_%d", os.Getpid()))
	pool, err := pgxpool.New(ctx, pgtest.URL(cl.Servers[0].Addr())) // the coordinator's metadata database
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := metadata.NewStore(pool)

	// prepare leaves a distributed transaction inserting id prepared on
	// both workers and returns its base.
	prepare := func(id int) string {
		t.Helper()
		var b [8]byte
		_, _ = rand.Read(b[:])
		base := "pgfleet_test_" + hex.EncodeToString(b[:])
		for i, c := range conns {
			exec(t, c, fmt.Sprintf("BEGIN; INSERT INTO r VALUES (%d); PREPARE TRANSACTION '%s_%d'", id, base, i+1))
		}
		return base
	}
	left := func(base string) (n int) {
		t.Helper()
		for _, c := range conns {
			var k int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, $1)", base+"_").Scan(&k); err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}
	rows := func(id int) (n int) {
		t.Helper()
		for _, c := range conns {
			var k int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM r WHERE id = $1", id).Scan(&k); err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}

	committed := prepare(1)
	if err := store.Decide(ctx, committed); err != nil {
		t.Fatal(err)
	}
	aborted := prepare(2)

	// Younger than the grace: the decided one is committed at once (once
	// a second old, when its coordinator would have done it), the other is
	// left to its coordinator, which may yet decide.
	time.Sleep(1100 * time.Millisecond)
	if c, a := srv.RecoverPrepared(ctx, time.Hour); c != 2 || a != 0 {
		t.Errorf("recovery within the grace committed %d and rolled back %d, want 2 and 0", c, a)
	}
	if left(committed) != 0 || left(aborted) != 2 {
		t.Fatalf("recovery within the grace left %d of the decided and %d of the undecided, want 0 and 2",
			left(committed), left(aborted))
	}

	c, a := srv.RecoverPrepared(ctx, 0)
	if a < 2 {
		t.Errorf("recovery committed %d and rolled back %d, want 2 rolled back at least", c, a)
	}
	if n := left(committed) + left(aborted); n != 0 {
		t.Errorf("%d prepared transactions left after recovery", n)
	}
	if n := rows(1); n != 2 {
		t.Errorf("the decided transaction has %d rows, want 2 (one per worker)", n)
	}
	if n := rows(2); n != 0 {
		t.Errorf("the undecided transaction has %d rows, want none", n)
	}
	if d, err := store.Decision(ctx, aborted); err != nil || d != metadata.AbortDecision {
		t.Errorf("decision of the rolled-back transaction = %q, %v; want 'a'", d, err)
	}
	// Its coordinator, waking up, cannot decide to commit it.
	var pe *pgerr.Error
	if err := store.Decide(ctx, aborted); !errors.As(err, &pe) || pe.Code != "40001" {
		t.Errorf("Decide after recovery aborted: %v, want 40001", err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "pgfleet_recovered_transactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "decision" {
					counted[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if counted["commit"] < 2 || counted["abort"] < 2 {
		t.Errorf("pgfleet_recovered_transactions_total = %v, want commit and abort at 2 at least", counted)
	}
}

// scratchDB makes database db on every worker of cl, with a table r (id
// int), and returns a connection to it on each; the cleanup rolls back
// what a test left prepared there and drops it.
func scratchDB(t *testing.T, cl *pgcluster.Cluster, db string) []*pgx.Conn {
	t.Helper()
	ctx := context.Background()
	var conns []*pgx.Conn
	for _, w := range cl.Servers {
		admin := connect(t, w.Addr())
		exec(t, admin, "DROP DATABASE IF EXISTS "+db)
		exec(t, admin, "CREATE DATABASE "+db)
		t.Cleanup(func() {
			// Whatever the test left prepared would keep the database.
			rows, _ := admin.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = $1", db)
			gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			if c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", w.Addr(), db)); err == nil {
				for _, g := range gids {
					_, _ = c.Exec(ctx, "ROLLBACK PREPARED '"+g+"'")
				}
				_ = c.Close(ctx)
			}
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		})
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", w.Addr(), db))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		exec(t, c, "CREATE TABLE r (id int)")
		conns = append(conns, c)
	}
	return conns
}
