package coordinator

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// User code can run where a statement's text shows no call of it: a
// trigger, rule, column default, check constraint, policy or index
// expression of a table the statement names (or of one a foreign key's
// action or a partition reaches from it); a domain's CHECK, a cast's or an
// operator's function, or an operator class's support function, for values
// of a type the statement names or a column holds; a view over any of
// these; a user function shadowing a built-in's name or called in
// attribute notation (t.f); an event trigger. Such code may change
// the server connection's session state (set_config, advisory locks,
// holdable cursors), so statements naming such a table, view, type,
// function or operator are verified like user code (the session-state
// snapshot, session.go). What counts is read from the default node's
// catalog (pg_depend and the catalogs that own triggers, defaults,
// constraints, policies, rules and indexes), once per catalog version and
// DDL epoch of this coordinator; an object made through another
// coordinator, or on the node directly, is seen after this one's next DDL
// or catalog change. Functions of extensions are taken as built in, as
// are pgfleet's own, except as trigger functions. Views calling set_config, an advisory lock function,
// setseed, nextval or setval count too; pg_settings, whose UPDATE rule
// calls set_config, is classify's (a built-in, read by no such query).

// viewSet is what runs user code where the text shows no call: names
// (relations, types, functions; lower-case bare names) whose mention
// makes a statement verified, and operator symbols (operators of built-in
// types only: one with a user type reaches the type). all is set when the
// catalog could not be read or a cast between built-in types runs a user
// function: every statement is then verified. ddl is set when an event
// trigger is enabled: the statements that fire one are verified
// (firesEventTriggers).
type viewSet struct {
	stamp [3]int64
	names map[string]string
	ops   []string
	odd   []string          // names no word can spell (oddName), looked for as text
	calls map[string]string // functions, found only before "(" (unseen's)
	all   bool
	ddl   bool
	// unseen: what reaches user code changing session state the state
	// read cannot see (unseenIn), as a viewSet of its own; nil when no
	// user function does. A statement it names pins its session.
	unseen *viewSet
	// advisory: what reaches user code taking advisory locks (advisorySet),
	// as a viewSet of its own; nil when no user code does.
	advisory *viewSet
	// customs: the dotted names in the bodies of user functions that may
	// change session state (set_config('app.tenant', ...), SET
	// app.tenant, a format string): custom settings the state read reads
	// by name around a statement that may run them (stateNamesOf), since
	// placeholders are not in pg_settings.
	customs []string
}

// viewCheck is a statement's verdict for one viewSet.
type viewCheck struct {
	set      *viewSet
	verify   bool
	pin      bool
	advisory bool
}

// stateViewsSQL finds the user code above. bad is the closure of user
// functions over "may run the code of": what depends on an object
// (pg_depend, objects made by the user only, oid >= 16384), a table its
// triggers, defaults, constraints, policies, rules and indexes, a type its
// domain constraints, an operator family its members, an operator class
// its family, a user type its operator classes, operators and casts, a
// referenced table its referencing ones (ON DELETE CASCADE fires their
// triggers), a parent its partitions and children. A trigger calling an
// extension's function is bad too: such functions run SQL of their own
// (refint's check_foreign_key deletes from the tables its arguments name;
// autoinc calls nextval), which the closure cannot follow. Rows are a kind and a
// name: n for a name, o for an operator, and a (a cast between built-in
// types, or a default operator class of a built-in type: DISTINCT, GROUP
// BY, ORDER BY use it unwritten) or d (an enabled event trigger), both
// with no name, which verify everything. $1: the user functions left out
// of the seeds; $2: what a rule's text must name to be one (closure.rules);
// $3: functions that are seeds by name, built-ins included (closure.builtins),
// and so are the defaults, checks, index expressions and policies whose
// stored expression calls one (found by OID in the node tree's text: a
// deparser would lock the table, and a transaction altering it made the
// read wait), and operators and casts over one (a built-in is pinned:
// pg_depend records no dependency on it);
// $4: whether triggers calling an extension's function are seeds.
const stateViewsSQL = `WITH RECURSIVE ufn(oid) AS (
  SELECT p.oid FROM pg_catalog.pg_proc p
   WHERE p.oid >= 16384 AND p.pronamespace NOT IN (SELECT n.oid FROM pg_catalog.pg_namespace n
                                 WHERE n.nspname IN ('pgfleet', 'pgfleet_txn'))
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend e
                      WHERE e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND e.objid = p.oid AND e.deptype = 'e')),
edge(ccls, coid, pcls, poid) AS (
  SELECT d.classid, d.objid, d.refclassid, d.refobjid FROM pg_catalog.pg_depend d WHERE d.objid >= 16384 AND d.deptype NOT IN ('e', 'x')
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, t.tgrelid, 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_trigger t WHERE t.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, a.adrelid, 'pg_catalog.pg_attrdef'::pg_catalog.regclass, a.oid FROM pg_catalog.pg_attrdef a WHERE a.oid >= 16384
  UNION ALL SELECT CASE WHEN c.conrelid <> 0 THEN 'pg_catalog.pg_class'::pg_catalog.regclass ELSE 'pg_catalog.pg_type'::pg_catalog.regclass END,
                   CASE WHEN c.conrelid <> 0 THEN c.conrelid ELSE c.contypid END, 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid
              FROM pg_catalog.pg_constraint c WHERE c.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, p.polrelid, 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_policy p WHERE p.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, r.ev_class, 'pg_catalog.pg_rewrite'::pg_catalog.regclass, r.oid FROM pg_catalog.pg_rewrite r WHERE r.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, i.indrelid, 'pg_catalog.pg_class'::pg_catalog.regclass, i.indexrelid FROM pg_catalog.pg_index i WHERE i.indexrelid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, x.stxrelid, 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, x.oid FROM pg_catalog.pg_statistic_ext x WHERE x.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, o.amopfamily, 'pg_catalog.pg_amop'::pg_catalog.regclass, o.oid FROM pg_catalog.pg_amop o WHERE o.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, o.amprocfamily, 'pg_catalog.pg_amproc'::pg_catalog.regclass, o.oid FROM pg_catalog.pg_amproc o WHERE o.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass, c.oid, 'pg_catalog.pg_opfamily'::pg_catalog.regclass, c.opcfamily FROM pg_catalog.pg_opclass c WHERE c.oid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, c.opcintype, 'pg_catalog.pg_opclass'::pg_catalog.regclass, c.oid FROM pg_catalog.pg_opclass c WHERE c.oid >= 16384 AND c.opcintype >= 16384
  UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, x.t, 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid
              FROM pg_catalog.pg_operator o, LATERAL (VALUES (o.oprleft), (o.oprright), (o.oprresult)) x(t) WHERE o.oid >= 16384 AND x.t >= 16384
  UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, x.t, 'pg_catalog.pg_cast'::pg_catalog.regclass, k.oid
              FROM pg_catalog.pg_cast k, LATERAL (VALUES (k.castsource), (k.casttarget)) x(t) WHERE k.oid >= 16384 AND x.t >= 16384
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.confrelid, 'pg_catalog.pg_class'::pg_catalog.regclass, c.conrelid
              FROM pg_catalog.pg_constraint c WHERE c.oid >= 16384 AND c.contype = 'f'
  UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, h.inhparent, 'pg_catalog.pg_class'::pg_catalog.regclass, h.inhrelid FROM pg_catalog.pg_inherits h WHERE h.inhrelid >= 16384
  UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, 'pg_catalog.pg_class'::pg_catalog.regclass, t.typrelid
              FROM pg_catalog.pg_type t WHERE t.oid >= 16384 AND t.typrelid <> 0),
fre(re) AS (
  -- (The stored expression trees name functions by OID; read as text, no
  -- relation is opened or locked, as pg_get_expr would.)
  SELECT '(funcid|aggfnoid|winfnoid) (' || COALESCE(pg_catalog.string_agg(p.oid::pg_catalog.text, '|'), '0') || ')\M'
    FROM pg_catalog.pg_proc p WHERE p.proname = ANY ($3::pg_catalog.text[])),
bad(cls, oid) AS (
  SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, ufn.oid FROM ufn WHERE ufn.oid <> ALL ($1::pg_catalog.oid[])
  UNION
  SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, r.oid FROM pg_catalog.pg_rewrite r
   WHERE r.oid >= 16384 AND pg_catalog.pg_get_ruledef(r.oid) ~* $2
  UNION
  SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_proc p WHERE p.proname = ANY ($3::pg_catalog.text[])
  UNION
  SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_proc p, fre
   WHERE p.oid >= 16384 AND p.prosqlbody::pg_catalog.text ~ fre.re
  UNION
  SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, a.oid FROM pg_catalog.pg_attrdef a, fre
   WHERE a.oid >= 16384 AND a.adbin::pg_catalog.text ~ fre.re
  UNION
  SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid FROM pg_catalog.pg_constraint c, fre
   WHERE c.oid >= 16384 AND c.conbin::pg_catalog.text ~ fre.re
  UNION
  SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, i.indexrelid FROM pg_catalog.pg_index i, fre
   WHERE i.indexrelid >= 16384 AND (i.indexprs::pg_catalog.text ~ fre.re OR i.indpred::pg_catalog.text ~ fre.re)
  UNION
  SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_policy p, fre
   WHERE p.oid >= 16384 AND (p.polqual::pg_catalog.text ~ fre.re OR p.polwithcheck::pg_catalog.text ~ fre.re)
  UNION
  SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode
   WHERE o.oid >= 16384 AND p.proname = ANY ($3::pg_catalog.text[])
  UNION
  SELECT 'pg_catalog.pg_cast'::pg_catalog.regclass, k.oid FROM pg_catalog.pg_cast k JOIN pg_catalog.pg_proc p ON p.oid = k.castfunc
   WHERE k.oid >= 16384 AND p.proname = ANY ($3::pg_catalog.text[])
  UNION
  SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_trigger t
   WHERE $4 AND t.oid >= 16384 AND EXISTS (SELECT FROM pg_catalog.pg_depend e WHERE e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                                       AND e.objid = t.tgfoid AND e.deptype = 'e')
  UNION
  SELECT e.ccls, e.coid FROM edge e JOIN bad b ON b.cls = e.pcls AND b.oid = e.poid)
SELECT 'n', c.relname::text FROM bad JOIN pg_catalog.pg_class c ON bad.cls = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = bad.oid
UNION SELECT 'n', t.typname::text FROM bad JOIN pg_catalog.pg_type t ON bad.cls = 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid = bad.oid
UNION SELECT 'f', p.proname::text FROM ufn JOIN pg_catalog.pg_proc p ON p.oid = ufn.oid
UNION SELECT 'g', p.proname::text FROM bad JOIN pg_catalog.pg_proc p ON bad.cls = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = bad.oid
       WHERE p.oid >= 16384 OR p.proname <> 'set_config'
UNION SELECT 'o', o.oprname::text FROM bad JOIN pg_catalog.pg_operator o ON bad.cls = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = bad.oid
       WHERE o.oprleft < 16384 AND o.oprright < 16384 AND o.oprresult < 16384
UNION SELECT 'a', '' FROM bad JOIN pg_catalog.pg_opclass c ON bad.cls = 'pg_catalog.pg_opclass'::pg_catalog.regclass AND c.oid = bad.oid
       WHERE c.opcdefault AND c.opcintype < 16384
UNION SELECT 'a', '' FROM bad JOIN pg_catalog.pg_cast k ON bad.cls = 'pg_catalog.pg_cast'::pg_catalog.regclass AND k.oid = bad.oid
       WHERE k.castsource < 16384 AND k.casttarget < 16384
UNION SELECT 'd', '' FROM bad JOIN pg_catalog.pg_event_trigger e ON bad.cls = 'pg_catalog.pg_event_trigger'::pg_catalog.regclass AND e.oid = bad.oid
       WHERE e.evtenabled <> 'D'`

// closure is what a reading of stateViewsSQL seeds with besides user
// functions: the calls that make a rule (a view's too) a seed ($2), the
// functions that are seeds by name ($3), whether triggers calling an
// extension's function are ($4); unseen: the reading is unseenSet's, whose
// calls keep the closure's functions ('g' rows).
type closure struct {
	rules    string
	builtins []string
	unseen   bool
}

// stateClosure is the viewSet's: user code that may change session state;
// unseenClosure unseenSet's: only what the state read cannot see.
var stateClosure, unseenClosure = func() (all, unseen closure) {
	all.rules = `(set_config|advisory_lock|setseed|dblink_connect|lo_open|nextval|setval|pg_settings)`
	// (set_config is unseen's too: a view's or a SQL-standard body's
	// names are not read, being stored as trees (adversary round 14); its
	// own callers are not, through the 'g' rows, whose text is read.)
	unseen.rules = `(setseed|set_config|dblink_connect|backup_start|start_backup|replication_origin_session_setup|replication_slot)`
	for n := range sessionFuncs {
		all.builtins = append(all.builtins, strings.ToLower(n))
		if unseenFuncs[n] || n == "SET_CONFIG" {
			unseen.builtins = append(unseen.builtins, strings.ToLower(n))
		}
	}
	unseen.unseen = true
	return all, unseen
}()

// advisoryClosure is advisorySet's: user code that takes or releases
// advisory locks.
var advisoryClosure = closure{
	rules: `advisory_`,
	builtins: []string{"pg_advisory_lock", "pg_advisory_lock_shared", "pg_advisory_unlock", "pg_advisory_unlock_shared",
		"pg_advisory_unlock_all", "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_lock",
		"pg_try_advisory_lock_shared", "pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared"},
	unseen: true,
}

// userFuncsSQL lists the user functions of stateViewsSQL's ufn with what
// harmlessBody reads: language and body (a SQL-standard body, BEGIN ATOMIC,
// is not in prosrc: never harmless; what it calls is in pg_depend, and
// stateViewsSQL reads its tree for built-ins by OID: adversary).
const userFuncsSQL = `SELECT p.oid, p.proname::text, l.lanname::text, p.prosrc, p.prosqlbody IS NOT NULL,
       COALESCE(p.proconfig::pg_catalog.text, '')
  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE p.oid >= 16384 AND p.pronamespace NOT IN (SELECT n.oid FROM pg_catalog.pg_namespace n
                               WHERE n.nspname IN ('pgfleet', 'pgfleet_txn'))
   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend e
                    WHERE e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND e.objid = p.oid AND e.deptype = 'e')`

// userFunc is a row of userFuncsSQL.
type userFunc struct {
	oid                      uint32
	name, lang, body, config string
	atomic                   bool
}

// harmless reports whether f's body cannot change session state
// (harmlessBody). A SQL function's SELECT ... INTO makes a table (a
// temporary one under a search_path of pg_temp; adversary round 3), and a
// function's own settings naming pg_temp make its tables temporary.
func (f *userFunc) harmless() bool {
	if f.atomic || f.unseen() || f.lang != "plpgsql" && f.lang != "sql" || strings.Contains(strings.ToLower(f.config), "pg_temp") {
		return false
	}
	if f.lang == "sql" && !eachWord(f.body, func(w string) bool { return !strings.EqualFold(w, "into") }) {
		return false
	}
	return harmlessBody(f.body)
}

// unseen reports whether f changes session state the state read (session.go
// stateHead) cannot see: its body names one of unseenFuncs, or LOADs a
// module (unseenIn), or its own settings define a placeholder (adv.x: left
// defined, as an empty string, after the call).
func (f *userFunc) unseen() bool {
	if unseenIn(f.body) {
		return true
	}
	for _, kv := range strings.Split(strings.Trim(f.config, "{}"), ",") {
		// (plpgsql.variable_conflict and the like: PL/pgSQL's own
		// settings, defined once it loads, not placeholders.)
		if name, _, ok := strings.Cut(strings.Trim(kv, `"`), "="); ok && (strings.Contains(name, ".") &&
			!strings.HasPrefix(strings.ToLower(name), "plpgsql.") || strings.EqualFold(name, "seed")) {
			return true // (SET seed = 0.5: the seed stays when the setting is restored; adversary)
		}
	}
	return false
}

// unseenFuncs are the session functions (classify's sessionFuncs) whose
// state the state read cannot see: random()'s seed, a backup in progress,
// a replication origin or temporary slot, dblink's named connections.
// User code naming one pins the session that runs it.
var unseenFuncs = map[string]bool{"SETSEED": true, "PG_BACKUP_START": true, "PG_START_BACKUP": true,
	"PG_REPLICATION_ORIGIN_SESSION_SETUP": true, "PG_CREATE_PHYSICAL_REPLICATION_SLOT": true, "PG_CREATE_LOGICAL_REPLICATION_SLOT": true,
	"PG_COPY_PHYSICAL_REPLICATION_SLOT": true, "PG_COPY_LOGICAL_REPLICATION_SLOT": true, "DBLINK_CONNECT": true, "DBLINK_CONNECT_U": true,
}

// unseenIn reports whether code (a function's body, a DO block, SQL given
// to a built-in as text), strings and comments included, names one of
// unseenFuncs, LOADs a module (LOAD before a string), or spells one in a
// U& name or string (decoded here; one that cannot be is taken to), or
// sets a custom setting by a name built at run time (runTimeName). Names
// of these functions built at run time by dynamic SQL ('set' || 'seed')
// are not seen.
func unseenIn(code string) bool {
	var buf [40]byte
	found := runTimeName(code) || !eachWord(code, func(w string) bool {
		if len(w) < 7 || len(w) > len(buf) {
			return true
		}
		return !unseenFuncs[string(upperInto(buf[:], w))]
	})
	for i := 0; !found && i+2 <= len(code); i++ {
		switch {
		case code[i] == '&' && i > 0 && (code[i-1] == 'u' || code[i-1] == 'U') && (code[i+1] == '"' || code[i+1] == '\''):
			// U&"set\0073eed": read as decoded (adversary); one that
			// cannot be decoded counts.
			d, _, ok := unicodeEscaped(code, i+1)
			found = !ok || unseenIn(d)
		case i+4 <= len(code) && (i == 0 || !isIdentChar(code[i-1])) && (i+4 == len(code) || !isIdentChar(code[i+4])):
			switch w := code[i : i+4]; {
			case strings.EqualFold(w, "load"):
				// LOAD 'x', LOAD E'x', 'LOAD ''x''' in dynamic SQL (blanks
				// between: 'load' the value is not one; adversary).
				j := skipBlanks(code, i+4)
				if j < len(code) && (code[j] == 'e' || code[j] == 'E') {
					j++
				}
				found = j > i+4 && j < len(code) && (code[j] == '\'' || code[j] == '$')
			case strings.EqualFold(w, "seed"):
				found = seedSetting(code, i)
			}
		}
	}
	return found
}

// runTimeName reports whether code may set a custom setting whose name
// the state read cannot know (dynamicNames).
func runTimeName(code string) bool {
	_, unknown := dynamicNames(code, 0)
	return unknown
}

// dynamicNames reads code (a function's body, a DO block) for custom
// settings it may set whose names its text does not spell whole: the
// names dynamic SQL builds from string literals (EXECUTE 'SET app' ||
// '.x = 1'), and unknown when a name may exist only at run time. The
// state read reads custom settings by name (placeholders are not in
// pg_settings), so code with unknown names pins its session: the client
// would lose the value at its next statement, and the next client find
// the name defined (adversary rounds 12 and 14). Unknown:
//   - set_config whose first argument is not one whole string literal
//     (a variable, 'app.' || x, a cast then ||, a string continued on the
//     next line), under any spelling ("set_config", pg_catalog.);
//   - dynamic SQL (PL/pgSQL's EXECUTE, a built-in that runs SQL text)
//     whose text is not made of string literals, quote_ident,
//     quote_literal, quote_nullable and format with a literal template
//     without %s (a variable could hold any statement: EXECUTE q, EXECUTE
//     (SELECT q FROM cmds)); or whose text, so made, has a SET or RESET
//     statement naming a piece it does not spell (SET quote_ident(n));
//   - a SET or RESET of a U& name (no read spells it);
//   - a DO block, at any depth, whose body is so (read as code however
//     quoted), or whose body is escaped or is a piece (DO || quote_literal(q));
//   - CREATE FUNCTION or PROCEDURE outside a DO block (its body, a string,
//     may run in the same call, before the catalog is read again).
//
// UPDATE's and ALTER's SET are not statements of their own and do not
// count (EXECUTE 'UPDATE ' || quote_ident(t) || ' SET ...').
func dynamicNames(code string, depth int) (names []string, unknown bool) {
	if depth > 4 {
		return nil, true
	}
	// A single-quoted string is data unless it runs: as EXECUTE's text,
	// read through sqlShape, or as a DO block's body (DO 'BEGIN ...').
	doBody := depth == 0 && oneOf(firstWord(code), "DO")
	for i := 0; i < len(code); {
		c := code[i]
		if e := commentEnd(code, i); e > i {
			i = e
			continue
		}
		var w string
		switch {
		case c == '\'' && !doBody:
			end := skipString(code, i, i > 0 && (code[i-1] == 'E' || code[i-1] == 'e'))
			if end < 0 {
				return names, true
			}
			i = end
			continue
		case c == '"':
			// A quoted name: "set_config"(...) is the function.
			k := strings.IndexByte(code[i+1:], '"')
			if k < 0 {
				return names, false
			}
			w = code[i+1 : i+1+k]
			if i > 0 && code[i-1] == '&' {
				// U&"set\005fconfig"(n, ...): a function no read spells
				// (adversary round 16).
				if e := skipBlanks(code, i+k+2); e < len(code) && code[e] == '(' {
					return names, true
				}
			}
			i += k + 2
		case isIdentStart(c) && (i == 0 || !isIdentChar(code[i-1])):
			j := i
			for j < len(code) && isIdentChar(code[j]) {
				j++
			}
			w = code[i:j]
			i = j
		default:
			i++
			continue
		}
		switch {
		case strings.EqualFold(w, "set_config"):
			if k := skipBlanks(code, i); k < len(code) && code[k] == '(' && !wholeLiteralArg(code, k+1) {
				return names, true
			}
		case strings.EqualFold(w, "set") || strings.EqualFold(w, "reset"):
			k := skipBlanks(code, i)
			if n := firstWord(code[k:]); oneOf(n, "LOCAL", "SESSION") {
				k = skipBlanks(code, k+len(n))
			}
			if k+2 < len(code) && (code[k] == 'u' || code[k] == 'U') && code[k+1] == '&' {
				return names, true // (SET U&"app.t\0065nant": no read spells it)
			}
		case strings.EqualFold(w, "do"):
			// A DO block's body runs, however quoted, at any depth
			// (adversary round 15: DO 'BEGIN PERFORM set_config(...)'
			// in a function, in EXECUTE's text, or DO || quote_literal(q)).
			k := skipBlanks(code, i)
			if lang := firstWord(code[k:]); strings.EqualFold(lang, "language") {
				k = skipBlanks(code, k+len(lang))
				k = skipBlanks(code, k+len(firstWord(code[k:])))
			}
			if k >= len(code) {
				continue
			}
			switch c := code[k]; {
			case c == '\'':
				body, end, ok := stringLiteral(code, k)
				if !ok {
					return names, true
				}
				more, unknown := dynamicNames(body, depth+1)
				names = append(names, more...)
				if unknown {
					return names, true
				}
				i = end
			case strings.IndexByte(shapeIdent+shapeLiteral, c) >= 0, // (a body a variable gave)
				strings.IndexByte("EeUu", c) >= 0 && k+1 < len(code) && (code[k+1] == '\'' || code[k+1] == '&'): // (E'...', U&'...')
				return names, true
			}
		case strings.EqualFold(w, "execute"):
			k := skipBlanks(code, i)
			if k+8 <= len(code) && (strings.EqualFold(code[k:k+8], "function") || k+9 <= len(code) && strings.EqualFold(code[k:k+9], "procedure")) {
				continue // (CREATE TRIGGER ... EXECUTE FUNCTION f())
			}
			shape, ok := sqlShape(code, k)
			if !ok {
				return names, true
			}
			if names, unknown = shapeNames(shape, names, depth); unknown {
				return names, true
			}
		case strings.EqualFold(w, "create") && !doBody:
			// A function user code makes may run before the coordinator
			// reads the catalog again, its body a string read as data
			// here (adversary round 16: CREATE FUNCTION g ... AS 'SELECT
			// set_config(m, ...)' then g(n) in one call). (A DO block's
			// strings are read as code.)
			k := skipBlanks(code, i)
			for _, m := range []string{"OR", "REPLACE"} {
				if oneOf(firstWord(code[k:]), m) {
					k = skipBlanks(code, k+len(m))
				}
			}
			if oneOf(firstWord(code[k:]), "FUNCTION", "PROCEDURE") {
				return names, true
			}
		default:
			if arg, ok := sqlTextArg[strings.ToUpper(w)]; ok && len(w) < 40 {
				k := skipBlanks(code, i)
				if k >= len(code) || code[k] != '(' {
					continue
				}
				if k = argAt(code, k, arg); k < 0 {
					continue
				}
				shape, ok := sqlShape(code, k)
				if !ok {
					return names, true
				}
				if names, unknown = shapeNames(shape, names, depth); unknown {
					return names, true
				}
			}
		}
	}
	return names, false
}

// sqlTextArg: the built-ins that run SQL text, by the position of that
// argument (classify's runsSQLText also marks those that read tables
// named otherwise).
var sqlTextArg = map[string]int{"QUERY_TO_XML": 0, "QUERY_TO_XMLSCHEMA": 0, "QUERY_TO_XML_AND_XMLSCHEMA": 0,
	"TS_STAT": 0, "TS_REWRITE": 1}

// argAt returns where the n-th argument (from 0) of the call whose '(' is
// at code[open] starts, or -1 if it has fewer.
func argAt(code string, open, n int) int {
	if n == 0 {
		return open + 1
	}
	depth := 0
	for k := open + 1; k < len(code); k++ {
		switch c := code[k]; {
		case c == '\'' || c == '$' && dollarTag(code[k:]) != "":
			if e := skipString(code, k, false); e > k {
				k = e - 1
			}
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return -1
			}
			depth--
		case c == ',' && depth == 0:
			if n--; n == 0 {
				return k + 1
			}
		}
	}
	return -1
}

// wordBefore is the word before s[i] (a name, or a schema and a dot, at
// s[i] itself), as written.
func wordBefore(s string, i int) string {
	j := i
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t' || s[j-1] == '\n' || s[j-1] == '\r') {
		j--
	}
	if j > 0 && s[j-1] == '.' {
		j--
		for j > 0 && (isIdentChar(s[j-1]) || s[j-1] == '"' || s[j-1] == shapeIdent[0]) {
			j--
		}
		for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t' || s[j-1] == '\n' || s[j-1] == '\r') {
			j--
		}
	}
	e := j
	for j > 0 && isIdentChar(s[j-1]) {
		j--
	}
	return s[j:e]
}

// nextIndex is strings.Index of sub in s from i on, as an index of s.
func nextIndex(s, sub string, i int) int {
	if j := strings.Index(s[i:], sub); j >= 0 {
		return i + j
	}
	return -1
}

// firstWord is code's first word, after blanks and comments.
func firstWord(code string) string {
	k := skipBlanks(code, 0)
	e := k
	for e < len(code) && isIdentChar(code[e]) {
		e++
	}
	return code[k:e]
}

// shapeNames checks the text dynamic SQL runs (sqlShape's), adding the
// custom names it spells: it is code too (dynamicNames), and a SET or RESET
// statement in it must name a setting whole.
func shapeNames(shape string, names []string, depth int) ([]string, bool) {
	more, unknown := dynamicNames(shape, depth+1)
	names = append(names, more...)
	if unknown {
		return names, true
	}
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	names = dottedNames(shape, seen, names)
	// Statement starts: SET or RESET there names a setting, which must
	// not be a piece (quote_ident(n), %I).
	for i := strings.Index(shape, shapeIdent); i >= 0; i = nextIndex(shape, shapeIdent, i+1) {
		// An identifier a piece gives, called: a function named at run
		// time (format('SELECT %I(%L, ...)', 'set_config', n); adversary
		// round 16), schema-qualified too.
		k := skipBlanks(shape, i+1)
		if k < len(shape) && shape[k] == '.' {
			k = skipBlanks(shape, k+1)
			for k < len(shape) && (isIdentChar(shape[k]) || shape[k] == '"' || shape[k] == shapeIdent[0]) {
				k++
			}
			k = skipBlanks(shape, k)
		}
		if k < len(shape) && shape[k] == '(' && !oneOf(wordBefore(shape, i), "INTO", "TABLE", "COPY", "REFERENCES", "ON") {
			return names, true // (INSERT INTO %I.%I (a, b): a column list)
		}
	}
	for _, stmt := range strings.Split(shape, ";") {
		if k := skipBlanks(stmt, 0); k < len(stmt) && strings.IndexByte(shapeIdent+shapeLiteral, stmt[k]) >= 0 {
			return names, true // (quote_ident('set') is set: a statement a piece starts may be a SET)
		}
		if !oneOf(firstWord(stmt), "SET", "RESET") {
			continue
		}
		k := skipBlanks(stmt, skipBlanks(stmt, 0)+len(firstWord(stmt)))
		if w := firstWord(stmt[k:]); oneOf(w, "LOCAL", "SESSION") {
			k = skipBlanks(stmt, k+len(w))
		}
		for k < len(stmt) { // (the name: app . x too)
			if j := skipBlanks(stmt, k); isIdentChar(stmt[k]) || stmt[k] == '"' {
				k++
			} else if stmt[k] == '.' || j < len(stmt) && stmt[j] == '.' {
				k = skipBlanks(stmt, j+1)
			} else {
				break
			}
		}
		if k = skipBlanks(stmt, k); k < len(stmt) && strings.IndexByte(shapeIdent+shapeLiteral, stmt[k]) >= 0 {
			return names, true // (SET app. || quote_ident(n))
		}
	}
	return names, false
}

// The pieces of a dynamic statement's text that are not literal text:
// an identifier (quote_ident, format's %I) and a literal (quote_literal,
// quote_nullable, %L). Neither can end a statement or start another.
const (
	shapeIdent   = "\x01"
	shapeLiteral = "\x02"
)

// sqlShape reads the SQL-text expression at code[k] (after EXECUTE, or a
// built-in's first argument) up to where it ends (USING, INTO, a ';', a
// ',' or ')' outside parentheses), as the text it makes, pieces replaced
// (shapeIdent, shapeLiteral): ok false if it is not made only of string
// literals joined with ||, quote_ident, quote_literal, quote_nullable
// and format with a literal template without %s.
func sqlShape(code string, k int) (string, bool) {
	var b strings.Builder
	for {
		k = skipBlanks(code, k)
		if k >= len(code) {
			return "", false
		}
		switch c := code[k]; {
		case c == '\'' || c == '$' && dollarTag(code[k:]) != "":
			lit, end, ok := stringLiteral(code, k)
			if !ok {
				return "", false
			}
			b.WriteString(lit)
			k = end
		case isIdentStart(c):
			e := k
			for e < len(code) && (isIdentChar(code[e]) || code[e] == '.') {
				e++
			}
			fn := strings.ToLower(strings.TrimPrefix(strings.ToLower(code[k:e]), "pg_catalog."))
			p := skipBlanks(code, e)
			if p >= len(code) || code[p] != '(' {
				return "", false // a variable, a parameter: any text
			}
			close := matchParen(code, p)
			if close < 0 {
				return "", false
			}
			switch fn {
			case "quote_ident":
				b.WriteString(shapeIdent)
			case "quote_literal", "quote_nullable":
				b.WriteString(shapeLiteral)
			case "format":
				t := skipBlanks(code, p+1)
				if t >= len(code) || code[t] != '\'' {
					return "", false
				}
				tmpl, end, ok := stringLiteral(code, t)
				if e := skipBlanks(code, end); !ok || e >= len(code) || code[e] != ',' && code[e] != ')' {
					return "", false // (a template joined with ||: adversary round 16)
				}
				text, ok := formatShape(tmpl)
				if !ok {
					return "", false
				}
				b.WriteString(text)
			default:
				return "", false
			}
			k = close + 1
		default:
			return "", false
		}
		k = skipBlanks(code, k)
		if strings.HasPrefix(code[k:], "||") {
			k += 2
			continue
		}
		if k >= len(code) || code[k] == ';' || code[k] == ',' || code[k] == ')' {
			return b.String(), true
		}
		e := k
		for e < len(code) && isIdentChar(code[e]) {
			e++
		}
		if oneOf(code[k:e], "USING", "INTO") {
			return b.String(), true
		}
		return "", false // (a cast, an operator: not text we can read)
	}
}

// stringLiteral reads the string literal at code[k] ('...' with doubled
// quotes, or $tag$...$tag$; an E string or a backslash is refused: its
// escapes change the text) and returns its text and the index after it.
func stringLiteral(code string, k int) (text string, end int, ok bool) {
	if k > 0 && (code[k-1] == 'E' || code[k-1] == 'e') {
		return "", 0, false
	}
	end = skipString(code, k, false)
	if end < 0 {
		return "", 0, false
	}
	if code[k] == '$' {
		tag := dollarTag(code[k:])
		return code[k+len(tag) : end-len(tag)], end, true
	}
	body := code[k+1 : end-1]
	if strings.IndexByte(body, '\\') >= 0 {
		return "", 0, false
	}
	return strings.ReplaceAll(body, "''", "'"), end, true
}

// matchParen returns the index of the ')' closing the '(' at code[p], or
// -1; strings and comments inside are skipped.
func matchParen(code string, p int) int {
	depth := 0
	for i := p; i < len(code); {
		switch c := code[i]; {
		case commentEnd(code, i) > i:
			i = commentEnd(code, i)
			continue
		case c == '\'' || c == '$' && dollarTag(code[i:]) != "":
			end := skipString(code, i, false)
			if end < 0 {
				return -1
			}
			i = end
			continue
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth == 0 {
				return i
			}
		}
		i++
	}
	return -1
}

// formatShape is the text format() makes of template tmpl, its
// arguments as pieces: ok false for %s (any text) or a form it does not
// know.
func formatShape(tmpl string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		if tmpl[i] != '%' {
			b.WriteByte(tmpl[i])
			continue
		}
		i++
		for i < len(tmpl) && (tmpl[i] >= '0' && tmpl[i] <= '9' || tmpl[i] == '$' || tmpl[i] == '-' || tmpl[i] == '*') {
			i++
		}
		if i >= len(tmpl) {
			return "", false
		}
		switch tmpl[i] {
		case '%':
			b.WriteByte('%')
		case 'I':
			b.WriteString(shapeIdent)
		case 'L':
			b.WriteString(shapeLiteral)
		default:
			return "", false
		}
	}
	return b.String(), true
}

// wholeLiteralArg reports whether the argument at code[k] (set_config's
// first) is one string literal naming a setting ('app.x', quotes doubled
// in a dynamic statement's string), optionally cast, then a comma.
func wholeLiteralArg(code string, k int) bool {
	k = skipBlanks(code, k)
	q := 0
	for k < len(code) && code[k] == '\'' {
		k, q = k+1, q+1
	}
	start := k
	for k < len(code) && (isIdentChar(code[k]) || code[k] == '.') {
		k++
	}
	if q == 0 || k == start || code[k-1] == '.' {
		return false
	}
	for m := 0; m < q; m++ {
		if k >= len(code) || code[k] != '\'' {
			return false
		}
		k++
	}
	k = skipBlanks(code, k)
	if strings.HasPrefix(code[k:], "::") {
		k += 2
		for k < len(code) && (isIdentChar(code[k]) || code[k] == '.' || code[k] == ' ') {
			k++
		}
	}
	return k < len(code) && code[k] == ','
}

// seedSetting reports whether the word seed at code[i] names the setting
// being set: after SET [LOCAL | SESSION], or as set_config's first
// argument ('seed', quoted, after "set_config("). A column or a comment
// named seed is not one (adversary: every statement naming such a column
// pinned).
func seedSetting(code string, i int) bool {
	j := i
	for j > 0 && (code[j-1] == ' ' || code[j-1] == '\t' || code[j-1] == '\n' || code[j-1] == '\r' || code[j-1] == '\f' || code[j-1] == '\'' || code[j-1] == '"') {
		j--
	}
	k := j
	for k > 0 && isIdentChar(code[k-1]) {
		k--
	}
	prev := code[k:j]
	if oneOf(prev, "LOCAL", "SESSION") {
		return true // (SET LOCAL seed: the SET before it)
	}
	if oneOf(prev, "SET") {
		// A SET statement, not UPDATE's SET: what comes before SET is the
		// start, punctuation (;, a quote, $$) or a word that ends a
		// PL/pgSQL statement's head (BEGIN, THEN, ELSE, LOOP, AS, DO), not
		// a table name or alias (UPDATE t SET seed = 2).
		m := k
		for m > 0 && (code[m-1] == ' ' || code[m-1] == '\t' || code[m-1] == '\n' || code[m-1] == '\r' || code[m-1] == '\f') {
			m--
		}
		if m == 0 || !isIdentChar(code[m-1]) {
			return true
		}
		n := m
		for n > 0 && isIdentChar(code[n-1]) {
			n--
		}
		return oneOf(code[n:m], "BEGIN", "THEN", "ELSE", "LOOP", "AS", "DO")
	}
	// set_config('seed', ...), set_config(''seed'', ...) in dynamic SQL.
	if j > 0 && code[j-1] == '(' {
		k := j - 1
		for k > 0 && (code[k-1] == ' ' || code[k-1] == '\t' || code[k-1] == '\n' || code[k-1] == '"') {
			k--
		}
		return k >= 10 && strings.EqualFold(code[k-10:k], "set_config")
	}
	return false
}

// unseenSet reads the viewSet of the user functions that change state the
// state read cannot see (userFunc.unseen), and of those whose bodies name
// one of them, nil when none does. Its names are relations and types
// reaching one, and the functions themselves.
func unseenSet(ctx context.Context, pool *pgxpool.Pool, stamp [3]int64, funcs []userFunc) (*viewSet, error) {
	return codeSet(ctx, pool, stamp, funcs, (*userFunc).unseen, unseenClosure)
}

// advisorySet is unseenSet for user code calling an advisory lock
// function: a statement naming what it holds takes advisory locks where
// it runs, which must be the default worker (classify's advisory).
// Advisory lock functions called by names built at run time (EXECUTE
// 'SELECT pg_' || 'advisory_lock(1)') are not seen.
func advisorySet(ctx context.Context, pool *pgxpool.Pool, stamp [3]int64, funcs []userFunc) (*viewSet, error) {
	return codeSet(ctx, pool, stamp, funcs, (*userFunc).advisory, advisoryClosure)
}

// advisory reports whether f's body (strings and comments included)
// names an advisory lock function.
func (f *userFunc) advisory() bool { return advisoryIn(f.body) }

// codeSet reads the viewSet of the user functions seed picks, of those
// whose bodies name one of them, and of what reaches them (closure c),
// nil when there is none.
func codeSet(ctx context.Context, pool *pgxpool.Pool, stamp [3]int64, funcs []userFunc, seed0 func(*userFunc) bool, c closure) (*viewSet, error) {
	seeds, names := map[uint32]bool{}, map[string]string{}
	seed := func(f *userFunc) {
		seeds[f.oid] = true
		names[nameKey(f.name)], names[strings.ToLower(f.name)] = f.name, f.name
	}
	for i := range funcs {
		if seed0(&funcs[i]) {
			seed(&funcs[i])
		}
	}
	// Read until no function's body names what the set holds: a function
	// calling one of its functions, or writing a table whose trigger
	// reaches one (adversary: SELECT log_it(), whose INSERT fired a dblink
	// audit trigger). Not settled after 8 readings: every function counts.
	var u *viewSet
	var relTypes map[string]string
	for round := 0; ; round++ {
		others := map[uint32]bool{}
		for _, f := range funcs {
			if !seeds[f.oid] {
				others[f.oid] = true
			}
		}
		// (Read even with no such user function: a default, check,
		// domain or operator may call setseed itself.)
		var err error
		if u, relTypes, err = readViewSet(ctx, pool, stamp, others, c); err != nil {
			return nil, err
		}
		maps.Copy(names, u.calls) // (an aggregate over such a function, found by the closure)
		grown := false
		for i := range funcs {
			if f := &funcs[i]; !seeds[f.oid] && (round == 8 || mentionedTable(f.body, names) != "" || mentionedTable(f.body, relTypes) != "") {
				seed(f)
				grown = true
			}
		}
		if !grown || round == 9 {
			break
		}
	}
	u.names, u.calls, u.odd = relTypes, names, nil
	for _, m := range []map[string]string{relTypes, names} { // (functions too: "my""seed"(), adversary)
		for _, n := range m {
			if oddName(n) {
				u.odd = append(u.odd, n, strings.ReplaceAll(n, `"`, `""`))
			}
		}
	}
	if len(u.names) == 0 && len(u.calls) == 0 && len(u.ops) == 0 && !u.all && !u.ddl {
		return nil, nil
	}
	return u, nil
}

// stateViews returns the current viewSet, reading it when this
// coordinator's catalog version or DDL epoch moved.
func (s *Server) stateViews() *viewSet {
	var stamp [3]int64
	if snap := s.catalog.Load(); snap != nil {
		stamp[0] = snap.Version
	}
	stamp[1], stamp[2] = s.ddlEpoch.Load(), s.viewEpoch.Load()
	if vs := s.views.Load(); vs != nil && vs.stamp == stamp {
		return vs
	}
	// One reading at a time: after a catalog change every session asks
	// at once, and each reading would take a metadata connection.
	s.viewsMu.Lock()
	defer s.viewsMu.Unlock()
	if vs := s.views.Load(); vs != nil && vs.stamp == stamp {
		return vs
	}
	vs := &viewSet{stamp: stamp, names: map[string]string{}}
	if s.metaPool == nil {
		s.views.Store(vs)
		return vs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var funcs []userFunc
	var ext []string
	err := s.askMeta(ctx, func() (err error) {
		funcs, ext, err = readUserFuncs(ctx, s.metaPool)
		return err
	})
	if err != nil {
		vs.all = true
		s.views.Store(vs)
		return vs
	}
	// Functions whose bodies cannot change session state are left out of
	// the closure's seeds, unless a body names what the closure finds
	// (a table whose trigger is not harmless, a user function that is
	// not): read again until no harmless function is taken back.
	harmless := map[uint32]bool{}
	for _, f := range funcs {
		if f.harmless() {
			harmless[f.oid] = true
		}
	}
	for round := 0; ; round++ {
		if round == 8 {
			clear(harmless) // (not settled: none is harmless)
		}
		var relTypes map[string]string
		vs, relTypes, err = readViewSet(ctx, s.metaPool, stamp, harmless, stateClosure)
		if err != nil || len(harmless) == 0 {
			break
		}
		others := map[string]string{} // user functions that are not harmless, extensions' functions
		var odd []string
		for _, n := range ext {
			others[nameKey(n)], others[strings.ToLower(n)] = n, n
		}
		for _, f := range funcs {
			if !harmless[f.oid] {
				others[nameKey(f.name)], others[strings.ToLower(f.name)] = f.name, f.name
				if oddName(f.name) {
					odd = append(odd, f.name)
				}
			}
		}
		taken := false
		for _, f := range funcs {
			if harmless[f.oid] && (mentionedTable(f.body, relTypes) != "" || mentionedTable(f.body, others) != "" ||
				containsAny(f.body, vs.ops) || containsAny(f.body, vs.odd) || containsAny(f.body, odd) ||
				vs.ddl && firesEventTriggers(f.body)) {
				delete(harmless, f.oid)
				taken = true
			}
		}
		if !taken {
			break
		}
	}
	if err == nil {
		seen := map[string]bool{}
		for _, f := range funcs {
			if !harmless[f.oid] {
				vs.customs = dottedNames(f.body, seen, vs.customs)
				built, _ := dynamicNames(f.body, 0) // (EXECUTE 'SET app' || '.x = 1')
				for _, n := range built {
					if !seen[n] {
						seen[n] = true
						vs.customs = append(vs.customs, n)
					}
				}
			}
		}
		vs.unseen, err = unseenSet(ctx, s.metaPool, stamp, funcs)
	}
	if err == nil {
		vs.advisory, err = advisorySet(ctx, s.metaPool, stamp, funcs)
	}
	if err != nil {
		vs = &viewSet{stamp: stamp, names: map[string]string{}, all: true}
	}
	s.views.Store(vs)
	return vs
}

// extensionFuncsSQL lists the names of extensions' functions: the closure
// trusts them, but a harmless body must not call one (some run SQL given
// as text, as tablefunc's crosstab does; adversary round 5).
const extensionFuncsSQL = `SELECT DISTINCT p.proname::text FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend e ON e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND e.objid = p.oid AND e.deptype = 'e'`

// readUserFuncs runs userFuncsSQL, and extensionFuncsSQL (ext).
func readUserFuncs(ctx context.Context, pool *pgxpool.Pool) (_ []userFunc, ext []string, _ error) {
	rows, err := pool.Query(ctx, extensionFuncsSQL)
	if err != nil {
		return nil, nil, err
	}
	if ext, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, nil, err
	}
	rows, err = pool.Query(ctx, userFuncsSQL)
	if err != nil {
		return nil, nil, err
	}
	var funcs []userFunc
	for rows.Next() {
		var f userFunc
		if err := rows.Scan(&f.oid, &f.name, &f.lang, &f.body, &f.atomic, &f.config); err != nil {
			rows.Close()
			return nil, nil, err
		}
		funcs = append(funcs, f)
	}
	return funcs, ext, rows.Err()
}

// readViewSet runs stateViewsSQL with the harmless functions left out of
// its seeds. relTypes: the names of relations and types alone.
func readViewSet(ctx context.Context, pool *pgxpool.Pool, stamp [3]int64, harmless map[uint32]bool, c closure) (*viewSet, map[string]string, error) {
	vs := &viewSet{stamp: stamp, names: map[string]string{}}
	relTypes := map[string]string{}
	oids := make([]uint32, 0, len(harmless))
	for o := range harmless {
		oids = append(oids, o)
	}
	rows, err := pool.Query(ctx, stateViewsSQL, oids, c.rules, c.builtins, !c.unseen)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, n string
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, nil, err
		}
		switch kind {
		case "n", "f":
			vs.names[nameKey(n)] = n
			vs.names[strings.ToLower(n)] = n
			if kind == "n" {
				relTypes[nameKey(n)], relTypes[strings.ToLower(n)] = n, n
			}
			if oddName(n) {
				vs.odd = append(vs.odd, n)
				if strings.Contains(n, `"`) {
					vs.odd = append(vs.odd, strings.ReplaceAll(n, `"`, `""`))
				}
			}
		case "o":
			if syntaxOps[n] {
				vs.all = true // LIKE, IN, BETWEEN, CASE x WHEN... use it unwritten
			}
			vs.ops = append(vs.ops, n)
		case "d":
			vs.ddl = true
		case "g": // (functions of the closure: unseenSet's calls)
			if !c.unseen {
				break
			}
			if vs.calls == nil {
				vs.calls = map[string]string{}
			}
			vs.calls[nameKey(n)], vs.calls[strings.ToLower(n)] = n, n
		default: // a cast between built-in types, a default operator class
			vs.all = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return vs, relTypes, nil
}

// harmlessBody reports whether a PL/pgSQL or SQL function's body cannot
// change session state (the connection's settings, role, temporary
// objects, prepared statements, holdable cursors, LISTEN channels,
// advisory locks) by what it says itself. Not harmless: a word, anywhere
// (strings and comments included: conservative), of RESET, DISCARD,
// PREPARE, DEALLOCATE, EXECUTE (dynamic SQL), CALL, LOAD, LISTEN,
// UNLISTEN, HOLD, DDL (CREATE, ALTER, DROP: what it makes may run code),
// temporary objects, the session functions classify knows (set_config,
// advisory locks, dblink, setseed...), built-ins that run SQL given as
// text, pg_settings, currval and lastval (another client's sequence
// state); a Unicode-escaped name; and, in the code itself, a SET that is
// not UPDATE's (SET LOCAL too) or a DO with a body (harmlessCode). What
// it calls or writes is the caller's check: user functions and tables by
// name (stateViews).
func harmlessBody(src string) bool {
	if strings.Contains(src, "&") && (strings.Contains(src, "U&") || strings.Contains(src, "u&")) ||
		strings.IndexByte(src, '\\') >= 0 {
		// (A backslash: strings whose ends depend on
		// standard_conforming_strings and on continuations; adversary
		// rounds 3 and 4.)
		return false
	}
	if !eachWord(src, func(w string) bool {
		w = strings.ToUpper(w)
		return !(harmfulWords[w] || sessionFuncs[w] != "" || builtins[w]&(runsSQLText|readsAllTables) != 0 ||
			strings.Contains(w, "ADVISORY") || strings.HasPrefix(w, "DBLINK") || strings.Contains(w, "PG_TEMP") ||
			strings.Contains(w, "REPLICATION")) // (a session's replication origin, a temporary slot)
	}) {
		return false
	}
	// (Read both ways: a backslash escapes in an E string, and in any
	// string when standard_conforming_strings is off; adversary round 3.)
	return harmlessCode(src, false) && harmlessCode(src, true)
}

// harmlessCode is harmlessBody's reading of the code itself, comments and
// string literals left out (a strings's text runs only through EXECUTE,
// DO or a built-in that runs SQL text): every SET must be UPDATE's (UPDATE
// t SET, UPDATE ONLY s.t AS a SET, DO UPDATE SET: an UPDATE among the six
// words before it in its statement, with no comment or string between,
// and a name just before it, not a word that starts a PL/pgSQL statement),
// and a DO must be ON CONFLICT's or a rule's (DO UPDATE, NOTHING, ALSO,
// INSTEAD), not a DO block (adversary: a "-- update" comment before a SET
// passed for UPDATE's). A string that cannot be read to its end leaves
// the rest out, and a SET in it then fails the check: unsure is harmful.
// backslashes: a backslash escapes in every string (else in E strings).
func harmlessCode(src string, backslashes bool) bool {
	var last [6]string // the code's words since the last ';', comment or string
	n := 0
	prevWord := false // the token just before is a word or a quoted name
	afterDo := false
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
			continue
		case commentEnd(src, i) > i:
			i = commentEnd(src, i)
			n, prevWord = 0, false
			continue
		case c == '\'' || c == '$' && (i == 0 || !isIdentChar(src[i-1])) && dollarTag(src[i:]) != "":
			if afterDo {
				return false // a DO block
			}
			end := skipString(src, i, backslashes || i > 0 && (src[i-1] == 'E' || src[i-1] == 'e') && (i == 1 || !isIdentChar(src[i-2])))
			if end < 0 {
				// Unreadable to its end: whatever follows is
				// taken for string, where a SET fails the check.
				return !strings.Contains(strings.ToUpper(src[i:]), "SET")
			}
			i = end
			n, prevWord = 0, false
			continue
		case c == '"':
			k := i + 1
			for k < len(src) && !(src[k] == '"' && (k+1 >= len(src) || src[k+1] != '"')) {
				if src[k] == '"' {
					k++
				}
				k++
			}
			if afterDo {
				return false
			}
			i = k + 1
			last[n%6], n, prevWord = "", n+1, true
			continue
		case isIdentStart(c):
			j := i
			for j < len(src) && isIdentChar(src[j]) {
				j++
			}
			w := strings.ToUpper(src[i:j])
			if afterDo && w != "UPDATE" && w != "NOTHING" && w != "ALSO" && w != "INSTEAD" {
				return false // DO LANGUAGE ..., a DO block
			}
			afterDo = w == "DO"
			if w == "SET" {
				if !prevWord || n == 0 || statementStarts[last[(n-1)%6]] {
					return false
				}
				update := false
				for m := 1; m <= 6 && m <= n; m++ {
					update = update || last[(n-m)%6] == "UPDATE"
				}
				if !update {
					return false
				}
			}
			last[n%6] = w
			n, prevWord = n+1, true
			i = j
			continue
		case c == ';':
			n = 0
		}
		if afterDo {
			return false // DO followed by anything else
		}
		prevWord = false
		i++
	}
	return !afterDo
}

// dollarTag returns the $tag$ (or $$) that s starts with, or "".
func dollarTag(s string) string {
	for k := 1; k < len(s); k++ {
		c := s[k]
		switch {
		case c == '$':
			return s[:k+1]
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || k > 1 && c >= '0' && c <= '9':
		default:
			return ""
		}
	}
	return ""
}

// skipString returns the index after the string literal at src[i] ('...'
// with doubled quotes, and backslash escapes if backslashes; or
// $tag$...$tag$), or -1 if it does not end.
func skipString(src string, i int, backslashes bool) int {
	if src[i] == '$' {
		tag := dollarTag(src[i:])
		k := strings.Index(src[i+len(tag):], tag)
		if k < 0 {
			return -1
		}
		return i + len(tag) + k + len(tag)
	}
	for k := i + 1; k < len(src); k++ {
		switch src[k] {
		case '\\':
			if backslashes {
				k++
			}
		case '\'':
			if k+1 < len(src) && src[k+1] == '\'' {
				k++
				continue
			}
			return k + 1
		}
	}
	return -1
}

// harmfulWords are the words of statements that change session state, or
// run code harmlessBody cannot read (harmlessBody).
var harmfulWords = map[string]bool{"RESET": true, "DISCARD": true, "PREPARE": true, "DEALLOCATE": true,
	"EXECUTE": true, "CALL": true, "LOAD": true, "LISTEN": true, "UNLISTEN": true, "HOLD": true,
	"CREATE": true, "ALTER": true, "DROP": true, "TEMP": true, "TEMPORARY": true, "PG_SETTINGS": true,
	"IMPORT": true, "SECURITY": true, "GRANT": true, "REVOKE": true, "COMMENT": true, "REFRESH": true,
	// (They run other tables' index expressions and statistics.)
	"ANALYZE": true, "ANALYSE": true, "VACUUM": true, "CLUSTER": true, "REINDEX": true,
	"PG_MY_TEMP_SCHEMA": true,
	// (Sequence state: user code that reads it runs after DISCARD
	// SEQUENCES, seqcheck.go.)
	"CURRVAL": true, "LASTVAL": true}

// statementStarts are the PL/pgSQL words after which a statement begins.
var statementStarts = map[string]bool{"BEGIN": true, "THEN": true, "ELSE": true, "LOOP": true, "ELSIF": true,
	"ELSEIF": true, "EXCEPTION": true, "DECLARE": true, "IS": true, "AS": true, "ATOMIC": true, "DO": true}

// syntaxOps are the operators PostgreSQL's grammar uses where the text does
// not write them: LIKE and ILIKE (~~, ~~*, !~~, !~~*), SIMILAR TO (~, !~),
// IN, NULLIF, IS DISTINCT FROM, CASE x WHEN, USING (=), != (<>), BETWEEN
// (<=, >=), row comparisons. A user operator of built-in types by one of
// these names makes every statement verified.
var syntaxOps = map[string]bool{"=": true, "<>": true, "<": true, ">": true, "<=": true, ">=": true,
	"~~": true, "~~*": true, "!~~": true, "!~~*": true, "~": true, "!~": true, "~*": true, "!~*": true}

// viewVerify reports whether q may run user code its text does not call:
// it names a table, view, type or function of the viewSet, or uses one of
// its operators (st, if not nil, caches the verdict per viewSet). Callers
// skip statements that run no user code (classify's quiet: SET, SHOW,
// transaction control; deferred triggers that COMMIT runs were queued by
// a statement that was verified, whose snapshot is compared only when the
// connection goes back to the pool, after the COMMIT): a verified SET
// would pin the session, its change showing in the state read after it.
func (ss *session) viewVerify(q string, maint bool, st *Statement) bool {
	v, _ := ss.implicitCode(q, maint, st)
	return v
}

// implicitCode is viewVerify's verdict, and pin: q may run user code that
// changes state the state read cannot see (viewSet.unseen).
func (ss *session) implicitCode(q string, maint bool, st *Statement) (verify, pin bool) {
	c := ss.viewCheck(q, maint, st)
	return c.verify, c.pin
}

// implicitAdvisory reports whether q may run user code that takes or
// releases advisory locks (viewSet.advisory).
func (ss *session) implicitAdvisory(q string, maint bool, st *Statement) bool {
	return ss.viewCheck(q, maint, st).advisory
}

// stAdvisory is implicitAdvisory for a prepared statement.
func (ss *session) stAdvisory(st *Statement) bool {
	return !st.cls.quiet && ss.implicitAdvisory(st.Query, st.cls.maint, st)
}

// viewCheck is q's verdict for the current viewSet, cached in st when not
// nil.
func (ss *session) viewCheck(q string, maint bool, st *Statement) viewCheck {
	vs := ss.srv.stateViews()
	if !vs.all && len(vs.names) == 0 && len(vs.ops) == 0 && !vs.ddl {
		return viewCheck{} // (unseen, advisory: user functions, which are in names)
	}
	if st != nil {
		if c := st.viewChk.Load(); c != nil && c.set == vs {
			return *c
		}
	}
	// (ANALYZE, VACUUM, REINDEX, CLUSTER of no table name run every
	// table's code: maint.)
	c := viewCheck{set: vs, verify: maint || vs.match(q)}
	c.pin = vs.unseen != nil && (maint || vs.unseen.match(q))
	c.advisory = vs.advisory != nil && (maint || vs.advisory.match(q))
	if st != nil {
		st.viewChk.Store(&c)
	}
	return c
}

// match reports whether q names what vs holds (or vs holds everything).
func (vs *viewSet) match(q string) bool {
	return vs.all || vs.ddl && firesEventTriggers(q) || mentionedTable(q, vs.names) != "" || containsAny(q, vs.ops) || containsAny(q, vs.odd) ||
		len(vs.calls) > 0 && mentionedCall(q, vs.calls) != ""
}

// stVerify is a prepared statement's classify verify, or a view it names
// that may change session state.
func (ss *session) stVerify(st *Statement) bool {
	return st.cls.verify || !st.cls.quiet && ss.viewVerify(st.Query, st.cls.maint, st)
}

// noteViewDDL dates the viewSet when user code (DO, CALL, a function) whose
// text mentions creating, replacing or altering objects ran: it may have
// made a view, trigger, default, domain, cast or operator. (DDL inside a
// function's body, which the text does not show, is seen at the next DDL
// or catalog change.)
func (ss *session) noteViewDDL(verify bool, sql string) {
	if !verify {
		return
	}
	if l := strings.ToLower(sql); strings.Contains(l, "create") || strings.Contains(l, "replace") || strings.Contains(l, "alter") {
		// Now, and again when its transaction has ended (afterMessage):
		// a set read while it ran, or before its block committed, is
		// without what it made (adversary).
		ss.srv.viewEpoch.Add(1)
		ss.viewDDLPending = true
	}
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// firesEventTriggers reports whether sql may fire an event trigger: in
// PostgreSQL 15 CREATE, ALTER, DROP, COMMENT, GRANT, REVOKE, SECURITY
// LABEL, IMPORT FOREIGN SCHEMA, REFRESH MATERIALIZED VIEW and SELECT ...
// INTO do (ddl_command_start and _end, sql_drop, table_rewrite); DML,
// SELECT, TRUNCATE, VACUUM, SET and the rest do not. It looks for their
// words anywhere, strings and comments included (conservative), and for
// an INTO other than that of a text whose first word is INSERT or MERGE
// (WITH ... INSERT INTO, and a second statement's INSERT INTO, are taken
// for ones that fire). (Before, an enabled
// event trigger had every statement verified: two state reads each.)
func firesEventTriggers(sql string) bool {
	prev := ""
	first := true // prev is the text's first word
	words := 0
	return !eachWord(sql, func(w string) bool {
		for _, k := range eventTriggerWords {
			if strings.EqualFold(w, k) {
				return false
			}
		}
		if strings.EqualFold(w, "into") && !(first && (strings.EqualFold(prev, "insert") || strings.EqualFold(prev, "merge"))) {
			// (SELECT 1 AS insert INTO t: a label; SELECT ';insert'
			// INTO t: a string's; adversaries.)
			return false
		}
		prev, first = w, words == 0
		words++
		return true
	})
}

// eachWord calls f with each word of s (identifier characters, as
// PostgreSQL reads them unquoted; strings and comments not told apart),
// in order, until f returns false, and reports whether it read them all.
func eachWord(s string, f func(w string) bool) bool {
	for i := 0; i < len(s); {
		if !isIdentStart(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isIdentChar(s[j]) {
			j++
		}
		w := s[i:j]
		if strings.IndexByte(w, '$') > 0 {
			// (a$x$a$INTO: a dollar string glued to a word; PostgreSQL
			// reads $ in an identifier, but the parts may be words of
			// their own; adversary.)
			for _, part := range strings.Split(w, "$") {
				if part != "" && !f(part) {
					return false
				}
			}
		} else if !f(w) {
			return false
		}
		i = j
	}
	return true
}

var eventTriggerWords = []string{"create", "alter", "drop", "comment", "grant", "revoke", "security", "import", "refresh"}

// dottedNames appends to names the words of code (strings and comments
// included) that could name a custom setting, two or more identifiers
// joined by dots (customName), each once by seen, its ASCII letters lower
// case (as PostgreSQL compares setting names). Double quotes are read
// through ("app"."x" is app.x) and a word is also read in its pieces
// between $ signs (a dollar-quoted $q$app.x$q$; adversary round 12).
func dottedNames(code string, seen map[string]bool, names []string) []string {
	word := func(c byte) bool { return isIdentChar(c) || c == '.' || c == '"' }
	for i := 0; i < len(code); {
		if !word(code[i]) {
			i++
			continue
		}
		var sb strings.Builder
		j := i
		for j < len(code) {
			if word(code[j]) {
				if code[j] != '"' {
					sb.WriteByte(code[j])
				}
				j++
				continue
			}
			// Blanks and comments around a dot: SET app . x is app.x
			// (adversary round 14).
			if k := skipBlanks(code, j); k > j && k < len(code) && (code[k] == '.' || code[j-1] == '.' && (isIdentStart(code[k]) || code[k] == '"')) {
				j = k
				continue
			}
			break
		}
		w := sb.String()
		i = j
		pieces := []string{w}
		if strings.IndexByte(w, '$') >= 0 {
			pieces = append(pieces, strings.Split(w, "$")...)
		}
		for _, p := range pieces {
			if p = nameKey(p); strings.IndexByte(p, '.') > 0 && customName(p) && !seen[p] {
				seen[p] = true
				names = append(names, p)
			}
		}
	}
	return names
}
