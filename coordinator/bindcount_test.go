package coordinator_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// transcript sends msgs and reads until a ReadyForQuery: each answer as a
// short string, errors with their message ("E 08P01 bind message ...").
func transcript(t *testing.T, c *protoClient, msgs ...pgproto3.FrontendMessage) []string {
	t.Helper()
	sendRaw(t, c, msgs...)
	var out []string
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("receive: %v (answers so far: %q)", err, out)
		}
		switch m := msg.(type) {
		case *pgproto3.ParseComplete:
			out = append(out, "ParseComplete")
		case *pgproto3.BindComplete:
			out = append(out, "BindComplete")
		case *pgproto3.CommandComplete:
			out = append(out, "C "+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			out = append(out, "E "+m.Code+" "+m.Message)
		case *pgproto3.ReadyForQuery:
			return append(out, "Z "+string(m.TxStatus))
		}
	}
}

// plainTable makes table anew on a worker, connected to directly, as an
// oracle's table beside a distributed one, and drops it after the test.
func plainTable(t *testing.T, direct *pgx.Conn, table, columns string) {
	t.Helper()
	simple := pgx.QueryExecModeSimpleProtocol
	exec(t, direct, "DROP TABLE IF EXISTS "+table, simple)
	exec(t, direct, "CREATE TABLE "+table+" "+columns, simple)
	t.Cleanup(func() { exec(t, direct, "DROP TABLE IF EXISTS "+table, simple) })
}

// TestKeptBindChecked: a Bind the coordinator keeps rather than relays (a
// reference-table write, a multi-shard write or read) whose parameters do
// not match its statement gets PostgreSQL's 08P01 at the Bind, naming the
// client's statement, with no BindComplete; in a transaction block too,
// where the next Parse then gets 25P02 and drops the unnamed statement, as
// PostgreSQL's.
// The same messages sent to PostgreSQL directly are the oracle. (Adversary
// finding: BindComplete, then the error at Execute naming the coordinator's
// own statement, "pgfleet_210".)
func TestKeptBindChecked(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	testTable(t, c, "kb_ref", "(k int PRIMARY KEY, v text)", "SELECT create_reference_table('kb_ref')")
	testTable(t, c, "kb_dist", "(k int PRIMARY KEY, v text)", "SELECT create_distributed_table('kb_dist', 'k')")
	direct := connect(t, cl.Servers[0].Addr())
	plainTable(t, direct, "kb_plain", "(k int PRIMARY KEY, v text)")

	fleet := protoDial(t, srv.Addr(), "fleet")
	oracle := protoDial(t, cl.Servers[0].Addr(), "oracle")
	shapes := []string{
		"INSERT INTO %s VALUES ($1, 'x')",
		"UPDATE %s SET v = $2 WHERE v = $1",
		"SELECT count(*) FROM %s WHERE v = $1",
		"SELECT count(*) FROM %s WHERE k = $1 AND v = $2",
	}
	binds := []struct {
		what string
		b    *pgproto3.Bind
	}{
		{"no parameters", &pgproto3.Bind{PreparedStatement: "kb"}},
		{"three parameters", &pgproto3.Bind{PreparedStatement: "kb", Parameters: [][]byte{[]byte("1"), []byte("2"), []byte("3")}}},
		{"one parameter", &pgproto3.Bind{PreparedStatement: "kb", Parameters: [][]byte{[]byte("1")}}},
		{"two formats for one parameter", &pgproto3.Bind{PreparedStatement: "kb", ParameterFormatCodes: []int16{0, 0}, Parameters: [][]byte{[]byte("1")}}},
	}
	for _, shape := range shapes {
		for _, table := range []string{"kb_ref", "kb_dist"} {
			for _, block := range []bool{false, true} {
				for _, bd := range binds {
					if bd.what == "one parameter" && !strings.Contains(shape, "$2") {
						continue // a valid Bind: it would run
					}
					run := func(p *protoClient, table string) []string {
						var got []string
						if block {
							// An unnamed statement before the block, which
							// a failed Parse in it drops.
							got = transcript(t, p, &pgproto3.Parse{Query: "SELECT 2"}, &pgproto3.Sync{})
							got = append(got, transcript(t, p, &pgproto3.Query{String: "BEGIN"})...)
						}
						got = append(got, transcript(t, p, &pgproto3.Parse{Name: "kb", Query: fmt.Sprintf(shape, table)},
							bd.b, &pgproto3.Execute{}, &pgproto3.Sync{})...)
						if block {
							// The block failed: the next Parse gets 25P02.
							got = append(got, transcript(t, p, &pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{},
								&pgproto3.Execute{}, &pgproto3.Sync{})...)
							// And the unnamed statement is gone.
							got = append(got, transcript(t, p, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})...)
						}
						got = append(got, transcript(t, p, &pgproto3.Query{String: "ROLLBACK"})...)
						return append(got, transcript(t, p, &pgproto3.Close{ObjectType: 'S', Name: "kb"}, &pgproto3.Sync{})...)
					}
					want := run(oracle, "kb_plain")
					if got := run(fleet, table); !slices.Equal(got, want) {
						t.Errorf("%s on %s (block %v), %s:\n got %q\nwant %q", fmt.Sprintf(shape, "t"), table, block, bd.what, got, want)
					}
				}
			}
		}
	}
}
