package shards

import (
	"bytes"
	"strconv"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// CopyFormat describes the text or CSV format of a COPY FROM STDIN, as its
// options give it.
type CopyFormat struct {
	CSV       bool
	Delimiter byte   // tab for text, comma for CSV
	Null      string // \N for text, empty for CSV
	Header    bool
	Quote     byte // CSV only
	Escape    byte // CSV only
}

// DefaultCopyFormat returns the defaults of PostgreSQL's COPY.
func DefaultCopyFormat(csv bool) CopyFormat {
	if csv {
		return CopyFormat{CSV: true, Delimiter: ',', Quote: '"', Escape: '"'}
	}
	return CopyFormat{Delimiter: '\t', Null: `\N`}
}

// rowSplitter cuts a COPY data stream into rows and reads one field of each.
// Rows may span CopyData messages; a partial row waits for the next one.
type rowSplitter struct {
	f       CopyFormat
	field   int // index of the field to extract
	pending []byte
	skipped bool // the CSV header was skipped
	ended   bool // saw the \. end marker
}

// next returns the next complete row (with its line end) and the value of
// the chosen field (isNull when it is NULL), or ok=false when data is needed.
func (s *rowSplitter) next(final bool) (row []byte, val string, isNull bool, ok bool, err error) {
	for {
		if s.ended {
			return nil, "", false, false, nil
		}
		end := s.rowEnd()
		if end < 0 {
			if !final || len(s.pending) == 0 {
				return nil, "", false, false, nil
			}
			end = len(s.pending) // last row without a newline
		}
		row = s.pending[:end]
		s.pending = s.pending[end:]
		line := bytes.TrimRight(row, "\r\n")
		if !s.f.CSV && bytes.Equal(line, []byte(`\.`)) {
			s.ended = true
			return nil, "", false, false, nil
		}
		if s.f.Header && !s.skipped {
			s.skipped = true
			continue
		}
		if len(line) == 0 && len(row) == 0 {
			return nil, "", false, false, nil
		}
		val, isNull, err = s.extract(line)
		if err != nil {
			return nil, "", false, false, err
		}
		if len(row) == end && row[len(row)-1] != '\n' {
			row = append(row[:len(row):len(row)], '\n')
		}
		return row, val, isNull, true, nil
	}
}

// rowEnd is the length of the first complete row in pending, -1 if none.
func (s *rowSplitter) rowEnd() int {
	if !s.f.CSV {
		if i := bytes.IndexByte(s.pending, '\n'); i >= 0 {
			return i + 1
		}
		return -1
	}
	inQuote := false
	for i := 0; i < len(s.pending); i++ {
		c := s.pending[i]
		switch {
		case inQuote && c == s.f.Escape && s.f.Escape != s.f.Quote && i+1 < len(s.pending) && s.pending[i+1] == s.f.Quote:
			i++
		case c == s.f.Quote:
			inQuote = !inQuote
		case c == '\n' && !inQuote:
			return i + 1
		}
	}
	return -1
}

// extract returns the chosen field of one row.
func (s *rowSplitter) extract(line []byte) (string, bool, error) {
	if s.f.CSV {
		return s.extractCSV(line)
	}
	field := 0
	start := 0
	for i := 0; i <= len(line); i++ {
		if i < len(line) && line[i] == '\\' {
			i++
			continue
		}
		if i == len(line) || line[i] == s.f.Delimiter {
			if field == s.field {
				raw := line[start:i]
				if string(raw) == s.f.Null {
					return "", true, nil
				}
				v, err := unescapeText(raw)
				return v, false, err
			}
			field++
			start = i + 1
		}
	}
	return "", false, pgerr.New("22P04", "missing data for the distribution column (field %d) in COPY row %q", s.field+1, truncate(line))
}

func (s *rowSplitter) extractCSV(line []byte) (string, bool, error) {
	field := 0
	var cur []byte
	quoted, inQuote := false, false
	for i := 0; i <= len(line); i++ {
		if i == len(line) || (!inQuote && line[i] == s.f.Delimiter) {
			if field == s.field {
				if !quoted && string(cur) == s.f.Null {
					return "", true, nil
				}
				return string(cur), false, nil
			}
			field++
			cur, quoted = cur[:0], false
			continue
		}
		c := line[i]
		switch {
		case inQuote && c == s.f.Escape && i+1 < len(line) && line[i+1] == s.f.Quote:
			cur = append(cur, s.f.Quote)
			i++
		case c == s.f.Quote:
			inQuote, quoted = !inQuote, true
		default:
			cur = append(cur, c)
		}
	}
	return "", false, pgerr.New("22P04", "missing data for the distribution column (field %d) in COPY row %q", s.field+1, truncate(line))
}

func truncate(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}

// unescapeText decodes the backslash escapes of COPY's text format.
func unescapeText(b []byte) (string, error) {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b), nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 == len(b) {
			out = append(out, c)
			continue
		}
		i++
		switch d := b[i]; d {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, '\v')
		case 'x':
			j := i + 1
			for j < len(b) && j < i+3 && isHex(b[j]) {
				j++
			}
			if j == i+1 {
				out = append(out, 'x')
				continue
			}
			v, _ := strconv.ParseUint(string(b[i+1:j]), 16, 8)
			out = append(out, byte(v))
			i = j - 1
		default:
			if d >= '0' && d <= '7' {
				j := i
				for j < len(b) && j < i+3 && b[j] >= '0' && b[j] <= '7' {
					j++
				}
				v, _ := strconv.ParseUint(string(b[i:j]), 8, 8)
				out = append(out, byte(v))
				i = j - 1
			} else {
				out = append(out, d)
			}
		}
	}
	return string(out), nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
