package coordinator

import (
	"encoding/binary"
	"testing"
)

// bindSection encodes a Bind's parameter section (after the statement
// name): format codes, values (nil: NULL), no result formats.
func bindSection(formats []int16, values [][]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(formats)))
	for _, f := range formats {
		b = binary.BigEndian.AppendUint16(b, uint16(f))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(values)))
	for _, v := range values {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return binary.BigEndian.AppendUint16(b, 0)
}

func TestLocalSetsOf(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want int // calls; -1: not followed
	}{
		{"SELECT set_config('search_path', $1, true), set_config('role', $2, true), set_config('request.jwt.claims', $3, true)", 3},
		{"select pg_catalog.set_config('app.tenant', '7', true) AS t", 1},
		{"SELECT set_config($1, $2::text, true)", 1},
		{"SELECT set_config($1, $2::pg_catalog.text, true)", 1},
		{"SELECT set_config('app.tenant', '7', false)", -1}, // for the session
		{"SELECT set_config('app.tenant', '7', $1)", -1},    // not known to be local
		{"SELECT set_config('app.tenant', lower('X'), true)", -1},
		{"SELECT set_config('app.tenant', '7', true) FROM t", -1},
		{"SELECT set_config('app.tenant', '7', true) WHERE f()", -1},
		{"SELECT set_config('app.tenant', '7', true), 1", -1},
		{"SELECT set_config('app.tenant', '7', true); SELECT 1", -1},
		{"SELECT myschema.set_config('app.tenant', '7', true)", -1},
		{"SELECT set_config('App.Tenant', '7', true)", -1}, // (any case is the same setting: not followed)
		{"SELECT set_config('seed', '0.5', true)", -1},
		{"SELECT set_config('transaction_isolation', 'serializable', true)", -1},
		{"SELECT set_config('session_authorization', 'x', true)", -1},
		{"SELECT set_config('app.tenant', 'a\\b', true)", -1}, // (a backslash: standard_conforming_strings)
		{"SELECT set_config('app.tenant', $1::int, true)", -1},
		{"SELECT set_config('app.tenant', NULL, true)", -1},
		{"WITH x AS (SELECT 1) SELECT set_config('app.tenant', '7', true)", -1},
		{"SELECT set_config('app.tenant', '7', true) FOR UPDATE", -1},
	} {
		sets, ok := localSetsOf(tc.sql)
		got := len(sets)
		if !ok {
			got = -1
		}
		if got != tc.want {
			t.Errorf("%s: %d calls, want %d", tc.sql, got, tc.want)
		}
	}
}

func TestLocalOps(t *testing.T) {
	sets, ok := localSetsOf("SELECT set_config('search_path', $1, true), set_config($2, $3, true), set_config('role', 'web_anon', true)")
	if !ok {
		t.Fatal("not followed")
	}
	if _, ok := localOps(sets, nil, nil); ok {
		t.Fatal("resolved without the Bind's parameters")
	}
	ops, ok := localOps(sets, bindSection(nil, [][]byte{[]byte(`"$user", api`), []byte("app.tenant"), []byte("it's")}), nil)
	if !ok {
		t.Fatal("not resolved")
	}
	want := []paramOp{
		{kind: opNone, tagText: "SET", name: "search_path", text: `SELECT pg_catalog.set_config('search_path', '"$user", api', true)`},
		{kind: opPlaceholder, name: "app.tenant", text: `SELECT pg_catalog.set_config('app.tenant', 'it''s', true)`},
		{kind: opNone, tagText: "SET", name: "role", text: `SELECT pg_catalog.set_config('role', 'web_anon', true)`},
	}
	for i := range want {
		if ops[i].kind != want[i].kind || ops[i].name != want[i].name || ops[i].text != want[i].text || ops[i].tagText != want[i].tagText {
			t.Errorf("op %d: %+v, want %+v", i, ops[i], want[i])
		}
	}
	// Binary text values are their bytes.
	if _, ok := localOps(sets, bindSection([]int16{1}, [][]byte{[]byte("api"), []byte("app.x"), []byte("1")}), nil); !ok {
		t.Error("binary values not resolved")
	}
	for what, bind := range map[string][]byte{
		"a NULL value":             bindSection(nil, [][]byte{[]byte("api"), []byte("app.x"), nil}),
		"a name not followed":      bindSection(nil, [][]byte{[]byte("api"), []byte("seed"), []byte("0.5")}),
		"a name in capitals":       bindSection(nil, [][]byte{[]byte("api"), []byte("App.X"), []byte("1")}),
		"search_path with pg_temp": bindSection(nil, [][]byte{[]byte("pg_temp, public"), []byte("app.x"), []byte("1")}),
		"a missing parameter":      bindSection(nil, [][]byte{[]byte("api")}),
		"a zero byte in a value":   bindSection([]int16{1}, [][]byte{[]byte("api"), []byte("app.x"), []byte("a\x00")}),
		"a format code out of use": bindSection([]int16{2}, [][]byte{[]byte("api"), []byte("app.x"), []byte("1")}),
	} {
		if _, ok := localOps(sets, bind, nil); ok {
			t.Errorf("%s: resolved", what)
		}
	}
	// A parameter declared of a type PostgreSQL converts first (bpchar
	// drops trailing blanks) is not taken as the value set.
	tail := []byte{0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0x12} // $3 bpchar (1042)
	if _, ok := localOps(sets, bindSection(nil, [][]byte{[]byte("api"), []byte("app.x"), []byte("a  ")}), tail); ok {
		t.Error("a bpchar value resolved")
	}
}
