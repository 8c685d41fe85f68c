package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgtest"
)

// sleepyCoordinator starts a coordinator whose idle sessions sleep after
// 20 to 40 ms, and returns it with a reader of a gauge of its metrics.
func sleepyCoordinator(t *testing.T) (*coordinator.Server, func(name string) float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := pgtest.Coordinator(t, pgtest.Shared(t), func(c *coordinator.Config) {
		c.IdleSleep = 20 * time.Millisecond
		c.Registry = reg
	})
	gauge := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	return srv, gauge
}

// awaitGauge waits up to 5 s for gauge name to read want.
func awaitGauge(t *testing.T, gauge func(string) float64, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for gauge(name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 5 s, want %v", name, gauge(name), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionsSleep: idle sessions give up their goroutines and come back
// with everything a session keeps: settings, prepared statements, their
// process ID for cancel and terminate; a session in a transaction block
// stays awake and keeps its transaction.
func TestSessionsSleep(t *testing.T) {
	srv, gauge := sleepyCoordinator(t)
	ctx := context.Background()
	const n = 12
	conns := make([]*pgx.Conn, n)
	pids := make([]uint32, n)
	for i := range conns {
		c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		conns[i] = c
		pids[i] = c.PgConn().PID()
		if _, err := c.Exec(ctx, fmt.Sprintf("SET application_name = 'sleeper%d'", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Prepare(ctx, "twice", "SELECT $1::int * 2"); err != nil {
			t.Fatal(err)
		}
	}
	// The last one waits in a transaction block that wrote.
	txc := conns[n-1]
	// (A temporary table would pin the session to its server connection,
	// which keeps it awake.)
	if _, err := txc.Exec(ctx, "DROP TABLE IF EXISTS sleep_t; CREATE TABLE sleep_t (a int)"); err != nil {
		t.Fatal(err)
	}
	tx, err := txc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO sleep_t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n-1)
	time.Sleep(100 * time.Millisecond) // several sweeps: the block stays awake
	if got := gauge("pgfleet_client_sessions_asleep"); got != n-1 {
		t.Fatalf("%v sessions asleep, want %d (the one in a block stays awake)", got, n-1)
	}
	for round := 0; round < 3; round++ {
		for i, c := range conns[:n-1] {
			var app string
			var twice int
			if err := c.QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil {
				t.Fatalf("round %d, client %d after sleeping: %v", round, i, err)
			}
			if err := c.QueryRow(ctx, "twice", 21+i).Scan(&twice); err != nil {
				t.Fatalf("round %d, client %d: prepared statement after sleeping: %v", round, i, err)
			}
			if app != fmt.Sprintf("sleeper%d", i) || twice != 2*(21+i) {
				t.Fatalf("round %d, client %d: application_name %q, twice %d", round, i, app, twice)
			}
		}
		awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n-1)
	}
	var sum int
	if err := tx.QueryRow(ctx, "SELECT sum(a) FROM sleep_t").Scan(&sum); err != nil || sum != 7 {
		t.Fatalf("the block after others slept: sum %d, %v; want 7", sum, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n)

	// A cancel request for a sleeping session changes nothing.
	if err := conns[0].PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	var one int
	if err := conns[0].QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after a cancel request while asleep: %d, %v", one, err)
	}

	// pg_terminate_backend of a sleeping session ends it with 57P01.
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n)
	var ok bool
	if err := conns[2].QueryRow(ctx, "SELECT pg_terminate_backend($1)", int(pids[1])).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v, %v", ok, err)
	}
	_, err = conns[1].Exec(ctx, "SELECT 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57P01" {
		// The FATAL may have been read as the connection closing.
		if err == nil || !conns[1].IsClosed() {
			t.Fatalf("a terminated sleeping session: %v, want 57P01", err)
		}
	}
	awaitGauge(t, gauge, "pgfleet_client_connections", n-1)

	// A client that goes away while its session sleeps ends the session.
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n-1)
	if err := conns[3].Close(ctx); err != nil {
		t.Fatal(err)
	}
	awaitGauge(t, gauge, "pgfleet_client_connections", n-2)
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n-2)
	conns[3] = nil

	// Shutdown tells every sleeping session 57P01 at once.
	start := time.Now()
	shutCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown with sleeping sessions took %v", d)
	}
	for i, c := range conns {
		if i == 1 || c == nil {
			continue
		}
		_, err := c.Exec(ctx, "SELECT 1")
		if err == nil {
			t.Errorf("client %d ran a statement after Shutdown", i)
		}
	}
	if got := gauge("pgfleet_client_connections"); got != 0 {
		t.Errorf("%v client connections after Shutdown", got)
	}
}

// TestSleepingSessionsClose: Close ends sleeping sessions (they have no
// goroutine to notice their connection closing) and returns.
func TestSleepingSessionsClose(t *testing.T) {
	srv, gauge := sleepyCoordinator(t)
	ctx := context.Background()
	for range 5 {
		c, err := pgx.Connect(ctx, pgtest.URL(srv.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
	}
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", 5)
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with sessions asleep")
	}
	if got := gauge("pgfleet_client_connections"); got != 0 {
		t.Errorf("%v client connections after Close", got)
	}
}

// TestShutdownWakesSleepers: clients whose sessions sleep send a query
// just as Shutdown begins; every one gets FATAL 57P01 (after its answer,
// or instead of it) and then the end of the connection, never a reset.
// (A killer that wrote the FATAL raced the session the client's query
// woke: it closed the connection with the query unread, first.)
func TestShutdownWakesSleepers(t *testing.T) {
	srv, gauge := sleepyCoordinator(t)
	const n = 300
	type client struct {
		c  net.Conn
		fe *pgproto3.Frontend
	}
	clients := make([]client, n)
	for i := range clients {
		c, fe := hijacked(t, srv.Addr())
		clients[i] = client{c, fe}
	}
	awaitGauge(t, gauge, "pgfleet_client_sessions_asleep", n)
	q := (&pgproto3.Query{String: "SELECT 1"})
	msg, err := q.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	for i, cl := range clients {
		if _, err := cl.c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				done <- srv.Shutdown(ctx)
			}()
		}
	}
	var reset, noFatal int
	for _, cl := range clients {
		_ = cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		fatal := false
		for {
			m, err := cl.fe.Receive()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					reset++
				}
				break
			}
			if e, ok := m.(*pgproto3.ErrorResponse); ok && e.Code == "57P01" {
				fatal = true
			}
		}
		if !fatal {
			noFatal++
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if reset > 0 || noFatal > 0 {
		t.Errorf("of %d clients that sent a query as Shutdown began: %d saw no 57P01, %d a read error other than the end of the connection", n, noFatal, reset)
	}
}
