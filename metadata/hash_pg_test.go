package metadata_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/metadata"
)

// TestMain (pgtest.Main, which stops the shared cluster) is in store_test.go.

func hashTestConn(t *testing.T) (context.Context, *pgx.Conn) {
	t.Helper()
	cl := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, cl.Servers[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// Reproducible random() values; gen_random_uuid() is not seeded.
	if _, err := conn.Exec(ctx, "SELECT setseed(0.25)"); err != nil {
		t.Fatal(err)
	}
	return ctx, conn
}

// TestHashMatchesPostgres compares the Go hashes with PostgreSQL's own for
// values generated in SQL, each fetched together with PostgreSQL's hash of it
// in its text form and its binary (send) form.
func TestHashMatchesPostgres(t *testing.T) {
	ctx, conn := hashTestConn(t)
	total := 0

	// check runs a query returning (text form, binary form, PostgreSQL's
	// hash) and compares HashValue, HashBinary and, via native, the typed
	// function with the hash.
	check := func(name, typ, sql string, native func(text string, bin []byte) int32) {
		t.Helper()
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n, bad := 0, 0
		var text string
		var bin []byte
		var want int32
		_, err = pgx.ForEachRow(rows, []any{&text, &bin, &want}, func() error {
			n++
			got, err := metadata.HashValue(typ, text)
			if err != nil || got != want {
				bad++
				if bad <= 10 {
					t.Errorf("%s: HashValue(%q, %q) = %d, %v; PostgreSQL %d", name, typ, text, got, err, want)
				}
			}
			got, err = metadata.HashBinary(typ, bin)
			if err != nil || got != want {
				bad++
				if bad <= 10 {
					t.Errorf("%s: HashBinary(%q, %x) = %d, %v; PostgreSQL %d", name, typ, bin, got, err, want)
				}
			}
			if got := native(text, bin); got != want {
				bad++
				if bad <= 10 {
					t.Errorf("%s: Go hash of %q = %d; PostgreSQL %d", name, text, got, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n < 100 {
			t.Fatalf("%s: only %d rows", name, n)
		}
		t.Logf("%s: %d values compared, %d mismatches", name, n, bad)
		total += n
	}
	be := func(b []byte) uint64 {
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v
	}

	check("int8", "int8", `
		WITH v(x) AS (
			SELECT generate_series(-3000, 3000)::int8
			UNION ALL SELECT unnest('{-9223372036854775808, -9223372036854775807, 9223372036854775807,
				9223372036854775806, 2147483647, 2147483648, -2147483648, -2147483649,
				4294967295, 4294967296, -4294967296, -4294967297}'::int8[])
			UNION ALL SELECT s * ((1::int8 << e) + d)
				FROM generate_series(0, 62) e, generate_series(-2, 2) d, (VALUES (1), (-1)) sg(s)
			UNION ALL SELECT ((random() - 0.5) * 1.8e19)::int8 FROM generate_series(1, 3000)
		)
		SELECT x::text, int8send(x), hashint8(x) FROM v`,
		func(_ string, b []byte) int32 { return metadata.HashInt8(int64(be(b))) })

	check("int4", "int4", `
		WITH v(x) AS (
			SELECT generate_series(-3000, 3000)::int4
			UNION ALL SELECT unnest('{-2147483648, -2147483647, 2147483647, 2147483646, 32767, 32768, -32768, -32769}'::int4[])
			UNION ALL SELECT s * ((1 << e) + d)
				FROM generate_series(0, 30) e, generate_series(-2, 2) d, (VALUES (1), (-1)) sg(s)
			UNION ALL SELECT ((random() - 0.5) * 4.2e9)::int4 FROM generate_series(1, 3000)
		)
		SELECT x::text, int4send(x), hashint4(x) FROM v`,
		func(_ string, b []byte) int32 { return metadata.HashInt4(int32(be(b))) })

	// Every smallint.
	check("int2", "int2", `
		SELECT x::text, int2send(x), hashint2(x) FROM generate_series(-32768, 32767) g(i), LATERAL (SELECT i::int2) v(x)`,
		func(_ string, b []byte) int32 { return metadata.HashInt2(int16(be(b))) })

	// Texts of every length 0..200 (md5 digits), multibyte UTF-8 texts of
	// 0..119 characters and texts with trailing spaces.
	const texts = `
		WITH v(x) AS (
			SELECT substr(repeat(md5(i::text), 7), 1, i % 201) FROM generate_series(0, 4019) i
			UNION ALL SELECT substr(repeat('äö€𝄞x日本', 40), 1, i % 120) FROM generate_series(0, 239) i
			UNION ALL SELECT substr(md5(i::text), 1, i % 13) || repeat(' ', i % 4) FROM generate_series(0, 399) i
		)`
	check("text", "text", texts+`SELECT x, textsend(x), hashtext(x) FROM v`,
		func(s string, b []byte) int32 { return metadata.HashText(b) })
	check("varchar", "varchar", texts+`SELECT x, varcharsend(x::varchar), hashtext(x::varchar) FROM v`,
		func(s string, _ []byte) int32 { return metadata.HashTextString(s) })
	check("bpchar", "bpchar", texts+`SELECT x, bpcharsend(x::bpchar), hashbpchar(x::bpchar) FROM v`,
		func(s string, _ []byte) int32 { return metadata.HashBPChar([]byte(s)) })

	// Random UUIDs, also in PostgreSQL's other input forms.
	const uuids = `
		WITH v(x) AS (
			SELECT gen_random_uuid() FROM generate_series(1, 3000)
			UNION ALL SELECT unnest('{00000000-0000-0000-0000-000000000000, ffffffff-ffff-ffff-ffff-ffffffffffff}'::uuid[])
		)`
	uuidNative := func(_ string, b []byte) int32 { return metadata.HashUUID([16]byte(b)) }
	check("uuid", "uuid", uuids+`SELECT x::text, uuid_send(x), uuid_hash(x) FROM v`, uuidNative)
	check("uuid upper, no hyphens", "uuid", uuids+`SELECT upper(replace(x::text, '-', '')), uuid_send(x), uuid_hash(x) FROM v`, uuidNative)
	check("uuid braces", "uuid", uuids+`SELECT '{' || x::text || '}', uuid_send(x), uuid_hash(x) FROM v`, uuidNative)

	t.Logf("%d values compared in all", total)
}

// TestHashValueInputMatchesPostgres feeds the same strings to PostgreSQL's
// input functions and to HashValue: both must accept them and agree on the
// hash, or both reject them with the same SQLSTATE and message.
func TestHashValueInputMatchesPostgres(t *testing.T) {
	ctx, conn := hashTestConn(t)
	inputs := map[string][]string{
		"int2": {"0", " 1", "-1 ", "+7", "-0", "32767", "-32768", "32768", "-32769", "000032767",
			"", " ", "-", "+", "+-1", "1 2", "1.5", "1e2", "0x1F", "1_0", "abc", "\t\n\v\f\r5\r\n",
			"99999999999999999999x", "１"},
		"int4": {"0", "2147483647", "-2147483648", "2147483648", "-2147483649", " +42 ", "4 2", "--1",
			"00000000000000002147483647", "21474836470", "1\u00a0"},
		"int8": {"0", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
			"-9223372036854775809", " -1", "1 ", "18446744073709551616", "1.", ".1", "٣"},
		"uuid": {"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
			"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "a0eebc999c0b4ef8bb6d6bb9bd380a11",
			"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11", "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11",
			"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-", "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
			"a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11", "a0e-ebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
			" a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
			"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
			"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
			"g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "", "{}", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}}"},
		"text":    {"", "x", "  spaced  ", "ünïcödé"},
		"varchar": {"", "abc  "},
		"bpchar":  {"", "   ", "abc  "},
	}
	hashFn := map[string]string{"int2": "hashint2", "int4": "hashint4", "int8": "hashint8",
		"uuid": "uuid_hash", "text": "hashtext", "varchar": "hashtext", "bpchar": "hashbpchar"}
	n := 0
	for typ, list := range inputs {
		for _, in := range list {
			n++
			var want int32
			pgErr := conn.QueryRow(ctx, "SELECT "+hashFn[typ]+"($1::text::"+typ+")", in).Scan(&want)
			got, err := metadata.HashValue(typ, in)
			var wpe *pgconn.PgError
			switch {
			case pgErr == nil:
				if err != nil || got != want {
					t.Errorf("%s %q: HashValue = %d, %v; PostgreSQL %d", typ, in, got, err, want)
				}
			case errors.As(pgErr, &wpe):
				var pe *pgerr.Error
				if !errors.As(err, &pe) || pe.Code != wpe.Code || pe.Message != wpe.Message {
					t.Errorf("%s %q: HashValue error %v; PostgreSQL %s %q", typ, in, err, wpe.Code, wpe.Message)
				}
			default:
				t.Fatalf("%s %q: %v", typ, in, pgErr)
			}
		}
	}
	t.Logf("%d inputs compared", n)
}

// TestHashFunctionsAreTheTypesOwn checks that the SQL functions the other
// tests compare with are the hash support functions of the types' default
// hash operator classes, the ones PostgreSQL (and Citus) use to hash a
// value of the type, and that varchar is hashed as text.
func TestHashFunctionsAreTheTypesOwn(t *testing.T) {
	ctx, conn := hashTestConn(t)
	rows, err := conn.Query(ctx, `
		SELECT oc.opcintype::regtype::text, p.amproc::text
		FROM pg_opclass oc
		JOIN pg_am am ON am.oid = oc.opcmethod AND am.amname = 'hash'
		JOIN pg_amproc p ON p.amprocfamily = oc.opcfamily AND p.amproclefttype = oc.opcintype
			AND p.amprocrighttype = oc.opcintype AND p.amprocnum = 1
		WHERE oc.opcdefault
			AND oc.opcintype IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'text'::regtype,
				'bpchar'::regtype, 'uuid'::regtype, 'varchar'::regtype)`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var typ, fn string
	if _, err := pgx.ForEachRow(rows, []any{&typ, &fn}, func() error { got[typ] = fn; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"smallint": "hashint2", "integer": "hashint4", "bigint": "hashint8",
		"text": "hashtext", "character": "hashbpchar", "uuid": "uuid_hash"}
	for typ, fn := range want {
		if got[typ] != fn {
			t.Errorf("default hash function of %s: %q, want %q", typ, got[typ], fn)
		}
	}
	if len(got) != len(want) {
		t.Errorf("default hash opclasses: %v, want %v (varchar must have none of its own)", got, want)
	}
	var method string
	err = conn.QueryRow(ctx, `SELECT castmethod::text FROM pg_cast
		WHERE castsource = 'varchar'::regtype AND casttarget = 'text'::regtype`).Scan(&method)
	if err != nil || method != "b" {
		t.Errorf("varchar to text cast: method %q, %v; want binary coercible (b)", method, err)
	}
}

// TestHashRanges checks the shard hash ranges against Citus' formula: with
// step = 2^32 / n, shard i holds [MinInt32 + i*step, MinInt32 + (i+1)*step - 1]
// and the last shard ends at MaxInt32. Together the ranges cover the int32
// space without gaps or overlaps.
func TestHashRanges(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 7, 32, 64, 100, 1000} {
		r := metadata.HashRanges(n)
		if len(r) != n {
			t.Fatalf("n=%d: %d ranges", n, len(r))
		}
		step := int64(1<<32) / int64(n)
		if r[0][0] != math.MinInt32 || r[n-1][1] != math.MaxInt32 {
			t.Errorf("n=%d: ranges span [%d, %d], want the whole int32 space", n, r[0][0], r[n-1][1])
		}
		for i := range r {
			wantMin := int32(math.MinInt32 + int64(i)*step)
			wantMax := int32(int64(wantMin) + step - 1)
			if i == n-1 {
				wantMax = math.MaxInt32
			}
			if r[i] != [2]int32{wantMin, wantMax} {
				t.Errorf("n=%d: range %d = %v, want [%d, %d]", n, i, r[i], wantMin, wantMax)
			}
			if r[i][0] > r[i][1] {
				t.Errorf("n=%d: range %d = %v is empty", n, i, r[i])
			}
			if i > 0 && int64(r[i-1][1])+1 != int64(r[i][0]) {
				t.Errorf("n=%d: ranges %d and %d are not contiguous: %v %v", n, i-1, i, r[i-1], r[i])
			}
		}
		// Citus' shortcut for finding the shard of a hash without a search
		// must agree with the ranges.
		for _, h := range []int32{math.MinInt32, -1, 0, 1, math.MaxInt32, r[n-1][0], r[n-1][0] - 1,
			metadata.HashInt8(42), metadata.HashTextString("pgfleet")} {
			i := int64(uint32(int64(h)-math.MinInt32)) / step
			if i == int64(n) {
				i = int64(n) - 1
			}
			if h < r[i][0] || h > r[i][1] {
				t.Errorf("n=%d: hash %d is in shard %d by Citus' formula, whose range is %v", n, h, i, r[i])
			}
		}
	}
	for _, n := range []int{0, -1} {
		if r := metadata.HashRanges(n); r != nil {
			t.Errorf("HashRanges(%d) = %v, want nil", n, r)
		}
	}
}
