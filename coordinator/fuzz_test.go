package coordinator

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// Fuzz targets for what the coordinator reads from clients before any
// worker sees it (run with scripts/fuzz; plain go test runs the seeds and
// the corpus under testdata/fuzz). None needs PostgreSQL: the session code
// they drive stops before it would check out a server connection.

// fuzzConn is a client connection whose bytes come from the fuzzer, in
// reads cut at the points cuts gives; what the coordinator writes is kept.
type fuzzConn struct {
	net.Conn // nil: only the methods below are called
	in       []byte
	cuts     []byte
	k        int
	out      bytes.Buffer
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := len(c.in)
	if len(c.cuts) > 0 {
		n = 1 + int(c.cuts[c.k%len(c.cuts)])*5
		c.k++
	}
	n = min(n, len(p), len(c.in))
	copy(p, c.in[:n])
	c.in = c.in[n:]
	return n, nil
}

func (c *fuzzConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fuzzConn) Close() error                     { return nil }

func fuzzServer(t testing.TB, auth string) *Server {
	s, err := New(Config{Workers: []string{"127.0.0.1:1"}, Auth: auth, Users: map[string]string{"alice": "secret"},
		Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzStartup sends arbitrary bytes as a new connection's first: startup
// packets (SSL and GSS requests, cancel requests, protocol versions) and
// then the authentication exchange of trust, md5 or SCRAM. Nothing may
// panic; every refusal is an error PostgreSQL would send (or a quiet
// close); and without the password nobody gets past md5 or SCRAM.
func FuzzStartup(f *testing.F) {
	servers := []*Server{fuzzServer(f, "trust"), fuzzServer(f, "md5"), fuzzServer(f, "scram-sha-256")}
	startup := func(params ...string) []byte {
		b := []byte{0, 0, 0, 0, 0, 3, 0, 0}
		for _, p := range params {
			b = append(append(b, p...), 0)
		}
		b = append(b, 0)
		b[3] = byte(len(b))
		b[2] = byte(len(b) >> 8)
		return b
	}
	ssl := []byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f}
	sm := startup("user", "alice", "database", "db", "options", "-c search_path=x --work-mem=64kB")
	f.Add(append(append([]byte{}, ssl...), sm...), []byte(nil), uint8(0))
	f.Add(append(startup("user", "alice"), "p\x00\x00\x00\x28md5aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\x00"...), []byte{1}, uint8(1))
	f.Add(append(startup("user", "alice"), "p\x00\x00\x00\x36SCRAM-SHA-256\x00\x00\x00\x00\x20n,,n=,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa\x00"...), []byte(nil), uint8(2))
	f.Add([]byte{0, 0, 0, 16, 4, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2}, []byte(nil), uint8(0))
	f.Add(startup("user", "alice", "_pq_.x", "1"), []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, in, cuts []byte, auth uint8) {
		s := servers[int(auth)%len(servers)]
		c := &fuzzConn{in: in, cuts: cuts}
		ss := &session{srv: s, conn: c, w: c, r: wire.NewPooledReader(c, 8192)}
		sm, err := ss.readStartup()
		if err != nil {
			checkClientError(t, err)
			return
		}
		if sm.Parameters["user"] == "" {
			t.Fatalf("startup accepted without a user: %v", sm.Parameters)
		}
		if p, err := startupParams(sm.Parameters); err != nil {
			checkClientError(t, err)
		} else {
			_ = newSessionParams(p)
		}
		err = ss.authenticate(sm)
		if err != nil {
			checkClientError(t, err)
			return
		}
		if s.cfg.Auth != "trust" {
			t.Fatalf("%s authentication let %q in without the password: %q", s.cfg.Auth, sm.Parameters["user"], in)
		}
	})
}

// checkClientError: what a client is told is a PostgreSQL error with a
// SQLSTATE, or the connection closes quietly.
func checkClientError(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, errQuietClose) {
		return
	}
	var pe *pgerr.Error
	if !errors.As(err, &pe) || len(pe.Code) != 5 || pe.Code == pgerr.Internal {
		t.Fatalf("client error %v is not a PostgreSQL error with a SQLSTATE", err)
	}
}

// FuzzClientMessage decodes one frontend message as the session does
// (session.go: simpleQuery, parse, bind, describe, execute, close; the
// statement registry; routing's Bind parameter reader) and checks the
// pieces against pgproto3's decoders wherever those accept the message.
func FuzzClientMessage(f *testing.F) {
	var reg stmtRegistry
	reg.m = map[string]*Statement{}
	f.Add(byte('Q'), []byte("SELECT 1; SET search_path = x\x00"))
	f.Add(byte('P'), []byte("s1\x00SELECT * FROM t WHERE id = $1\x00\x00\x01\x00\x00\x00\x14"))
	f.Add(byte('P'), []byte("\x00SELECT $1, $2\x00\x00\x02\x00\x00\x00\x17\x00\x00\x00\x00"))
	f.Add(byte('B'), []byte("p\x00s1\x00\x00\x01\x00\x01\x00\x02\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x07\xff\xff\xff\xff\x00\x00"))
	f.Add(byte('B'), []byte("\x00\x00\x00\x02\x00\x00\x00\x01\x00\x01\x00\x00\x00\x0212\x00\x01\x00\x01"))
	f.Add(byte('D'), []byte("Ss1\x00"))
	f.Add(byte('C'), []byte("Pp\x00"))
	f.Add(byte('E'), []byte("p\x00\x00\x00\x00\x0a"))
	f.Add(byte('p'), []byte("SCRAM-SHA-256\x00\xff\xff\xff\xff"))
	f.Add(byte('f'), []byte("client gave up\x00"))
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		switch typ {
		case 'Q':
			if sql, _, ok := wire.CBytes(body); ok {
				_ = classify(string(sql))
			}
		case 'P':
			name, rest, ok := wire.CBytes(body)
			var pm pgproto3.Parse
			pok := pm.Decode(body) == nil
			if !ok {
				if pok {
					t.Fatalf("Parse %q: pgproto3 reads it, the session refuses it", body)
				}
				return
			}
			st := reg.intern(rest)
			if st == nil {
				if pok {
					t.Fatalf("Parse %q: pgproto3 reads it, the registry refuses it", body)
				}
				return
			}
			if !pok {
				return
			}
			if string(name) != pm.Name || st.Query != pm.Query {
				t.Fatalf("Parse %q: name %q query %q, pgproto3: %q %q", body, name, st.Query, pm.Name, pm.Query)
			}
			for k, oid := range pm.ParameterOIDs {
				if got := paramType(st.paramTail, k); got != oid {
					t.Fatalf("Parse %q: parameter %d type %d, pgproto3: %d", body, k+1, got, oid)
				}
			}
			if got := paramType(st.paramTail, len(pm.ParameterOIDs)); got != 0 {
				t.Fatalf("Parse %q: parameter %d beyond the declared has type %d", body, len(pm.ParameterOIDs)+1, got)
			}
			// The frame the worker is sent prepares the same text and types.
			var sp pgproto3.Parse
			if sp.Decode(st.parse[5:]) != nil || sp.Name != st.Name || sp.Query != pm.Query ||
				len(sp.ParameterOIDs) != len(pm.ParameterOIDs) {
				t.Fatalf("Parse %q: the worker's frame %q does not match", body, st.parse)
			}
		case 'B':
			portal, rest, ok1 := wire.CBytes(body)
			name, params, ok2 := wire.CBytes(rest)
			var bm pgproto3.Bind
			bok := bm.Decode(body) == nil
			if !ok1 || !ok2 {
				if bok {
					t.Fatalf("Bind %q: pgproto3 reads it, the session refuses it", body)
				}
				return
			}
			for _, k := range []int{0, 1, 2, len(bm.Parameters), 65535} {
				_, _, _, _ = bindParam(params, k)
			}
			if !bok {
				return
			}
			if string(portal) != bm.DestinationPortal || string(name) != bm.PreparedStatement {
				t.Fatalf("Bind %q: portal %q statement %q, pgproto3: %q %q", body, portal, name, bm.DestinationPortal, bm.PreparedStatement)
			}
			for k, want := range bm.Parameters {
				val, format, isNull, ok := bindParam(params, k)
				var wantFormat int16
				switch n := len(bm.ParameterFormatCodes); {
				case n == 1:
					wantFormat = bm.ParameterFormatCodes[0]
				case n > k:
					wantFormat = bm.ParameterFormatCodes[k]
				}
				if !ok || isNull != (want == nil) || !bytes.Equal(val, want) || format != wantFormat {
					t.Fatalf("Bind %q: parameter %d = %q null=%v format %d ok=%v; pgproto3: %q format %d",
						body, k+1, val, isNull, format, ok, want, wantFormat)
				}
			}
			if _, _, _, ok := bindParam(params, len(bm.Parameters)); ok {
				t.Fatalf("Bind %q: parameter %d read past the %d sent", body, len(bm.Parameters)+1, len(bm.Parameters))
			}
		case 'D', 'C':
			if len(body) < 2 {
				return
			}
			name, _, ok := wire.CBytes(body[1:])
			var dm pgproto3.Describe
			if dm.Decode(body) == nil && (!ok || string(name) != dm.Name) {
				t.Fatalf("Describe/Close %q: name %q ok=%v, pgproto3: %q", body, name, ok, dm.Name)
			}
		case 'E':
			portal, _, ok := wire.CBytes(body)
			var em pgproto3.Execute
			if em.Decode(body) == nil && (!ok || string(portal) != em.Portal) {
				t.Fatalf("Execute %q: portal %q ok=%v, pgproto3: %q", body, portal, ok, em.Portal)
			}
		case 'p':
			var pm pgproto3.PasswordMessage
			_ = pm.Decode(body)
			var si pgproto3.SASLInitialResponse
			_ = si.Decode(body)
			var sr pgproto3.SASLResponse
			_ = sr.Decode(body)
		case 'f':
			var cf pgproto3.CopyFail
			_ = cf.Decode(body)
		}
	})
}

// FuzzClassify runs the lexical classifier on arbitrary SQL. It must not
// panic; its statement splitting must cover the text exactly (the pieces
// joined with ";" give it back); and where PostgreSQL's own grammar
// (pg_query) parses the text, both must count the same statements, since
// a statement the classifier does not see is a SET or BEGIN it cannot
// track.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"SELECT 1; SET search_path = x", "BEGIN; UPDATE t SET v = 1; COMMIT AND CHAIN",
		"SELECT 'a;b' ; SELECT \"x;y\"; SELECT $$;$$; SELECT $q$ ; $q$", "SELECT E'\\';' ; RESET ALL",
		"/* ; /* ; */ ; */ SET x = 1", "-- ;\nDISCARD ALL", "SELECT set_config('a.b', 'c', false)",
		"DO $$BEGIN PERFORM 1; END$$", "SELECT currval('s'); SELECT \"lastval\"()", "PREPARE p AS SELECT 1; EXECUTE p",
		"SELECT 1 FROM t AS x(a) ; LISTEN c", "SAVEPOINT a; ROLLBACK TO a; RELEASE a", "SELECT U&'\\0061' ; SET TIME ZONE LOCAL",
		"SET a = 'b'; RESET ALL", "/* /* */", "E'\\", `"a""b"`, "$1$", "DEALLOCATE",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		c := classify(sql)
		if c.count < 0 || len(c.ops) > c.count {
			t.Fatalf("classify(%q): %d ops for %d statements", sql, len(c.ops), c.count)
		}
		lx := lexer{s: sql}
		var pieces []string
		words, prevEnd := 0, -1
		for {
			n, start, end, more := lx.statement()
			if start < 0 || start > end || end > len(sql) || start < prevEnd || n > maxWords {
				t.Fatalf("statement %d of %q: words %d, [%d:%d]", len(pieces), sql, n, start, end)
			}
			prevEnd = end
			pieces = append(pieces, sql[start:end])
			if n > 0 {
				words++
			}
			if !more {
				break
			}
		}
		if strings.Join(pieces, ";") != sql {
			t.Fatalf("statements %q do not join back into %q", pieces, sql)
		}
		if words != c.count {
			t.Fatalf("%q: %d statements with words, classify counts %d", sql, words, c.count)
		}
		if strings.IndexByte(sql, 0) >= 0 || len(sql) > 2000 {
			return
		}
		tree, err := pg_query.Parse(sql)
		if err != nil {
			return
		}
		if len(tree.Stmts) != c.count {
			t.Fatalf("%q: PostgreSQL's grammar reads %d statements, classify %d", sql, len(tree.Stmts), c.count)
		}
	})
}

// FuzzLiftLiterals lifts a statement's constants into parameters, as the
// simple protocol path does, and splices them back. It must not panic;
// splicing the lifted text gives back exactly the statement (the routed
// text is the client's); collapsing long IN lists changes nothing a splice
// gives back.
func FuzzLiftLiterals(f *testing.F) {
	for _, s := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;", "UPDATE t SET v = 'it''s' WHERE id = -7",
		"SELECT * FROM t WHERE d = date '2020-01-01' AND x = 1.5e3", "SELECT * FROM t1 WHERE c = E'a\\'b' AND k = 2 -- 3\n",
		`SELECT "col1" FROM "T2" WHERE $$x$$ = 'y' /* 9 */`, "SELECT a FROM t WHERE k BETWEEN 5 AND 5 + 999 ORDER BY 1 LIMIT 10",
		"SELECT * FROM t WHERE id IN (" + strings.Repeat("1, ", 70) + "2)", "SELECT 'a' 'b'", "SELECT U&'d\\0061t' , 3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		_ = escapeStrings(sql)
		_ = stringConstants(sql)
		norm, lits, ok := liftLiterals(sql)
		if !ok {
			return
		}
		back, ok2 := spliceLiterals(norm, lits)
		comments := strings.Contains(sql, "--") || strings.Contains(sql, "/*")
		if (ok2 || !comments) && back != sql {
			// The planner's texts (deparsed) have no comments; with them,
			// splicing may only fail (ok false), never give other text.
			t.Fatalf("splice(lift(%q)) = %q, %v (lifted %q)", sql, back, ok2, norm)
		}
		if !ok2 && !comments {
			t.Fatalf("splice(lift(%q)) failed (lifted %q)", sql, norm)
		}
		// A collapsed list is rendered with one space after each comma:
		// the same text up to whitespace between tokens.
		cn, cl := collapseLists(norm, lits)
		if cb, ok3 := spliceLiterals(cn, cl); ok2 && (!ok3 || !sameTokens(cb, back)) {
			t.Fatalf("collapsed %q splices to %q, %v; uncollapsed gives %q", cn, cb, ok3, back)
		}
	})
}

// sameTokens reports whether a and b differ at most in whitespace outside
// quotes (a collapsed list is written "1, 2"; the client may write "1,2").
func sameTokens(a, b string) bool {
	strip := func(s string) string {
		var out strings.Builder
		var quote byte
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
				continue
			}
			out.WriteByte(c)
		}
		return out.String()
	}
	return strip(a) == strip(b)
}

// fuzzCatalog: accounts int8 and orders text distributed (4 shards),
// items uuid, branches a reference table.
func fuzzCatalog() *metadata.Snapshot {
	s := &metadata.Snapshot{Version: 1, Tables: map[string]*metadata.Table{}, Shards: map[string][]metadata.Shard{}}
	id := int64(102008)
	dist := func(name, col, typ string, coloc int32) {
		s.Tables[name] = &metadata.Table{Name: name, Kind: metadata.Distributed, DistColumn: col, DistType: typ, ColocationID: coloc, ShardCount: 4}
		for i, r := range metadata.HashRanges(4) {
			s.Shards[name] = append(s.Shards[name], metadata.Shard{ID: id, Table: name, MinHash: r[0], MaxHash: r[1], Nodes: []int32{int32(i%2 + 1)}})
			id++
		}
	}
	dist("public.accounts", "aid", "int8", 1)
	dist("public.orders", "id", "text", 2)
	dist("public.items", "id", "uuid", 3)
	dist("public.smalls", "k", "int2", 4)
	dist("public.chars", "c", "bpchar", 5)
	s.Tables["public.branches"] = &metadata.Table{Name: "public.branches", Kind: metadata.Reference}
	s.Shards["public.branches"] = []metadata.Shard{{ID: id, Table: "public.branches", MinHash: -1 << 31, MaxHash: 1<<31 - 1, Nodes: []int32{1, 2}}}
	return s
}

// FuzzLiftRoute compares the two ways a simple-protocol statement can be
// planned: as written, and with its constants lifted (planSimple's way,
// which it takes when the lifted text plans and splices back). Where both
// route to one shard by a value the router reads itself, the shard must
// be the same, and the statement the shard is sent must be the same.
func FuzzLiftRoute(f *testing.F) {
	cat := fuzzCatalog()
	for _, s := range []string{
		"SELECT abalance FROM accounts WHERE aid = 48213", "UPDATE accounts SET abalance = abalance + 5 WHERE aid = -7",
		"SELECT * FROM orders WHERE id = 'it''s'", "SELECT * FROM orders WHERE id = 12", "INSERT INTO accounts (aid, abalance) VALUES (00012, 3)",
		"SELECT * FROM items WHERE id = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "SELECT * FROM smalls WHERE k = 70000",
		"SELECT * FROM chars WHERE c = 'ab  '", "DELETE FROM accounts WHERE aid = 1.5", "SELECT * FROM accounts WHERE aid = 1e3",
		"SELECT * FROM accounts WHERE aid = 9223372036854775808", "SELECT * FROM orders WHERE id = 'x' AND 1 = 1",
		"SELECT * FROM accounts WHERE aid IN (" + strings.Repeat("1, ", 70) + "2)", "SELECT * FROM branches WHERE bid = 3",
		"SELECT * FROM accounts a JOIN accounts b USING (aid) WHERE a.aid = 4", "SELECT * FROM orders WHERE id = '5'::text",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4000 || strings.IndexByte(sql, 0) >= 0 {
			return
		}
		pa, errA := planner.Build(sql, cat)
		norm, lits, ok := liftLiterals(sql)
		if !ok {
			return
		}
		norm, lits = collapseLists(norm, lits)
		pb, errB := planner.Build(norm, cat)
		if errB != nil || pb.SyntaxError() {
			return // planSimple plans the text as written
		}
		if len(pb.ShardSQL()) > 0 {
			if _, ok := spliceLiterals(pb.ShardSQL()[0], lits); !ok {
				return
			}
		}
		if errA != nil || pa.SyntaxError() || pa.Kind() != planner.KindRouter || pb.Kind() != planner.KindRouter || pa.DistTable() != pb.DistTable() {
			return
		}
		va, vb := pa.Root.(*planner.Route).Value, pb.Root.(*planner.Route).Value
		if va == nil || vb == nil || va.Null || vb.Null || va.Param != 0 {
			return
		}
		ha, askA, errHA := fastHash(pa, va, constInput(va), false)
		var in distInput
		if vb.Param > 0 {
			if vb.Param > len(lits) {
				t.Fatalf("%q lifted to %q: the value is $%d of %d literals", sql, norm, vb.Param, len(lits))
			}
			l := lits[vb.Param-1]
			in = distInput{src: litSource(l.token), val: []byte(l.value), lit: &l}
		} else {
			in = constInput(vb)
		}
		hb, askB, errHB := fastHash(pb, vb, in, false)
		if askA || askB {
			return // PostgreSQL computes it
		}
		if (errHA == nil) != (errHB == nil) || errHA == nil && ha != hb {
			t.Fatalf("%q routes by hash %d (%v) as written, by %d (%v) lifted to %q", sql, ha, errHA, hb, errHB, norm)
		}
		if errHA != nil {
			return
		}
		idx := metadata.ShardIndex(cat.Shards[pa.DistTable()], ha)
		if idx < 0 || idx >= len(pa.ShardSQL()) || idx >= len(pb.ShardSQL()) {
			return
		}
		sa := normalSQL(pa.ShardSQL()[idx])
		spliced, _ := spliceLiterals(pb.ShardSQL()[idx], lits)
		if sb := normalSQL(spliced); sa != sb {
			t.Fatalf("%q: the shard is sent\n%s\nas written, but lifted\n%s", sql, sa, sb)
		}
	})
}

// normalSQL is sql parsed and deparsed (constants as PostgreSQL reads
// them, no comments), or sql if it does not parse.
func normalSQL(sql string) string {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return sql
	}
	out, err := pg_query.Deparse(tree)
	if err != nil {
		return sql
	}
	return out
}
