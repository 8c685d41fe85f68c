// Package soak runs mixed reads and writes through several coordinators
// for a bounded time while workers restart and coordinators are killed,
// then checks that every acknowledged write is present and nothing else.
// It runs only when asked (-soak.duration, see scripts/soak).
package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

var (
	flagDuration = flag.Duration("soak.duration", 0, "how long to run the workload (0: skip the soak)")
	flagClients  = flag.Int("soak.clients", 8, "clients, spread over the coordinators")
	flagCoords   = flag.Int("soak.coordinators", 2, "coordinator processes")
	flagSeed     = flag.Uint64("soak.seed", 0, "random seed (0: from the clock)")
	flagBin      = flag.String("soak.bin", "", "pgfleet binary (default: built into a temporary directory)")
	flagFaults   = flag.Duration("soak.fault-every", 20*time.Second, "mean time between faults")
)

const accounts = 200

// outcome of one write operation as the client saw it.
type outcome uint8

const (
	acked   outcome = iota + 1 // COMMIT (or the autocommit statement) answered without error
	failed                     // definitely not committed
	unknown                    // the answer was lost: committed everywhere or nowhere
)

// op is one write: event id with the transfer it records (from == to and
// amount 0 for a plain insert).
type op struct {
	id, from, to, amount int64
	out                  outcome
}

type coord struct {
	addr string
	cmd  *exec.Cmd
	args []string
	log  string
	mu   sync.Mutex
}

type fleet struct {
	t      *testing.T
	cl     *pgcluster.Cluster
	bin    string
	coords []*coord
}

func TestSoak(t *testing.T) {
	if *flagDuration <= 0 {
		t.Skip("the soak runs only with -soak.duration (scripts/soak)")
	}
	setupStart := time.Now()
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun: scripts/soak %v %d)", seed, *flagDuration, seed)
	dir := t.TempDir()
	bin := *flagBin
	if bin == "" {
		bin = filepath.Join(dir, "pgfleet")
		build := exec.Command("go", "build", "-o", bin, "./cmd/pgfleet")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building pgfleet: %v\n%s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cl, err := pgcluster.StartCluster(ctx, "", 2, "synchronous_commit=on")
	cancel()
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	t.Cleanup(cl.Stop)
	f := &fleet{t: t, cl: cl, bin: bin}
	for i := 0; i < *flagCoords; i++ {
		port, err := pgcluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		c := &coord{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: filepath.Join(dir, fmt.Sprintf("coordinator%d.log", i+1))}
		c.args = []string{"serve", "--listen", c.addr, "--pool-size", "8", "--recovery-interval", "1s",
			"--recovery-grace", "10s", "--log-level", "warn"}
		for _, w := range cl.Servers {
			c.args = append(c.args, "--worker", w.Addr())
		}
		f.coords = append(f.coords, c)
		f.start(c)
	}
	t.Cleanup(func() {
		for _, c := range f.coords {
			f.kill(c)
		}
	})
	f.setup()
	t.Logf("setup took %v", time.Since(setupStart).Round(time.Millisecond))

	// The workload and the faults.
	var (
		mu     sync.Mutex
		ops    []op
		nextID atomic.Int64
		codes  = map[string]int{}
		sample = map[string]string{} // the first error of each SQLSTATE
		reads  atomic.Int64
		lost   []string
	)
	nextID.Store(1_000_000)
	runCtx, stop := context.WithTimeout(context.Background(), *flagDuration)
	defer stop()
	runStart := time.Now()
	var stalls []string // operations that hit the client's timeout (not the run's end)
	record := func(o op, err error, began time.Time, what string) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, o)
		if err != nil && errCode(err) == "timeout" && runCtx.Err() == nil {
			stalls = append(stalls, fmt.Sprintf("%s began at +%v: %v", what, began.Sub(runStart).Round(time.Millisecond), err))
		}
		if err != nil {
			codes[errCode(err)]++
			if _, ok := sample[errCode(err)]; !ok {
				m := err.Error()
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Detail != "" {
					m += " (detail: " + pe.Detail + ")"
				}
				sample[errCode(err)] = m
			}
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < *flagClients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			c := f.coords[i%len(f.coords)]
			mode := pgx.QueryExecModeSimpleProtocol
			if i%2 == 1 {
				mode = pgx.QueryExecModeCacheStatement
			}
			var conn *pgx.Conn
			var mine []int64 // this client's acknowledged events
			for runCtx.Err() == nil {
				if conn == nil || conn.IsClosed() {
					var err error
					if conn, err = connect(runCtx, c.addr); err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				switch p := r.IntN(10); {
				case p < 4: // a transfer between two accounts, usually on two workers
					a, b := r.Int64N(accounts)+1, r.Int64N(accounts)+1
					for b == a {
						b = r.Int64N(accounts) + 1
					}
					o := op{id: nextID.Add(1), from: a, to: b, amount: r.Int64N(50) + 1}
					began := time.Now()
					err := transfer(runCtx, conn, mode, o, &o.out)
					if o.out == acked {
						mine = append(mine, o.id)
					}
					record(o, err, began, fmt.Sprintf("transfer via %s", c.addr))
				case p < 7: // a single-row autocommit insert
					a := r.Int64N(accounts) + 1
					o := op{id: nextID.Add(1), from: a, to: a}
					began := time.Now()
					sctx, cancel := context.WithTimeout(runCtx, 30*time.Second)
					_, err := conn.Exec(sctx, "INSERT INTO soak_ev (id, src, dst, amount) VALUES ($1, $2, $3, 0)", mode, o.id, a, a)
					cancel()
					o.out = classify(err, true)
					if o.out == acked {
						mine = append(mine, o.id)
					}
					record(o, err, began, fmt.Sprintf("insert via %s", c.addr))
				default: // read back one of this client's acknowledged events
					if len(mine) == 0 {
						continue
					}
					id := mine[r.IntN(len(mine))]
					var n int
					sctx, cancel := context.WithTimeout(runCtx, 30*time.Second)
					err := conn.QueryRow(sctx, "SELECT count(*) FROM soak_ev WHERE id = $1", mode, id).Scan(&n)
					cancel()
					reads.Add(1)
					if err == nil && n != 1 {
						mu.Lock()
						lost = append(lost, fmt.Sprintf("acknowledged event %d read back %d times", id, n))
						mu.Unlock()
					}
					if err != nil {
						mu.Lock()
						codes["read "+errCode(err)]++
						mu.Unlock()
					}
				}
			}
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}(i)
	}
	faults := f.chaos(runCtx, rand.New(rand.NewPCG(seed, 1<<40)), runStart)
	wg.Wait()
	<-faults.done

	// Everything up again; recovery resolves what the faults left prepared.
	for _, w := range cl.Servers {
		f.ensureWorker(w)
	}
	for _, c := range f.coords {
		f.ensureCoordinator(c)
	}
	f.awaitNoPrepared(2 * time.Minute)

	// The check: every acknowledged event present, every failed one
	// absent, every unknown one all-or-nothing (its balance changes with
	// it), nothing that was never written, and balances that are exactly
	// the sum of the events present.
	admin := f.connect()
	present := map[int64][3]int64{}
	rows, err := admin.Query(context.Background(), "SELECT id, src, dst, amount FROM soak_ev", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, a, b, amt int64
		if err := rows.Scan(&id, &a, &b, &amt); err != nil {
			t.Fatal(err)
		}
		present[id] = [3]int64{a, b, amt}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	var nAcked, nFailed, nUnknown, nUnknownPresent, nTransfers int
	problems := append([]string(nil), lost...)
	attempted := map[int64]bool{}
	for _, o := range ops {
		attempted[o.id] = true
		_, ok := present[o.id]
		if o.from != o.to {
			nTransfers++
		}
		switch o.out {
		case acked:
			nAcked++
			if !ok {
				problems = append(problems, fmt.Sprintf("acknowledged write %d is missing", o.id))
			}
		case failed:
			nFailed++
			if ok {
				problems = append(problems, fmt.Sprintf("failed write %d is present", o.id))
			}
		default:
			nUnknown++
			if ok {
				nUnknownPresent++
			}
		}
	}
	for id := range present {
		if !attempted[id] {
			problems = append(problems, fmt.Sprintf("event %d was never written", id))
		}
	}
	want := map[int64]int64{}
	for a := int64(1); a <= accounts; a++ {
		want[a] = 1000
	}
	for _, e := range present {
		want[e[0]] -= e[2]
		want[e[1]] += e[2]
	}
	brows, err := admin.Query(context.Background(), "SELECT id, bal FROM soak_acc", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for brows.Next() {
		var id, bal int64
		if err := brows.Scan(&id, &bal); err != nil {
			t.Fatal(err)
		}
		seen++
		if want[id] != bal {
			problems = append(problems, fmt.Sprintf("account %d: balance %d, the events present say %d", id, bal, want[id]))
		}
	}
	if seen != accounts {
		problems = append(problems, fmt.Sprintf("%d accounts, want %d", seen, accounts))
	}
	var codeList []string
	for c, n := range codes {
		codeList = append(codeList, fmt.Sprintf("%s:%d", c, n))
	}
	sort.Strings(codeList)
	t.Logf("%v: %d writes (%d transfers across accounts): %d acknowledged, %d failed, %d unknown (%d of them committed); %d reads; faults: %d worker restarts, %d coordinator kills; errors by SQLSTATE: %s",
		*flagDuration, len(ops), nTransfers, nAcked, nFailed, nUnknown, nUnknownPresent, reads.Load(),
		faults.restarts, faults.kills, strings.Join(codeList, " "))
	if len(stalls) > 0 {
		t.Logf("%d operations hit the client's timeout:\n%s\nfaults:\n%s", len(stalls), strings.Join(stalls, "\n"), strings.Join(faults.events, "\n"))
	}
	for _, c := range []string{"XX000", "08006", "conn", "57P01"} {
		if m, ok := sample[c]; ok {
			t.Logf("first %s error: %s", c, m)
		}
	}
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... %d more", len(problems)-20))
		}
		t.Errorf("%d lost or extra writes:\n%s", len(problems), strings.Join(problems, "\n"))
	} else {
		t.Logf("0 lost, 0 extra writes; balances agree with the events")
	}
}

// transfer moves o.amount from o.from to o.to and records the event, in
// one transaction block (updates in account order, so that two transfers
// cannot wait for each other across workers).
func transfer(ctx context.Context, c *pgx.Conn, mode pgx.QueryExecMode, o op, out *outcome) error {
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	a, b, amt := o.from, o.to, o.amount
	first, second := [2]int64{a, -amt}, [2]int64{b, amt}
	if b < a {
		first, second = second, first
	}
	*out = failed
	if _, err := c.Exec(sctx, "BEGIN", mode); err != nil {
		return err
	}
	for _, s := range [][2]int64{first, second} {
		if _, err := c.Exec(sctx, "UPDATE soak_acc SET bal = bal + $2 WHERE id = $1", mode, s[0], s[1]); err != nil {
			rollback(c)
			return err
		}
	}
	if _, err := c.Exec(sctx, "INSERT INTO soak_ev (id, src, dst, amount) VALUES ($1, $2, $3, $4)", mode, o.id, a, b, amt); err != nil {
		rollback(c)
		return err
	}
	_, err := c.Exec(sctx, "COMMIT", mode)
	*out = classify(err, true)
	return err
}

func rollback(c *pgx.Conn) {
	if c.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
		_ = c.Close(ctx)
	}
}

// classify tells what an answer to a commit (COMMIT or an autocommit
// write) says of its outcome: errors that PostgreSQL gives before
// committing anything are failures; a lost connection or a connection
// failure of pgfleet's leaves it unknown.
func classify(err error, commit bool) outcome {
	if err == nil {
		return acked
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return unknown
	}
	switch {
	case pe.Code == "08001":
		return failed // pgfleet could not connect to the worker: nothing was sent
	case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03",
		pe.Code == "XX000", pe.Code == "57014":
		return unknown
	}
	return failed
}

func errCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "timeout"
	}
	return "conn"
}

func connect(ctx context.Context, addr string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(cctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
}

// connect connects to the first coordinator that answers.
func (f *fleet) connect() *pgx.Conn {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for _, c := range f.coords {
			if conn, err := connect(context.Background(), c.addr); err == nil {
				return conn
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatal("no coordinator answers")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (f *fleet) setup() {
	f.t.Helper()
	c := f.connect()
	defer c.Close(context.Background())
	for _, q := range []string{
		"CREATE TABLE soak_acc (id bigint PRIMARY KEY, bal bigint NOT NULL)",
		fmt.Sprintf("INSERT INTO soak_acc SELECT g, 1000 FROM generate_series(1, %d) g", accounts),
		"SELECT create_distributed_table('soak_acc', 'id', shard_count => 8)",
		"CREATE TABLE soak_ev (id bigint PRIMARY KEY, src bigint NOT NULL, dst bigint NOT NULL, amount bigint NOT NULL)",
		"SELECT create_distributed_table('soak_ev', 'id', shard_count => 8)",
	} {
		if _, err := c.Exec(context.Background(), q, pgx.QueryExecModeSimpleProtocol); err != nil {
			f.t.Fatalf("%s: %v", q, err)
		}
	}
}

func (f *fleet) start(c *coord) {
	f.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	lf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(f.bin, c.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	c.cmd = cmd
	for i := 0; i < 200; i++ {
		if nc, err := net.DialTimeout("tcp", c.addr, 100*time.Millisecond); err == nil {
			nc.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Errorf("coordinator %s did not start; see %s", c.addr, c.log)
}

func (f *fleet) kill(c *coord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		c.cmd = nil
	}
}

func (f *fleet) ensureCoordinator(c *coord) {
	c.mu.Lock()
	running := c.cmd != nil
	c.mu.Unlock()
	if !running {
		f.start(c)
	}
}

func (f *fleet) ensureWorker(w *pgcluster.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if nc, err := net.DialTimeout("tcp", w.Addr(), time.Second); err == nil {
		nc.Close()
		return
	}
	if err := w.Restart(ctx); err != nil {
		f.t.Errorf("restarting worker %s: %v", w.Addr(), err)
	}
}

// awaitNoPrepared waits until recovery has resolved every prepared
// transaction on the workers.
func (f *fleet) awaitNoPrepared(limit time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		n := 0
		for _, w := range f.cl.Servers {
			c, err := pgx.Connect(context.Background(), w.URL())
			if err != nil {
				n = -1
				break
			}
			var k int
			err = c.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts").Scan(&k)
			_ = c.Close(context.Background())
			if err != nil {
				n = -1
				break
			}
			n += k
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Errorf("%d prepared transactions still left after %v", n, limit)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type faultLog struct {
	done            chan struct{}
	restarts, kills int
	events          []string // what happened when, for stalls to be read against
}

// chaos restarts a worker or kills and restarts a coordinator at random
// times until ctx is done.
func (f *fleet) chaos(ctx context.Context, r *rand.Rand, start time.Time) *faultLog {
	fl := &faultLog{done: make(chan struct{})}
	go func() {
		defer close(fl.done)
		for {
			wait := time.Duration(float64(*flagFaults) * (0.5 + r.Float64()))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if r.IntN(2) == 0 {
				w := f.cl.Servers[r.IntN(len(f.cl.Servers))]
				fl.events = append(fl.events, fmt.Sprintf("+%v worker %s stops", time.Since(start).Round(time.Millisecond), w.Addr()))
				w.Stop()
				time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
				rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				if err := w.Restart(rctx); err != nil {
					f.t.Errorf("restarting worker %s: %v", w.Addr(), err)
				}
				cancel()
				fl.restarts++
				fl.events = append(fl.events, fmt.Sprintf("+%v worker %s is back", time.Since(start).Round(time.Millisecond), w.Addr()))
			} else {
				c := f.coords[r.IntN(len(f.coords))]
				fl.events = append(fl.events, fmt.Sprintf("+%v coordinator %s killed", time.Since(start).Round(time.Millisecond), c.addr))
				f.kill(c)
				time.Sleep(time.Duration(200+r.IntN(1800)) * time.Millisecond)
				f.start(c)
				fl.kills++
				fl.events = append(fl.events, fmt.Sprintf("+%v coordinator %s is back", time.Since(start).Round(time.Millisecond), c.addr))
			}
		}
	}()
	return fl
}
