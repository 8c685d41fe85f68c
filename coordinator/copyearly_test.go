package coordinator_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// endlessRows is COPY text input: one bad row, then good rows up to limit
// bytes; read counts what the client took from it.
type endlessRows struct {
	first bool
	read  int64
	limit int64
}

func (r *endlessRows) Read(p []byte) (int, error) {
	if r.read >= r.limit {
		return 0, io.EOF
	}
	n := 0
	if !r.first {
		r.first = true
		n = copy(p, "not a number\n")
	}
	for n+2 <= len(p) {
		p[n], p[n+1] = '1', '\n'
		n += 2
	}
	r.read += int64(n)
	return n, nil
}

// TestCopyFailsEarly: a COPY FROM STDIN that the server fails at its first
// row ends for the client as on PostgreSQL, soon after: the error reaches
// it while it still sends, so it stops (pgx's CopyFrom sent everything
// first through the coordinator: 10 s in pgx's own test, not 0.5 s); the
// session works on afterwards.
func TestCopyFailsEarly(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	exec(t, setup, "DROP TABLE IF EXISTS ce_local")
	exec(t, setup, "CREATE TABLE ce_local (n int)")
	t.Cleanup(func() { _, _ = setup.Exec(context.Background(), "DROP TABLE IF EXISTS ce_local") })
	const limit = 1 << 30 // 1 GiB: sending it all would take far longer than the test allows
	for _, addr := range []string{cl.Servers[0].Addr(), srv.Addr()} {
		c := connect(t, addr)
		in := &endlessRows{limit: limit}
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		start := time.Now()
		_, err := c.PgConn().CopyFrom(ctx, in, "COPY ce_local (n) FROM STDIN")
		cancel()
		if sqlState(err) != "22P02" {
			t.Errorf("%s: COPY of a bad first row: %v, want 22P02", addr, err)
		}
		if in.read >= limit {
			t.Errorf("%s: the client sent all %d bytes before it heard of the error (%v)", addr, in.read, time.Since(start))
		}
		t.Logf("%s: error after %d bytes sent, %v", addr, in.read, time.Since(start))
		if got := queryString(t, c, "SELECT count(*)::text FROM ce_local"); got != "0" {
			t.Errorf("%s: rows after the failed COPY: %s", addr, got)
		}
	}
}

// TestCopyNoticesMidStream: notices a trigger raises for each row of a COPY
// FROM STDIN reach the client, all of them, and the COPY completes (the
// coordinator passes them on while the client still sends).
func TestCopyNoticesMidStream(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	setup := connect(t, srv.Addr())
	for _, q := range []string{"DROP TABLE IF EXISTS cn_local",
		"CREATE TABLE cn_local (n int)",
		"CREATE OR REPLACE FUNCTION cn_note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE NOTICE 'row %', NEW.n; RETURN NEW; END $$",
		"CREATE TRIGGER cn_note BEFORE INSERT ON cn_local FOR EACH ROW EXECUTE FUNCTION cn_note()"} {
		exec(t, setup, q)
	}
	t.Cleanup(func() {
		_, _ = setup.Exec(context.Background(), "DROP TABLE IF EXISTS cn_local")
		_, _ = setup.Exec(context.Background(), "DROP FUNCTION IF EXISTS cn_note()")
	})
	cfg, err := pgx.ParseConfig(pgtest.URL(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	var notices atomic.Int64
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.HasPrefix(n.Message, "row ") {
			notices.Add(1)
		}
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	const rows = 50000
	var sb strings.Builder
	for i := 0; i < rows; i++ {
		sb.WriteString("7\n")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tag, err := c.PgConn().CopyFrom(ctx, strings.NewReader(sb.String()), "COPY cn_local (n) FROM STDIN")
	if err != nil || tag.RowsAffected() != rows {
		t.Fatalf("COPY with a notice per row: %v %v", tag, err)
	}
	if got := notices.Load(); got != rows {
		t.Errorf("notices: %d, want %d", got, rows)
	}
}

// TestTempObjectDDL: DDL of temporary functions and types (pg_temp) runs on
// the session's own connection, as on PostgreSQL, not on every worker in
// a two-phase commit, which PostgreSQL refuses for temporary objects
// (pgx's TestConnCopyFromNoticeResponseReceivedMidStream: a temporary
// trigger function); they work for the session and are gone for others.
func TestTempObjectDDL(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	ctx := context.Background()
	c := connect(t, srv.Addr())
	for _, q := range []string{
		"CREATE TEMPORARY TABLE tt_sentences (t text, ts tsvector)",
		"CREATE FUNCTION pg_temp.tt_trigger() RETURNS trigger AS $$ BEGIN new.ts := to_tsvector(new.t); RETURN new; END $$ LANGUAGE plpgsql",
		"CREATE TRIGGER tt_update BEFORE INSERT ON tt_sentences FOR EACH ROW EXECUTE PROCEDURE pg_temp.tt_trigger()",
		"CREATE TYPE pg_temp.tt_mood AS ENUM ('ok', 'meh')",
		"COMMENT ON FUNCTION pg_temp.tt_trigger() IS 'temp'",
	} {
		if _, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("hello world\n"), "COPY tt_sentences (t) FROM STDIN"); err != nil {
		t.Fatalf("COPY into the temporary table: %v", err)
	}
	if got := queryString(t, c, "SELECT ts::text FROM tt_sentences"); got != "'hello':1 'world':2" {
		t.Errorf("the temporary trigger's work: %q", got)
	}
	if got := queryString(t, c, "SELECT 'meh'::pg_temp.tt_mood::text"); got != "meh" {
		t.Errorf("the temporary type: %q", got)
	}
	if _, err := c.Exec(ctx, "DROP FUNCTION pg_temp.tt_trigger() CASCADE", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Errorf("DROP of the temporary function: %v", err)
	}
	other := connect(t, srv.Addr())
	if _, err := other.Exec(ctx, "SELECT 'meh'::pg_temp.tt_mood"); err == nil {
		t.Error("another session sees the temporary type")
	}

	// A temporary table made in a transaction that spans workers: its
	// COMMIT cannot be two-phase (PostgreSQL refuses to PREPARE it):
	// 0A000 with a hint, nothing kept.
	testTable(t, other, "tt_d", "(k int PRIMARY KEY)", "SELECT create_distributed_table('tt_d', 'k', shard_count => 4)")
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, other, "BEGIN", simple)
	exec(t, other, "INSERT INTO tt_d VALUES (1), (2), (3), (4), (5), (6), (7), (8)", simple)
	exec(t, other, "CREATE TEMP TABLE tt_scratch (a int)", simple)
	_, err := other.Exec(ctx, "COMMIT", simple)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Hint, "temporary") {
		t.Errorf("COMMIT of a spanning transaction with a temporary table: %v, want 0A000 with a hint", err)
	}
	if got := queryString(t, connect(t, srv.Addr()), "SELECT count(*)::text FROM tt_d"); got != "0" {
		t.Errorf("rows of the refused transaction: %s", got)
	}
}
