package executor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// The executor against fake shard connections: what reaches the client,
// in what order, and the state the connections are left in.

// catalog has public.t, distributed by bigint aid over 4 shards on nodes 1
// and 2.
func catalog() *metadata.Snapshot {
	s := &metadata.Snapshot{Version: 1, Tables: map[string]*metadata.Table{}, Shards: map[string][]metadata.Shard{}}
	s.Tables["public.t"] = &metadata.Table{Name: "public.t", Kind: metadata.Distributed, DistColumn: "aid", DistType: "int8", ColocationID: 1, ShardCount: 4}
	for i, r := range metadata.HashRanges(4) {
		s.Shards["public.t"] = append(s.Shards["public.t"], metadata.Shard{ID: int64(102008 + i), Table: "public.t", MinHash: r[0], MaxHash: r[1], Nodes: []int32{int32(i%2 + 1)}})
	}
	return s
}

func plan(t *testing.T, sql string) *planner.Plan {
	t.Helper()
	p, err := planner.Build(sql, catalog())
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind() != planner.KindMultiShard || len(p.Scatter().Workers) != 2 {
		t.Fatalf("%s: plan %s with %d workers, want a multi-shard one over 2", sql, p.Kind(), len(p.Scatter().Workers))
	}
	return p
}

func int8Field(name string, format int16) pgproto3.FieldDescription {
	return pgproto3.FieldDescription{Name: []byte(name), DataTypeOID: 20, DataTypeSize: 8, TypeModifier: -1, Format: format}
}

func text(vals ...string) [][][]byte {
	var rows [][][]byte
	for _, v := range vals {
		rows = append(rows, [][]byte{[]byte(v)})
	}
	return rows
}

// run runs p over one fake worker per plan worker, each answering with
// answers[i], and returns the run and what the client got.
func run(t *testing.T, p *planner.Plan, answers []func(q string, b *pgproto3.Bind) answer, setup func(*Scatter)) (*Scatter, *sink, error) {
	t.Helper()
	k := &sink{}
	r := &Scatter{X: p.Scatter(), FirstSQL: p.ShardSQL()[0], Pending: make([]bool, len(answers)), Text: noText{},
		RT: &Runtime{}, Limit: -1, Sink: k,
		Env: &Env{MaxGather: 1 << 20, Types: func(*pooling.ServerConn) (map[uint32]Type, error) {
			return map[uint32]Type{20: {Name: "int8", Array: 1016}, 23: {Name: "int4", Array: 1007}, 1700: {Name: "numeric", Array: 1231}}, nil
		}, Prepared: func(rest []byte) Stmt {
			q := string(rest[:strings.IndexByte(string(rest), 0)])
			parse, _ := (&pgproto3.Parse{Name: "m1", Query: q}).Encode(nil)
			return Stmt{Name: "m1", Parse: parse}
		}}}
	for i, a := range answers {
		sc, _ := fakeConn(t, fmt.Sprintf("worker%d", i+1), a)
		r.Conns = append(r.Conns, sc)
	}
	if setup != nil {
		setup(r)
	}
	err := r.Run()
	return r, k, err
}

type noText struct{}

func (noText) Splice(sql string) string { return sql }
func (noText) SpliceParams(sql string, params []int, first int) (string, error) {
	return sql, nil
}

// rowsOf are the DataRows' single text values the client got, and the
// other message types in order.
func rowsOf(k *sink) (types string, vals []string) {
	for _, m := range k.msgs {
		types += m[:1]
		if m[0] == 'D' {
			var dr pgproto3.DataRow
			if err := dr.Decode([]byte(m[1:])); err == nil && len(dr.Values) == 1 {
				vals = append(vals, string(dr.Values[0]))
			}
		}
		if m[0] == 'C' {
			vals = append(vals, "tag "+strings.TrimRight(m[1:], "\x00"))
		}
	}
	return types, vals
}

// TestScatterConcat: the first shard's worker is read first and describes
// the result; OFFSET and LIMIT are counted over the workers' rows in
// that order; every connection ends ready for the next statement.
func TestScatterConcat(t *testing.T) {
	p := plan(t, "SELECT aid FROM t")
	worker := func(vals ...string) func(string, *pgproto3.Bind) answer {
		return func(string, *pgproto3.Bind) answer {
			return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)}, rows: text(vals...)}
		}
	}
	r, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{worker("1", "2"), worker("3", "4", "5")}, func(r *Scatter) {
		r.Limit, r.Offset = 3, 1
	})
	if err != nil {
		t.Fatal(err)
	}
	types, vals := rowsOf(k)
	if types != "TDDDC" || strings.Join(vals, ",") != "2,3,4,tag SELECT 3" {
		t.Errorf("client got %s %v, want TDDDC [2 3 4 tag SELECT 3]", types, vals)
	}
	for i, pending := range r.Pending {
		if pending {
			t.Errorf("connection %d left mid-answer", i)
		}
	}
}

// TestScatterWorkerError: a worker's error is the statement's, rows after
// it are not sent, and every connection is read up to ReadyForQuery.
func TestScatterWorkerError(t *testing.T) {
	p := plan(t, "SELECT aid FROM t")
	ok := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)}, rows: text("1")}
	}
	failing := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)},
			err: &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "22012", Message: "division by zero"}}
	}
	// The failing worker holds the first shard: the other's rows come after
	// its error and are dropped.
	r, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{failing, ok}, nil)
	var we *WorkerError
	if !errors.As(err, &we) || we.PG.Code != "22012" {
		t.Fatalf("err = %v, want the worker's 22012", err)
	}
	if types, _ := rowsOf(k); strings.Contains(types, "D") || strings.Contains(types, "C") {
		t.Errorf("client got %s after the error", types)
	}
	for i, pending := range r.Pending {
		if pending {
			t.Errorf("connection %d left mid-answer", i)
		}
	}
}

// TestScatterLostWorker: a worker that hangs up fails the statement with
// 08006; its connection is left pending (the caller closes it), the
// other's is read to the end.
func TestScatterLostWorker(t *testing.T) {
	p := plan(t, "SELECT aid FROM t")
	ok := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)}, rows: text("1")}
	}
	gone := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)}, hangUp: true}
	}
	r, _, err := run(t, p, []func(string, *pgproto3.Bind) answer{ok, gone}, nil)
	var pe interface{ SQLState() string }
	if !errors.As(err, &pe) || pe.SQLState() != "08006" {
		t.Fatalf("err = %v, want 08006", err)
	}
	if r.Pending[0] || !r.Pending[1] {
		t.Errorf("pending = %v, want [false true]", r.Pending)
	}
}

// TestScatterClientGone: once the sink says the client is gone, nothing
// more is sent and the run ends with ErrClientGone, the workers read to
// the end (their connections go back to the pool in sync).
func TestScatterClientGone(t *testing.T) {
	p := plan(t, "SELECT aid FROM t")
	worker := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)}, rows: text("1", "2", "3")}
	}
	r, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{worker, worker}, func(r *Scatter) {
		r.Sink.(*sink).gone = 2 // the RowDescription, then one row
	})
	if !errors.Is(err, ErrClientGone) {
		t.Fatalf("err = %v, want ErrClientGone", err)
	}
	if types, _ := rowsOf(k); types != "TD" {
		t.Errorf("client got %s, want TD", types)
	}
	if r.Pending[0] || r.Pending[1] {
		t.Errorf("pending = %v", r.Pending)
	}
}

// int8Array reads a one-dimensional int8[] in binary.
func int8Array(t *testing.T, b []byte) []int64 {
	t.Helper()
	if len(b) < 12 || binary.BigEndian.Uint32(b[8:]) != 20 {
		t.Fatalf("not an int8 array: %v", b)
	}
	if binary.BigEndian.Uint32(b) == 0 {
		return nil
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	b = b[20:]
	var out []int64
	for i := 0; i < n; i++ {
		if l := int32(binary.BigEndian.Uint32(b)); l != 8 {
			t.Fatalf("element of length %d", l)
		}
		out = append(out, int64(binary.BigEndian.Uint64(b[4:])))
		b = b[12:]
	}
	return out
}

// TestScatterMerge: the workers' partial counts are gathered in binary and
// handed to the merge statement, on the first shard's connection, as one
// int8[] parameter; its row is the client's.
func TestScatterMerge(t *testing.T) {
	p := plan(t, "SELECT count(*) FROM t")
	if p.Scatter().Merge.Kind != planner.SQLMerge {
		t.Fatalf("merge %s", p.Scatter().Merge.Kind)
	}
	var got []int64
	partial := func(n int64) func(string, *pgproto3.Bind) answer {
		return func(q string, b *pgproto3.Bind) answer {
			if strings.HasPrefix(q, "SELECT count(*) FROM") {
				v := binary.BigEndian.AppendUint64(nil, uint64(n))
				return answer{fields: []pgproto3.FieldDescription{int8Field("count", 1)}, rows: [][][]byte{{v}}}
			}
			// The merge statement: the sum of the array.
			var sum int64
			if b != nil && len(b.Parameters) == 1 {
				got = int8Array(t, b.Parameters[0])
				for _, v := range got {
					sum += v
				}
			}
			return answer{fields: []pgproto3.FieldDescription{int8Field("count", 0)}, rows: text(fmt.Sprint(sum))}
		}
	}
	r, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{partial(3), partial(4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	types, vals := rowsOf(k)
	if types != "TDC" || strings.Join(vals, ",") != "7,tag SELECT 1" {
		t.Errorf("client got %s %v, want TDC [7 tag SELECT 1]", types, vals)
	}
	if fmt.Sprint(got) != "[3 4]" {
		t.Errorf("merge got the partial counts %v, want [3 4]", got)
	}
	if r.Pending[0] || r.Pending[1] {
		t.Errorf("pending = %v", r.Pending)
	}
}

// TestScatterMaxGather: partial rows past Env.MaxGather stop the run with
// 54000 and cancel the workers' statements; nothing reaches the client.
func TestScatterMaxGather(t *testing.T) {
	p := plan(t, "SELECT count(*) FROM t")
	many := func(q string, b *pgproto3.Bind) answer {
		var rows [][][]byte
		for i := 0; i < 100; i++ {
			rows = append(rows, [][]byte{binary.BigEndian.AppendUint64(nil, 1)})
		}
		return answer{fields: []pgproto3.FieldDescription{int8Field("count", 1)}, rows: rows}
	}
	cancelled := 0
	_, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{many, many}, func(r *Scatter) {
		r.Env.MaxGather = 1000
		r.Cancel = func() { cancelled++ }
	})
	var pe interface{ SQLState() string }
	if !errors.As(err, &pe) || pe.SQLState() != "54000" {
		t.Fatalf("err = %v, want 54000", err)
	}
	if cancelled != 1 {
		t.Errorf("cancelled %d times, want once", cancelled)
	}
	if types, _ := rowsOf(k); types != "" {
		t.Errorf("client got %s", types)
	}
}

// TestScatterParams: a simple-protocol statement run prepared on the
// workers (TextParams) binds its constants there; a worker's error at
// that statement's Parse or Bind marks the run Unbound (the caller runs
// the text instead), at its Parse UnboundParse too, and leaves the
// connection to prepare it afresh; an error after BindComplete is the
// statement's own answer.
func TestScatterParams(t *testing.T) {
	p := plan(t, "SELECT count(*) FROM t WHERE aid > $1")
	partial := func(q string, b *pgproto3.Bind) answer {
		if strings.Contains(q, "unnest") { // the merge
			return answer{fields: []pgproto3.FieldDescription{int8Field("count", 0)}, rows: text("7")}
		}
		v := binary.BigEndian.AppendUint64(nil, 3)
		return answer{fields: []pgproto3.FieldDescription{int8Field("count", 1)}, rows: [][][]byte{{v}}}
	}
	failure := &pgproto3.ErrorResponse{Severity: "ERROR", Code: "22P02", Message: "invalid input syntax"}
	for _, tc := range []struct {
		name                  string
		step                  string // where a worker fails its statement
		first                 bool   // the first shard's worker (it describes first), not the other
		desc                  pgproto3.FieldDescription
		unbound, unboundParse bool
	}{
		{name: "ok"},
		{name: "bind", step: "bind", unbound: true},
		{name: "parse", step: "parse", unbound: true, unboundParse: true},
		{name: "execute", step: "execute"},
		{name: "first parse", step: "parse", first: true, unbound: true, unboundParse: true},
		{name: "first bind", step: "bind", first: true, unbound: true},
		// The description's Parse (the text) fails: the statement's is
		// skipped, not refused.
		{name: "describe", step: "describe", first: true, unbound: true},
		// The description kept from an earlier run: not asked again; if
		// the merge's types differ from it, the text runs.
		{name: "cached", desc: int8Field("count", 0)},
		{name: "stale", desc: pgproto3.FieldDescription{Name: []byte("count"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1}, unbound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &sink{}
			params := &TextParams{Values: [][]byte{[]byte("5")}}
			if tc.desc.Name != nil {
				params.RowDesc, _ = (&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{tc.desc}}).Encode(nil)
				params.RowDesc = params.RowDesc[5:]
			}
			for i, w := range p.Scatter().Workers {
				name := fmt.Sprintf("b%d", i)
				parse, _ := (&pgproto3.Parse{Name: name, Query: w.SQL}).Encode(nil)
				params.Stmts = append(params.Stmts, Stmt{Name: name, Parse: parse})
			}
			r := &Scatter{X: p.Scatter(), FirstSQL: p.ShardSQL()[0], Pending: make([]bool, 2), Text: noText{},
				Params: params, RT: &Runtime{}, Limit: -1, Sink: k,
				Env: &Env{MaxGather: 1 << 20, Types: func(*pooling.ServerConn) (map[uint32]Type, error) {
					return map[uint32]Type{20: {Name: "int8", Array: 1016}}, nil
				}, Prepared: func(rest []byte) Stmt {
					q := string(rest[:strings.IndexByte(string(rest), 0)])
					parse, _ := (&pgproto3.Parse{Name: "m1", Query: q}).Encode(nil)
					return Stmt{Name: "m1", Parse: parse}
				}}}
			var workers []*fakeWorker
			for i := range 2 {
				sc, w := fakeConn(t, fmt.Sprintf("worker%d", i+1), partial)
				r.Conns = append(r.Conns, sc)
				workers = append(workers, w)
			}
			second := 1 - r.First
			if tc.first {
				second = r.First
			}
			stmt := params.Stmts[second].Name
			workers[second].fail = func(step, q string) *pgproto3.ErrorResponse {
				if step == tc.step && q == p.Scatter().Workers[second].SQL || tc.step == "describe" && step == "parse" && q == r.FirstSQL {
					return failure
				}
				return nil
			}
			if tc.step == "execute" {
				workers[second].answer = func(q string, b *pgproto3.Bind) answer {
					if q == p.Scatter().Workers[second].SQL {
						return answer{err: failure}
					}
					return partial(q, b)
				}
			}
			err := r.Run()
			if r.Unbound != tc.unbound || r.UnboundParse != tc.unboundParse {
				t.Errorf("Unbound %v, UnboundParse %v; want %v, %v", r.Unbound, r.UnboundParse, tc.unbound, tc.unboundParse)
			}
			if tc.name == "stale" {
				if err != ErrTableChanged || len(k.msgs) > 0 {
					t.Errorf("stale description: %v, client got %d messages; want ErrTableChanged and nothing", err, len(k.msgs))
				}
			} else if tc.step == "" {
				types, vals := rowsOf(k)
				if err != nil || types != "TDC" || strings.Join(vals, ",") != "7,tag SELECT 1" {
					t.Errorf("client got %s %v (%v), want TDC [7 tag SELECT 1]", types, vals, err)
				}
				for i, w := range workers {
					w.mu.Lock()
					var bound bool
					for _, b := range w.binds {
						if b.PreparedStatement == params.Stmts[i].Name && len(b.Parameters) == 1 && string(b.Parameters[0]) == "5" {
							bound = true
						}
					}
					w.mu.Unlock()
					if !bound {
						t.Errorf("worker %d: no Bind of %s with the constant", i+1, params.Stmts[i].Name)
					}
				}
				if desc := workers[r.First].parsedText(r.FirstSQL); desc == (params.RowDesc != nil) {
					t.Errorf("the first shard's text described: %v, with a description kept: %v", desc, params.RowDesc != nil)
				}
			} else if sqlState(err) != "22P02" {
				t.Errorf("error %v, want the worker's 22P02", err)
			}
			// Refused or skipped, it is prepared afresh next time.
			if has := r.Conns[second].Stmts.Has(stmt, r.Conns[second].ParamsKey); has != (tc.step == "" || tc.step == "execute") && tc.name != "stale" {
				t.Errorf("after a failure at %q the connection's cache has %s: %v", tc.step, stmt, has)
			}
			if r.Pending[0] || r.Pending[1] {
				t.Errorf("pending = %v", r.Pending)
			}
		})
	}
}

// sqlState is err's SQLSTATE, "" if it has none.
func sqlState(err error) string {
	var we *WorkerError
	if errors.As(err, &we) {
		return we.PG.Code
	}
	return ""
}

// TestScatterMixedPartials: two workers whose partial rows have other
// types (DDL committed between their statements' starts) fail the run
// before the merge (40001 for a text run; a client's prepared statement
// gets PostgreSQL's 0A000); no row reaches the client (found by an
// adversary round: the merge read one worker's values as the other's
// type, 08P01 or 22P03 from the merge statement, and rows of a type the
// client was not told).
func TestScatterMixedPartials(t *testing.T) {
	p := plan(t, "SELECT count(*) FROM t")
	partial := func(oid uint32) func(string, *pgproto3.Bind) answer {
		return func(q string, b *pgproto3.Bind) answer {
			f := int8Field("count", 1)
			v := binary.BigEndian.AppendUint64(nil, 3)
			if oid == 23 {
				f.DataTypeOID, f.DataTypeSize, v = 23, 4, binary.BigEndian.AppendUint32(nil, 3)
			}
			return answer{fields: []pgproto3.FieldDescription{f}, rows: [][][]byte{{v}}}
		}
	}
	_, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{partial(20), partial(23)}, nil)
	if err != ErrTableChanged {
		t.Errorf("partial rows of two types: %v, want %v", err, ErrTableChanged)
	}
	if types, _ := rowsOf(k); strings.Contains(types, "D") {
		t.Errorf("the client got rows: %s", types)
	}
}

// TestScatterConcatMixedWidth: a worker whose rows have another number of
// columns than the description (a column added between the workers'
// statements' starts) ends the run with 40001; its rows do not reach the
// client.
func TestScatterConcatMixedWidth(t *testing.T) {
	p := plan(t, "SELECT * FROM t")
	one := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0)}, rows: text("1", "2")}
	}
	two := func(string, *pgproto3.Bind) answer {
		return answer{fields: []pgproto3.FieldDescription{int8Field("aid", 0), int8Field("x", 0)},
			rows: [][][]byte{{[]byte("3"), []byte("7")}}}
	}
	_, k, err := run(t, p, []func(string, *pgproto3.Bind) answer{one, two}, nil)
	if err != ErrTableChanged {
		t.Errorf("rows of two widths: %v, want %v", err, ErrTableChanged)
	}
	for _, m := range k.msgs {
		if m[0] == 'D' && binary.BigEndian.Uint16([]byte(m[1:3])) != 1 {
			t.Errorf("the client got a row of %d columns under a description of one", binary.BigEndian.Uint16([]byte(m[1:3])))
		}
	}
}
