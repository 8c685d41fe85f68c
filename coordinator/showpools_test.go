package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// SHOW POOLS lists the coordinator's pools, as PgBouncer's console does:
// one row per worker, database and user, with what is checked out, idle
// and waiting.
func TestShowPools(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, poolSize(3))
	c := connect(t, srv.Addr())
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, c, "SELECT 1")

	type pool struct {
		worker, database, user      string
		active, idle, waiting, size int32
		share                       *int32
		mode                        string
	}
	show := func(c *pgx.Conn) []pool {
		t.Helper()
		rows, err := c.Query(ctx, "show pools", simple)
		if err != nil {
			t.Fatal(err)
		}
		var out []pool
		for rows.Next() {
			var p pool
			if err := rows.Scan(&p.worker, &p.database, &p.user, &p.active, &p.idle, &p.waiting, &p.size, &p.share, &p.mode); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if tag := rows.CommandTag().String(); tag != "SHOW" {
			t.Errorf("command tag %q, want SHOW", tag)
		}
		return out
	}
	w := cl.Servers[0].Addr()
	got := show(c)
	if len(got) != 1 {
		t.Fatalf("SHOW POOLS: %+v, want one pool", got)
	}
	p := got[0]
	if p.worker != w || p.database != "postgres" || p.user != "postgres" || p.active != 0 || p.idle < 1 || p.waiting != 0 ||
		p.size != 3 || p.share != nil || p.mode != "transaction" {
		t.Errorf("SHOW POOLS: %+v, want worker %s, postgres/postgres, none active, one or more idle, size 3, no share", p, w)
	}

	// A session in a transaction holds its connection: active.
	exec(t, c, "BEGIN", simple)
	exec(t, c, "SELECT 1", simple)
	if got := show(connect(t, srv.Addr())); len(got) != 1 || got[0].active != 1 {
		t.Errorf("SHOW POOLS with one transaction open: %+v, want one active", got)
	}
	// Inside the block it answers too, and leaves it open.
	if got := show(c); len(got) != 1 {
		t.Errorf("SHOW POOLS in a transaction block: %+v", got)
	}
	if c.PgConn().TxStatus() != 'T' {
		t.Errorf("transaction status after SHOW POOLS in a block: %c, want T", c.PgConn().TxStatus())
	}
	// In a failed block it is refused, as every statement is.
	if _, err := c.Exec(ctx, "SELECT 1/0", simple); sqlState(err) != "22012" {
		t.Fatalf("SELECT 1/0: %v", err)
	}
	if _, err := c.Exec(ctx, "SHOW POOLS", simple); sqlState(err) != "25P02" {
		t.Errorf("SHOW POOLS in a failed block: %v, want 25P02", err)
	}
	exec(t, c, "ROLLBACK", simple)

	// Over the extended protocol, or beside other statements: 0A000 with a
	// hint, as PgBouncer's console takes simple queries only.
	_, err := c.PgConn().ExecParams(ctx, "SHOW POOLS", nil, nil, nil, nil).Close()
	if sqlState(err) != "0A000" || !strings.Contains(err.Error(), "SHOW POOLS") {
		t.Errorf("SHOW POOLS over the extended protocol: %v, want 0A000", err)
	}
	if _, err := c.Exec(ctx, "SELECT 1; SHOW POOLS", simple); sqlState(err) != "0A000" {
		t.Errorf("SHOW POOLS in a string with another statement: %v, want 0A000", err)
	}
	// Other SHOW statements are PostgreSQL's.
	if s := queryString(t, c, "SHOW server_version_num"); !strings.HasPrefix(s, "15") {
		t.Errorf("SHOW server_version_num: %q", s)
	}
	if _, err := c.Exec(ctx, `SHOW "pools"`, simple); sqlState(err) != "42704" {
		t.Errorf(`SHOW "pools": %v, want PostgreSQL's 42704`, err)
	}
}
