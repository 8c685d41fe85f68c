package difftest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// stmt is one generated statement.
type stmt struct {
	family  string
	sql     string
	proto   protocol
	params  []param
	copy    string    // COPY data (text format), for copyProto
	more    [][]param // further executions of a prepared statement
	ordered bool      // the result has a total order: compare rows in order
	txCtl   bool      // a transaction-control statement
	setting [2]string // SET name TO value: the generator follows it
	reset   string    // RESET name ("all" for RESET ALL): the generator follows it
}

// gen draws statements. Its state is the schema, the enabled features, the
// current session's settings and whether a transaction block is open.
type gen struct {
	r        *rand.Rand
	s        *schema
	f        features
	set      settings
	startup  settings // the session's startup parameters
	inTx     bool
	failedTx bool // the open transaction failed (status E)
	sp       int  // savepoints taken in the open transaction
	cursors  int  // cursors declared in the open transaction (c0, c1, ...)
}

// family is a kind of statement. New families go in the families table:
// a name (which is also the feature that enables it), a weight, and a
// function that draws one statement.
type family struct {
	name         string
	weight       int
	offByDefault bool // a known, not yet fixed bug (see knownBug)
	gen          func(g *gen) *stmt
}

var families []family

func init() {
	families = []family{
		{name: "point-select", weight: 14, gen: (*gen).pointSelect},
		{name: "point-update", weight: 6, gen: (*gen).pointUpdate},
		{name: "point-delete", weight: 3, gen: (*gen).pointDelete},
		{name: "multi-write", weight: 2, gen: (*gen).multiWrite},
		{name: "insert-select", weight: 1, gen: (*gen).insertSelect},
		{name: "insert", weight: 8, gen: (*gen).insert},
		{name: "insert-multi", weight: 4, gen: (*gen).insertMulti},
		{name: "upsert", weight: 3, gen: (*gen).upsert},
		{name: "upsert-key", weight: 1, gen: (*gen).upsertKey},
		{name: "ref-read", weight: 3, gen: (*gen).refRead},
		{name: "ref-write", weight: 3, gen: (*gen).refWrite},
		{name: "join-colocated", weight: 4, gen: (*gen).joinColocated},
		{name: "join-ref", weight: 4, gen: (*gen).joinRef},
		{name: "scatter-select", weight: 6, gen: (*gen).scatterSelect},
		{name: "scatter-agg", weight: 6, gen: (*gen).scatterAgg},
		{name: "gather", weight: 4, gen: (*gen).gather},
		{name: "gather-tables", weight: 3, gen: (*gen).gatherTables},
		{name: "copy", weight: 2, gen: (*gen).copyIn},
		{name: "copy-where", weight: 1, gen: (*gen).copyWhere},
		{name: "txn", weight: 6, gen: (*gen).txn},
		{name: "chain", weight: 2, gen: (*gen).chain},
		{name: "set", weight: 2, gen: (*gen).setStmt},
		{name: "prepared", weight: 4, gen: (*gen).prepared},
		{name: "reset", weight: 1, gen: (*gen).resetStmt},
		{name: "multi-statement", weight: 2, gen: (*gen).multiStatement},
		{name: "views", weight: 2, gen: (*gen).viewRead},
		{name: "cursor", weight: 3, gen: (*gen).cursor},
		{name: "cte-scope", weight: 2, gen: (*gen).cteScope},
	}
	for _, f := range families {
		if f.offByDefault {
			if _, ok := knownBug[f.name]; !ok {
				panic("family " + f.name + " is off by default but not listed in knownBug")
			}
		}
	}
}

// next draws a statement from an enabled family, by weight.
func (g *gen) next() *stmt {
	if g.failedTx && g.r.IntN(2) == 0 {
		if s := g.txn(); s != nil {
			s.family = "txn"
			return s
		}
	}
	total := 0
	for _, f := range families {
		if g.f.on(f.name) {
			total += f.weight
		}
	}
	for {
		n := g.r.IntN(total)
		for _, f := range families {
			if !g.f.on(f.name) {
				continue
			}
			if n < f.weight {
				if s := f.gen(g); s != nil {
					s.family = f.name
					return s
				}
				break
			}
			n -= f.weight
		}
	}
}

func (g *gen) pick(c ...string) string { return c[g.r.IntN(len(c))] }

// newBuilder chooses the protocol of a statement that may use either.
func (g *gen) newBuilder() (*builder, protocol) {
	if g.r.IntN(2) == 0 {
		return &builder{g: g, extended: true}, extendedProto
	}
	return &builder{g: g}, simpleProto
}

func (g *gen) finish(b *builder, p protocol, sql string) *stmt {
	return &stmt{sql: sql, proto: p, params: b.params}
}

func (g *gen) distTable() *table {
	d := g.s.distributed()
	return d[g.r.IntN(len(d))]
}

func (g *gen) refTable() *table {
	d := g.s.references()
	return d[g.r.IntN(len(d))]
}

// name spells a table reference, sometimes schema-qualified.
func (g *gen) name(t *table) string {
	if g.r.IntN(4) == 0 {
		return "public." + t.name
	}
	return t.name
}

func (g *gen) randKey(t *table) value { return t.keys[g.r.IntN(len(t.keys))] }

// randKeyOf draws an integer-looking key from keys, or def.
func (g *gen) randKeyOf(keys []value, def value) value {
	for range 10 {
		if len(keys) == 0 {
			break
		}
		if k := keys[g.r.IntN(len(keys))]; isIntText(k.s) {
			return k
		}
	}
	return def
}

// keyEq is the pinning equality on the key, in one of several shapes.
func (g *gen) keyEq(b *builder, t *table, qual string) string {
	k := qual + "k"
	b.keys = t.keys
	lit := b.key(t.key().typ, g.randKey(t))
	b.keys = nil
	switch g.r.IntN(6) {
	case 0:
		return lit + " = " + k
	case 1:
		return "(" + k + " = " + lit + ")"
	case 2:
		return k + " IN (" + lit + ")"
	}
	return k + " = " + lit
}

// selectList is a random subset of columns, or *.
func (g *gen) selectList(t *table, qual string) string {
	if g.r.IntN(3) == 0 {
		return "*"
	}
	var out []string
	for _, c := range t.cols {
		if g.r.IntN(2) == 0 {
			out = append(out, qual+c.name)
		}
	}
	if len(out) == 0 {
		out = append(out, qual+"k")
	}
	if g.r.IntN(5) == 0 {
		out = append(out, qual+"t AS "+g.pick("label", `"Mixed Case"`, "x"))
	}
	if g.r.IntN(4) == 0 {
		e := g.expression(t, qual)
		// Unnamed, (k)::text is also called k, which makes ORDER BY k
		// ambiguous (42702); the coordinator reports that even in a failed
		// transaction, where PostgreSQL answers 25P02 (featAbortedPlan).
		if !g.f.on(featAbortedPlan) || g.r.IntN(2) == 0 {
			e += " AS e"
		}
		out = append(out, e)
	}
	return strings.Join(out, ", ")
}

func (g *gen) pointSelect() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	where := g.keyEq(b, t, "")
	if g.r.IntN(3) == 0 {
		where += " AND " + g.valuePred(b, t, "")
	}
	return g.finish(b, p, fmt.Sprintf("SELECT %s FROM %s WHERE %s", g.selectList(t, ""), g.name(t), where))
}

// expression is a computed select-list item, evaluated where the row is
// (on a worker, under the session's settings).
func (g *gen) expression(t *table, qual string) string {
	c := t.cols[g.r.IntN(len(t.cols))]
	q := qual + c.name
	if g.f.on(featExprErrors) && g.r.IntN(3) == 0 {
		// Expressions that fail on some rows (overflow, bad bytea input).
		switch {
		case c.typ.isInt():
			return g.pick(q+" + 1", "-"+q)
		case c.typ.isString():
			return "(" + q + ")::bytea"
		case c.typ.k == kFloat8:
			return q + " * 2"
		}
	}
	switch c.typ.k {
	case kInt2, kInt4, kInt8:
		return g.pick(q+" % 7", "coalesce("+q+", -1)", "("+q+")::text", q+"::numeric / 3", q+"::numeric + 1")
	case kText, kVarchar, kBPChar:
		return g.pick("upper("+q+")", "length("+q+")", q+" || '|'", "octet_length("+q+")", "quote_literal("+q+")")
	case kTimestamptz:
		return g.pick(q+"::text", "extract(hour from "+q+")", q+" AT TIME ZONE 'UTC'", "to_char("+q+", 'YYYY-MM-DD HH24:MI TZ')", "date_trunc('day', "+q+")",
			"("+q+" AT TIME ZONE 'UTC')::date", "("+q+" AT TIME ZONE 'Asia/Kolkata')::text", q+" AT TIME ZONE ('Etc/GMT' || '+3')")
	case kTimestamp, kDate:
		return g.pick(q+"::text", q+" + interval '1 day'", "to_char("+q+", 'DD Mon YYYY')", "extract(dow from "+q+")")
	case kInterval:
		return g.pick(q+"::text", q+" * 2", "justify_interval("+q+")")
	case kFloat8:
		return g.pick(q+"::text", q+" / 2", "round("+q+"::numeric, 2)")
	case kNumeric:
		return g.pick(q+"::text", "round("+q+", 1)", q+" * 2")
	case kUUID:
		return g.pick(q+"::text", "upper("+q+"::text)")
	case kBool:
		return g.pick("NOT "+q, "CASE WHEN "+q+" THEN 'yes' ELSE 'no' END")
	}
	return q
}

// valuePred is a predicate on a non-key column.
func (g *gen) valuePred(b *builder, t *table, qual string) string {
	c := t.cols[1+g.r.IntN(len(t.cols)-1)]
	switch g.r.IntN(5) {
	case 0:
		return qual + c.name + g.pick(" IS NULL", " IS NOT NULL")
	case 1:
		if c.typ.k == kBool {
			return qual + c.name
		}
	}
	if c.typ.k == kFloat8 && g.r.IntN(2) == 0 {
		return qual + c.name + " > 0"
	}
	return qual + c.name + g.pick(" = ", " <> ", " < ", " >= ") + b.val(c.typ, genValue(g.r, c.typ, false))
}

// assignment is SET col = value for a random non-key column.
func (g *gen) assignment(b *builder, t *table, not string) string {
	c := t.cols[1+g.r.IntN(len(t.cols)-1)]
	if c.name == not {
		c = t.cols[1]
		if c.name == not {
			c = t.cols[2]
		}
	}
	if c.typ.isInt() && g.r.IntN(3) == 0 {
		return fmt.Sprintf("%s = %s + 1", c.name, c.name)
	}
	return c.name + " = " + b.val(c.typ, genValue(g.r, c.typ, true))
}

func (g *gen) returning(t *table) string {
	if g.r.IntN(4) != 0 {
		return ""
	}
	return " RETURNING " + g.selectList(t, "")
}

func (g *gen) pointUpdate() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	set := g.assignment(b, t, "")
	if g.r.IntN(3) == 0 {
		set += ", " + g.assignment(b, t, strings.Fields(set)[0])
	}
	where := g.keyEq(b, t, "")
	if g.r.IntN(4) == 0 {
		where += " AND " + g.valuePred(b, t, "")
	}
	return g.finish(b, p, fmt.Sprintf("UPDATE %s SET %s WHERE %s%s", g.name(t), set, where, g.returning(t)))
}

func (g *gen) pointDelete() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	return g.finish(b, p, fmt.Sprintf("DELETE FROM %s WHERE %s%s", g.name(t), g.keyEq(b, t, ""), g.returning(t)))
}

// multiWrite draws an UPDATE or DELETE with no equality on the
// distribution column: it runs on every shard, all or nothing. Deletes
// take a narrow predicate, so that the tables keep rows.
func (g *gen) multiWrite() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	d := g.name(t)
	grp := fmt.Sprint(g.r.IntN(6))
	switch g.r.IntN(6) {
	case 4:
		// Subqueries over the table itself, not pinned to a shard: run
		// first, then the write with their rows (both protocols).
		return g.finish(b, p, fmt.Sprintf("UPDATE %s SET %s WHERE k IN (SELECT k FROM %s WHERE %s)%s", d, g.assignment(b, t, ""), d, g.valuePred(b, t, ""), g.returning(t)))
	case 5:
		return g.finish(b, p, fmt.Sprintf("DELETE FROM %s WHERE g = %s AND g > (SELECT min(g) FROM %s WHERE %s)%s", d, grp, d, g.valuePred(b, t, ""), g.returning(t)))
	case 0:
		return g.finish(b, p, fmt.Sprintf("UPDATE %s SET %s WHERE %s%s", d, g.assignment(b, t, ""), g.valuePred(b, t, ""), g.returning(t)))
	case 1:
		return g.finish(b, p, fmt.Sprintf("UPDATE %s SET g = g + 1, t = t || 'x' WHERE g = %s", d, grp))
	case 2:
		r0 := g.s.references()[0]
		return g.finish(b, p, fmt.Sprintf("UPDATE %s x SET %s FROM %s r WHERE r.k = x.g AND r.g %s", d, g.assignment(b, t, ""), g.name(r0), g.pick("IS NULL", "> 2", "< 3")))
	default:
		return g.finish(b, p, fmt.Sprintf("DELETE FROM %s WHERE g = %s AND %s%s", d, grp, g.valuePred(b, t, ""), g.returning(t)))
	}
}

// insertSelect draws an INSERT ... SELECT between colocated tables, the
// target's key the source's (pushed down shard by shard), or one that
// cannot push down (refused).
func (g *gen) insertSelect() *stmt {
	var pairs [][2]*table
	for _, t := range g.s.distributed() {
		if t.colocate != "" {
			for _, base := range g.s.distributed() {
				if base.name == t.colocate {
					pairs = append(pairs, [2]*table{base, t}, [2]*table{t, base})
				}
			}
		}
	}
	if len(pairs) == 0 {
		return g.multiWrite()
	}
	pr := pairs[g.r.IntN(len(pairs))]
	src, dst := pr[0], pr[1]
	b, p := g.newBuilder()
	conflict := g.pick(" ON CONFLICT DO NOTHING", " ON CONFLICT (k) DO UPDATE SET g = excluded.g, t = excluded.t", "")
	switch g.r.IntN(4) {
	case 0:
		return g.finish(b, p, fmt.Sprintf("INSERT INTO %s (k, g, t) SELECT k, g, t FROM %s WHERE %s%s", g.name(dst), g.name(src), g.valuePred(b, src, ""), conflict))
	case 1:
		return g.finish(b, p, fmt.Sprintf("INSERT INTO %s (t, k, g) SELECT s.t || '+', s.k, r.g FROM %s s JOIN %s r ON r.k = s.g%s", g.name(dst), g.name(src), g.name(g.s.references()[0]), conflict))
	case 2:
		return g.finish(b, p, fmt.Sprintf("INSERT INTO %s (k, g) SELECT k, count(*) FROM %s GROUP BY k HAVING count(*) > 0%s", g.name(dst), g.name(src), conflict))
	default:
		return g.finish(b, p, fmt.Sprintf("INSERT INTO %s (k, g) SELECT k, g FROM %s ORDER BY k LIMIT 3%s", g.name(dst), g.name(src), conflict))
	}
}

// rowValues renders one row's VALUES tuple.
func (g *gen) rowValues(b *builder, t *table, row []value) string {
	parts := make([]string, len(row))
	for i, v := range row {
		if i == 0 {
			b.keys = t.keys
			parts[i] = b.key(t.cols[i].typ, v)
			b.keys = nil
			if t.cols[i].typ.isInt() && !t.reference && g.r.IntN(6) == 0 {
				// An expression the coordinator has PostgreSQL evaluate.
				parts[i] = "(" + parts[i] + " + 0)"
			}
		} else {
			parts[i] = b.val(t.cols[i].typ, v)
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func (g *gen) insertInto(t *table, rows int, b *builder) string {
	var tuples []string
	for range rows {
		tuples = append(tuples, g.rowValues(b, t, t.row(g.r)))
	}
	if g.r.IntN(4) == 0 {
		// Without a column list: every column, in the table's order.
		return fmt.Sprintf("INSERT INTO %s VALUES %s", g.name(t), strings.Join(tuples, ", "))
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", g.name(t), colNames(t.cols), strings.Join(tuples, ", "))
}

func (g *gen) insert() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	sql := g.insertInto(t, 1, b)
	if g.r.IntN(3) == 0 {
		sql += " ON CONFLICT DO NOTHING"
	}
	return g.finish(b, p, sql+g.returning(t))
}

// insertMulti is a multi-row INSERT over several shards (simple protocol
// mostly: over the extended protocol it is refused today).
func (g *gen) insertMulti() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	if g.r.IntN(4) != 0 {
		b, p = &builder{g: g}, simpleProto
	}
	sql := g.insertInto(t, 2+g.r.IntN(4), b)
	if g.r.IntN(2) == 0 {
		sql += " ON CONFLICT DO NOTHING"
	}
	return g.finish(b, p, sql)
}

func (g *gen) upsert() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	c := t.cols[1+g.r.IntN(len(t.cols)-1)]
	sql := g.insertInto(t, 1, b) + fmt.Sprintf(" ON CONFLICT (k) DO UPDATE SET %s = EXCLUDED.%s", c.name, c.name)
	return g.finish(b, p, sql+g.returning(t))
}

func (g *gen) upsertKey() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	sql := g.insertInto(t, 1, b) + " ON CONFLICT (k) DO UPDATE SET k = " + b.key(t.key().typ, g.randKey(t))
	return g.finish(b, p, sql)
}

func (g *gen) refRead() *stmt {
	t := g.refTable()
	b, p := g.newBuilder()
	sql := fmt.Sprintf("SELECT %s FROM %s", g.selectList(t, ""), g.name(t))
	if g.r.IntN(2) == 0 {
		if g.r.IntN(2) == 0 {
			sql += " WHERE " + g.keyEq(b, t, "")
		} else {
			sql += " WHERE " + g.valuePred(b, t, "")
		}
	}
	s := &stmt{proto: p, params: b.params}
	if g.r.IntN(2) == 0 {
		sql += " ORDER BY k"
		s.ordered = true
	}
	s.sql = sql
	return s
}

func (g *gen) refWrite() *stmt {
	t := g.refTable()
	b, p := g.newBuilder()
	var sql string
	switch g.r.IntN(4) {
	case 0:
		sql = g.insertInto(t, 1, b) + g.pick("", " ON CONFLICT DO NOTHING", " ON CONFLICT (k) DO UPDATE SET t = EXCLUDED.t")
	case 1:
		sql = fmt.Sprintf("UPDATE %s SET %s WHERE %s", g.name(t), g.assignment(b, t, ""), g.keyEq(b, t, ""))
	case 2:
		sql = fmt.Sprintf("UPDATE %s SET %s WHERE %s", g.name(t), g.assignment(b, t, ""), g.valuePred(b, t, ""))
	default:
		sql = fmt.Sprintf("DELETE FROM %s WHERE %s", g.name(t), g.keyEq(b, t, ""))
	}
	return g.finish(b, p, sql)
}

func (g *gen) joinColocated() *stmt {
	var pairs [][2]*table
	for _, t := range g.s.distributed() {
		if t.colocate != "" {
			for _, u := range g.s.distributed() {
				if u.name == t.colocate {
					pairs = append(pairs, [2]*table{u, t})
				}
			}
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	pr := pairs[g.r.IntN(len(pairs))]
	b, p := g.newBuilder()
	join := g.pick("JOIN", "LEFT JOIN", "INNER JOIN")
	sql := fmt.Sprintf("SELECT a.k, a.g, b.t, b.g AS bg FROM %s a %s %s b ON a.k = b.k", g.name(pr[0]), join, g.name(pr[1]))
	s := &stmt{proto: p}
	if g.r.IntN(2) == 0 {
		sql += " WHERE " + g.keyEq(b, pr[0], "a.")
	} else if g.r.IntN(2) == 0 {
		sql += " WHERE " + g.valuePred(b, pr[1], "b.")
	}
	if g.r.IntN(2) == 0 {
		sql += " ORDER BY a.k"
		s.ordered = true
		if g.r.IntN(2) == 0 {
			sql += fmt.Sprintf(" LIMIT %d", g.r.IntN(10))
		}
	}
	s.sql, s.params = sql, b.params
	return s
}

func (g *gen) joinRef() *stmt {
	t := g.distTable()
	r0 := g.s.references()[0]
	b, p := g.newBuilder()
	if g.r.IntN(4) == 0 {
		return &stmt{proto: p, ordered: true, sql: fmt.Sprintf(
			"SELECT r.t, count(*), sum(d.g), min(d.t) FROM %s d JOIN %s r ON d.g = r.k GROUP BY r.t ORDER BY r.t", g.name(t), g.name(r0))}
	}
	sql := fmt.Sprintf("SELECT d.k, d.t, r.k AS rk, r.t AS rt FROM %s d %s %s r ON d.g = r.k", g.name(t), g.pick("JOIN", "LEFT JOIN"), g.name(r0))
	s := &stmt{proto: p}
	if g.r.IntN(2) == 0 {
		sql += " WHERE " + g.keyEq(b, t, "d.")
	}
	if g.r.IntN(2) == 0 {
		sql += " ORDER BY d.k"
		s.ordered = true
	}
	s.sql, s.params = sql, b.params
	return s
}

func (g *gen) scatterSelect() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	s := &stmt{proto: p}
	var sql string
	if g.r.IntN(6) == 0 {
		sql = fmt.Sprintf("SELECT DISTINCT ON (g) g, k, t FROM %s ORDER BY g %s, k", g.name(t), g.pick("", "DESC", "NULLS FIRST", "DESC NULLS LAST"))
		s.ordered = true
	} else if g.r.IntN(8) == 0 {
		// The same constant twice: lifted, two parameters would be two
		// expressions to a merge.
		m := g.r.IntN(4) + 2
		sql = fmt.Sprintf("SELECT DISTINCT ON (g %% %d) g %% %d AS r, k FROM %s ORDER BY g %% %d, k", m, m, g.name(t), m)
		s.ordered = true
	} else if g.r.IntN(4) == 0 {
		sql = fmt.Sprintf("SELECT DISTINCT g FROM %s", g.name(t))
		if g.r.IntN(2) == 0 {
			sql += " ORDER BY g"
			s.ordered = true
		}
	} else {
		sql = fmt.Sprintf("SELECT %s FROM %s", g.selectList(t, ""), g.name(t))
		if g.r.IntN(2) == 0 {
			sql += " WHERE " + g.valuePred(b, t, "")
		} else if g.r.IntN(3) == 0 {
			sql += " WHERE " + g.keySet(b, t)
		}
		if g.r.IntN(2) == 0 {
			sql += " ORDER BY " + g.pick("k", "k DESC", "g NULLS FIRST, k", "g DESC, k DESC", "t, k")
			s.ordered = true
			if g.r.IntN(2) == 0 {
				sql += fmt.Sprintf(" LIMIT %d", g.r.IntN(8))
				if g.r.IntN(2) == 0 {
					sql += fmt.Sprintf(" OFFSET %d", g.r.IntN(5))
				}
			}
		}
	}
	s.sql, s.params = sql, b.params
	return s
}

// keySet is a predicate on the key that may hold in several shards: an IN
// list, an OR of equalities, a range.
func (g *gen) keySet(b *builder, t *table) string {
	b.keys = t.keys
	defer func() { b.keys = nil }()
	kt := t.key().typ
	switch g.r.IntN(4) {
	case 0:
		var lits []string
		for range 1 + g.r.IntN(4) {
			lits = append(lits, b.key(kt, g.randKey(t)))
		}
		return "k IN (" + strings.Join(lits, ", ") + ")"
	case 1:
		return "(k = " + b.key(kt, g.randKey(t)) + " OR k = " + b.key(kt, g.randKey(t)) + ")"
	case 2:
		return "k BETWEEN " + b.key(kt, g.randKey(t)) + " AND " + b.key(kt, g.randKey(t))
	}
	return "k " + g.pick("<>", ">", "<=") + " " + b.key(kt, g.randKey(t))
}

// aggregate draws one aggregate over t's columns. Sums and averages of
// float8 are left out: the multi-shard merge adds partial sums (see
// docs/architecture.md, known inexactness).
func (g *gen) aggregate(t *table) string {
	c := t.cols[g.r.IntN(len(t.cols))]
	switch {
	case g.r.IntN(5) == 0:
		return "count(*)"
	case c.typ.isInt():
		return g.pick("sum", "avg", "min", "max", "count", "bit_and", "bit_or")
	case c.typ.k == kNumeric:
		// Not min/max: 0 and 0.00 are equal and print differently, so
		// which one max returns depends on the scan order, on PostgreSQL
		// too. The same holds for 0 and -0 in float8.
		return g.pick("sum", "avg", "count") + "(" + c.name + ")"
	case c.typ.k == kFloat8:
		return "count(" + c.name + ")"
	case c.typ.k == kBool:
		return g.pick("bool_and", "bool_or", "every", "count") + "(" + c.name + ")"
	case c.typ.k == kUUID:
		return "count(" + c.name + ")"
	}
	return g.pick("min", "max", "count") + "(" + c.name + ")"
}

func (g *gen) scatterAgg() *stmt {
	t := g.distTable()
	b, p := g.newBuilder()
	var aggs []string
	for range 1 + g.r.IntN(3) {
		a := g.aggregate(t)
		if !strings.Contains(a, "(") {
			var ints []string
			for _, c := range t.cols {
				if c.typ.isInt() || (c.typ.k == kNumeric && (a == "sum" || a == "avg" || a == "count")) {
					ints = append(ints, c.name)
				}
			}
			a += "(" + ints[g.r.IntN(len(ints))] + ")"
		}
		aggs = append(aggs, a)
	}
	s := &stmt{proto: p}
	group := ""
	switch g.r.IntN(3) {
	case 0:
		group = "g"
	case 1:
		if g.r.IntN(2) == 0 {
			group = "k" // grouped by the distribution column: any aggregate
			aggs = append(aggs, "string_agg(t, ',' ORDER BY t)")
		}
	}
	if g.r.IntN(4) == 0 {
		aggs = append(aggs, "count(*) FILTER (WHERE g > 3)")
	}
	sel := strings.Join(aggs, ", ")
	if group != "" {
		sel = group + ", " + sel
	}
	sql := fmt.Sprintf("SELECT %s FROM %s", sel, g.name(t))
	if g.r.IntN(2) == 0 {
		sql += " WHERE " + g.valuePred(b, t, "")
	}
	if group != "" {
		sql += " GROUP BY " + group
		if g.r.IntN(3) == 0 {
			sql += " HAVING count(*) > " + fmt.Sprint(g.r.IntN(3))
			if g.r.IntN(2) == 0 {
				sql += " AND min(t) IS NOT NULL"
			}
		}
		if g.r.IntN(2) == 0 {
			sql += " ORDER BY " + group
			s.ordered = true
		}
	}
	s.sql, s.params = sql, b.params
	return s
}

// maybeWhere is " WHERE <a predicate on t's values>" half the time, else "".
func (g *gen) maybeWhere(b *builder, t *table, qual string) string {
	if g.r.IntN(2) == 0 {
		return " WHERE " + g.valuePred(b, t, qual)
	}
	return ""
}

// gather draws a read over one distributed table that the coordinator
// cannot push down to the shards (windows, self-joins off the key, set
// operations, subqueries, aggregates without a partial form): it gathers
// the table's rows and runs the statement once on a worker.
func (g *gen) gather() *stmt {
	t := g.distTable()
	d := g.name(t)
	b, p := g.newBuilder()
	s := &stmt{proto: p}
	var sql string
	switch g.r.IntN(8) {
	case 0:
		sql = fmt.Sprintf("SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY k), sum(g) OVER (ORDER BY k) AS running, lag(t) OVER (ORDER BY k) FROM %s%s ORDER BY k", d, g.maybeWhere(b, t, ""))
		s.ordered = true
	case 1:
		sql = fmt.Sprintf("SELECT count(*), count(b.t), count(DISTINCT a.k) FROM %s a JOIN %s b ON a.g = b.g%s", d, d, g.pick("", " AND a.k <> b.k"))
		if g.r.IntN(2) == 0 {
			sql += " WHERE " + g.valuePred(b, t, "b.")
		}
	case 2:
		sql = fmt.Sprintf("SELECT g, t FROM %s%s %s SELECT g, t FROM %s%s", d, g.maybeWhere(b, t, ""), g.pick("UNION", "UNION ALL", "INTERSECT", "EXCEPT", "EXCEPT ALL"), d, g.maybeWhere(b, t, ""))
	case 3:
		sql = fmt.Sprintf("SELECT k, t FROM %s WHERE g %s (SELECT g FROM %s%s) ORDER BY k", d, g.pick("IN", "NOT IN", "= ANY", "<> ALL"), d, g.maybeWhere(b, t, ""))
		s.ordered = true
	case 4:
		sql = fmt.Sprintf("SELECT k, g - (SELECT max(g) FROM %s) AS below, (SELECT count(*) FROM %s x WHERE x.g = %s.g) AS peers FROM %s WHERE %s", d, d, d, d, g.keyEq(b, t, ""))
	case 5:
		aggs := []string{"count(DISTINCT t)", "stddev(g)", "var_pop(g)", "string_agg(t, ',' ORDER BY k)",
			"percentile_cont(0.5) WITHIN GROUP (ORDER BY g)", "mode() WITHIN GROUP (ORDER BY g)", "array_agg(g ORDER BY k)"}
		sel := g.pick(aggs...) + ", " + g.pick(aggs...)
		if g.r.IntN(2) == 0 {
			sql = fmt.Sprintf("SELECT g, %s FROM %s%s GROUP BY g ORDER BY g", sel, d, g.maybeWhere(b, t, ""))
			s.ordered = true
		} else {
			sql = fmt.Sprintf("SELECT %s FROM %s%s", sel, d, g.maybeWhere(b, t, ""))
		}
	case 6:
		sql = fmt.Sprintf("WITH c AS (SELECT g, count(*) AS n FROM %s%s GROUP BY g) SELECT max(n), min(g), count(*) FROM c", d, g.maybeWhere(b, t, ""))
	default:
		r0 := g.s.references()[0]
		sql = fmt.Sprintf("SELECT r.t, count(DISTINCT d.k), rank() OVER (ORDER BY r.t) FROM %s d JOIN %s r ON d.g = r.k GROUP BY r.t ORDER BY r.t", d, g.name(r0))
		s.ordered = true
	}
	s.sql, s.params = sql, b.params
	return s
}

// cteScope draws statements with a CTE named as a table, which hides the
// table only where PostgreSQL's scope says: inside the CTE itself (unless
// RECURSIVE) and in earlier sibling CTEs the name is still the table.
func (g *gen) cteScope() *stmt {
	t := g.distTable()
	if g.r.IntN(3) == 0 {
		t = g.refTable()
	}
	n := t.name
	b, p := g.newBuilder()
	s := &stmt{proto: p}
	var sql string
	switch g.r.IntN(5) {
	case 0:
		sql = fmt.Sprintf("WITH %s AS (SELECT * FROM %s WHERE %s) SELECT count(*), count(DISTINCT g) FROM %s", n, n, g.valuePred(b, t, ""), n)
	case 1:
		sql = fmt.Sprintf("WITH a AS (SELECT k, g FROM %s), %s AS (SELECT 1 AS k) SELECT count(*), count(g) FROM a", n, n)
	case 2:
		sql = fmt.Sprintf("SELECT count(*) FROM %s WHERE g IN (WITH %s AS (SELECT g FROM %s WHERE %s) SELECT g FROM %s)", n, n, n, g.valuePred(b, t, ""), n)
	case 3:
		sql = fmt.Sprintf("WITH %s AS (SELECT 7 AS k) SELECT k FROM %s", n, n)
	default:
		sql = fmt.Sprintf("WITH x AS (SELECT count(*) AS c FROM %s) SELECT c, (WITH %s AS (SELECT 1) SELECT count(*) FROM %s) FROM x", n, n, n)
	}
	s.sql, s.params = sql, b.params
	return s
}

// gatherTables draws a read over two distributed tables (colocated or
// not, with any distribution types) that no shard can answer alone: joins
// and subqueries on g or t, set operations; the coordinator gathers both
// tables' rows in one pass.
func (g *gen) gatherTables() *stmt {
	t1, t2 := g.distTable(), g.distTable()
	for t2 == t1 && len(g.s.distributed()) > 1 {
		t2 = g.distTable()
	}
	d1, d2 := g.name(t1), g.name(t2)
	b, p := g.newBuilder()
	s := &stmt{proto: p}
	var sql string
	switch g.r.IntN(7) {
	case 0:
		sql = fmt.Sprintf("SELECT a.g, count(*), count(DISTINCT b.t), max(b.k) FROM %s a JOIN %s b ON a.g = b.g%s GROUP BY a.g ORDER BY a.g", d1, d2, g.maybeWhere(b, t1, "a."))
		s.ordered = true
	case 1:
		sql = fmt.Sprintf("SELECT k, t FROM %s WHERE g %s (SELECT g FROM %s%s) ORDER BY k", d1, g.pick("IN", "NOT IN", "= ANY", "<> ALL"), d2, g.maybeWhere(b, t2, ""))
		s.ordered = true
	case 2:
		sql = fmt.Sprintf("SELECT t, g FROM %s%s %s SELECT t, g FROM %s%s", d1, g.maybeWhere(b, t1, ""), g.pick("UNION", "UNION ALL", "INTERSECT", "EXCEPT", "EXCEPT ALL"), d2, g.maybeWhere(b, t2, ""))
	case 3:
		sql = fmt.Sprintf("SELECT count(*), count(b.k), sum(a.g) FROM %s a %s JOIN %s b ON a.t = b.t%s", d1, g.pick("LEFT", "RIGHT", "FULL", "INNER"), d2, g.maybeWhere(b, t1, "a."))
	case 4:
		sql = fmt.Sprintf("SELECT a.k, (SELECT count(*) FROM %s b WHERE b.g = a.g) AS peers FROM %s a WHERE %s", d2, d1, g.keyEq(b, t1, "a."))
	case 5:
		sql = fmt.Sprintf("SELECT a.k FROM %s a WHERE %sEXISTS (SELECT 1 FROM %s b WHERE b.g = a.g AND b.t %s a.t) ORDER BY a.k", d1, g.pick("", "NOT "), d2, g.pick("=", "<>", "<"))
		s.ordered = true
	default:
		sql = fmt.Sprintf("WITH x AS (SELECT g, count(*) AS n FROM %s GROUP BY g) SELECT a.g, x.n, rank() OVER (ORDER BY x.n DESC, a.g) FROM (SELECT DISTINCT g FROM %s) a JOIN x ON x.g = a.g ORDER BY a.g", d2, d1)
		s.ordered = true
	}
	s.sql, s.params = sql, b.params
	return s
}

// copyRows renders rows in COPY's text format.
func copyRows(t *table, rows [][]value) string {
	var b strings.Builder
	for _, row := range rows {
		for i, v := range row {
			if i > 0 {
				b.WriteByte('\t')
			}
			if v.null {
				b.WriteString(`\N`)
				continue
			}
			r := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`)
			b.WriteString(r.Replace(v.s))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// copyCSV renders rows in COPY's CSV format: NULL unquoted and empty, the
// empty string quoted.
func copyCSV(rows [][]value) string {
	var b strings.Builder
	for _, row := range rows {
		for i, v := range row {
			if i > 0 {
				b.WriteByte(',')
			}
			switch {
			case v.null:
			case v.s == "" || strings.ContainsAny(v.s, ",\"\n\r\\") || strings.TrimSpace(v.s) != v.s:
				b.WriteString(`"` + strings.ReplaceAll(v.s, `"`, `""`) + `"`)
			default:
				b.WriteString(v.s)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (g *gen) copyRowsFor(t *table) string {
	return copyRows(t, g.rowsFor(t))
}

func (g *gen) rowsFor(t *table) [][]value {
	rows := make([][]value, 1+g.r.IntN(6))
	for i := range rows {
		rows[i] = t.row(g.r)
	}
	return rows
}

func (g *gen) copyIn() *stmt {
	t := g.distTable()
	if g.r.IntN(4) == 0 {
		t = g.refTable()
	}
	if g.r.IntN(3) == 0 {
		return &stmt{proto: copyProto, sql: fmt.Sprintf("COPY %s (%s) FROM STDIN WITH (FORMAT csv)", g.name(t), colNames(t.cols)),
			copy: copyCSV(g.rowsFor(t))}
	}
	return &stmt{proto: copyProto, sql: fmt.Sprintf("COPY %s (%s) FROM STDIN", g.name(t), colNames(t.cols)), copy: g.copyRowsFor(t)}
}

func (g *gen) copyWhere() *stmt {
	t := g.distTable()
	return &stmt{proto: copyProto, sql: fmt.Sprintf("COPY %s (%s) FROM STDIN WHERE g > 5", g.name(t), colNames(t.cols)), copy: g.copyRowsFor(t)}
}

// txn opens or ends a transaction block, or takes a savepoint.
func (g *gen) txn() *stmt {
	s := &stmt{proto: simpleProto, txCtl: true}
	if g.r.IntN(3) == 0 {
		s.proto = extendedProto
	}
	if !g.inTx {
		s.sql = g.pick("BEGIN", "BEGIN", "BEGIN ISOLATION LEVEL READ COMMITTED", "begin work", "BEGIN ISOLATION LEVEL REPEATABLE READ")
		if g.f.on(featStartTx) && g.r.IntN(4) == 0 {
			s.sql = g.pick("START TRANSACTION", "START TRANSACTION ISOLATION LEVEL READ COMMITTED")
		}
		return s
	}
	switch g.r.IntN(8) {
	case 0:
		s.sql = fmt.Sprintf("SAVEPOINT s%d", g.sp)
		g.sp++
	case 1:
		// In a failed transaction, ROLLBACK TO a savepoint reaches a
		// coordinator difference (featSavepointRefuse) when the coordinator
		// failed the transaction itself (a refusal, or an error of a
		// multi-shard part run outside the transaction's connection).
		if g.sp == 0 || (g.failedTx && !g.f.on(featSavepointRefuse)) {
			return nil
		}
		s.sql = fmt.Sprintf("%s s%d", g.pick("ROLLBACK TO SAVEPOINT", "RELEASE SAVEPOINT"), g.r.IntN(g.sp))
	case 2, 3:
		s.sql = g.pick("ROLLBACK", "ABORT", "ROLLBACK WORK")
	default:
		s.sql = g.pick("COMMIT", "COMMIT", "END", "COMMIT WORK")
	}
	return s
}

// cursor declares a cursor over a distributed or reference table in a
// transaction block (its rows in key order), or fetches from, moves or
// closes one declared before (perhaps closed since: 34000 on both sides).
func (g *gen) cursor() *stmt {
	if !g.inTx {
		return nil
	}
	s := &stmt{proto: simpleProto, ordered: true}
	if g.cursors == 0 || g.r.IntN(5) == 0 {
		t := g.distTable()
		if g.r.IntN(4) == 0 {
			t = g.refTable()
		}
		b := &builder{g: g}
		where := ""
		if g.r.IntN(3) == 0 {
			where = " WHERE " + g.valuePred(b, t, "")
		}
		// Columns, not expressions: an expression failing on a row fails
		// at DECLARE through pgfleet (it runs the query then), at the
		// FETCH that reaches the row on PostgreSQL (a documented
		// departure, not what this family looks for).
		s.sql = fmt.Sprintf("DECLARE c%d %s CURSOR FOR SELECT %s FROM %s%s ORDER BY k", g.cursors,
			g.pick("", "SCROLL", "NO SCROLL"), g.pick("k, g, t", "*", "t, k"), g.name(t), where)
		if len(b.params) > 0 {
			return nil // the simple protocol only
		}
		g.cursors++
		return s
	}
	c := g.r.IntN(g.cursors)
	if g.r.IntN(10) == 0 {
		s.sql = fmt.Sprintf("CLOSE c%d", c)
		return s
	}
	dir := g.pick("NEXT", "PRIOR", "FIRST", "LAST", "ABSOLUTE %d", "RELATIVE %d", "FORWARD %d", "BACKWARD %d", "%d", "ALL",
		"FORWARD ALL", "BACKWARD ALL", "FORWARD 0")
	if strings.Contains(dir, "%d") {
		dir = fmt.Sprintf(dir, g.r.IntN(13)-4)
	}
	s.sql = fmt.Sprintf("%s %s FROM c%d", g.pick("FETCH", "FETCH", "FETCH", "MOVE"), dir, c)
	return s
}

// chain ends a transaction with AND CHAIN / AND NO CHAIN.
func (g *gen) chain() *stmt {
	if !g.inTx {
		return nil
	}
	return &stmt{proto: simpleProto, txCtl: true,
		sql: g.pick("COMMIT AND CHAIN", "ROLLBACK AND CHAIN", "COMMIT WORK AND CHAIN", "COMMIT AND NO CHAIN", "ROLLBACK AND NO CHAIN")}
}

// setStmt changes one setting mid-session; in a transaction block
// sometimes with SET LOCAL (for settings the generator does not follow).
func (g *gen) setStmt() *stmt {
	names := sortedKeys(settingChoices)
	name := names[g.r.IntN(len(names))]
	c := settingChoices[name]
	v := c[g.r.IntN(len(c))]
	if feat := settingFeature(name, v); feat != "" && !g.f.on(feat) {
		return nil
	}
	if g.inTx && g.r.IntN(3) == 0 && name != "client_encoding" && name != "standard_conforming_strings" {
		return &stmt{proto: simpleProto, sql: strings.Replace(setSQL(name, v), "SET ", "SET LOCAL ", 1)}
	}
	return &stmt{proto: simpleProto, sql: setSQL(name, v), setting: [2]string{name, v}}
}

// resetStmt resets one setting (to the session's startup value, as
// PostgreSQL does) or all of them.
func (g *gen) resetStmt() *stmt {
	startup := len(g.startup) > 0 && !g.f.on(featResetStartup)
	if g.r.IntN(4) == 0 {
		if startup {
			return nil
		}
		return &stmt{proto: simpleProto, sql: "RESET ALL", reset: "all"}
	}
	names := sortedKeys(settingChoices)
	name := names[g.r.IntN(len(names))]
	if _, ok := g.startup[name]; ok && startup {
		return nil
	}
	return &stmt{proto: simpleProto, sql: "RESET " + name, reset: name}
}

// viewRead reads a distributed table through a view or an SQL function
// created at setup (viewSQL).
func (g *gen) viewRead() *stmt {
	t := g.distTable()
	if !t.views {
		return g.pointSelect() // the coordinator refused the view (counted at setup)
	}
	b, p := g.newBuilder()
	switch g.r.IntN(3) {
	case 0:
		return g.finish(b, p, fmt.Sprintf("SELECT count(*), count(g) FROM v_%s", t.name))
	case 1:
		return g.finish(b, p, fmt.Sprintf("SELECT k, g, t FROM v_%s WHERE %s", t.name, g.keyEq(b, t, "")))
	}
	return g.finish(b, p, fmt.Sprintf("SELECT f_%s(%s)", t.name, b.key(t.key().typ, g.randKey(t))))
}

// viewSQL creates the view and function viewRead uses.
func (t *table) viewSQL() []string {
	return []string{
		fmt.Sprintf("CREATE VIEW v_%s AS SELECT * FROM %s", t.name, t.name),
		fmt.Sprintf("CREATE OR REPLACE FUNCTION f_%s(%s) RETURNS int LANGUAGE sql AS 'SELECT g FROM %s WHERE k = $1'", t.name, t.key().typ.sql(), t.name),
	}
}

// prepared is a routed or multi-shard statement prepared under a name and
// executed two to four times with other parameter values, as drivers with
// statement caches do.
func (g *gen) prepared() *stmt {
	var s *stmt
	for s == nil || len(s.params) == 0 {
		switch g.r.IntN(4) {
		case 0:
			s = g.pointUpdate()
		case 1:
			s = g.scatterSelect()
		default:
			s = g.pointSelect()
		}
		if s.proto != extendedProto {
			s = nil
		}
	}
	s.proto = preparedProto
	for range 1 + g.r.IntN(3) {
		next := make([]param, len(s.params))
		for i, p := range s.params {
			next[i] = p
			next[i].val = p.redraw()
			if p.oid == oidBPChar && !next[i].val.null {
				next[i].val.s += " "
			}
			if _, ok := encodeBinary(p.oid, next[i].val, false); !ok {
				next[i].format = 0
			}
		}
		s.more = append(s.more, next)
	}
	return s
}

// multiStatement sends two or three statements in one simple Query, which
// PostgreSQL runs as one implicit transaction outside a transaction block.
func (g *gen) multiStatement() *stmt {
	var parts []string
	ordered := true
	for range 2 + g.r.IntN(2) {
		var s *stmt
		for s == nil || s.proto != simpleProto {
			switch g.r.IntN(5) {
			case 0:
				s = g.pointUpdate()
			case 1:
				s = g.insert()
			case 2:
				s = g.refWrite()
			case 3:
				s = g.scatterSelect()
			default:
				s = g.pointSelect()
			}
		}
		ordered = ordered && (s.ordered || !strings.HasPrefix(s.sql, "SELECT"))
		parts = append(parts, s.sql)
	}
	// Rows of all parts are compared together: as a multiset unless every
	// part's order is total.
	return &stmt{proto: simpleProto, sql: strings.Join(parts, "; "), ordered: ordered}
}
