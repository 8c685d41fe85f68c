package shards

import (
	"reflect"
	"testing"
)

func TestRowSplitter(t *testing.T) {
	type row struct {
		val    string
		isNull bool
	}
	cases := []struct {
		name   string
		f      CopyFormat
		field  int
		chunks []string
		want   []row
		rows   []string
	}{
		{"text, rows across chunks", DefaultCopyFormat(false), 1, []string{"a\t1\n", "b\t2", "2\nc\t\\N\n"},
			[]row{{"1", false}, {"22", false}, {"", true}}, []string{"a\t1\n", "b\t22\n", "c\t\\N\n"}},
		{"text escapes", DefaultCopyFormat(false), 0, []string{"x\\ty\t1\n", "\\101\\x42\\\\\t2\n"},
			[]row{{"x\ty", false}, {"AB\\", false}}, []string{"x\\ty\t1\n", "\\101\\x42\\\\\t2\n"}},
		{"text end marker and no final newline", DefaultCopyFormat(false), 0, []string{"7\n\\.\n"},
			[]row{{"7", false}}, []string{"7\n"}},
		{"last row without newline", DefaultCopyFormat(false), 0, []string{"8\n9"},
			[]row{{"8", false}, {"9", false}}, []string{"8\n", "9"}},
		{"csv quotes, newline in a field, header", CopyFormat{CSV: true, Delimiter: ',', Quote: '"', Escape: '"', Header: true}, 1,
			[]string{"id,name\n1,\"a,\"\"b\"\"\n", "c\"\n2,\n3,\"\"\n"},
			[]row{{"a,\"b\"\nc", false}, {"", true}, {"", false}}, []string{"1,\"a,\"\"b\"\"\nc\"\n", "2,\n", "3,\"\"\n"}},
		{"csv end marker, data after it ignored", DefaultCopyFormat(true), 0, []string{"1,a\n\\", ".\n2,b\n"},
			[]row{{"1", false}}, []string{"1,a\n"}},
		{"csv quoted \\. is data", DefaultCopyFormat(true), 0, []string{"\"\\.\",a\n\\.x,b\n"},
			[]row{{"\\.", false}, {"\\.x", false}}, []string{"\"\\.\",a\n", "\\.x,b\n"}},
		{"text CR line ends", DefaultCopyFormat(false), 0, []string{"1\ta\r2\tb\r", "\\.\r"},
			[]row{{"1", false}, {"2", false}}, []string{"1\ta\r", "2\tb\r"}},
		{"text marker after data on its line", DefaultCopyFormat(false), 0, []string{"1\ta\r\n2\tb\\.\r\n"},
			[]row{{"1", false}, {"2", false}}, []string{"1\ta\r\n", "2\tb\r\n"}},
	}
	for _, c := range cases {
		s := rowSplitter{f: c.f, field: c.field}
		var got []row
		var rows []string
		for i, ch := range c.chunks {
			s.pending = append(s.pending, ch...)
			for {
				r, v, isNull, ok, err := s.next(i == len(c.chunks)-1)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if !ok {
					break
				}
				got = append(got, row{v, isNull})
				rows = append(rows, string(r))
			}
		}
		if !reflect.DeepEqual(got, c.want) || !reflect.DeepEqual(rows, c.rows) {
			t.Errorf("%s: got %v %q, want %v %q", c.name, got, rows, c.want, c.rows)
		}
	}
	s := rowSplitter{f: DefaultCopyFormat(false), field: 3}
	s.pending = []byte("1\t2\n")
	if _, _, _, _, err := s.next(true); err == nil {
		t.Error("a row without the distribution field was accepted")
	}
	for _, bad := range []string{"1\ta\r\n2\tb\n", "1\ta\r\n\\.\n", "1\ta\n\\.", "1\ta\n2\tb\r"} {
		s := rowSplitter{f: DefaultCopyFormat(false)}
		s.pending = []byte(bad)
		var err error
		for ok := true; ok && err == nil; {
			_, _, _, ok, err = s.next(true)
		}
		if err == nil {
			t.Errorf("%q was accepted; PostgreSQL refuses it (22P04)", bad)
		}
	}
}

// TestRowSplitterChunks: the rows do not depend on how the data is cut
// into messages.
func TestRowSplitterChunks(t *testing.T) {
	inputs := []struct {
		f    CopyFormat
		data string
	}{
		{DefaultCopyFormat(false), "1\ta\r\n2\tb\\\nc\r\n3\tc\\.\r\nignored\r\n"},
		{DefaultCopyFormat(false), "1\ta\r2\tb\r\\.\r"},
		{DefaultCopyFormat(true), "1,\"x\r\n\\.\r\ny\"\r\n\\.x,b\r\n\"2\",\"q\"\"\"\r\n\\.\r\n"},
		{CopyFormat{CSV: true, Delimiter: ',', Quote: '"', Escape: '\\'}, "1,\"a\\\"\n\\.\",b\n2,c"},
	}
	read := func(f CopyFormat, chunks []string) (out []string, err error) {
		s := rowSplitter{f: f}
		for i, ch := range chunks {
			s.pending = append(s.pending, ch...)
			for {
				r, v, _, ok, err := s.next(i == len(chunks)-1)
				if err != nil {
					return out, err
				}
				if !ok {
					break
				}
				out = append(out, v+"|"+string(r))
			}
		}
		return out, nil
	}
	for _, in := range inputs {
		want, werr := read(in.f, []string{in.data})
		var bytes []string
		for i := range in.data {
			bytes = append(bytes, in.data[i:i+1])
		}
		got, gerr := read(in.f, bytes)
		if !reflect.DeepEqual(got, want) || (gerr == nil) != (werr == nil) {
			t.Errorf("%q byte by byte: %q %v, whole: %q %v", in.data, got, gerr, want, werr)
		}
		if len(want) < 2 {
			t.Errorf("%q: only %q", in.data, want)
		}
	}
}

// TestRowSplitterBinary: the binary format split at every byte boundary
// gives the same tuples and distribution values; a header with an
// extension, NULLs, the trailer and data cut short.
func TestRowSplitterBinary(t *testing.T) {
	tuple := func(fields ...[]byte) []byte {
		b := []byte{0, byte(len(fields))}
		for _, f := range fields {
			if f == nil {
				b = append(b, 0xff, 0xff, 0xff, 0xff)
				continue
			}
			b = append(b, 0, 0, 0, byte(len(f)))
			b = append(b, f...)
		}
		return b
	}
	header := append(append([]byte(nil), binarySignature...), 0, 0, 0, 0, 0, 0, 0, 3, 'x', 'y', 'z') // a 3-byte extension
	t1 := tuple([]byte{0, 0, 0, 42}, []byte("a"))
	t2 := tuple([]byte{0xff, 0xff, 0xff, 0xfe}, nil)
	t3 := tuple(nil, []byte("c"))
	data := append(append(append(append(append([]byte(nil), header...), t1...), t2...), t3...), binaryTrailer...)
	data = append(data, "ignored"...)
	for step := 1; step <= len(data); step++ {
		s := rowSplitter{f: CopyFormat{Binary: true}, distType: "int4", ncols: 2}
		var vals []string
		var rows [][]byte
		for i := 0; i < len(data); i += step {
			s.pending = append(s.pending, data[i:min(i+step, len(data))]...)
			for {
				row, val, isNull, ok, err := s.next(i+step >= len(data))
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if !ok {
					s.pending = append(s.pending[:0:0], s.pending...)
					break
				}
				if isNull {
					val = "NULL"
				}
				vals = append(vals, val)
				rows = append(rows, append([]byte(nil), row...))
			}
		}
		if want := []string{"42", "-2", "NULL"}; !reflect.DeepEqual(vals, want) {
			t.Fatalf("step %d: values %v, want %v", step, vals, want)
		}
		if want := [][]byte{t1, t2, t3}; !reflect.DeepEqual(rows, want) {
			t.Fatalf("step %d: rows %v, want %v", step, rows, want)
		}
	}
	for _, bad := range []struct {
		name string
		data []byte
		code string
	}{
		{"signature", append([]byte("PGCOPY\n\xff\r\n\x01"), 0, 0, 0, 0, 0, 0, 0, 0), "22P04"},
		{"cut short", append(append([]byte(nil), header...), t1[:5]...), "22P04"},
		{"field count", append(append([]byte(nil), header...), tuple([]byte{0, 0, 0, 1})...), "22P04"},
		{"int4 of 3 bytes", append(append([]byte(nil), header...), tuple([]byte{0, 0, 1}, []byte("a"))...), "22P03"},
	} {
		s := rowSplitter{f: CopyFormat{Binary: true}, distType: "int4", ncols: 2, pending: bad.data}
		var err error
		for err == nil {
			var ok bool
			if _, _, _, ok, err = s.next(true); !ok && err == nil {
				break
			}
		}
		if e, isPg := err.(interface{ SQLState() string }); !isPg || e.SQLState() != bad.code {
			t.Errorf("%s: %v, want %s", bad.name, err, bad.code)
		}
	}
}
