package coordinator_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// liveHeap is the heap still in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// header is a message header claiming a body of n bytes.
func header(typ byte, n int) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(n+4))
	return b
}

// flood sends what it can of n bytes on c (the coordinator may close it
// first) and leaves c open.
func flood(c net.Conn, n int) {
	chunk := make([]byte, 1<<20)
	_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
	for sent := 0; sent < n; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			return
		}
	}
}

// receiveError reads messages until an ErrorResponse and returns it.
func receiveError(t *testing.T, c net.Conn, fe *pgproto3.Frontend) *pgproto3.ErrorResponse {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Errorf("waiting for an error: %v", err)
			return nil
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			return e
		}
	}
}

const floodLimit = 100 << 20 // the bound above idle

// TestUnauthenticatedMessageLimits: clients that claim 1 GiB messages
// before authenticating (SCRAM's SASLInitialResponse, the startup packet)
// and send what they can get PostgreSQL's answer (28P01 for the SASL
// message, 08P01 for the startup packet), and the coordinator's heap stays
// within 100 MiB of its idle size while their connections are open. Before
// the limits each session kept what its client had sent of the body.
func TestUnauthenticatedMessageLimits(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.Auth = "scram-sha-256"
		c.Users = map[string]string{"postgres": "secret"}
		c.StartupTimeout = time.Minute // the limits, not the deadline, must stop them
	})
	idle := liveHeap()
	const clients = 6
	var floods, readers sync.WaitGroup
	errs := make([]*pgproto3.ErrorResponse, clients)
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fe := pgproto3.NewFrontend(c, c)
		if i%2 == 1 {
			// A startup packet claiming 1 GiB.
			lw := []byte{0, 0, 0, 0}
			binary.BigEndian.PutUint32(lw, 1<<30)
			if _, err := c.Write(lw); err != nil {
				t.Fatal(err)
			}
		} else {
			fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
				Parameters: map[string]string{"user": "postgres", "database": "postgres"}})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.(*pgproto3.AuthenticationSASL); !ok {
				t.Fatalf("want AuthenticationSASL, got %T", m)
			}
			// A SASLInitialResponse claiming 1 GiB.
			if _, err := c.Write(header('p', 1<<30-1)); err != nil {
				t.Fatal(err)
			}
		}
		readers.Add(1)
		go func(i int) { defer readers.Done(); errs[i] = receiveError(t, c, fe) }(i)
		floods.Add(1)
		go func() { defer floods.Done(); flood(c, 64<<20) }()
	}
	floods.Wait()
	if used := liveHeap(); used > idle+floodLimit {
		t.Errorf("heap grew from %d MiB idle to %d MiB under %d clients claiming 1 GiB",
			idle>>20, used>>20, clients)
	} else {
		t.Logf("heap %d MiB idle, %d MiB with %d flooding clients open", idle>>20, used>>20, clients)
	}
	readers.Wait()
	for i, e := range errs {
		want := "28P01" // PostgreSQL fails the authentication
		if i%2 == 1 {
			want = "08P01" // invalid length of startup packet
		}
		if e == nil || e.Code != want || e.Severity != "FATAL" {
			t.Errorf("client %d: got %+v, want FATAL %s", i, e, want)
		}
	}
	// The coordinator still serves.
	c := connectURL(t, "postgres://postgres:secret@"+srv.Addr()+"/postgres?sslmode=disable")
	if got := queryString(t, c, "SELECT 'ok'"); got != "ok" {
		t.Errorf("after the flood: %q", got)
	}
}

func connectURL(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// hijacked is an authenticated client connection at the message level.
func hijacked(t *testing.T, addr string) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, pgtest.URL(addr))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return hc.Conn, hc.Frontend
}

// TestMessageLimitsAfterAuthentication: an authenticated client's Query
// header claiming 1 GiB ends its session with FATAL 08P01 before the body
// is read, and the heap stays within 100 MiB of idle while such clients
// send what they can; a Sync longer than PostgreSQL's 10000 bytes is
// refused likewise; --max-message-size bounds queries and leaves shorter
// ones alone.
func TestMessageLimitsAfterAuthentication(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	idle := liveHeap()
	const clients = 4
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		c, fe := hijacked(t, srv.Addr())
		if _, err := c.Write(header('Q', 1<<30-1)); err != nil {
			t.Fatal(err)
		}
		if e := receiveError(t, c, fe); e == nil || e.Code != "08P01" || e.Severity != "FATAL" ||
			e.Message != "invalid message length" {
			t.Errorf("Query of 1 GiB: got %+v, want FATAL 08P01 invalid message length", e)
		}
		wg.Add(1)
		go func() { defer wg.Done(); flood(c, 64<<20) }()
	}
	wg.Wait()
	if used := liveHeap(); used > idle+floodLimit {
		t.Errorf("heap grew from %d MiB idle to %d MiB under %d clients claiming 1 GiB queries",
			idle>>20, used>>20, clients)
	} else {
		t.Logf("heap %d MiB idle, %d MiB with %d flooding clients open", idle>>20, used>>20, clients)
	}

	c, fe := hijacked(t, srv.Addr())
	if _, err := c.Write(header('S', 20000)); err != nil {
		t.Fatal(err)
	}
	if e := receiveError(t, c, fe); e == nil || e.Code != "08P01" {
		t.Errorf("Sync of 20000 bytes: got %+v, want 08P01", e)
	}

	small := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.MaxMessageSize = 1 << 20 })
	ok := connect(t, small.Addr())
	long := strings.Repeat("x", 512<<10)
	if got := queryString(t, ok, "SELECT length('"+long+"')::text"); got != "524288" {
		t.Errorf("a 512 KiB query under a 1 MiB limit: %q", got)
	}
	over := connect(t, small.Addr())
	_, err := over.Exec(context.Background(), "SELECT length('"+long+long+"')::text")
	if sqlState(err) != "08P01" {
		t.Errorf("a 1 MiB query under a 1 MiB limit: got %v, want 08P01", err)
	}
}

// TestMaxClientConnections: the client over --max-client-connections gets
// PostgreSQL's FATAL 53300 "sorry, too many clients already"; once one
// leaves, a new client gets in.
func TestMaxClientConnections(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) { c.MaxClientConnections = 3 })
	var held []*pgx.Conn
	for i := 0; i < 3; i++ {
		held = append(held, connect(t, srv.Addr()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgx.Connect(ctx, pgtest.URL(srv.Addr()))
	var pe *pgconn.PgError
	if !asPgError(err, &pe) || pe.Code != "53300" || pe.Message != "sorry, too many clients already" {
		t.Fatalf("fourth client: got %v, want 53300 sorry, too many clients already", err)
	}
	// The three still work.
	for _, c := range held {
		if got := queryString(t, c, "SELECT 'ok'"); got != "ok" {
			t.Errorf("held client: %q", got)
		}
	}
	_ = held[0].Close(ctx)
	// The coordinator notices the close when its session ends; try until it has.
	for i := 0; ; i++ {
		c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr()))
		if err == nil {
			_ = c.Close(ctx)
			break
		}
		if !asPgError(err, &pe) || pe.Code != "53300" || i == 100 {
			t.Fatalf("after a client left: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func asPgError(err error, pe **pgconn.PgError) bool {
	if err == nil {
		return false
	}
	return errors.As(err, pe)
}

// TestLargeMessageNotKept: after a large statement (simple and extended
// protocol) the session does not keep copies of it while it idles.
func TestLargeMessageNotKept(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, nil)
	c := connect(t, srv.Addr())
	exec(t, c, "SELECT 1")
	idle := liveHeap()
	long := strings.Repeat("x", 32<<20)
	for i := 0; i < 2; i++ {
		var n int
		if err := c.QueryRow(context.Background(), "SELECT length($1::text) + length('"+long+"') + "+fmt.Sprint(i), pgx.QueryExecModeExec, "a").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(context.Background(), "SELECT length('"+long+"') + "+fmt.Sprint(i), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	long = ""
	// PostgreSQL keeps a session's unnamed statement until the next one.
	if got := queryString(t, c, "SELECT $1::text", "small"); got != "small" {
		t.Fatal(got)
	}
	if used := liveHeap(); used > idle+16<<20 {
		t.Errorf("heap grew from %d MiB to %d MiB after 32 MiB statements", idle>>20, used>>20)
	} else {
		t.Logf("heap %d MiB idle, %d MiB after", idle>>20, used>>20)
	}
}

// bigQuery is a Query message of about n bytes whose answer is its
// literal's length.
func bigQuery(n int) (msg []byte, length int) {
	length = n - 64
	body := "SELECT length('" + strings.Repeat("x", length) + "')::text\x00"
	return append(header('Q', len(body)), body...), length
}

// receiveRow reads until ReadyForQuery and returns the first DataRow's
// first value, or the error.
func receiveRow(t *testing.T, c net.Conn, fe *pgproto3.Frontend) (string, *pgproto3.ErrorResponse) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var val string
	var perr *pgproto3.ErrorResponse
	for {
		m, err := fe.Receive()
		if err != nil {
			if perr != nil {
				return val, perr
			}
			t.Fatalf("waiting for an answer: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.DataRow:
			val = string(m.Values[0])
		case *pgproto3.ErrorResponse:
			e := *m
			perr = &e
			if e.Severity == "FATAL" {
				return val, perr
			}
		case *pgproto3.ReadyForQuery:
			return val, perr
		}
	}
}

// TestMessageMemory: large messages of all sessions together stay within
// --message-memory. With room for one 4 MiB query at a time, a second
// session's 4 MiB query waits while the first is being sent and, past the
// wait, ends with FATAL 53200 without its body being read; once the first
// is answered the memory is back and the next large query runs.
func TestMessageMemory(t *testing.T) {
	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.MaxMessageSize = 4 << 20
		c.MessageMemory = 6 << 20
		c.MessageMemoryWait = time.Second
	})
	q, n := bigQuery(4 << 20)

	a, afe := hijacked(t, srv.Addr())
	if _, err := a.Write(q[:1<<20]); err != nil { // header and part of the body
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a's reader has reserved its body
	b, bfe := hijacked(t, srv.Addr())
	go func() { _, _ = b.Write(q) }()
	start := time.Now()
	if _, e := receiveRow(t, b, bfe); e == nil || e.Code != "53200" || e.Severity != "FATAL" {
		t.Errorf("second 4 MiB query while the first is read: got %+v, want FATAL 53200", e)
	} else if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("53200 after %v, before the 1s wait", waited)
	} else {
		t.Logf("53200 after %v: %s %s", waited.Round(time.Millisecond), e.Message, e.Detail)
	}

	if _, err := a.Write(q[1<<20:]); err != nil {
		t.Fatal(err)
	}
	if v, e := receiveRow(t, a, afe); e != nil || v != fmt.Sprint(n) {
		t.Fatalf("first query: %q %+v", v, e)
	}
	// a's body was given back once its answer was sent (the session
	// waits for its client holding no share: c's query below, and d's
	// and e's after it, each need the 4 MiB that c's answered query held).
	if _, err := a.Write(append(header('Q', len("SELECT 'small'\x00")), "SELECT 'small'\x00"...)); err != nil {
		t.Fatal(err)
	}
	if v, e := receiveRow(t, a, afe); e != nil || v != "small" {
		t.Fatalf("small query: %q %+v", v, e)
	}
	c, cfe := hijacked(t, srv.Addr())
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	if v, e := receiveRow(t, c, cfe); e != nil || v != fmt.Sprint(n) {
		t.Errorf("4 MiB query after the first was answered: %q %+v", v, e)
	}
	// A session that ends holding its share gives it back.
	d, _ := hijacked(t, srv.Addr())
	if _, err := d.Write(q[:1<<20]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	d.Close()
	time.Sleep(time.Second)
	e, efe := hijacked(t, srv.Addr())
	if _, err := e.Write(q); err != nil {
		t.Fatal(err)
	}
	if v, perr := receiveRow(t, e, efe); perr != nil || v != fmt.Sprint(n) {
		t.Errorf("4 MiB query after a session ended midway through one: %q %+v", v, perr)
	}
	// Config: a message memory below the largest message is refused.
	if _, err := coordinator.New(coordinator.Config{Listen: "127.0.0.1:0", Workers: []string{"127.0.0.1:1"},
		MaxMessageSize: 8 << 20, MessageMemory: 4 << 20}); err == nil || !strings.Contains(err.Error(), "message memory") {
		t.Errorf("New with message memory below the max message size: %v, want refused", err)
	}
}
