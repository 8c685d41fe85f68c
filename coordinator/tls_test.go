package coordinator_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/pgtest"
	"github.com/pgfleet/pgfleet/internal/tlscert"
	"github.com/pgfleet/pgfleet/pooling"
)

// clientTLS is a coordinator option offering TLS with a certificate for
// 127.0.0.1 and localhost signed by a new CA; it returns the CA's file.
func clientTLS(t *testing.T, required bool) (string, func(*coordinator.Config)) {
	t.Helper()
	files, err := tlscert.Make(t.TempDir(), "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	return files.CA, func(c *coordinator.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		c.TLSRequired = required
	}
}

// usesTLS reports whether a pgx connection runs over TLS.
func usesTLS(c *pgx.Conn) bool {
	_, ok := c.PgConn().Conn().(*tls.Conn)
	return ok
}

// TestClientTLS: with a certificate, pgx connects with sslmode=require and
// verify-full (by IP address and by name) and really runs over TLS,
// including messages larger than a TLS record in both directions; a CA that
// did not sign the certificate is refused by the client; plain text is
// still accepted when TLS is not required.
func TestClientTLS(t *testing.T) {
	cl := pgtest.Shared(t)
	ca, opt := clientTLS(t, false)
	srv := pgtest.Coordinator(t, cl, opt)
	ctx := context.Background()
	_, port, _ := strings.Cut(srv.Addr(), ":")
	for _, conn := range []string{
		"host=127.0.0.1 sslmode=require",
		"host=127.0.0.1 sslmode=verify-full sslrootcert=" + ca,
		"host=localhost sslmode=verify-full sslrootcert=" + ca,
	} {
		t.Run(conn, func(t *testing.T) {
			c, err := pgx.Connect(ctx, fmt.Sprintf("%s port=%s user=postgres dbname=postgres", conn, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			if !usesTLS(c) {
				t.Fatal("connection is not TLS")
			}
			big := strings.Repeat("pgfleet ", 40000) // 320 kB: many TLS records
			var n int
			var back string
			if err := c.QueryRow(ctx, "SELECT length($1::text), $1::text", big).Scan(&n, &back); err != nil {
				t.Fatal(err)
			}
			if n != len(big) || back != big {
				t.Errorf("length %d, echo of %d bytes, want %d", n, len(back), len(big))
			}
			// The simple protocol and a worker error through TLS.
			_, err = c.Exec(ctx, "SELECT 1/0", pgx.QueryExecModeSimpleProtocol)
			if sqlState(err) != "22012" {
				t.Errorf("1/0: %v, want 22012", err)
			}
			if got := queryString(t, c, "SELECT 'still here'"); got != "still here" {
				t.Errorf("after error: %q", got)
			}
		})
	}
	t.Run("other CA", func(t *testing.T) {
		other, _ := clientTLS(t, false)
		_, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=postgres sslmode=verify-full sslrootcert=%s", port, other))
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("err %v, want a certificate verification failure", err)
		}
	})
	t.Run("plain text allowed", func(t *testing.T) {
		c, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=postgres sslmode=disable", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if usesTLS(c) {
			t.Error("sslmode=disable connection is TLS")
		}
		if got := queryString(t, c, "SELECT 'plain'"); got != "plain" {
			t.Errorf("got %q", got)
		}
	})
}

// psqlPath is psql's path; without it the test fails under CI (which
// installs it) and is skipped elsewhere.
func psqlPath(t *testing.T) string {
	t.Helper()
	psql, err := osexec.LookPath("psql")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("psql not on PATH (scripts/test installs it with PostgreSQL)")
		}
		t.Skip("psql not on PATH")
	}
	return psql
}

// TestClientTLSPsql: psql with sslmode=verify-full and the CA connects over
// TLS (\conninfo says so) and runs queries.
func TestClientTLSPsql(t *testing.T) {
	psql := psqlPath(t)
	cl := pgtest.Shared(t)
	ca, opt := clientTLS(t, true)
	srv := pgtest.Coordinator(t, cl, opt)
	_, port, _ := strings.Cut(srv.Addr(), ":")
	conn := fmt.Sprintf("host=localhost port=%s user=postgres dbname=postgres sslmode=verify-full sslrootcert=%s", port, ca)
	out, err := osexec.Command(psql, conn, "-X", "-At", "-c", `\conninfo`, "-c", "SELECT 20 + 22").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SSL connection (protocol: TLS") || !strings.Contains(string(out), "\n42\n") {
		t.Errorf("psql output:\n%s", out)
	}
	// Plain text is refused under --tls-required, as by a hostssl-only
	// pg_hba.conf.
	plain := fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=postgres sslmode=disable", port)
	out, err = osexec.Command(psql, plain, "-X", "-At", "-c", "SELECT 1").CombinedOutput()
	want := `no pg_hba.conf entry for host "127.0.0.1", user "postgres", database "postgres", no encryption`
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("psql sslmode=disable: %v\n%s\nwant %s", err, out, want)
	}
}

// TestClientTLSRequired: under TLSRequired a plaintext client gets FATAL
// 28000 as from a hostssl-only pg_hba.conf, with a hint; sslmode=prefer
// and require connect over TLS; the encryption requests are answered as
// PostgreSQL does (GSS 'N', then SSL 'S').
func TestClientTLSRequired(t *testing.T) {
	cl := pgtest.Shared(t)
	_, opt := clientTLS(t, true)
	srv := pgtest.Coordinator(t, cl, opt)
	ctx := context.Background()
	_, port, _ := strings.Cut(srv.Addr(), ":")
	_, err := pgconn.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%s user=alice dbname=shop sslmode=disable", port))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28000" || pe.Severity != "FATAL" ||
		pe.Message != `no pg_hba.conf entry for host "127.0.0.1", user "alice", database "shop", no encryption` ||
		!strings.Contains(pe.Hint, "sslmode=require") {
		t.Errorf("plaintext: %#v", err)
	}
	for _, mode := range []string{"prefer", "require"} {
		c, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=postgres sslmode=%s", port, mode))
		if err != nil {
			t.Fatalf("sslmode=%s: %v", mode, err)
		}
		if !usesTLS(c) {
			t.Errorf("sslmode=%s: not TLS", mode)
		}
		c.Close(ctx)
	}
	t.Run("cancel needs no TLS", func(t *testing.T) {
		// pgx sends cancel requests in plain text, as libpq before 17 does;
		// PostgreSQL serves them before pg_hba.conf, and so must we.
		c, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=postgres sslmode=require", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, "SELECT pg_sleep(60)")
			done <- err
		}()
		w := connect(t, cl.Servers[0].Addr())
		for {
			var n int
			if err := w.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond) // polling, not a deadline
		}
		if err := c.PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; sqlState(err) != "57014" {
			t.Errorf("cancelled statement: %v, want 57014", err)
		}
	})
	t.Run("GSSENCRequest N then SSLRequest S", func(t *testing.T) {
		c := rawStartup(t, srv.Addr(), packet(80877104, nil))
		one := make([]byte, 1)
		if _, err := io.ReadFull(c, one); err != nil || one[0] != 'N' {
			t.Fatalf("GSSENCRequest: %q %v, want N", one, err)
		}
		if _, err := c.Write(packet(80877103, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil || one[0] != 'S' {
			t.Fatalf("SSLRequest: %q %v, want S", one, err)
		}
	})
	t.Run("needs a certificate", func(t *testing.T) {
		_, err := coordinator.New(coordinator.Config{Workers: []string{"127.0.0.1:1"}, TLSRequired: true})
		if err == nil || !strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("New: %v, want an error naming --tls-cert", err)
		}
	})
}

// TestAuthDefaults: without users, trust is the default only on loopback;
// a coordinator listening on any other address refuses to start unless
// trust is asked for by name. With users and no --auth, clients must pass
// SCRAM-SHA-256, on any address.
func TestAuthDefaults(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:6432", "example.com:6432"} {
		_, err := coordinator.New(coordinator.Config{Listen: listen, Workers: []string{"127.0.0.1:1"}})
		if err == nil || !strings.Contains(err.Error(), "refusing to listen on "+listen+" without authentication") {
			t.Errorf("listen %s, no users: %v, want a refusal", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "127.0.0.2:6432"} {
		if _, err := coordinator.New(coordinator.Config{Listen: listen, Workers: []string{"127.0.0.1:1"}}); err != nil {
			t.Errorf("listen %s, no users: %v", listen, err)
		}
	}
	if _, err := coordinator.New(coordinator.Config{Listen: "0.0.0.0:0", Auth: "trust", Workers: []string{"127.0.0.1:1"}}); err != nil {
		t.Errorf("explicit trust on 0.0.0.0: %v", err)
	}

	cl := pgtest.Shared(t)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.Listen = "0.0.0.0:0"
		c.Users = map[string]string{"postgres": "s3cret"}
	})
	_, port, _ := net.SplitHostPort(srv.Addr())
	ctx := context.Background()
	url := func(pw string) string {
		return fmt.Sprintf("host=127.0.0.1 port=%s user=postgres password=%s dbname=postgres sslmode=disable", port, pw)
	}
	c, err := pgx.Connect(ctx, url("s3cret"))
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	c.Close(ctx)
	for _, pw := range []string{"wrong", "''"} {
		if _, err := pgx.Connect(ctx, url(pw)); sqlState(err) != "28P01" {
			t.Errorf("password %s: %v, want 28P01", pw, err)
		}
	}
	// The exchange offered is SCRAM-SHA-256: AuthenticationSASL (10).
	raw := rawStartup(t, "127.0.0.1:"+port, packet(3<<16, []byte("user\x00postgres\x00\x00")))
	msg := make([]byte, 9)
	if _, err := io.ReadFull(raw, msg); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(msg[1:5])-8)
	if _, err := io.ReadFull(raw, body); err != nil {
		t.Fatal(err)
	}
	if msg[0] != 'R' || binary.BigEndian.Uint32(msg[5:9]) != 10 || string(body) != "SCRAM-SHA-256\x00\x00" {
		t.Errorf("authentication request %q %q, want AuthenticationSASL SCRAM-SHA-256", msg, body)
	}
}

// workerTLSCluster starts two workers with ssl=on and a certificate for
// 127.0.0.1 signed by a new CA, and a pg_hba.conf that, once the workers are
// up, accepts only TLS connections. It returns the cluster and the CA file.
func workerTLSCluster(t *testing.T) (*pgcluster.Cluster, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgfleet-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := tlscert.Make(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(dir, "pg_hba.conf")
	// The harness checks that a worker is up with a plaintext startup
	// packet, so plain text is refused only after the start (reload).
	if err := os.WriteFile(hba, []byte("host all all 127.0.0.1/32 trust\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		name := os.Getenv("PGFLEET_PG_OS_USER")
		if name == "" {
			name = "postgres"
		}
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(files.Key, uid, gid); err != nil { // PostgreSQL wants its key 0600 and its own
			t.Fatal(err)
		}
	}
	cl := pgtest.Start(t, 2, "ssl=on", "ssl_cert_file="+files.Cert, "ssl_key_file="+files.Key, "hba_file="+hba)
	if err := os.WriteFile(hba, []byte("hostssl all all 127.0.0.1/32 trust\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range cl.Servers {
		c, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=require", s.Port))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		c.Close(ctx)
	}
	return cl, files.CA
}

// TestWorkerTLS: workers that accept only TLS (hostssl pg_hba.conf) refuse
// plain text, and a coordinator with sslmode=verify-full and the workers' CA
// runs the catalog, pooled statements, per-statement connections
// (distributed DDL, multi-row INSERT, reference-table writes with two-phase
// commit) and recovery over TLS; with sslmode=disable or another CA it cannot
// start.
func TestWorkerTLS(t *testing.T) {
	cl, ca := workerTLSCluster(t)
	ctx := context.Background()
	w1 := cl.Servers[0]
	_, err := pgconn.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", w1.Port))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28000" || !strings.Contains(pe.Message, "no encryption") {
		t.Fatalf("plaintext to a hostssl-only worker: %v, want 28000 no encryption", err)
	}

	t.Run("sslmode=disable cannot start", func(t *testing.T) {
		srv, err := coordinator.New(coordinator.Config{Listen: "127.0.0.1:0", Workers: []string{w1.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err == nil || !strings.Contains(err.Error(), "no encryption") {
			_ = srv.Close()
			t.Fatalf("Start: %v, want the worker's refusal of plain text", err)
		}
	})
	t.Run("another CA cannot start", func(t *testing.T) {
		other, err := tlscert.Make(t.TempDir(), "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		srv, err := coordinator.New(coordinator.Config{Listen: "127.0.0.1:0", Workers: []string{w1.Addr()},
			WorkerTLS: pooling.WorkerTLS{SSLMode: "verify-full", RootCert: other.CA}})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err == nil || !strings.Contains(err.Error(), "certificate") {
			_ = srv.Close()
			t.Fatalf("Start: %v, want a certificate verification failure", err)
		}
	})

	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		c.WorkerTLS = pooling.WorkerTLS{SSLMode: "verify-full", RootCert: ca}
	})
	c := connect(t, srv.Addr())
	var values []string
	for id := 1; id <= 50; id++ {
		values = append(values, fmt.Sprintf("(%d, 'v%d')", id, id))
	}
	for _, q := range []string{
		"CREATE TABLE tls_items (id int PRIMARY KEY, v text)",
		"SELECT create_distributed_table('tls_items', 'id', shard_count => 4)",
		"CREATE TABLE tls_ref (k int PRIMARY KEY, v text)",
		"SELECT create_reference_table('tls_ref')",
		"INSERT INTO tls_items (id, v) VALUES " + strings.Join(values, ", "),
		"INSERT INTO tls_items (id, v) VALUES (101, 'a'), (102, 'b'), (103, 'c')",
		"INSERT INTO tls_ref (k, v) VALUES (1, 'one'), (2, 'two')",
		"UPDATE tls_ref SET v = 'uno' WHERE k = 1",
	} {
		if _, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var copyText strings.Builder
	for id := 51; id <= 100; id++ {
		fmt.Fprintf(&copyText, "%d\tv%d\n", id, id)
	}
	if tag, err := c.PgConn().CopyFrom(ctx, strings.NewReader(copyText.String()), "COPY tls_items (id, v) FROM STDIN"); err != nil || tag.RowsAffected() != 50 {
		t.Fatalf("COPY: %v, %v", tag, err)
	}
	for id := 1; id <= 103; id += 17 {
		want := "v" + strconv.Itoa(id)
		if id > 100 {
			want = string(rune('a' + id - 101))
		}
		if got := queryString(t, c, "SELECT v FROM tls_items WHERE id = $1", id); got != want {
			t.Errorf("id %d: %q, want %q", id, got, want)
		}
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM tls_items"); got != "103" {
		t.Errorf("count %s, want 103", got)
	}
	if got := queryString(t, c, "SELECT string_agg(v, ',' ORDER BY k) FROM tls_ref"); got != "uno,two" {
		t.Errorf("reference table %q", got)
	}
	// A transaction across both workers commits with two-phase commit.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := 1; id <= 8; id++ {
		if _, err := tx.Exec(ctx, "UPDATE tls_items SET v = 'tx' WHERE id = $1", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, c, "SELECT count(*)::text FROM tls_items WHERE v = 'tx'"); got != "8" {
		t.Errorf("after the cross-worker transaction: %s rows updated, want 8", got)
	}
	// Recovery's connections (as postgres, to every worker) go over TLS
	// too: it rolls back a prepared transaction left without a decision.
	var b [8]byte
	_, _ = rand.Read(b[:])
	base := "pgfleet_test_" + hex.EncodeToString(b[:])
	var wconns []*pgx.Conn
	for i, s := range cl.Servers {
		wc, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=verify-full sslrootcert=%s", s.Port, ca))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = wc.Close(context.Background()) })
		wconns = append(wconns, wc)
		for _, q := range []string{"CREATE TABLE IF NOT EXISTS tls_rec (id int)", "BEGIN", "INSERT INTO tls_rec VALUES (1)",
			fmt.Sprintf("PREPARE TRANSACTION '%s_%d'", base, i+1)} {
			if _, err := wc.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	if _, aborted := srv.RecoverPrepared(ctx, 0); aborted == 0 {
		t.Error("recovery rolled back nothing")
	}
	for _, wc := range wconns {
		var left, rows int
		if err := wc.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, $1)), (SELECT count(*) FROM tls_rec)",
			base).Scan(&left, &rows); err != nil {
			t.Fatal(err)
		}
		if left != 0 || rows != 0 {
			t.Errorf("after recovery: %d prepared parts left, %d rows, want 0 and 0", left, rows)
		}
	}
	// Every client backend on the workers uses TLS (none could otherwise).
	for i, s := range cl.Servers {
		wc := wconns[i]
		var plain, all int
		if err := wc.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT s.ssl), count(*) FROM pg_stat_activity a
			JOIN pg_stat_ssl s USING (pid) WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()`).Scan(&plain, &all); err != nil {
			t.Fatal(err)
		}
		if plain != 0 || all == 0 {
			t.Errorf("worker %s: %d plaintext of %d coordinator connections", s.Addr(), plain, all)
		}
	}
	// A cancel request reaches a hostssl-only worker (PostgreSQL serves
	// cancel requests before pg_hba.conf, so the coordinator sends them in
	// plain text as libpq does).
	sleepErr := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "SELECT pg_sleep(60) FROM tls_items WHERE id = 1")
		sleepErr <- err
	}()
	for sleeping := false; !sleeping; {
		for _, wc := range wconns {
			var n int
			if err := wc.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			sleeping = sleeping || n > 0
		}
		time.Sleep(10 * time.Millisecond) // polling, not a deadline
	}
	if err := c.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sleepErr; sqlState(err) != "57014" {
		t.Errorf("cancelled statement: %v, want 57014", err)
	}
	// An idle pooled TLS connection whose worker backend ended is noticed
	// when it is next taken (the check peeks at the socket under TLS) and
	// replaced: the client sees no error.
	for _, wc := range wconns {
		if _, err := wc.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = 'postgres'
			AND application_name = ''`); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(150 * time.Millisecond) // past the pool's 100 ms freshness window, so the check runs
	for id := 1; id <= 103; id += 9 {
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM tls_items WHERE id = $1", id).Scan(&n); err != nil || n != 1 {
			t.Errorf("id %d after the workers ended the pooled connections: %d rows, %v", id, n, err)
		}
	}
}

// TestClientTLSChannelBinding: over TLS with users, SCRAM-SHA-256-PLUS is
// offered (channel binding to the coordinator's certificate, as PostgreSQL
// does): pgx and psql with channel_binding=require connect with the right
// password only; plain SCRAM still works over TLS, and over plain text a
// client requiring channel binding is turned away.
func TestClientTLSChannelBinding(t *testing.T) {
	cl := pgtest.Shared(t)
	ca, opt := clientTLS(t, false)
	srv := pgtest.Coordinator(t, cl, func(c *coordinator.Config) {
		opt(c)
		c.Users = map[string]string{"postgres": "s3cret"}
	})
	ctx := context.Background()
	_, port, _ := net.SplitHostPort(srv.Addr())
	conn := func(pw, extra string) string {
		return fmt.Sprintf("host=127.0.0.1 port=%s user=postgres password=%s dbname=postgres %s", port, pw, extra)
	}
	for _, extra := range []string{
		"sslmode=require channel_binding=require",
		"sslmode=verify-full sslrootcert=" + ca + " channel_binding=require",
		"sslmode=require", // channel_binding=prefer
		"sslmode=require channel_binding=disable",
		"sslmode=disable",
	} {
		c, err := pgx.Connect(ctx, conn("s3cret", extra))
		if err != nil {
			t.Errorf("%s: %v", extra, err)
			continue
		}
		if got := queryString(t, c, "SELECT current_user::text"); got != "postgres" {
			t.Errorf("%s: current_user %q", extra, got)
		}
		c.Close(ctx)
		if _, err := pgx.Connect(ctx, conn("wrong", extra)); sqlState(err) != "28P01" {
			t.Errorf("%s, wrong password: %v, want 28P01", extra, err)
		}
	}
	if _, err := pgx.Connect(ctx, conn("s3cret", "sslmode=disable channel_binding=require")); err == nil {
		t.Error("channel_binding=require over plain text connected")
	}
	if psql, err := osexec.LookPath("psql"); err == nil {
		cmd := osexec.Command(psql, conn("s3cret", "sslmode=verify-full sslrootcert="+ca+" channel_binding=require"),
			"-X", "-At", "-c", `\conninfo`, "-c", "SELECT current_user")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SSL connection") || !strings.HasSuffix(string(out), "\npostgres\n") {
			t.Errorf("psql channel_binding=require: %v\n%s", err, out)
		}
	}
}
