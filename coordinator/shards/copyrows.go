package shards

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// CopyFormat describes the text or CSV format of a COPY FROM STDIN, as its
// options give it.
type CopyFormat struct {
	// Binary: PostgreSQL's binary COPY format (a header, then tuples of
	// length-prefixed fields, then a trailer); the other fields are
	// unused.
	Binary    bool
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
// Lines are read as PostgreSQL 15's COPY reads them (CopyReadLineText):
// the first line's ending (LF, CR or CRLF) is the one every line must use,
// and the end-of-data marker \. ends the data (in CSV only alone at the
// start of a line, outside quotes); anything after it is ignored.
type rowSplitter struct {
	f CopyFormat
	// distType: the distribution column's type, whose binary value
	// nextBinary reads (as metadata.HashValue takes it).
	distType string
	header   bool // binary: the header was read
	field    int  // index of the field to extract
	ncols    int  // the COPY's columns, 0 if not known
	pending  []byte
	skipped  bool // the CSV header was skipped
	ended    bool // saw the \. end marker (or the end of the data)
	eol      eolType
	// resume is where readLine stopped in an incomplete line, so that a
	// long line over many messages is scanned once.
	resume *lineScan
}

type lineScan struct {
	i                          int
	inQuote, lastWasEsc, first bool
}

// eolType is the line ending the data uses, set by its first line.
type eolType uint8

const (
	eolUnknown eolType = iota
	eolNL
	eolCR
	eolCRNL
)

func (e eolType) terminator() string {
	switch e {
	case eolCR:
		return "\r"
	case eolCRNL:
		return "\r\n"
	}
	return "\n"
}

// next returns the next complete row (with its line end) and the value of
// the chosen field (isNull when it is NULL), or ok=false when data is needed.
func (s *rowSplitter) next(final bool) (row []byte, val string, isNull bool, ok bool, err error) {
	if s.f.Binary {
		return s.nextBinary(final)
	}
	for {
		if s.ended {
			return nil, "", false, false, nil
		}
		line, n, eod, more, err := s.readLine(final)
		if err != nil {
			return nil, "", false, false, err
		}
		if more {
			return nil, "", false, false, nil
		}
		if eod {
			s.ended = true
			if len(line) == 0 {
				s.pending = s.pending[:0]
				return nil, "", false, false, nil
			}
			if n == len(line) {
				// The end of the data without a line end: the shard reads
				// it as this one did (a lone \. there too is data in CSV).
				row = line
			} else {
				// Data before the \. marker: a last row, with a line end.
				row = append(line[:len(line):len(line)], s.eol.terminator()...)
			}
			s.pending = s.pending[:0]
		} else {
			row = s.pending[:n]
			s.pending = s.pending[n:]
		}
		if s.f.Header && !s.skipped {
			s.skipped = true
			continue
		}
		val, isNull, err = s.extract(line)
		if err != nil {
			return nil, "", false, false, err
		}
		return row, val, isNull, true, nil
	}
}

// readLine reads the first line of pending as PostgreSQL's
// CopyReadLineText does. It returns the line without its ending and the
// bytes it takes (with the ending); eod when the data ends with it (the
// \. marker or the end of the data without a line end; line may hold a
// last row); more when the line is not complete yet.
func (s *rowSplitter) readLine(final bool) (line []byte, n int, eod, more bool, err error) {
	buf := s.pending
	csv := s.f.CSV
	inQuote, lastWasEsc := false, false
	first := true
	esc := s.f.Escape
	if esc == s.f.Quote {
		esc = 0 // the quote toggles; no escape processing
	}
	// at reads the byte at i; past the end it is 0, as PostgreSQL pads
	// its buffer at the end of the data.
	at := func(i int) byte {
		if i < len(buf) {
			return buf[i]
		}
		return 0
	}
	i := 0
	if r := s.resume; r != nil {
		i, inQuote, lastWasEsc, first = r.i, r.inQuote, r.lastWasEsc, r.first
		s.resume = nil
	}
	for {
		if i >= len(buf) {
			if !final {
				s.resume = &lineScan{i: i, inQuote: inQuote, lastWasEsc: lastWasEsc, first: first}
				return nil, 0, false, true, nil
			}
			return buf[:i], i, true, false, nil
		}
		prev := i
		c := buf[i]
		i++
		if csv {
			if (c == '\\' || c == '\r') && i >= len(buf) && !final {
				return nil, 0, false, true, nil
			}
			if inQuote && c == esc {
				lastWasEsc = !lastWasEsc
			}
			if c == s.f.Quote && !lastWasEsc {
				inQuote = !inQuote
			}
			if c != esc {
				lastWasEsc = false
			}
		}
		if c == '\r' && (!csv || !inQuote) {
			switch s.eol {
			case eolUnknown, eolCRNL:
				if i >= len(buf) && !final {
					return nil, 0, false, true, nil
				}
				if at(i) == '\n' {
					i++
					s.eol = eolCRNL
				} else {
					if s.eol == eolCRNL {
						return nil, 0, false, false, copyCRError(csv)
					}
					s.eol = eolCR
				}
			case eolNL:
				return nil, 0, false, false, copyCRError(csv)
			}
			return buf[:prev], i, false, false, nil
		}
		if c == '\n' && (!csv || !inQuote) {
			if s.eol == eolCR || s.eol == eolCRNL {
				what, hint := "literal newline found in data", `Use "\n" to represent newline.`
				if csv {
					what, hint = "unquoted newline found in data", "Use quoted CSV field to represent newline."
				}
				return nil, 0, false, false, pgerr.New(pgerr.BadCopyFileFormat, "%s", what).WithHint("%s", hint)
			}
			s.eol = eolNL
			return buf[:prev], i, false, false, nil
		}
		if c == '\\' && (!csv || first) {
			if i >= len(buf) {
				if !final {
					return nil, 0, false, true, nil
				}
				// A backslash just before the end is data.
				return buf[:i], i, true, false, nil
			}
			if buf[i] == '.' {
				j := i + 1
				notEnd := false
				if s.eol == eolCRNL {
					if j >= len(buf) && !final {
						return nil, 0, false, true, nil
					}
					c2 := at(j)
					j++
					switch {
					case c2 == '\n' && !csv:
						return nil, 0, false, false, pgerr.New(pgerr.BadCopyFileFormat, "end-of-copy marker does not match previous newline style")
					case c2 != '\r' && !csv:
						return nil, 0, false, false, pgerr.New(pgerr.BadCopyFileFormat, "end-of-copy marker corrupt")
					case c2 != '\r':
						notEnd = true
					}
				}
				if !notEnd {
					if j >= len(buf) && !final {
						return nil, 0, false, true, nil
					}
					c2 := at(j)
					switch {
					case c2 != '\r' && c2 != '\n' && !csv:
						return nil, 0, false, false, pgerr.New(pgerr.BadCopyFileFormat, "end-of-copy marker corrupt")
					case c2 != '\r' && c2 != '\n':
						notEnd = true
					case s.eol == eolNL && c2 != '\n', s.eol == eolCRNL && c2 != '\n', s.eol == eolCR && c2 != '\r':
						return nil, 0, false, false, pgerr.New(pgerr.BadCopyFileFormat, "end-of-copy marker does not match previous newline style")
					}
				}
				if !notEnd {
					return buf[:prev], len(buf), true, false, nil
				}
				// CSV: \. followed by more is data; go on after the backslash.
			} else if !csv {
				// In text, a backslash quotes the next byte, a line end too.
				i++
			}
		}
		first = false
	}
}

func copyCRError(csv bool) error {
	if csv {
		return pgerr.New(pgerr.BadCopyFileFormat, "unquoted carriage return found in data").
			WithHint("Use quoted CSV field to represent carriage return.")
	}
	return pgerr.New(pgerr.BadCopyFileFormat, "literal carriage return found in data").
		WithHint(`Use "\r" to represent carriage return.`)
}

// extract returns the chosen field of one row. A row with more fields
// than the COPY has columns is refused first, as PostgreSQL does before
// it reads any value.
func (s *rowSplitter) extract(line []byte) (string, bool, error) {
	if s.field < 0 {
		return "", false, nil // no field to read (a sequence gives the value)
	}
	var val string
	var isNull, found bool
	var verr error
	take := func(field int, raw []byte, quoted bool, cur []byte) {
		if field != s.field {
			return
		}
		found = true
		switch {
		case s.f.CSV && !quoted && string(raw) == s.f.Null, !s.f.CSV && string(raw) == s.f.Null:
			isNull = true
		case s.f.CSV:
			val = string(cur)
		default:
			val, verr = unescapeText(raw)
		}
	}
	var n int
	var err error
	if s.f.CSV {
		n, err = s.fieldsCSV(line, take)
	} else {
		n = s.fieldsText(line, take)
	}
	if err != nil {
		return "", false, err
	}
	if s.ncols > 0 && n > s.ncols {
		return "", false, pgerr.New(pgerr.BadCopyFileFormat, "extra data after last expected column")
	}
	if !found {
		return "", false, pgerr.New(pgerr.BadCopyFileFormat, "missing data for the distribution column (field %d) in COPY row %q", s.field+1, truncate(line))
	}
	return val, isNull, verr
}

// fieldsText calls take with each field of a text-format line (raw, with
// its escapes) and returns how many there are.
func (s *rowSplitter) fieldsText(line []byte, take func(int, []byte, bool, []byte)) int {
	field, start := 0, 0
	for i := 0; ; i++ {
		if i < len(line) && line[i] == '\\' {
			if i+1 < len(line) {
				i++
			}
			continue
		}
		if i >= len(line) || line[i] == s.f.Delimiter {
			take(field, line[start:min(i, len(line))], false, nil)
			field++
			start = i + 1
			if i >= len(line) {
				return field
			}
		}
	}
}

// fieldsCSV reads the fields of a CSV line as PostgreSQL's
// CopyReadAttributesCSV does (inside quotes, the escape character takes a
// following quote or escape literally), calls take with each (raw, whether
// it was quoted, and its value) and returns how many there are.
func (s *rowSplitter) fieldsCSV(line []byte, take func(int, []byte, bool, []byte)) (int, error) {
	q, e, d := s.f.Quote, s.f.Escape, s.f.Delimiter
	i := 0
	var cur []byte
	for field := 0; ; field++ {
		cur = cur[:0]
		start := i
		sawQuote := false
		last := false
	field:
		for {
			// Outside quotes.
			for {
				if i >= len(line) {
					last = true
					break field
				}
				c := line[i]
				i++
				if c == d {
					break field
				}
				if c == q {
					sawQuote = true
					break
				}
				cur = append(cur, c)
			}
			// Inside quotes.
			for {
				if i >= len(line) {
					return 0, pgerr.New(pgerr.BadCopyFileFormat, "unterminated CSV quoted field")
				}
				c := line[i]
				i++
				if c == e && i < len(line) && (line[i] == e || line[i] == q) {
					cur = append(cur, line[i])
					i++
					continue
				}
				if c == q {
					break
				}
				cur = append(cur, c)
			}
		}
		end := i
		if !last {
			end--
		}
		take(field, line[start:end], sawQuote, cur)
		if last {
			return field + 1, nil
		}
	}
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
		if c == '\\' && i+1 == len(b) {
			break // a backslash at the very end is dropped, as PostgreSQL does
		}
		if c != '\\' {
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

// binarySignature starts PostgreSQL's binary COPY format; binaryHeader is
// a whole header without flags or extension, which each shard's COPY gets.
var (
	binarySignature = []byte("PGCOPY\n\xff\r\n\x00")
	binaryHeader    = append(append([]byte(nil), binarySignature...), 0, 0, 0, 0, 0, 0, 0, 0)
	binaryTrailer   = []byte{0xff, 0xff}
)

// nextBinary is next for the binary format: the header first (checked and
// dropped: each shard gets a plain one), then one tuple at a time.
func (s *rowSplitter) nextBinary(final bool) (row []byte, val string, isNull bool, ok bool, err error) {
	if s.ended {
		return nil, "", false, false, nil
	}
	buf := s.pending
	if !s.header {
		if len(buf) < len(binarySignature)+8 {
			return s.binaryShort(final)
		}
		if !bytes.Equal(buf[:len(binarySignature)], binarySignature) {
			return nil, "", false, false, pgerr.New("22P04", "COPY file signature not recognized")
		}
		flags := binary.BigEndian.Uint32(buf[len(binarySignature):])
		if flags&(1<<16) != 0 {
			return nil, "", false, false, pgerr.New("22P04", "invalid COPY file header (WITH OIDS)")
		}
		if flags&^(1<<16)>>16 != 0 {
			return nil, "", false, false, pgerr.New("22P04", "unrecognized critical flags in COPY file header")
		}
		ext := int(binary.BigEndian.Uint32(buf[len(binarySignature)+4:]))
		if ext < 0 || len(buf) < len(binarySignature)+8+ext {
			if ext < 0 {
				return nil, "", false, false, pgerr.New("22P04", "invalid COPY file header (wrong length)")
			}
			return s.binaryShort(final)
		}
		s.header = true
		s.pending = buf[len(binarySignature)+8+ext:]
		buf = s.pending
	}
	if len(buf) == 0 {
		return nil, "", false, false, nil
	}
	if len(buf) < 2 {
		return s.binaryShort(final)
	}
	fields := int(int16(binary.BigEndian.Uint16(buf)))
	if fields == -1 {
		s.ended = true // the trailer; anything after it is ignored
		s.pending = s.pending[:0]
		return nil, "", false, false, nil
	}
	if s.ncols > 0 && fields != s.ncols {
		return nil, "", false, false, pgerr.New("22P04", "row field count is %d, expected %d", fields, s.ncols)
	}
	at := 2
	for i := 0; i < fields; i++ {
		if len(buf) < at+4 {
			return s.binaryShort(final)
		}
		n := int(int32(binary.BigEndian.Uint32(buf[at:])))
		at += 4
		if n < -1 {
			return nil, "", false, false, pgerr.New("22P04", "invalid field size")
		}
		if n > 0 {
			if len(buf) < at+n {
				return s.binaryShort(final)
			}
		}
		if i == s.field {
			if n == -1 {
				isNull = true
			} else if val, err = binaryValue(s.distType, buf[at:at+n]); err != nil {
				return nil, "", false, false, err
			}
		}
		if n > 0 {
			at += n
		}
	}
	row = buf[:at]
	s.pending = buf[at:]
	return row, val, isNull, true, nil
}

// binaryShort: the data so far ends inside the header or a tuple: more is
// needed, or, at the end of the data, it is cut short.
func (s *rowSplitter) binaryShort(final bool) ([]byte, string, bool, bool, error) {
	if final {
		return nil, "", false, false, pgerr.New("22P04", "unexpected EOF in COPY data")
	}
	return nil, "", false, false, nil
}

// binaryValue is a distribution value sent in binary as the text
// metadata.HashValue reads.
func binaryValue(typ string, b []byte) (string, error) {
	bad := func() (string, error) {
		return "", pgerr.New("22P03", "incorrect binary data format")
	}
	switch typ {
	case "int2":
		if len(b) != 2 {
			return bad()
		}
		return strconv.Itoa(int(int16(binary.BigEndian.Uint16(b)))), nil
	case "int4":
		if len(b) != 4 {
			return bad()
		}
		return strconv.Itoa(int(int32(binary.BigEndian.Uint32(b)))), nil
	case "int8":
		if len(b) != 8 {
			return bad()
		}
		return strconv.FormatInt(int64(binary.BigEndian.Uint64(b)), 10), nil
	case "uuid":
		if len(b) != 16 {
			return bad()
		}
		return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
	}
	return string(b), nil // text, varchar, bpchar: the string itself
}
