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
