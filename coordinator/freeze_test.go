package coordinator_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// TestWritesReadTheTimeOnce: multi-row INSERTs over several shards and
// into reference tables that take DEFAULT now() / CURRENT_DATE /
// LOCALTIMESTAMP(2), and multi-shard UPDATEs and DELETEs that read now(),
// answer as plain PostgreSQL does: one moment for the whole statement, on
// every shard and every copy, under the session's TimeZone. Before, they
// were refused (0A000). Inside a transaction block they still are.
func TestWritesReadTheTimeOnce(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	plain := oracleDB(t, cl.Servers[1].Addr(), "freezeoracle")
	ctx := context.Background()
	simple := pgx.QueryExecModeSimpleProtocol
	const cols = "(id int PRIMARY KEY, t timestamptz DEFAULT now(), d date DEFAULT CURRENT_DATE, v int, lt timestamp(2) DEFAULT LOCALTIMESTAMP(2))"
	exec(t, plain, "DROP TABLE IF EXISTS fz_t, fz_r")
	testTable(t, c, "fz_t", cols, "SELECT create_distributed_table('fz_t', 'id', shard_count => 8)")
	testTable(t, c, "fz_r", "(id int PRIMARY KEY, t timestamptz DEFAULT now(), note text)", "SELECT create_reference_table('fz_r')")
	exec(t, plain, "CREATE TABLE fz_t "+cols)
	exec(t, plain, "CREATE TABLE fz_r (id int PRIMARY KEY, t timestamptz DEFAULT now(), note text)")
	t.Cleanup(func() { _, _ = plain.Exec(ctx, "DROP TABLE IF EXISTS fz_t, fz_r") })
	for _, conn := range []*pgx.Conn{c, plain} {
		exec(t, conn, "SET TimeZone = 'Pacific/Kiritimati'", simple) // UTC+14: another date than UTC's for hours a day
	}
	compareOracle(t, c, plain, []string{
		"INSERT INTO fz_t (id, v) VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8)",
		"SELECT count(*), count(DISTINCT t), count(DISTINCT d), count(DISTINCT lt), bool_and(d = t::date), bool_and(lt = t::timestamp(2)) FROM fz_t",
		"INSERT INTO fz_t VALUES (20, DEFAULT, DEFAULT, 20), (21, DEFAULT, '2020-01-01', 21), (22, '2021-01-01 00:00+00', DEFAULT, 22)",
		"SELECT id, t = (SELECT t FROM fz_t WHERE id = 20), d = (SELECT t FROM fz_t WHERE id = 20)::date FROM fz_t WHERE id >= 20 ORDER BY id",
		// RETURNING reads the statement's one moment; CURRENT_TIMESTAMP(0)
		// is it rounded to the second (whether it came out before now()
		// depended on the half of the second the statement ran in: a
		// flaky test).
		"INSERT INTO fz_t (id, v, t) VALUES (30, 30, now() - interval '1 day'), (31, 31, CURRENT_TIMESTAMP(0) - interval '1 day') RETURNING id, CASE WHEN id = 30 THEN t = now() - interval '1 day' ELSE t - (now() - interval '1 day') BETWEEN interval '-0.5 second' AND interval '0.5 second' END",
		// CURRENT_TIMESTAMP(0) rounds half up: the same moment as now()
		// truncated after half a second (truncating both depended on
		// when the statement ran).
		"SELECT count(DISTINCT date_trunc('second', t + CASE WHEN id = 30 THEN interval '0.5 second' ELSE interval '0' END)) FROM fz_t WHERE id >= 30",
		"UPDATE fz_t SET t = now() + interval '1 hour', v = v * 2 WHERE v <= 8",
		"SELECT count(DISTINCT t), bool_and(t > now()) FROM fz_t WHERE v <= 16 AND id < 20",
		"DELETE FROM fz_t WHERE t > now() + interval '30 minutes' AND id % 2 = 0",
		"SELECT id FROM fz_t ORDER BY id",
		"INSERT INTO fz_r (id) VALUES (1), (2), (3)",
		"INSERT INTO fz_r VALUES (4, DEFAULT, 'four')",
		"SELECT count(DISTINCT t) FROM fz_r WHERE id <= 3",
		"UPDATE fz_r SET note = 'at ' || (now() > t)::text WHERE id = 1",
		"SELECT note FROM fz_r WHERE id = 1",
		// A transaction block's time began on its first worker: refused.
		"BEGIN; UPDATE fz_t SET t = now(); ROLLBACK",
	}, map[string]bool{"BEGIN; UPDATE fz_t SET t = now(); ROLLBACK": true})
	// The block the refusal failed is still open, as on PostgreSQL.
	exec(t, c, "ROLLBACK", simple)

	// The extended protocol, as drivers send bulk inserts.
	for _, conn := range []*pgx.Conn{c, plain} {
		if _, err := conn.Exec(ctx, "INSERT INTO fz_t (id, v) VALUES ($1, $2), ($3, $4), ($5, $6), ($7, $8)", 40, 1, 41, 2, 42, 3, 43, 4); err != nil {
			t.Fatalf("extended multi-row INSERT: %v", err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO fz_r (id, note) VALUES ($1, $2)", 40, "forty"); err != nil {
			t.Fatalf("extended reference INSERT: %v", err)
		}
	}
	compareOracle(t, c, plain, []string{
		"SELECT count(*), count(DISTINCT t), count(DISTINCT d), count(DISTINCT lt), bool_and(d = t::date) FROM fz_t WHERE id BETWEEN 40 AND 43",
		"SELECT note, t <= now() FROM fz_r WHERE id = 40",
	}, nil)
	// Multi-shard UPDATE and DELETE reading now() over the extended
	// protocol (planned with a placeholder moment, run with their own).
	for _, conn := range []*pgx.Conn{c, plain} {
		if _, err := conn.Exec(ctx, "UPDATE fz_t SET t = now() - $1::interval, v = v + 1 WHERE id BETWEEN 40 AND 43", "1 hour"); err != nil {
			t.Fatalf("extended multi-shard UPDATE: %v", err)
		}
		rows, err := conn.Query(ctx, "UPDATE fz_t SET v = v + 1 WHERE id BETWEEN 40 AND 43 AND t < now() RETURNING t < now(), t = now() - interval '1 hour'")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var before, exact bool
			if err := rows.Scan(&before, &exact); err != nil {
				t.Fatal(err)
			}
			if !before || exact && conn == c {
				t.Errorf("RETURNING over the extended protocol: t < now() %v, t = now() - 1 hour %v (a later statement's now())", before, exact)
			}
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if _, err := conn.Exec(ctx, "DELETE FROM fz_t WHERE id BETWEEN $1 AND $2 AND t < now() - interval '30 minutes' AND v % 2 = 0", 40, 43); err != nil {
			t.Fatalf("extended multi-shard DELETE: %v", err)
		}
	}
	compareOracle(t, c, plain, []string{
		"SELECT id, v FROM fz_t WHERE id BETWEEN 40 AND 43 ORDER BY id",
		"SELECT count(DISTINCT t), bool_and(t < now() - interval '59 minutes') FROM fz_t WHERE id BETWEEN 40 AND 43",
	}, nil)
	// Over the extended protocol statement_timestamp() is the Execute's
	// moment, later than now(): not frozen, refused.
	if _, err := c.Exec(ctx, "UPDATE fz_t SET t = statement_timestamp() WHERE v > $1", 0); sqlState(err) != "0A000" {
		t.Errorf("an extended multi-shard UPDATE with statement_timestamp(): %v, want 0A000", err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO fz_t (id, v) VALUES ($1, $2), ($3, $4), ($5, $6), ($7, $8)", 50, 1, 51, 2, 52, 3, 53, 4); sqlState(err) != "0A000" {
		t.Errorf("in a transaction block: %v, want 0A000 (its time began on its first worker)", err)
	}
	_ = tx.Rollback(ctx)
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE fz_t SET t = now() WHERE v > $1", 0); sqlState(err) != "0A000" {
		t.Errorf("an extended multi-shard UPDATE reading now() in a transaction block: %v, want 0A000", err)
	}
	_ = tx.Rollback(ctx)

	// A now() of another schema, which search_path may put before
	// pg_catalog's: only PostgreSQL can resolve the call, so the
	// statement is not frozen (it was, and stored the real time where
	// PostgreSQL stores the function's; found by an adversary).
	exec(t, c, "CREATE SCHEMA IF NOT EXISTS fz_s", simple)
	exec(t, c, "CREATE OR REPLACE FUNCTION fz_s.now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT '2001-02-03 04:05:06+00'::timestamptz $$", simple)
	t.Cleanup(func() {
		_, _ = c.Exec(ctx, "DROP FUNCTION IF EXISTS fz_s.now()", simple)
		_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS fz_s", simple)
	})
	exec(t, c, "SET search_path = fz_s, pg_catalog, public", simple)
	if _, err := c.Exec(ctx, "UPDATE public.fz_t SET t = now() WHERE v > 0", simple); sqlState(err) != "0A000" {
		t.Errorf("UPDATE ... now() with a now() of another schema on the search_path: %v, want 0A000", err)
	}
	exec(t, c, "RESET search_path", simple)
	exec(t, c, "DROP FUNCTION fz_s.now()", simple)

	var workers []*pgx.Conn
	for _, s := range cl.Servers {
		workers = append(workers, connect(t, s.Addr()))
	}
	var shard string
	if err := workers[0].QueryRow(ctx, "SELECT shardid::text FROM pgfleet.shards WHERE table_name = 'public.fz_r'").Scan(&shard); err != nil {
		t.Fatal(err)
	}
	refCopies(t, workers, "pgfleet_shards.fz_r_"+shard, "after writes that read now()")
}
