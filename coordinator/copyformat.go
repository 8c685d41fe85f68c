package coordinator

import (
	"slices"

	"github.com/pgfleet/pgfleet/planner"
)

// COPY's text and CSV output written by the coordinator itself (COPY
// (query) TO STDOUT whose query needs the merge), byte for byte as
// PostgreSQL's CopyAttributeOutText and CopyAttributeOutCSV write values
// given as text in a client encoding that embeds no ASCII in multibyte
// characters (UTF8; the caller refuses others).

// forcedColumns says which columns FORCE_QUOTE names: * all of them, a
// name the first column of that name (as PostgreSQL matches it).
func forcedColumns(f *planner.CopyFormat, names []string) []bool {
	out := make([]bool, len(names))
	for i := range out {
		out[i] = f.ForceAll
	}
	for _, q := range f.ForceQuote {
		if i := slices.Index(names, q); i >= 0 {
			out[i] = true
		}
	}
	return out
}

// appendCopyLine appends one line of COPY output: the values (nil for
// NULL) of a row, or the column names of the header (header true); force
// is forcedColumns'.
func appendCopyLine(b []byte, f *planner.CopyFormat, names []string, force []bool, vals []*string, header bool) []byte {
	n := len(vals)
	if header {
		n = len(names)
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, f.Delimiter)
		}
		v := ""
		if header {
			v = names[i]
		} else if vals[i] == nil {
			b = append(b, f.Null...)
			continue
		} else {
			v = *vals[i]
		}
		if f.CSV {
			b = appendCSV(b, f, v, !header && force[i], n == 1)
		} else {
			b = appendCopyText(b, f.Delimiter, v)
		}
	}
	return append(b, '\n')
}

// appendCopyText escapes v as COPY's text format does.
func appendCopyText(b []byte, delim byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 {
			switch c {
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\v':
				b = append(b, '\\', 'v')
			default:
				if c == delim {
					b = append(b, '\\')
				}
				b = append(b, c)
			}
			continue
		}
		if c == '\\' || c == delim {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return b
}

// appendCSV writes v as COPY's CSV format does: quoted when asked to
// (force), when it equals the NULL string, when it holds the delimiter,
// the quote, a carriage return or a newline, or when it is \. alone on a
// line (one column); inside quotes the quote and the escape character
// are escaped.
func appendCSV(b []byte, f *planner.CopyFormat, v string, force, single bool) []byte {
	quote := force || v == f.Null || single && v == `\.`
	for i := 0; !quote && i < len(v); i++ {
		c := v[i]
		quote = c == f.Delimiter || c == f.Quote || c == '\n' || c == '\r'
	}
	if !quote {
		return append(b, v...)
	}
	b = append(b, f.Quote)
	for i := 0; i < len(v); i++ {
		if v[i] == f.Quote || v[i] == f.Escape {
			b = append(b, f.Escape)
		}
		b = append(b, v[i])
	}
	return append(b, f.Quote)
}
