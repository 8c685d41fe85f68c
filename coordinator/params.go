package coordinator

import (
	"sort"
	"strings"
	"time"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/pooling"
)

// sessionParams is the part of a client's session that must follow it from
// one server connection to the next: the parameters from its startup packet
// and the SETs it ran since. Its key is the SQL that recreates it on a server
// connection after RESET ALL; two sessions with equal keys can share a server
// connection without any replay.
//
// On a server connection the startup values are SETs, so there RESET goes
// to the server's default, while PostgreSQL resets to the startup value:
// the session puts the startup value back after such a RESET (paramfix.go).
type sessionParams struct {
	startup []string // SET statements from the startup packet
	// startupVal: the startup packet's settings by lower-case name.
	startupVal map[string]string
	set        map[string]string // name -> SET statement, from the session's SETs
	// rolePath: the search_path the session started with when it is not
	// the default (ALTER ROLE/DATABASE ... SET search_path), as a SET
	// statement; its connections have it from the role, so it is not
	// replayed on them.
	rolePath string
	// path, pathPublic, pathUser: the search_path's SET statement (""
	// for the default), whether it leaves unqualified names on public,
	// and whether it looks in a schema of the role's name first
	// ("$user"); derived by rebuild.
	path                 string
	pathPublic, pathUser bool
	key                  string
	// defines: the custom setting names the session has defined, from its
	// startup packet and its SETs, as a pooling name set; derived by
	// rebuild. PostgreSQL keeps such a name defined once set, so a server
	// connection whose backend defined others does not serve the session
	// (pooling/defines.go).
	defines string
	// readKeys are the session's SETs of the settings under which
	// PostgreSQL reads a statement's constants, by group (parsekey.go).
	readKeys [nGroups]string
	// idleTxn: idle_in_transaction_session_timeout where the session's
	// SET or startup packet says it exactly (idleSetting), else 0.
	idleTxn time.Duration
}

func newSessionParams(startup map[string]string) sessionParams {
	p := sessionParams{set: map[string]string{}, startupVal: map[string]string{}}
	names := make([]string, 0, len(startup))
	for k := range startup {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p.startup = append(p.startup, setSQL(k, startup[k]))
		p.startupVal[strings.ToLower(k)] = startup[k]
	}
	p.rebuild()
	return p
}

// custom reports whether a setting name is a custom (extension or
// placeholder) one: it has a dot.
func custom(name string) bool { return strings.IndexByte(name, '.') >= 0 }

// resetSQL replays RESET of a custom setting: PostgreSQL keeps the
// placeholder (SHOW gives an empty string), which a server connection that never saw it
// would not know.
func resetSQL(name string) string { return "SET " + quoteIdent(name) + " TO DEFAULT" }

func (p *sessionParams) apply(op paramOp) {
	switch op.kind {
	case opSet:
		p.set[op.name] = op.sql
		for _, m := range op.more {
			p.set[m.name] = m.sql
		}
	case opReset, opSetDefault:
		p.reset(op.name)
	case opPlaceholder:
		if _, ok := p.set[op.name]; ok || !custom(op.name) {
			return
		}
		if _, ok := p.startupVal[op.name]; ok {
			return
		}
		p.set[op.name] = resetSQL(op.name)
	case opResetAll, opDiscardAll:
		for name := range p.set {
			p.reset(name)
		}
	default:
		return
	}
	p.rebuild()
}

func (p *sessionParams) reset(name string) {
	if _, ok := p.startupVal[name]; ok || !custom(name) {
		delete(p.set, name)
		return
	}
	p.set[name] = resetSQL(name)
}

// applyOps applies the changes of a committed transaction. A SET of a
// setting the server reports (ParameterStatus: DateStyle, TimeZone, ...)
// is recorded with the value the server reported, which may combine
// several SETs (SET datestyle TO iso, then TO ymd: "ISO, YMD").
func (p *sessionParams) applyOps(ops []paramOp, reported map[string]string) {
	for _, op := range ops {
		p.apply(op)
	}
	changed := false
	for _, op := range ops {
		if op.kind != opSet || p.set[op.name] != op.sql {
			continue
		}
		for k, v := range reported {
			if strings.EqualFold(k, op.name) {
				p.set[op.name] = setSQL(k, v)
				changed = true
			}
		}
	}
	if changed {
		p.rebuild()
	}
}

// publicPath reports whether a search_path setting (a SET statement or a
// startup value) resolves unqualified names as the default does: to public.
func publicPath(setting string) bool {
	v := strings.ToLower(setting)
	if i := strings.Index(v, " to "); i >= 0 {
		v = v[i+4:]
	} else if i := strings.IndexByte(v, '='); i >= 0 {
		v = v[i+1:]
	}
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == ';' }) {
		switch strings.Trim(f, `'"`) {
		case "public", "$user", "pg_catalog", "default", "":
		default:
			return false
		}
	}
	return true
}

// derivePath sets path, pathPublic and pathUser from the session's SET,
// its startup packet and its role's setting, in that order.
func (p *sessionParams) derivePath() {
	p.path = p.rolePath
	for _, s := range p.startup {
		if strings.HasPrefix(s, `SET "search_path" = `) {
			p.path = s
		}
	}
	if sql, ok := p.set["search_path"]; ok {
		p.path = sql
	}
	p.pathPublic = p.path == "" || publicPath(p.path)
	p.pathUser = p.pathPublic && (p.path == "" || strings.Contains(p.path, "$user"))
}

func (p *sessionParams) rebuild() {
	p.derivePath()
	p.readKeys = readKeys(p.set)
	p.idleTxn = idleSetting(p)
	p.defines = ""
	for name := range p.startupVal {
		if custom(name) {
			p.defines = pooling.AddDefine(p.defines, name)
		}
	}
	for name := range p.set {
		if custom(name) {
			p.defines = pooling.AddDefine(p.defines, name)
		}
	}
	if len(p.startup) == 0 && len(p.set) == 0 {
		p.key = ""
		return
	}
	var b strings.Builder
	b.WriteString("RESET ALL")
	for _, s := range p.startup {
		b.WriteString(";")
		b.WriteString(s)
	}
	names := make([]string, 0, len(p.set))
	for k := range p.set {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b.WriteString(";")
		b.WriteString(p.set[k])
	}
	p.key = b.String()
}

// setSQL sets a setting to a value as a startup packet, current_setting()
// or ParameterStatus spells it: set_config reads the value as the setting's
// own text form, so a list ("$user", public) stays a list, where SET name =
// '...' would make it one quoted element.
func setSQL(name, value string) string {
	return "SELECT pg_catalog.set_config(" + quoteLiteral(name) + ", " + quoteLiteral(value) + ", false)"
}

// setLocalSQL is setSQL for the transaction only (SET LOCAL).
func setLocalSQL(name, value string) string {
	return "SELECT pg_catalog.set_config(" + quoteLiteral(name) + ", " + quoteLiteral(value) + ", true)"
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string {
	if strings.Contains(s, `\`) {
		return `E'` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `''`) + `'`
	}
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}

// startupParams picks the settings a startup packet asks for: everything but
// user, database, replication and options; options' "-c name=value" (or
// "--name=value") pairs become settings too.
func startupParams(in map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range in {
		switch k {
		case "user", "database", "replication":
		case "options":
			if err := parseOptions(v, out); err != nil {
				return nil, err
			}
		default:
			if strings.HasPrefix(k, "_pq_.") {
				continue
			}
			out[k] = v
		}
	}
	return out, nil
}

func parseOptions(opts string, out map[string]string) error {
	fields := splitOptions(opts)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		var kv string
		switch {
		case f == "-c" && i+1 < len(fields):
			i++
			kv = fields[i]
		case strings.HasPrefix(f, "-c"):
			kv = f[2:]
		case strings.HasPrefix(f, "--"):
			kv = f[2:]
		default:
			return errUnsupportedOption(f)
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return errUnsupportedOption(f)
		}
		out[strings.ReplaceAll(k, "-", "_")] = v
	}
	return nil
}

// splitOptions splits on unescaped spaces; a backslash escapes the next byte.
func splitOptions(s string) []string {
	var out []string
	var cur strings.Builder
	esc := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			cur.WriteByte(c)
			esc = false
		case c == '\\':
			esc = true
		case c == ' ' || c == '\t':
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func errUnsupportedOption(opt string) error {
	return pgerr.Fatal(pgerr.FeatureNotSupported, "unsupported startup option %q", opt).
		WithHint("pgfleet accepts only -c name=value and --name=value in options.")
}

// customNames calls f with each custom setting a SET or RESET op defines
// in the backend it runs in (a placeholder, which stays defined).
func (o paramOp) customNames(f func(string)) {
	switch o.kind {
	case opSet, opReset, opSetDefault, opPlaceholder:
		if custom(o.name) {
			f(o.name)
		}
		for _, m := range o.more {
			m.customNames(f)
		}
	}
}

// noteDefines adds to the held connection's name set the custom settings
// op, which ran there, defined (pooling/defines.go).
func (ss *session) noteDefines(op paramOp) {
	op.customNames(func(name string) { ss.sc.Defines = pooling.AddDefine(ss.sc.Defines, name) })
}

// definesAlone returns the name set of the custom settings cls defines
// when it is one SET or RESET of them and nothing else; else "". (For a
// simple query only: a Parse's connection serves the rest of its batch,
// which may read them; adversary.)
func definesAlone(cls *class) string {
	if cls == nil || cls.count > 1 || len(cls.ops) != 1 {
		return ""
	}
	defs := ""
	cls.ops[0].customNames(func(name string) { defs = pooling.AddDefine(defs, name) })
	return defs
}

// customOnly reports whether ops only set or reset custom settings, which
// do not change how PostgreSQL reads a statement's constants (parsekey.go):
// a statement parsed while one is unanswered is read the same after it
// (adversary: SET app.x and a SELECT prepared in one pipeline got 0A000,
// "parsed under other settings (xmloption)").
func customOnly(ops []paramOp) bool {
	for _, op := range ops {
		switch op.kind {
		case opSet, opReset, opSetDefault, opPlaceholder:
			if !custom(op.name) || len(op.more) > 0 {
				return false
			}
		default:
			return false
		}
	}
	return len(ops) > 0
}
