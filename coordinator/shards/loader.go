package shards

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// flushBytes is how much a shard's buffer holds before it is written.
const flushBytes = 1 << 20

// Loader runs a client's COPY FROM STDIN into a distributed or reference
// table: it splits the rows by shard (a reference table's rows go to every
// node), writes each shard's rows with COPY in batches, one transaction per
// node, and commits all nodes with two-phase commit, so the load is all or
// nothing.
type Loader struct {
	snap    *metadata.Snapshot
	table   *metadata.Table
	shards  []metadata.Shard
	copySQL []string // per shard index: COPY shard (cols) FROM STDIN ...
	bufs    [][]byte
	split   rowSplitter
	g       *group
	nodes   *nodes
	rows    int64 // rows read from the client
	stored  int64 // rows the shards stored (the first copy's, for a reference table)
	// varcharLen: the distribution column is varchar(n), which cuts
	// trailing spaces beyond n characters before the value is hashed.
	varcharLen int
	// ForeignEncoding: the client's encoding is not the server's, so text
	// values are converted by the worker; non-ASCII ones are refused.
	ForeignEncoding bool
	// refName is a reference table's copy (schema-qualified, quoted),
	// whose rows this load stored Finish compares across copies.
	refName string
	// columns and options are the COPY's, for the shards' statements.
	columns []string
	options string
	// fill: sequence columns the COPY leaves out, added to each row from
	// draw (n values for each, in row order); distFill is the index in
	// fill of the distribution column, -1 if it is not one. Rows wait in
	// waiting until the values for a message's rows are drawn at once.
	fill     []string
	draw     func(n int) ([][]string, error)
	distFill int
	waiting  [][]byte
}

// NewLoader prepares a load. columns is the COPY's column list (empty: all
// columns, read from the default node's table); options is the COPY's WITH
// clause as written, passed on to the shards minus HEADER. store records
// the commit decision.
func NewLoader(ctx context.Context, store *metadata.Store, snap *metadata.Snapshot, conns map[int32]*pgx.Conn, defaultNode int32,
	table string, columns []string, f CopyFormat, options string) (*Loader, error) {
	if store == nil {
		return nil, errNoStore
	}
	t := snap.Table(table)
	if t == nil {
		return nil, pgerr.New(pgerr.UndefinedTable, "relation %q is not distributed", table)
	}
	n := &nodes{conns: conns, addrs: map[int32]string{}}
	for _, nd := range snap.Nodes {
		n.addrs[nd.ID] = nd.Addr()
	}
	l := &Loader{snap: snap, table: t, shards: snap.Shards[table], nodes: n, g: newGroup("copy", n, store)}
	l.g.beginStmt = "BEGIN"
	if t.Kind == metadata.Distributed {
		cols := columns
		if len(cols) == 0 {
			home, err := n.conn(defaultNode)
			if err != nil {
				return nil, err
			}
			rows, err := home.Query(ctx, `SELECT attname FROM pg_catalog.pg_attribute
				WHERE attrelid = pg_catalog.to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, metadata.SQLName(table))
			if err != nil {
				return nil, n.wrap(err, "reading the columns of %s", table)
			}
			cols, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return nil, n.wrap(err, "reading the columns of %s", table)
			}
		}
		if t.DistType == "varchar" {
			home, err := n.conn(defaultNode)
			if err != nil {
				return nil, err
			}
			var typmod int
			if err := home.QueryRow(ctx, `SELECT atttypmod FROM pg_catalog.pg_attribute
				WHERE attrelid = pg_catalog.to_regclass($1) AND attname = $2`, metadata.SQLName(table), t.DistColumn).Scan(&typmod); err != nil {
				return nil, n.wrap(err, "reading the type of %s.%s", table, t.DistColumn)
			}
			l.varcharLen = typmod - 4 // VARHDRSZ; -1 (no limit) becomes negative
		}
		l.split.field = -1
		l.split.ncols = len(cols)
		for i, c := range cols {
			if c == t.DistColumn {
				l.split.field = i
			}
		}
	}
	l.split.f = f
	l.split.distType = t.DistType
	l.columns, l.options, l.distFill = columns, options, -1
	l.statements()
	l.bufs = make([][]byte, len(l.shards))
	return l, nil
}

// statements makes the shards' COPY statements.
func (l *Loader) statements() {
	rel := l.table.Name[len(l.table.Schema())+1:]
	schema := l.table.ShardsIn()
	colList := ""
	if cols := append(slices.Clip(l.columns), l.fill...); len(cols) > 0 {
		q := make([]string, len(cols))
		for i, c := range cols {
			q[i] = pgx.Identifier{c}.Sanitize()
		}
		colList = " (" + strings.Join(q, ", ") + ")"
	}
	l.copySQL = l.copySQL[:0]
	for _, sh := range l.shards {
		name := pgx.Identifier{schema, metadata.ShardName(rel, sh.ID)}.Sanitize()
		sql := fmt.Sprintf("COPY %s%s FROM STDIN%s", name, colList, l.options)
		if l.table.Kind == metadata.Reference {
			sql += metadata.CopiesMarker(len(sh.Nodes))
			l.refName = name
		}
		l.copySQL = append(l.copySQL, sql)
	}
}

// Fill adds the sequence columns cols, which the COPY leaves out, to every
// row, with values from draw; before the first Write. A format whose
// delimiter or NULL marker an integer can hold is refused.
func (l *Loader) Fill(cols []string, draw func(n int) ([][]string, error)) error {
	if !l.split.f.CSV && (l.split.f.Delimiter == '-' || l.split.f.Null != "" && strings.Trim(l.split.f.Null, "-0123456789") == "") {
		return pgerr.New(pgerr.FeatureNotSupported,
			"COPY into %s leaving out a sequence column, with a DELIMITER or NULL that a number can contain, is not supported", l.table.Name).
			WithHint("Use another DELIMITER or NULL, or FORMAT csv.")
	}
	l.fill, l.draw = cols, draw
	if l.table.Kind == metadata.Distributed {
		l.distFill = slices.Index(cols, l.table.DistColumn)
	}
	l.statements()
	return nil
}

// checkDistField refuses a COPY of a distributed table without its
// distribution column (unless a sequence gives it): PostgreSQL would
// store its default there, or NULL, or fail with 23502 (NOT NULL), which
// only the column's definition says.
func (l *Loader) checkDistField() error {
	if l.table.Kind == metadata.Distributed && l.split.field < 0 && l.distFill < 0 {
		return pgerr.New(pgerr.FeatureNotSupported, "COPY into %s leaving its distribution column %q to its default is not supported", l.table.Name, l.table.DistColumn).
			WithHint("Include %s in the COPY's columns.", l.table.DistColumn)
	}
	return nil
}

// Write takes one CopyData message's bytes.
func (l *Loader) Write(ctx context.Context, data []byte) error {
	if err := l.checkDistField(); err != nil {
		return err
	}
	if l.split.ended {
		return nil // after \. PostgreSQL ignores the rest of the data
	}
	l.split.pending = append(l.split.pending, data...)
	return l.drain(ctx, false)
}

func (l *Loader) drain(ctx context.Context, final bool) error {
	for {
		row, val, isNull, ok, err := l.split.next(final)
		if err != nil {
			return err
		}
		if !ok {
			// Keep the unread tail at the front of the buffer.
			l.split.pending = append(l.split.pending[:0:0], l.split.pending...)
			return l.drainWaiting(ctx)
		}
		if l.fill != nil {
			l.waiting = append(l.waiting, bytes.Clone(row))
			continue
		}
		if err := l.route(ctx, row, val, isNull); err != nil {
			return err
		}
	}
}

// drainWaiting draws the sequence values of the rows waiting for them,
// adds them to each row (before its line end) and routes the rows.
func (l *Loader) drainWaiting(ctx context.Context) error {
	if len(l.waiting) == 0 {
		return nil
	}
	vals, err := l.draw(len(l.waiting))
	if err != nil {
		return err
	}
	f := l.split.f
	for i, row := range l.waiting {
		end := l.split.eol.terminator()
		body, hasEnd := bytes.CutSuffix(row, []byte(end))
		if !hasEnd {
			end = ""
		}
		out := slices.Clip(body)
		for k := range l.fill {
			out = append(out, f.Delimiter)
			if f.CSV {
				out = append(append(append(out, f.Quote), vals[k][i]...), f.Quote)
			} else {
				out = append(out, vals[k][i]...)
			}
		}
		out = append(out, end...)
		val, isNull := "", false
		if l.distFill >= 0 {
			val = vals[l.distFill][i]
		} else if l.table.Kind == metadata.Distributed {
			if val, isNull, err = l.split.extract(body); err != nil {
				return err
			}
		}
		if err := l.route(ctx, out, val, isNull); err != nil {
			return err
		}
	}
	l.waiting = l.waiting[:0]
	return nil
}

// route adds a row to its shard's buffer, writing the buffer when full.
func (l *Loader) route(ctx context.Context, row []byte, val string, isNull bool) error {
	{
		idx := 0
		if l.table.Kind == metadata.Reference && !l.split.f.Binary && timeWordField(row, l.split.f) {
			return pgerr.New(pgerr.FeatureNotSupported,
				"COPY into reference table %s of 'now', 'today', 'tomorrow' or 'yesterday' is not supported: each copy would read its own time", l.table.Name).
				WithHint("Send the time itself.")
		}
		if l.table.Kind == metadata.Distributed && isNull {
			// The shard of hash 0, as an INSERT's NULL goes: its worker
			// stores the row, or fails it under NOT NULL (23502), as
			// PostgreSQL does.
			if idx = metadata.ShardIndex(l.shards, 0); idx < 0 {
				return pgerr.New(pgerr.Internal, "no shard of %s holds hash 0", l.table.Name)
			}
		} else if l.table.Kind == metadata.Distributed {
			if l.ForeignEncoding && !isASCII(val) && (metadata.IsText(l.table.DistType) || metadata.IsBPChar(l.table.DistType)) {
				return pgerr.New(pgerr.FeatureNotSupported,
					"COPY into %s with a non-ASCII distribution value in a client_encoding other than the server's is not supported", l.table.Name).
					WithHint("Set client_encoding to the server's encoding for the COPY.")
			}
			if l.varcharLen > 0 {
				val = varcharValue(val, l.varcharLen)
			}
			h, err := metadata.HashValue(l.table.DistType, val)
			if err != nil {
				return err
			}
			if idx = metadata.ShardIndex(l.shards, h); idx < 0 {
				return pgerr.New(pgerr.Internal, "no shard of %s holds hash %d", l.table.Name, h)
			}
		}
		l.bufs[idx] = append(l.bufs[idx], row...)
		l.rows++
		if len(l.bufs[idx]) >= flushBytes {
			if err := l.flush(ctx, idx); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush writes shard idx's buffered rows to every placement.
func (l *Loader) flush(ctx context.Context, idx int) error {
	if len(l.bufs[idx]) == 0 {
		return nil
	}
	var first int64
	for i, node := range l.shards[idx].Nodes {
		tx, err := l.g.begin(ctx, node)
		if err != nil {
			return err
		}
		var data io.Reader = bytes.NewReader(l.bufs[idx])
		if l.split.f.Binary {
			data = io.MultiReader(bytes.NewReader(binaryHeader), data, bytes.NewReader(binaryTrailer))
		}
		tag, err := tx.conn.PgConn().CopyFrom(ctx, data, l.copySQL[idx])
		if err != nil {
			return l.nodes.stmtErr(err, "COPY into shard %s_%d on node %s", l.table.Name, l.shards[idx].ID, l.nodes.describe(node))
		}
		// The rows stored, which a WHERE may make fewer than those sent;
		// every copy of a reference table stores the same rows.
		if i == 0 {
			l.stored += tag.RowsAffected()
		} else if n := tag.RowsAffected(); n != first {
			return pgerr.New(pgerr.Internal, "copies of shard %s_%d differ: %d rows stored on node %s, %d on the first",
				l.table.Name, l.shards[idx].ID, n, l.nodes.describe(node), first)
		}
		if i == 0 {
			first = tag.RowsAffected()
		}
	}
	l.bufs[idx] = l.bufs[idx][:0]
	return nil
}

// Finish writes what is buffered and commits on every node. It returns the
// number of rows stored, as the COPY's command tag counts them (a WHERE
// clause may skip some).
func (l *Loader) Finish(ctx context.Context) (int64, error) {
	if err := l.drain(ctx, true); err != nil {
		return 0, err
	}
	for i := range l.bufs {
		if err := l.flush(ctx, i); err != nil {
			return 0, err
		}
	}
	if err := l.sameCopies(ctx); err != nil {
		return 0, err
	}
	if err := l.g.prepare(ctx); err != nil {
		return 0, err
	}
	if err := l.g.commit(ctx); err != nil {
		return 0, err
	}
	return l.stored, nil
}

// sameCopies compares, before anything commits, the rows this load stored
// in every copy of a reference table (those its transaction wrote: one
// scan of each copy): a value each worker read for itself ('now' in an
// array, a default that is not what its volatility says, ...) makes them
// differ, and the load is refused (0A000) instead of leaving the copies
// different.
func (l *Loader) sameCopies(ctx context.Context) error {
	if l.refName == "" || len(l.shards) != 1 {
		return nil
	}
	q := "SELECT pg_catalog.count(*)::text || ' ' || COALESCE(" + planner.RowsDigest("pgfleet_copy") + "::text, '') FROM " +
		l.refName + " pgfleet_copy WHERE pgfleet_copy.xmin::text::bigint = pg_catalog.txid_current() % 4294967296"
	var first string
	for i, node := range l.shards[0].Nodes {
		tx, err := l.g.begin(ctx, node)
		if err != nil {
			return err
		}
		var got string
		if err := tx.conn.QueryRow(ctx, q, pgx.QueryExecModeExec).Scan(&got); err != nil {
			return l.nodes.wrap(err, "checking the copy of %s on node %s", l.table.Name, l.nodes.describe(node))
		}
		if i == 0 {
			first = got
		} else if got != first {
			return pgerr.New(pgerr.FeatureNotSupported,
				"this COPY into reference table %s would store different rows on its copies; nothing was written", l.table.Name).
				WithHint("A value depends on the worker that reads it (a date/time word such as 'now', a volatile default, ...): write it as a plain constant.")
		}
	}
	return nil
}

// Columns is the number of columns each row has, 0 when not known.
func (l *Loader) Columns() int { return l.split.ncols }

// InClientTxn makes the load part of a client's transaction block: the
// connections NewLoader got are the block's, inside it; the load begins,
// commits and rolls back nothing (the client's COMMIT or ROLLBACK does).
// Call it before the first Write.
func (l *Loader) InClientTxn() { l.g.inClient = true }

// Abort rolls back everything written so far.
func (l *Loader) Abort() { l.g.rollback(context.Background()) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// varcharValue is s stored in a varchar(n), as varchar's input function
// (in a UTF-8 database) stores it: beyond n characters, trailing spaces
// are cut; a longer value with other characters is left for the worker
// to refuse (22001).
func varcharValue(s string, n int) string {
	chars := 0
	for i := range s {
		if chars == n {
			if strings.Trim(s[i:], " ") == "" {
				return s[:i]
			}
			return s
		}
		chars++
	}
	return s
}

// timeWordField reports whether a row has a field that a date/time column
// reads as the current time ('now', 'today', ...), which each copy of a
// reference table would read for itself. CSV fields are split at every
// delimiter, quoted or not: a false alarm refuses the row, never stores a
// wrong one.
func timeWordField(row []byte, f CopyFormat) bool {
	lower := bytes.ToLower(row)
	if !bytes.Contains(lower, []byte("now")) && !bytes.Contains(lower, []byte("to")) && !bytes.Contains(lower, []byte("yesterday")) {
		return false
	}
	for _, field := range bytes.Split(bytes.TrimRight(lower, "\r\n"), []byte{f.Delimiter}) {
		field = bytes.TrimSpace(field)
		if f.CSV && len(field) >= 2 && field[0] == f.Quote && field[len(field)-1] == f.Quote {
			field = bytes.TrimSpace(field[1 : len(field)-1])
		}
		switch string(field) {
		case "now", "today", "tomorrow", "yesterday":
			return true
		}
	}
	return false
}
