package difftest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// fixedSettings make the checkers' text output independent of defaults.
const fixedSettings = "SET TimeZone TO 'UTC'; SET DateStyle TO 'ISO, MDY'; SET IntervalStyle TO postgres; " +
	"SET extra_float_digits TO 3; SET client_encoding TO 'UTF8'; SET standard_conforming_strings TO on"

// checker holds connections with fixed settings to every worker (by
// address), a coordinator and the oracle, for the invariants.
type checker struct {
	workers map[string]*pgconn.PgConn
	meta    *pgconn.PgConn // the first worker: holds the catalog
	coord   *pgconn.PgConn
	oracle  *pgconn.PgConn
}

func connectFixed(ctx context.Context, addr string) (*pgconn.PgConn, error) {
	c, err := pgconn.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	if err != nil {
		return nil, err
	}
	if _, err := c.Exec(ctx, fixedSettings).ReadAll(); err != nil {
		c.Close(ctx)
		return nil, err
	}
	return c, nil
}

func newChecker(ctx context.Context, env Env) (*checker, error) {
	ch := &checker{workers: map[string]*pgconn.PgConn{}}
	var err error
	for i, w := range env.Workers {
		c, err := connectFixed(ctx, w)
		if err != nil {
			ch.close()
			return nil, err
		}
		ch.workers[w] = c
		if i == 0 {
			ch.meta = c
		}
	}
	if ch.coord, err = connectFixed(ctx, env.Coordinators[0]); err != nil {
		ch.close()
		return nil, err
	}
	if ch.oracle, err = connectFixed(ctx, env.Oracle); err != nil {
		ch.close()
		return nil, err
	}
	return ch, nil
}

func (ch *checker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, c := range ch.workers {
		c.Close(ctx)
	}
	for _, c := range []*pgconn.PgConn{ch.coord, ch.oracle} {
		if c != nil {
			c.Close(ctx)
		}
	}
}

// query runs sql (no parameters) and returns its rows, encoded.
func query(ctx context.Context, c *pgconn.PgConn, sql string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sql, err)
	}
	var rows []string
	for _, r := range res {
		for _, row := range r.Rows {
			rows = append(rows, encodeRow(row))
		}
	}
	return rows, nil
}

// placement is one shard's copy on a worker.
type placement struct {
	shard  int64
	lo, hi string
	addr   string
	schema string // of the shard tables
}

// check verifies the invariants and returns a description of each
// violation.
func (ch *checker) check(ctx context.Context, s *schema) ([]string, error) {
	var bad []string
	for addr, c := range ch.workers {
		rows, err := query(ctx, c, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'pgfleet%' ORDER BY gid")
		if err != nil {
			return nil, err
		}
		if len(rows) > 0 {
			bad = append(bad, fmt.Sprintf("worker %s has prepared transactions left: %v", addr, rows))
		}
	}
	for _, t := range s.tables {
		b, err := ch.checkTable(ctx, t)
		if err != nil {
			return nil, err
		}
		bad = append(bad, b...)
	}
	return bad, nil
}

func (ch *checker) checkTable(ctx context.Context, t *table) ([]string, error) {
	var bad []string
	cols := colNames(t.cols)
	want, err := query(ctx, ch.oracle, fmt.Sprintf("SELECT %s FROM %s", cols, t.name))
	if err != nil {
		return nil, err
	}
	slices.Sort(want)
	catalog, err := query(ctx, ch.meta, fmt.Sprintf(`SELECT s.shardid, s.min_hash, s.max_hash, n.host || ':' || n.port,
			coalesce(t.shard_schema, 'public')
		FROM pgfleet.shards s JOIN pgfleet.tables t ON t.name = s.table_name
		JOIN pgfleet.placements p USING (shardid) JOIN pgfleet.nodes n USING (nodeid)
		WHERE s.table_name = 'public.%s' ORDER BY s.shardid, n.port`, t.name))
	if err != nil {
		return nil, err
	}
	if len(catalog) == 0 {
		return []string{fmt.Sprintf("%s: no shards in the catalog", t.name)}, nil
	}
	var pls []placement
	for _, row := range catalog {
		f := strings.Split(row, "\x00|")
		var p placement
		fmt.Sscan(f[0], &p.shard)
		p.lo, p.hi, p.addr, p.schema = f[1], f[2], f[3], f[4]
		pls = append(pls, p)
	}
	var union []string
	for _, p := range pls {
		c := ch.workers[p.addr]
		if c == nil {
			return nil, fmt.Errorf("placement of %s on unknown node %s", t.name, p.addr)
		}
		shard := fmt.Sprintf("%s.%s_%d", p.schema, t.name, p.shard)
		got, err := query(ctx, c, fmt.Sprintf("SELECT %s FROM %s", cols, shard))
		if err != nil {
			return nil, err
		}
		if t.reference {
			slices.Sort(got)
			if !slices.Equal(got, want) {
				bad = append(bad, fmt.Sprintf("reference table %s: copy %s on %s differs from the oracle:\n%s",
					t.name, shard, p.addr, rowsDiff(got, want)))
			}
			continue
		}
		// A NULL key belongs to the shard of hash 0 (as an INSERT's NULL
		// goes).
		wrong, err := query(ctx, c, fmt.Sprintf("SELECT k FROM %s WHERE %s(k) NOT BETWEEN %s AND %s OR (k IS NULL AND 0 NOT BETWEEN %[3]s AND %[4]s)",
			shard, t.key().typ.hashFunc(), p.lo, p.hi))
		if err != nil {
			return nil, err
		}
		if len(wrong) > 0 {
			bad = append(bad, fmt.Sprintf("%s: shard %s on %s holds %d rows outside its hash range [%s, %s]: keys %q",
				t.name, shard, p.addr, len(wrong), p.lo, p.hi, wrong))
		}
		union = append(union, got...)
	}
	if !t.reference {
		slices.Sort(union)
		if !slices.Equal(union, want) {
			bad = append(bad, fmt.Sprintf("distributed table %s: shards' rows differ from the oracle's:\n%s", t.name, rowsDiff(union, want)))
		}
	}
	// The same through a coordinator (its scatter read). A scatter that
	// meets a shard moved since its coordinator last read the catalog
	// fails with 40001 (Config.Disturb), as it would for any client, which
	// retries.
	got, err := query(ctx, ch.coord, fmt.Sprintf("SELECT %s FROM %s", cols, t.name))
	for try := 0; try < 3 && err != nil && strings.Contains(err.Error(), "SQLSTATE 40001"); try++ {
		got, err = query(ctx, ch.coord, fmt.Sprintf("SELECT %s FROM %s", cols, t.name))
	}
	if err != nil {
		bad = append(bad, fmt.Sprintf("reading %s through the coordinator: %v", t.name, err))
	} else {
		slices.Sort(got)
		if !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%s through the coordinator differs from the oracle:\n%s", t.name, rowsDiff(got, want)))
		}
	}
	return bad, nil
}

// rowsDiff lists rows only on one side (sorted inputs).
func rowsDiff(got, want []string) string {
	count := map[string]int{}
	for _, r := range got {
		count[r]++
	}
	for _, r := range want {
		count[r]--
	}
	var b strings.Builder
	for _, r := range sortedKeys(count) {
		show := strings.ReplaceAll(strings.ReplaceAll(r, "\x00|", " | "), rowNull, "NULL")
		switch n := count[r]; {
		case n > 0:
			fmt.Fprintf(&b, "  extra   (%d) %s\n", n, show)
		case n < 0:
			fmt.Fprintf(&b, "  missing (%d) %s\n", -n, show)
		}
	}
	return b.String()
}
