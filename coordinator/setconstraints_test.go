package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestSetConstraintsMadeHere: Django's AddField of a foreign key between
// tables that are none of pgfleet's (ALTER TABLE ... ADD COLUMN ...
// CONSTRAINT n REFERENCES ... DEFERRABLE INITIALLY DEFERRED; SET
// CONSTRAINTS n IMMEDIATE, one string) runs in a database with distributed
// tables as on PostgreSQL, in a block or not: the key holds at once. It
// was refused (0A000). SET CONSTRAINTS of a name the string did not make,
// or that a distributed table's constraint has, is still refused.
func TestSetConstraintsMadeHere(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(4))
	ctx := context.Background()
	c := connect(t, srv.Addr())
	spanningTable(t, c, "scm_dist")
	simple := pgx.QueryExecModeSimpleProtocol
	drop := func() {
		_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS scm_b, scm_a", simple)
	}
	drop()
	t.Cleanup(drop)
	exec(t, c, "CREATE TABLE scm_a (id int PRIMARY KEY); CREATE TABLE scm_b (id int PRIMARY KEY); INSERT INTO scm_a VALUES (1); INSERT INTO scm_b VALUES (1), (2)", simple)
	add := func(col string) string {
		return `ALTER TABLE "scm_b" ADD COLUMN "` + col + `" integer NULL CONSTRAINT "scm_b_` + col + `_fk" REFERENCES "scm_a"("id") DEFERRABLE INITIALLY DEFERRED; SET CONSTRAINTS "scm_b_` + col + `_fk" IMMEDIATE`
	}
	// In a block, as Django's migrations run: the key is immediate, so a
	// bad row fails at its statement, not at COMMIT.
	exec(t, c, "BEGIN", simple)
	exec(t, c, add("a1"), simple)
	if _, err := c.Exec(ctx, "UPDATE scm_b SET a1 = 9 WHERE id = 1", simple); sqlState(err) != "23503" {
		t.Errorf("a row the immediate key refuses: %v, want 23503 at the statement", err)
	}
	exec(t, c, "ROLLBACK", simple)
	// Outside a block, then a good row.
	exec(t, c, add("a2"), simple)
	exec(t, c, "UPDATE scm_b SET a2 = 1 WHERE id = 2", simple)
	if got := queryString(t, c, "SELECT count(a2)::text FROM scm_b"); got != "1" {
		t.Errorf("rows with the new key: %s, want 1", got)
	}
	// Still refused: a name the string did not make, and one of a
	// distributed table's constraints.
	if _, err := c.Exec(ctx, `BEGIN; SET CONSTRAINTS "scm_b_a2_fk" IMMEDIATE; COMMIT`, simple); sqlState(err) != "0A000" {
		t.Errorf("SET CONSTRAINTS of a name made earlier: %v, want 0A000", err)
	}
	exec(t, c, "ROLLBACK", simple)
	// (scm_dist's CHECK (n >= 0) is scm_dist_n_check.)
	if _, err := c.Exec(ctx, `ALTER TABLE scm_b ADD COLUMN a3 int CONSTRAINT "scm_dist_n_check" REFERENCES scm_a(id) DEFERRABLE INITIALLY DEFERRED; SET CONSTRAINTS "scm_dist_n_check" IMMEDIATE`, simple); sqlState(err) != "0A000" {
		t.Errorf("SET CONSTRAINTS of a name a distributed table's constraint has too: %v, want 0A000", err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM pg_attribute WHERE attrelid = 'scm_b'::regclass AND attname = 'a3'"); got != "0" {
		t.Errorf("the refused string's column: %s, want none", got)
	}
}
