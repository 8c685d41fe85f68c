package coordinator_test

// Protocol conformance scripts: each file testdata/protocol/NAME.pgtest is a
// sequence of frontend messages that runs unchanged against plain PostgreSQL
// and against a coordinator in front of it; the backend messages each
// answers are recorded, normalised and compared. PostgreSQL's answers are
// also kept in NAME.golden next to the script so that a reviewer sees them;
// regenerate with
//
//	go test ./coordinator -run TestProtocolConformance -rewrite
//
// Script format (blank lines separate blocks):
//
//	# a comment
//	send
//	{"Type":"Parse","Name":"s1","Query":"select $1::int","ParameterOIDs":[23]}
//	{"Type":"Sync"}
//
//	until
//	ReadyForQuery
//
// A send block holds one frontend message per line as pgproto3 JSON (the
// shapes of pgx's pgproto3 MarshalJSON; "Type" names the message). For
// readability CopyData may carry "Text" instead of the hex "Data". The
// messages are sent together, then flushed.
//
// An until block names backend message types, one per line (or after
// "until" on the same line); the runner receives messages until it has seen
// each of them in turn, and records every message received on the way.
//
// A comment "# differs: why" right before an until block declares that the
// coordinator's answer to that block is intended to differ from
// PostgreSQL's; the block is then not compared (and a block so marked that
// does not differ is an error, so that stale notes go away).
//
// Each endpoint runs the script on a connection of its own, PostgreSQL
// first, one after the other (scripts run in parallel, so each uses tables
// of its own), with application_name proto_NAME. An until block that gets no
// answer within protoReceiveTimeout records the time-out and ends the run;
// the PostgreSQL backends of that session (direct, or a coordinator's server
// connection) are then terminated so that nothing stays blocked.
//
// Normalisation drops what legitimately differs between two servers:
// ParameterStatus and BackendKeyData messages, every ErrorResponse field
// but Severity, Code and Message, NoticeResponse's File, Line and Routine,
// and the OIDs of tables in RowDescription (tables are created afresh by each
// run; a table column shows as TableOID "table"). Empty fields are left out.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

const protoDir = "testdata/protocol"

// protoReceiveTimeout bounds each until block: a coordinator that never
// answers must fail the script, not hang it.
const protoReceiveTimeout = 5 * time.Second

func init() {
	// Another test file of the package may define -rewrite as well.
	if flag.Lookup("rewrite") == nil {
		flag.Bool("rewrite", false, "rewrite golden files from PostgreSQL's answers")
	}
}

func protoRewrite() bool {
	f := flag.Lookup("rewrite")
	return f != nil && f.Value.String() == "true"
}

type protoBlock struct {
	line    int    // 1-based line of the block's directive
	last    int    // 0-based index of the block's last line
	kind    string // "send" or "until"
	msgs    []pgproto3.FrontendMessage
	until   []string
	differs string
}

type protoScript struct {
	name   string
	lines  []string
	blocks []protoBlock
}

// protoBackendTypes are the message names an until block may wait for.
var protoBackendTypes = map[string]bool{
	"AuthenticationOk": true, "BackendKeyData": true, "BindComplete": true, "CloseComplete": true,
	"CommandComplete": true, "CopyBothResponse": true, "CopyData": true, "CopyDone": true,
	"CopyInResponse": true, "CopyOutResponse": true, "DataRow": true, "EmptyQueryResponse": true,
	"ErrorResponse": true, "FunctionCallResponse": true, "NoData": true, "NoticeResponse": true,
	"NotificationResponse": true, "ParameterDescription": true, "ParameterStatus": true,
	"ParseComplete": true, "PortalSuspended": true, "ReadyForQuery": true, "RowDescription": true,
}

func protoParseScript(name string, src []byte) (*protoScript, error) {
	s := &protoScript{name: name, lines: strings.Split(strings.TrimRight(string(src), "\n"), "\n")}
	var cur *protoBlock
	differs := ""
	end := func(i int) {
		if cur != nil {
			cur.last = i
			s.blocks = append(s.blocks, *cur)
			cur = nil
		}
	}
	for i, raw := range s.lines {
		line := strings.TrimSpace(raw)
		switch {
		case line == "":
			end(i - 1)
		case strings.HasPrefix(line, "#"):
			if d, ok := strings.CutPrefix(line, "# differs:"); ok {
				differs = strings.TrimSpace(d)
				if differs == "" {
					return nil, fmt.Errorf("%s:%d: a differs note must say why", name, i+1)
				}
			}
		case cur == nil:
			words := strings.Fields(line)
			switch words[0] {
			case "send":
				if len(words) > 1 {
					return nil, fmt.Errorf("%s:%d: send takes no arguments", name, i+1)
				}
				cur = &protoBlock{line: i + 1, kind: "send"}
			case "until":
				cur = &protoBlock{line: i + 1, kind: "until", differs: differs}
				differs = ""
				for _, w := range words[1:] {
					if !protoBackendTypes[w] {
						return nil, fmt.Errorf("%s:%d: unknown backend message %q", name, i+1, w)
					}
					cur.until = append(cur.until, w)
				}
			default:
				return nil, fmt.Errorf("%s:%d: expected send or until, got %q", name, i+1, line)
			}
		case cur.kind == "send":
			m, err := protoFrontendMessage([]byte(line))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, i+1, err)
			}
			cur.msgs = append(cur.msgs, m)
		default:
			if !protoBackendTypes[line] {
				return nil, fmt.Errorf("%s:%d: unknown backend message %q", name, i+1, line)
			}
			cur.until = append(cur.until, line)
		}
	}
	end(len(s.lines) - 1)
	if differs != "" {
		return nil, fmt.Errorf("%s: a differs note must come right before an until block", name)
	}
	for _, b := range s.blocks {
		if (b.kind == "send" && len(b.msgs) == 0) || (b.kind == "until" && len(b.until) == 0) {
			return nil, fmt.Errorf("%s:%d: empty %s block", name, b.line, b.kind)
		}
	}
	return s, nil
}

// protoFrontendMessage decodes one line of a send block.
func protoFrontendMessage(line []byte) (pgproto3.FrontendMessage, error) {
	var head struct {
		Type string
		Text *string // CopyData only
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return nil, err
	}
	var m pgproto3.FrontendMessage
	switch head.Type {
	case "Query":
		m = &pgproto3.Query{}
	case "Parse":
		m = &pgproto3.Parse{}
	case "Bind":
		m = &pgproto3.Bind{}
	case "Describe":
		m = &pgproto3.Describe{}
	case "Execute":
		m = &pgproto3.Execute{}
	case "Close":
		m = &pgproto3.Close{}
	case "Sync":
		m = &pgproto3.Sync{}
	case "Flush":
		m = &pgproto3.Flush{}
	case "CopyData":
		if head.Text != nil {
			return &pgproto3.CopyData{Data: []byte(*head.Text)}, nil
		}
		m = &pgproto3.CopyData{}
	case "CopyDone":
		m = &pgproto3.CopyDone{}
	case "CopyFail":
		m = &pgproto3.CopyFail{}
	case "Terminate":
		m = &pgproto3.Terminate{}
	default:
		return nil, fmt.Errorf("unsupported frontend message type %q", head.Type)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(m); err != nil {
		return nil, err
	}
	return m, nil
}

// protoRecording is what one endpoint answered: per block, the normalised
// messages received (send blocks record nothing).
type protoRecording [][]string

// protoRun runs a script against addr. The session's application_name is
// the script's, so that if the script is cut short the backends it left
// behind on PostgreSQL (pgAddr), directly or through a coordinator, can be
// ended: a coordinator stuck waiting for its worker would otherwise never
// close.
func protoRun(t *testing.T, s *protoScript, addr, pgAddr string) protoRecording {
	t.Helper()
	appName := "proto_" + s.name
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig(pgtest.URL(addr))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = appName
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	rec := protoPlay(s, hc.Conn, hc.Frontend)
	hc.Conn.Close()
	for _, r := range rec {
		if protoHasError(r) {
			protoTerminate(t, pgAddr, appName)
			break
		}
	}
	return rec
}

// protoTerminate ends the PostgreSQL backends of a script's sessions.
func protoTerminate(t *testing.T, pgAddr, appName string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, pgtest.URL(pgAddr))
	if err != nil {
		t.Logf("ending the script's backends: %v", err)
		return
	}
	defer pc.Close(ctx)
	_, err = pc.ExecParams(ctx, "select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1 and pid <> pg_backend_pid()",
		[][]byte{[]byte(appName)}, nil, nil, nil).Close()
	if err != nil {
		t.Logf("ending the script's backends: %v", err)
	}
}

// protoPlay sends the script's messages and records the answers.
func protoPlay(s *protoScript, conn net.Conn, fe *pgproto3.Frontend) protoRecording {
	rec := make(protoRecording, len(s.blocks))
	for i, b := range s.blocks {
		if b.kind == "send" {
			for _, m := range b.msgs {
				fe.Send(m)
			}
			_ = conn.SetWriteDeadline(time.Now().Add(protoReceiveTimeout))
			if err := fe.Flush(); err != nil {
				rec[i] = []string{"error: sending: " + err.Error()}
				return rec
			}
			continue
		}
		_ = conn.SetReadDeadline(time.Now().Add(protoReceiveTimeout))
		for _, want := range b.until {
			for {
				msg, err := fe.Receive()
				if err != nil {
					rec[i] = append(rec[i], fmt.Sprintf("error: waiting for %s: %v", want, protoErrText(err)))
					return rec
				}
				if line, ok := protoNormalize(msg); ok {
					rec[i] = append(rec[i], line)
				}
				if protoTypeName(msg) == want {
					break
				}
			}
		}
	}
	fe.Send(&pgproto3.Terminate{})
	_ = fe.Flush()
	return rec
}

func protoErrText(err error) string {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "timeout"
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return "connection closed"
	}
	return err.Error()
}

func protoTypeName(m pgproto3.BackendMessage) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3.")
}

type protoField struct {
	Name                 string
	TableOID             any // 0, or "table" for a column of a table
	TableAttributeNumber uint16
	DataTypeOID          uint32
	DataTypeSize         int16
	TypeModifier         int32
	Format               int16
}

// protoNormalize renders a backend message as one JSON line, leaving out
// what legitimately differs between endpoints; ok is false for messages
// that are dropped altogether.
func protoNormalize(msg pgproto3.BackendMessage) (line string, ok bool) {
	var v any = msg
	drop := map[string]bool{}
	switch m := msg.(type) {
	case *pgproto3.ParameterStatus, *pgproto3.BackendKeyData:
		return "", false
	case *pgproto3.ErrorResponse:
		v = struct{ Type, Severity, Code, Message string }{"ErrorResponse", m.Severity, m.Code, m.Message}
	case *pgproto3.NoticeResponse:
		b, err := json.Marshal(pgproto3.ErrorResponse(*m))
		if err != nil {
			return "error: " + err.Error(), true
		}
		b = bytes.Replace(b, []byte(`"Type":"ErrorResponse"`), []byte(`"Type":"NoticeResponse"`), 1)
		v = json.RawMessage(b)
		drop = map[string]bool{"File": true, "Line": true, "Routine": true}
	case *pgproto3.CopyData:
		if utf8.Valid(m.Data) {
			v = struct{ Type, Text string }{"CopyData", string(m.Data)}
		} else {
			v = struct{ Type, Data string }{"CopyData", hex.EncodeToString(m.Data)}
		}
	case *pgproto3.RowDescription:
		fields := make([]protoField, len(m.Fields))
		for i, f := range m.Fields {
			fields[i] = protoField{Name: string(f.Name), TableOID: 0, TableAttributeNumber: f.TableAttributeNumber,
				DataTypeOID: f.DataTypeOID, DataTypeSize: f.DataTypeSize, TypeModifier: f.TypeModifier, Format: f.Format}
			if f.TableOID != 0 {
				fields[i].TableOID = "table"
			}
		}
		v = struct {
			Type   string
			Fields []protoField
		}{"RowDescription", fields}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "error: " + err.Error(), true
	}
	return protoCompact(b, drop), true
}

// protoCompact re-emits a JSON object keeping its key order, without the
// keys in drop and without top-level empty values ("", 0, null).
func protoCompact(b []byte, drop map[string]bool) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return string(b)
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return string(b)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return string(b)
		}
		k := kt.(string)
		if drop[k] {
			continue
		}
		switch string(raw) {
		case `""`, `0`, `null`:
			continue
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		out.Write(raw)
	}
	out.WriteByte('}')
	return out.String()
}

// protoGolden renders the script with each until block followed by "----"
// and the messages recorded for it.
func protoGolden(s *protoScript, rec protoRecording) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# PostgreSQL's answers to %s.pgtest, written by\n", s.name)
	b.WriteString("# go test ./coordinator -run TestProtocolConformance -rewrite\n\n")
	ends := map[int]int{}
	for i, bl := range s.blocks {
		if bl.kind == "until" {
			ends[bl.last] = i
		}
	}
	for i, line := range s.lines {
		b.WriteString(line)
		b.WriteByte('\n')
		if bi, ok := ends[i]; ok {
			b.WriteString("----\n")
			if rec[bi] == nil {
				b.WriteString("(not reached)\n")
			}
			for _, l := range rec[bi] {
				b.WriteString(l)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

func protoScripts(t *testing.T) []*protoScript {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(protoDir, "*.pgtest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scripts in %s", protoDir)
	}
	var out []*protoScript
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s, err := protoParseScript(strings.TrimSuffix(filepath.Base(f), ".pgtest"), src)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestProtocolConformanceScriptsParse checks the scripts without a server.
func TestProtocolConformanceScriptsParse(t *testing.T) {
	for _, s := range protoScripts(t) {
		if len(s.blocks) == 0 {
			t.Errorf("%s: no blocks", s.name)
		}
		if s.blocks[len(s.blocks)-1].kind != "until" {
			t.Errorf("%s: the last block should be until, so that every answer is checked", s.name)
		}
	}
}

func TestProtocolConformance(t *testing.T) {
	cluster := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cluster, nil)
	pgAddr, coordAddr := cluster.Servers[0].Addr(), srv.Addr()
	for _, s := range protoScripts(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			// One endpoint after the other: both use the same tables.
			want := protoRun(t, s, pgAddr, pgAddr)
			golden := protoGolden(s, want)
			gpath := filepath.Join(protoDir, s.name+".golden")
			if protoRewrite() {
				if err := os.WriteFile(gpath, []byte(golden), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if old, err := os.ReadFile(gpath); err != nil {
				t.Errorf("%v (run with -rewrite to create it)", err)
			} else if string(old) != golden {
				t.Errorf("PostgreSQL's answers differ from %s (run with -rewrite if that is intended):\n%s",
					gpath, protoDiff(strings.Split(string(old), "\n"), strings.Split(golden, "\n")))
			}
			for i, bl := range s.blocks {
				if bl.kind == "until" && protoHasError(want[i]) {
					t.Errorf("%s.pgtest:%d: the script itself fails against PostgreSQL: %s",
						s.name, bl.line, strings.Join(want[i], "\n"))
				}
			}

			got := protoRun(t, s, coordAddr, pgAddr)
			for i, bl := range s.blocks {
				if bl.kind != "until" {
					continue
				}
				same := strings.Join(want[i], "\n") == strings.Join(got[i], "\n")
				switch {
				case same && bl.differs != "":
					t.Errorf("%s.pgtest:%d: marked as differing (%s) but the coordinator answers as PostgreSQL does; remove the note",
						s.name, bl.line, bl.differs)
				case !same && bl.differs != "":
					t.Logf("%s.pgtest:%d: differs as intended (%s):\n%s", s.name, bl.line, bl.differs,
						protoDiff(want[i], got[i]))
				case !same:
					t.Errorf("%s.pgtest:%d: the coordinator answers differently from PostgreSQL (- PostgreSQL, + coordinator):\n%s",
						s.name, bl.line, protoDiff(want[i], got[i]))
				}
			}
		})
	}
}

// protoHasError reports a recording cut short (timeout, closed connection).
func protoHasError(lines []string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, "error: ") {
			return true
		}
	}
	return false
}

// protoDiff is a line diff (longest common subsequence) with "-" for lines
// only in a, "+" for lines only in b and " " for common lines.
func protoDiff(a, b []string) string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out.WriteString("  " + a[i] + "\n")
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out.WriteString("+ " + b[j] + "\n")
			j++
		default:
			out.WriteString("- " + a[i] + "\n")
			i++
		}
	}
	return out.String()
}
