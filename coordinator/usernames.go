package coordinator

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// Errors name the user's tables, not their shards. A worker reports a
// unique violation on shard accounts_102009 with constraint
// accounts_pkey_102009; PostgreSQL would say accounts and accounts_pkey,
// and ORMs map errors by those names. The table and constraint fields are
// mapped whole; the message and detail only inside double quotes, where
// PostgreSQL quotes identifiers (a key value in a detail is not quoted and
// stays as it is). A name is a shard's when it ends in _N for N the id of
// a shard in the catalog: the shard table's own name, or one PostgreSQL or
// pgfleet derived from it (indexes, constraints), which carry the suffix.

// userNames maps shard names in er to the user's names; it reports whether
// it changed anything.
func userNames(snap *metadata.Snapshot, er *pgproto3.ErrorResponse) bool {
	if snap == nil {
		return false
	}
	if er.Code == pgerr.UndefinedTable {
		if e := staleShard(er.Message, snap); e != nil {
			// On paths that map names only (scatter, pipelines): the
			// shard left the worker after the statement was routed, or
			// left the catalog (a split; found by an adversary: 42P01
			// with the shard's name).
			er.Code, er.Message, er.Hint = e.Code, e.Message, e.Hint
			return true
		}
	}
	ids := shardIDs(snap, er)
	if len(ids) == 0 {
		return false
	}
	changed := false
	if er.SchemaName != "" {
		if _, table := unshard(er.TableName, ids); table != "" {
			t := snap.Tables[table]
			if t == nil || er.SchemaName != t.ShardsIn() {
				// A table whose name only ends like a shard's.
				return false
			}
			if sch := t.Schema(); sch != er.SchemaName {
				er.SchemaName, changed = sch, true
			}
		}
	}
	one := func(s *string, quoted bool) {
		var out string
		if quoted {
			out = unshardQuoted(*s, ids)
		} else {
			out = unshardName(*s, ids)
		}
		if out != *s {
			*s, changed = out, true
		}
	}
	one(&er.TableName, false)
	one(&er.ConstraintName, false)
	one(&er.Message, true)
	one(&er.Detail, true)
	if strings.Contains(er.Where, `"`+metadata.ShardsSchema+`".`) {
		// A foreign key's action names its table qualified (ri_triggers):
		// "pgfleet_shards"."t_102008" is "public"."t".
		if out := unshardWhere(er.Where, ids, snap); out != er.Where {
			er.Where, changed = out, true
		}
	}
	if er.Code == pgerr.InsufficientPrivilege {
		// PostgreSQL names the relation unquoted in its privilege errors
		// (aclcheck_error): "permission denied for table t".
		for _, p := range privilegeMessages {
			if name, ok := strings.CutPrefix(er.Message, p); ok {
				if out := unshardName(name, ids); out != name {
					er.Message, changed = p+out, true
				}
			}
		}
	}
	return changed
}

// privilegeMessages start the privilege errors that name a table unquoted.
var privilegeMessages = []string{"permission denied for table ", "must be owner of table "}

// userNamesBody maps the shard names in an ErrorResponse body.
func userNamesBody(snap *metadata.Snapshot, body []byte) []byte {
	if snap == nil || !bytes.ContainsRune(body, '_') {
		return body
	}
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil || !userNames(snap, &er) {
		return body
	}
	b, err := er.Encode(nil)
	if err != nil {
		return body
	}
	return b[5:]
}

// shardIDs collects the catalog's shard ids that end a name in er's
// fields, with their tables' names; nil when none could.
func shardIDs(snap *metadata.Snapshot, er *pgproto3.ErrorResponse) map[int64]string {
	var want []int64
	for _, s := range []string{er.TableName, er.ConstraintName, er.Message, er.Detail, er.Where} {
		for i := strings.IndexByte(s, '_'); i >= 0; {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if id, err := strconv.ParseInt(s[i+1:j], 10, 64); err == nil && j > i+1 {
				want = append(want, id)
			}
			k := strings.IndexByte(s[j:], '_')
			if k < 0 {
				break
			}
			i = j + k
		}
	}
	if len(want) == 0 {
		return nil
	}
	return shardTables(snap, want)
}

// shardTables maps those of ids that are the catalog's shards to their
// tables' names; nil when none is.
func shardTables(snap *metadata.Snapshot, ids []int64) map[int64]string {
	var out map[int64]string
	for table, shards := range snap.Shards {
		for _, sh := range shards {
			if slices.Contains(ids, sh.ID) {
				if out == nil {
					out = map[int64]string{}
				}
				out[sh.ID] = table
			}
		}
	}
	return out
}

// unshard splits a shard id suffix (_N) off a name: the name without it
// and the shard's table, or name and "" when it has none of ids.
func unshard(name string, ids map[int64]string) (string, string) {
	i := strings.LastIndexByte(name, '_')
	if i <= 0 || i == len(name)-1 || name[i+1] == '0' || name[i+1] == '+' || name[i+1] == '-' {
		return name, ""
	}
	id, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || ids[id] == "" {
		return name, ""
	}
	return name[:i], ids[id]
}

// unshardName drops a shard id suffix (_N) from a name. A name qualified
// with the shards' schema (metadata.ShardsSchema.accounts_102008) becomes
// the table's schema-qualified name.
func unshardName(name string, ids map[int64]string) string {
	base, table := unshard(name, ids)
	if table == "" {
		return name
	}
	if dot := strings.LastIndexByte(base, '.'); dot >= 0 {
		if base[:dot] == metadata.ShardsSchema && strings.HasSuffix(table, "."+base[dot+1:]) {
			return table
		}
	}
	return base
}

// unshardWhere maps the shard names qualified with the shards' schema in
// s, both quoted, to their tables' quoted schema and name.
func unshardWhere(s string, ids map[int64]string, snap *metadata.Snapshot) string {
	prefix := `"` + metadata.ShardsSchema + `"."`
	var b strings.Builder
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			break
		}
		rest := s[i+len(prefix):]
		j := strings.IndexByte(rest, '"')
		if j < 0 {
			break
		}
		base, table := unshard(rest[:j], ids)
		if t := snap.Tables[table]; t != nil {
			b.WriteString(s[:i])
			b.WriteString(`"` + t.Schema() + `"."` + base + `"`)
		} else {
			b.WriteString(s[:i+len(prefix)+j+1])
		}
		s = rest[j+1:]
	}
	b.WriteString(s)
	return b.String()
}

// unshardQuoted maps every double-quoted name in s.
func unshardQuoted(s string, ids map[int64]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+1:], '"')
		if j < 0 {
			break
		}
		b.WriteString(s[:i+1])
		b.WriteString(unshardName(s[i+1:i+1+j], ids))
		b.WriteByte('"')
		s = s[i+1+j+1:]
	}
	b.WriteString(s)
	return b.String()
}

// cascadeRefused is shards.CascadeRefused with the detail's list of
// dependents in the user's names: a shard's line ("column p of table
// t_102008 depends on type d") becomes its table's, once.
func (ss *session) cascadeRefused(err error) error {
	e, ok := shards.CascadeRefused(err).(*pgerr.Error)
	if !ok || e == err || e.Detail == "" {
		return err
	}
	ids := shardIDs(ss.srv.catalog.Load(), &pgproto3.ErrorResponse{Detail: e.Detail})
	var lines []string
	for _, l := range strings.Split(e.Detail, "\n") {
		words := strings.Fields(l)
		for i, w := range words {
			words[i] = unshardName(w, ids)
		}
		if l = strings.Join(words, " "); !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	e.Detail = strings.Join(lines, "\n")
	return e
}
