package coordinator

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// Views, materialized views, rules, functions, procedures and DO blocks run
// on the default node, where a distributed or reference table is an empty
// (or stale) local table: a view over it would silently answer from that
// table. Until the planner plans through them, pgfleet refuses to make such
// objects (their text names a catalog table) and refuses to distribute a
// table that existing views or functions use. What is not covered: objects
// made on a worker directly, and function bodies that build the table's
// name at run time (EXECUTE of a computed string).

// hiddenKind names what a statement creates or runs whose body is not
// planned by pgfleet ("" if none).
func hiddenKind(w []string) string {
	at := func(i int) string {
		if i < len(w) {
			return strings.ToUpper(w[i])
		}
		return ""
	}
	switch at(0) {
	case "DO":
		return "a DO block"
	case "CREATE":
	default:
		return ""
	}
	i := 1
	if at(1) == "OR" && at(2) == "REPLACE" {
		i = 3
	}
	for at(i) == "TEMP" || at(i) == "TEMPORARY" || at(i) == "RECURSIVE" || at(i) == "CONSTRAINT" {
		i++
	}
	switch at(i) {
	case "VIEW":
		return "a view"
	case "MATERIALIZED":
		return "a materialized view"
	case "FUNCTION":
		return "a function"
	case "PROCEDURE":
		return "a procedure"
	case "RULE":
		return "a rule"
	case "TRIGGER":
		return "a trigger"
	case "POLICY":
		return "a row-level security policy"
	}
	return ""
}

// tableWords is a catalog snapshot's table names without schema, lower
// case, made once per snapshot.
type tableWords struct {
	snap  *metadata.Snapshot
	names map[string]string // bare name -> schema-qualified name
}

var tableWordsCache atomic.Pointer[tableWords]

func catalogWords(snap *metadata.Snapshot) map[string]string {
	if tw := tableWordsCache.Load(); tw != nil && tw.snap == snap {
		return tw.names
	}
	m := make(map[string]string, len(snap.Tables))
	for name := range snap.Tables {
		bare := name
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			bare = name[i+1:]
		}
		m[strings.ToLower(strings.Trim(bare, `"`))] = name
	}
	tableWordsCache.Store(&tableWords{snap: snap, names: m})
	return m
}

// mentionedTable returns a catalog table whose name appears as a word
// anywhere in sql, bodies and strings included (conservative), or "". A
// name written with Unicode escapes (U&"\0064") is decoded; one whose
// escapes cannot be decoded here (UESCAPE) counts as naming any table.
// Words are read as PostgreSQL reads identifiers: '$' belongs to them
// (the parts between are looked up too), ASCII letters are lowered (in
// UTF-8 PostgreSQL lowers no other), and a word longer than 63 bytes is
// cut to its first 63 (NAMEDATALEN). names' keys are lower-case in ASCII;
// a name with other characters than a word's is found by oddNames.
func mentionedTable(sql string, names map[string]string) string {
	return mentioned(sql, names, false)
}

// mentioned is mentionedTable, and mentionedCall when call is set.
func mentioned(sql string, names map[string]string, call bool) string {
	var buf [63]byte
	for i := 0; i < len(sql); {
		c := sql[i]
		if (c == 'U' || c == 'u') && i+2 < len(sql) && sql[i+1] == '&' && (sql[i+2] == '"' || sql[i+2] == '\'') {
			name, next, ok := unicodeEscaped(sql, i+2)
			if !ok {
				for _, t := range names {
					return t
				}
			}
			if t, found := names[strings.ToLower(name)]; found {
				return t
			}
			if t, found := names[name]; found {
				return t
			}
			if found := mentionedTable(name, names); found != "" {
				return found
			}
			i = next
			continue
		}
		if !isIdentStart(c) {
			i++
			continue
		}
		j := i
		for j < len(sql) && isIdentChar(sql[j]) {
			j++
		}
		if call && !callAt(sql, i, j) {
			i = j
			continue
		}
		if t, found := lookWord(&buf, names, sql[i:j]); found {
			return t
		}
		if strings.IndexByte(sql[i:j], '$') > 0 {
			// (The parts too, as before '$' was read as PostgreSQL does.)
			for _, part := range strings.Split(sql[i:j], "$") {
				if t, found := lookWord(&buf, names, part); found {
					return t
				}
			}
		}
		i = j
	}
	return ""
}

// mentionedCall is mentionedTable for function names: a word counts only
// where a call can be, before "(" (blanks and comments between), or after
// "." (attribute notation, t.f, blanks between). (A function named like a
// column, tenant_id, must not make every query naming the column pin:
// adversary.) A quoted name with a quote in it is an odd name (oddName),
// looked for as text; one spelled with U& escapes is read as mentionedTable
// reads it, wherever it stands.
func mentionedCall(sql string, names map[string]string) string {
	return mentioned(sql, names, true)
}

// callAt reports whether the word sql[i:j] (in quotes or not) stands
// where a function is called: before "(" or after ".", blanks and
// comments between.
func callAt(sql string, i, j int) bool {
	if j < len(sql) && sql[j] == '"' {
		j++
	}
	if k := skipBlanks(sql, j); k < len(sql) && sql[k] == '(' {
		return true
	}
	if i > 0 && sql[i-1] == '"' {
		i--
	}
	for i > 0 && (sql[i-1] == ' ' || sql[i-1] == '\t' || sql[i-1] == '\n' || sql[i-1] == '\r' || sql[i-1] == '\f') {
		i--
	}
	return i > 0 && sql[i-1] == '.'
}

// lookWord looks w up in names as PostgreSQL would read it as an
// identifier: cut to 63 bytes, ASCII letters lowered (in buf: the lookup
// allocates nothing); then, for a word with other bytes, lowered as Go
// lowers it (a single-byte encoding's letters).
func lookWord(buf *[63]byte, names map[string]string, w string) (string, bool) {
	if len(w) > len(buf) {
		cut := len(buf)
		for cut > 0 && !utf8.RuneStart(w[cut]) {
			cut--
		}
		w = w[:cut]
	}
	ascii := lowerASCII(buf[:len(w)], w)
	if t, found := names[string(buf[:len(w)])]; found { // (no copy made)
		return t, true
	}
	if !ascii {
		if t, found := names[strings.ToLower(w)]; found {
			return t, true
		}
	}
	return "", false
}

// lowerASCII copies s into dst (as long) with its ASCII letters lowered,
// as PostgreSQL lowers an unquoted identifier in UTF-8; it reports whether
// s is all ASCII.
func lowerASCII(dst []byte, s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 0x80:
			ascii = false
		}
		dst[i] = c
	}
	return ascii
}

// nameKey is names' key for a name as the catalog has it.
func nameKey(name string) string {
	b := make([]byte, len(name))
	lowerASCII(b, name)
	return string(b)
}

// oddName reports whether a statement may name n (as the catalog has it)
// otherwise than by a word mentionedTable reads: it has characters no
// unquoted identifier has (a space, punctuation, '"'). Such names are
// looked for as text.
func oddName(n string) bool {
	for i := 0; i < len(n); i++ {
		if c := n[i]; !isIdentChar(c) {
			return true
		}
	}
	return n == "" || !isIdentStart(n[0])
}

// shardsWord is mentionedTable's map for the shards' schema.
var shardsWord = map[string]string{metadata.ShardsSchema: metadata.ShardsSchema}

// readsOnly says whether a statement's first words are those of a read:
// SELECT, TABLE, VALUES, SHOW, EXPLAIN without ANALYZE, COPY ... TO, or
// WITH whose first words write nothing.
func readsOnly(w []string) bool {
	if len(w) == 0 {
		return false
	}
	switch strings.ToUpper(w[0]) {
	case "SELECT", "TABLE", "VALUES", "SHOW":
		return true
	case "EXPLAIN":
		return !slices.ContainsFunc(w, func(s string) bool { return strings.EqualFold(s, "ANALYZE") || strings.EqualFold(s, "ANALYSE") })
	case "COPY":
		return !slices.ContainsFunc(w, func(s string) bool { return strings.EqualFold(s, "FROM") })
	case "WITH":
		return len(w) < maxWords && !slices.ContainsFunc(w, func(s string) bool {
			switch strings.ToUpper(s) {
			case "INSERT", "UPDATE", "DELETE", "MERGE":
				return true
			}
			return false
		})
	}
	return false
}

// textArg: the built-ins that run a query, or read a table, given as text
// (classify's runsSQLText), and the position and name of that argument.
var textArg = map[string]struct {
	pos  int
	name string
}{
	"query_to_xml": {0, "query"}, "query_to_xmlschema": {0, "query"}, "query_to_xml_and_xmlschema": {0, "query"},
	"table_to_xml": {0, "tbl"}, "table_to_xmlschema": {0, "tbl"}, "table_to_xml_and_xmlschema": {0, "tbl"},
	"ts_stat": {0, "query"}, "ts_rewrite": {1, ""},
}

// sqlTextArgs refuses a call of such a built-in whose query or table is not
// a constant or a parameter naming no catalog table (names holds their
// bare names): one built at run time (a concatenation, chr(116), format),
// or a table by OID, may read a distributed table's empty copy on the
// default node, and the text shows no name to check. A constant is checked
// as the server reads it, escapes decoded (E'\x74'), a query's own calls of
// such built-ins too; with standard_conforming_strings off a backslash is
// refused, as pg_query reads strings with it on. A parameter's value is
// checked at Bind (sqlTextBound; adversary: query_to_xml($1) with $1 =
// 'select count(*) from t' counted 0), which SQL's PREPARE and EXECUTE do
// not pass through, so there a parameter is refused. It returns the
// parameters given as such arguments.
func sqlTextArgs(sql string, names map[string]string, scsOff bool) ([]textParam, error) {
	return sqlTextIn(sql, names, scsOff, 0)
}

// textParam is a parameter given to a built-in as a query or a table.
type textParam struct {
	num   int32
	table bool
}

func sqlTextIn(sql string, names map[string]string, scsOff bool, depth int) (params []textParam, refuse error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, nil // the worker says why
	}
	if depth > 8 {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "queries given as text nested more than 8 deep are not supported while the fleet has distributed or reference tables").
			WithHint("Query the tables directly.")
	}
	if scsOff && strings.IndexByte(sql, '\\') >= 0 {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "a query given as text with a backslash is not supported with standard_conforming_strings off while the fleet has distributed or reference tables").
			WithHint("Turn standard_conforming_strings on (the default).")
	}
	prepared := false
	for _, raw := range tree.Stmts {
		prepared = prepared || raw.Stmt.GetPrepareStmt() != nil
	}
	planner.Walk(tree, func(m proto.Message) {
		fc, ok := m.(*pg_query.FuncCall)
		if !ok || refuse != nil || len(fc.Funcname) == 0 {
			return
		}
		fn := fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()
		ta, ok := textArg[fn]
		if !ok || fn == "ts_rewrite" && len(fc.Args) != 2 {
			return
		}
		var arg *pg_query.Node
		for i, a := range fc.Args {
			if na := a.GetNamedArgExpr(); na != nil {
				if na.Name == ta.name {
					arg = na.Arg // query_to_xml(query => ...)
				}
			} else if i == ta.pos {
				arg = a
			}
		}
		if arg == nil {
			return // PostgreSQL's error
		}
		table := ta.name == "tbl"
		for tc := arg.GetTypeCast(); tc != nil; tc = arg.GetTypeCast() {
			if !sameValueCast(tc.TypeName, table) {
				// varchar(22), name, char: a cut value; oid, int: a
				// table by OID (adversary: both read the empty copy).
				refuse = pgerr.New(pgerr.FeatureNotSupported,
					"%s of a query or table cast to another type is not supported while the fleet has distributed or reference tables: the cast may change what it names", fn).
					WithHint("Give the query or table name as a string constant or parameter, cast to text or regclass at most.")
				return
			}
			arg = tc.Arg
		}
		if p := arg.GetParamRef(); p != nil && !prepared {
			params = append(params, textParam{p.Number, table})
			return
		}
		if c := arg.GetAConst(); c != nil && c.GetSval() != nil {
			refuse = textRefusal(fn, c.GetSval().GetSval(), table, names, scsOff, depth)
			return
		}
		refuse = pgerr.New(pgerr.FeatureNotSupported,
			"%s of a query or table that is not a string constant is not supported while the fleet has distributed or reference tables: it may read a table's empty copy on the default node", fn).
			WithHint("Give the query or table name as a string constant, or query the table directly.")
	})
	return params, refuse
}

// sameValueCast: a cast to t leaves a query's or table's text as it is
// (text, varchar without a length; regclass for a table, which reads it as
// a name or digits, as textRefusal checks it).
func sameValueCast(t *pg_query.TypeName, table bool) bool {
	if t == nil || len(t.Typmods) > 0 || len(t.ArrayBounds) > 0 || t.Setof || t.PctType {
		return false
	}
	n := len(t.Names)
	if n == 0 || n > 2 || n == 2 && t.Names[0].GetString_().GetSval() != "pg_catalog" {
		return false
	}
	switch t.Names[n-1].GetString_().GetSval() {
	case "text", "varchar":
		return true
	case "regclass":
		return table
	}
	return false
}

// textRefusal checks the value of a built-in's query or table argument
// (fn's): a query must name no catalog table and give none to such
// built-ins of its own; a table, be no OID.
func textRefusal(fn, v string, table bool, names map[string]string, scsOff bool, depth int) error {
	if t := mentionedTable(v, names); t != "" {
		return pgerr.New(pgerr.FeatureNotSupported,
			"%s over the distributed or reference table %s is not supported: it would read the table's empty copy on the default node", fn, t).
			WithHint("Query the table directly.")
	}
	if table {
		if d := strings.TrimSpace(v); d != "" && strings.Trim(d, "0123456789") == "" {
			return pgerr.New(pgerr.FeatureNotSupported, "%s of a table given by OID is not supported while the fleet has distributed or reference tables", fn).
				WithHint("Name the table.")
		}
		return nil
	}
	_, err := sqlTextIn(v, names, scsOff, depth+1)
	return err
}

// sqlTextBound refuses the Bind (body) of a statement (sql) with a built-in
// that runs SQL given as text (classify's hidden) when a parameter given to
// it as a query or table may read a catalog table: the query would read its
// empty copy on the default node. Only those parameters are read (each on
// its own: a NULL's length bytes beside a name hid it).
func (ss *session) sqlTextBound(sql string, body []byte) error {
	snap := ss.catalog()
	if !ss.routes || snap == nil || len(snap.Tables) == 0 {
		return nil
	}
	names := catalogWords(snap)
	params, err := sqlTextArgs(sql, names, ss.scsOff)
	if err != nil || len(params) == 0 {
		return err
	}
	_, rest, ok := wire.CBytes(body) // the portal's name
	if ok {
		_, rest, ok = wire.CBytes(rest) // the statement's
	}
	b, err := executor.DecodeBind(rest, nil)
	if !ok || err != nil {
		return nil // the worker says why
	}
	for _, p := range params {
		i := int(p.num) - 1
		if i < 0 || i >= len(b.Values) || b.Values[i] == nil {
			continue
		}
		if p.table && b.Format(i) == 1 {
			return pgerr.New(pgerr.FeatureNotSupported, "a table given by OID to a built-in is not supported while the fleet has distributed or reference tables").
				WithHint("Name the table in text.")
		}
		if err := textRefusal("a query or table given in a parameter", string(b.Values[i]), p.table, names, ss.scsOff, 0); err != nil {
			return err
		}
	}
	return nil
}

// refuseHidden refuses a statement that makes (or runs) a view, function,
// procedure, rule, trigger or DO block naming a distributed or reference
// table.
func (ss *session) refuseHidden(sql string) error {
	if !ss.routes {
		return nil
	}
	snap := ss.catalog() // (a table the block dropped and made again is plain)
	if snap == nil || len(snap.Tables) == 0 {
		return nil
	}
	lx := lexer{s: sql}
	for {
		n, start, end, more := lx.statement()
		if n > 0 {
			kind := hiddenKind(lx.words[:n])
			all, sqlText := lx.sawAllTables, lx.sawSQLText
			if kind == "" && lx.sawSQLText {
				kind = "a query given as text (query_to_xml and the like)"
			}
			// Shards are pgfleet's: a body, or a statement other than a
			// read, that names their schema could drop, rename or change
			// them under the catalog (on the default node only).
			if (kind != "" || lx.sawShards && !readsOnly(lx.words[:n])) && mentionedTable(sql[start:end], shardsWord) != "" {
				return pgerr.New(pgerr.FeatureNotSupported, "statements that change schema %s are not supported: it holds the shards of distributed and reference tables", metadata.ShardsSchema).
					WithHint("Change the distributed or reference table itself (its shards follow), or read the shards with SELECT.")
			}
			lx.sawSessionFunc, lx.sawUserCall, lx.sawSQLText, lx.sawAllTables, lx.sawShards = "", false, false, false, false
			if all {
				return pgerr.New(pgerr.FeatureNotSupported,
					"schema_to_xml and database_to_xml are not supported: they would read the empty copies of the distributed and reference tables on the default node").
					WithHint("Use table_to_xml or query_to_xml on the tables you need.")
			}
			if kind != "" {
				if t := mentionedTable(sql[start:end], catalogWords(snap)); t != "" {
					return pgerr.New(pgerr.FeatureNotSupported,
						"%s over the distributed or reference table %s is not supported: it would read the table's empty copy on the default node", kind, t).
						WithHint("Query the table directly; pgfleet does not plan through views, functions, rules, triggers or DO blocks yet.")
				}
			}
			if sqlText {
				if _, err := sqlTextArgs(sql[start:end], catalogWords(snap), ss.scsOff); err != nil {
					return err
				}
			}
		}
		if !more {
			return nil
		}
	}
}

// refuseDependents refuses to distribute (or make a reference table of) a
// table that views, materialized views, rules or functions on the default
// node already use: after the move they would read its empty local copy.
// pgfleet's own functions (the guard trigger's) are not the user's.
func refuseDependents(ctx context.Context, home *pgx.Conn, table string) error {
	var views, policies *string
	err := home.QueryRow(ctx, `
SELECT (SELECT string_agg(DISTINCT r.ev_class::regclass::text, ', ')
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
           AND d.refobjid = t.oid AND r.ev_class <> t.oid),
       (SELECT string_agg(DISTINCT pol.polname || ' on ' || pol.polrelid::regclass::text, ', ')
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_policy pol ON pol.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_policy'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
           AND d.refobjid = t.oid AND pol.polrelid <> t.oid)
  FROM pg_catalog.pg_class t WHERE t.oid = pg_catalog.to_regclass($1)`, table).Scan(&views, &policies)
	if err == pgx.ErrNoRows {
		return nil // the function itself reports a missing table
	}
	if err != nil {
		return err
	}
	if views != nil {
		return pgerr.New(pgerr.FeatureNotSupported, "cannot distribute %s: the views %s use it, and would read its empty local copy", table, *views).
			WithHint("Drop the views first and query the table directly; pgfleet does not plan through views yet.")
	}
	if policies != nil {
		return pgerr.New(pgerr.FeatureNotSupported, "cannot distribute %s: the row-level security policies %s use it, and would read its empty local copy", table, *policies).
			WithHint("Drop the policies first; pgfleet does not plan through policies yet.")
	}
	if names, err := namingFunctions(ctx, home, table); err != nil {
		return err
	} else if len(names) > 0 {
		return pgerr.New(pgerr.FeatureNotSupported, "cannot distribute %s: the functions %s name it, and would read its empty local copy", table, strings.Join(names, ", ")).
			WithHint("Drop the functions first; pgfleet does not plan through functions yet.")
	}
	return nil
}

// namingFunctions lists the user's functions (any schema but pgfleet's,
// information_schema included) that may read table: those PostgreSQL
// records as depending on it (BEGIN ATOMIC bodies), and those whose body
// reads it, or may: an SQL or PL/pgSQL body is parsed, every one (a string
// may spell the name with escapes, or in parts: E'g\141dgets'), and names
// it when a statement in it reads a relation of the table's name or a
// string in it has the name as a word (it may be run as SQL); any other
// body, or one pg_query cannot parse, names it whenever it has the name
// as a word. (A body that only has
// a parameter, variable or column of the name, or the name in a comment
// or a RAISE message, does not: such functions kept tables from being
// distributed.)
func namingFunctions(ctx context.Context, home *pgx.Conn, table string) ([]string, error) {
	rows, err := home.Query(ctx, `
SELECT p.oid::regprocedure::text, l.lanname::text, p.prosrc, t.relname::text,
       EXISTS (SELECT FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_proc'::regclass
               AND d.objid = p.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = t.oid)
       OR p.prosrc ~* 'U&',
       CASE WHEN l.lanname = 'plpgsql' AND p.prokind IN ('f', 'p') THEN pg_catalog.pg_get_functiondef(p.oid) END
  FROM pg_catalog.pg_class t, pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE t.oid = pg_catalog.to_regclass($1)
   AND p.oid >= 16384
   AND p.pronamespace NOT IN (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgfleet')
   AND (l.lanname IN ('sql', 'plpgsql')
        OR pg_catalog.strpos(pg_catalog.lower(p.prosrc), pg_catalog.lower(t.relname)) > 0 OR p.prosrc ~* 'U&'
        OR EXISTS (SELECT FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_proc'::regclass
                   AND d.objid = p.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = t.oid))
 ORDER BY 1`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name, lang, src, rel string
		var always bool
		var def *string
		if err := rows.Scan(&name, &lang, &src, &rel, &always, &def); err != nil {
			return nil, err
		}
		if always || bodyReads(lang, src, def, rel) {
			out = append(out, name)
		}
	}
	return out, rows.Err()
}

// bodyReads reports whether a function body of language lang (its
// source, and for PL/pgSQL its whole definition) may read relation rel.
func bodyReads(lang, src string, def *string, rel string) bool {
	switch {
	case lang != "sql" && lang != "plpgsql":
		return nameWord(rel).MatchString(src)
	case lang == "sql":
		return sqlReads(src, rel, false)
	case lang == "plpgsql" && def != nil:
		js, err := pg_query.ParsePlPgSqlToJSON(*def)
		var tree any
		if err != nil || json.Unmarshal([]byte(js), &tree) != nil {
			return nameWord(rel).MatchString(src)
		}
		return plpgsqlReads(tree, rel)
	}
	return nameWord(rel).MatchString(src)
}

// plpgsqlReads walks a PL/pgSQL parse tree (pg_query's JSON) for the SQL
// of its statements and expressions.
func plpgsqlReads(n any, rel string) bool {
	switch v := n.(type) {
	case []any:
		for _, x := range v {
			if plpgsqlReads(x, rel) {
				return true
			}
		}
	case map[string]any:
		if e, ok := v["PLpgSQL_expr"].(map[string]any); ok {
			q, _ := e["query"].(string)
			mode, _ := e["parseMode"].(float64)
			switch mode {
			case 0: // a whole statement
				return sqlReads(q, rel, false)
			case 2: // an expression
				return sqlReads(q, rel, true)
			default: // an assignment: target := expression
				_, rhs, ok := strings.Cut(q, ":=")
				return !ok || sqlReads(rhs, rel, true)
			}
		}
		for _, x := range v {
			if plpgsqlReads(x, rel) {
				return true
			}
		}
	}
	return false
}

// nameWord matches rel as a word: not next to a letter, digit, _ or $
// (whatever rel's own first and last characters are: a table named
// "items!" has no word boundary where a regular expression's \M wants one).
func nameWord(rel string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)(^|[^\pL\pN_$])` + regexp.QuoteMeta(rel) + `($|[^\pL\pN_$])`)
}

// sqlReads reports whether SQL text (an expression when expr) reads
// relation rel, or may: a statement in it reads a relation named rel, or
// a string in it has rel as a word; when it does not parse, it has rel as
// a word (one body pg_query cannot read must not keep every table from
// being distributed).
func sqlReads(sql, rel string, expr bool) bool {
	word := nameWord(rel)
	text := sql
	if expr {
		text = "SELECT " + sql
	}
	tree, err := pg_query.Parse(text)
	if err != nil {
		return word.MatchString(sql)
	}
	found := false
	for _, st := range tree.Stmts {
		planner.Walk(st.Stmt, func(m proto.Message) {
			switch v := m.(type) {
			case *pg_query.RangeVar:
				found = found || strings.EqualFold(v.Relname, rel)
			case *pg_query.A_Const: // a string, not a name
				found = found || v.GetSval() != nil && word.MatchString(v.GetSval().Sval)
			}
		})
	}
	return found
}

// unicodeEscaped decodes the U& quoted name or string whose opening quote
// is at sql[q], with the escape character its UESCAPE clause gives (a
// backslash without one); ok is false for a malformed escape or clause.
func unicodeEscaped(sql string, q int) (decoded string, next int, ok bool) {
	quote := sql[q]
	var raw strings.Builder
	i := q + 1
	for ; i < len(sql); i++ {
		if sql[i] == quote {
			if i+1 < len(sql) && sql[i+1] == quote {
				raw.WriteByte(quote)
				i++
				continue
			}
			break
		}
		raw.WriteByte(sql[i])
	}
	next = i + 1
	esc := byte('\\')
	if j := skipBlanks(sql, min(next, len(sql))); j+7 <= len(sql) && strings.EqualFold(sql[j:j+7], "UESCAPE") &&
		(j+7 == len(sql) || !isIdentChar(sql[j+7])) {
		// UESCAPE 'c': c is one character, not a hex digit, +, a quote
		// or white space (PostgreSQL's check).
		k := skipBlanks(sql, j+7)
		if k+3 > len(sql) || sql[k] != '\'' || sql[k+2] != '\'' {
			return "", next, false
		}
		c := sql[k+1]
		if strings.IndexByte("0123456789abcdefABCDEF+'\" \t\r\n\f", c) >= 0 || c >= 0x80 {
			return "", next, false
		}
		esc, next = c, k+3
	}
	r := raw.String()
	var out strings.Builder
	for k := 0; k < len(r); k++ {
		if r[k] != esc {
			out.WriteByte(r[k])
			continue
		}
		if k+1 < len(r) && r[k+1] == esc {
			out.WriteByte(esc)
			k++
			continue
		}
		digits := 4
		if k+1 < len(r) && r[k+1] == '+' {
			digits = 6
			k++
		}
		if k+digits >= len(r) {
			return "", next, false
		}
		v, err := strconv.ParseUint(r[k+1:k+1+digits], 16, 32)
		if err != nil {
			return "", next, false
		}
		out.WriteRune(rune(v))
		k += digits
	}
	return out.String(), next, true
}
