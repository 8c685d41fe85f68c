package difftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Env is where the tester runs: a fleet's coordinators and workers (the
// first worker holds the catalog) and a plain PostgreSQL oracle, each as
// host:port, all with a trusted postgres user.
type Env struct {
	Coordinators []string
	Workers      []string
	Oracle       string
}

// Config of one run.
type Config struct {
	Seed          uint64
	Duration      time.Duration // stop after this long (0: no limit)
	MaxStatements int           // stop after this many statements (0: no limit)
	Features      features      // nil: defaultFeatures()
	CheckEvery    int           // statements between invariant checks (default 200)
	MaxFailures   int           // stop after this many mismatches (default 1)
	Timeout       time.Duration // per statement (default 20s)
	Logf          func(format string, args ...any)
	// Trace, if set, receives every statement and session start as it runs.
	Trace io.Writer
	// Disturb, if set, runs beside the sessions until the run's last
	// statement (its ctx is cancelled then), changing the fleet under them:
	// moving shards. It takes quiet around each change; the invariants are
	// checked holding quiet. While it runs, a coordinator's 40001 for a
	// moved shard is taken as a refusal (the statement changed nothing,
	// or its transaction failed): the oracle does not run the statement.
	// Its error ends the run.
	Disturb func(ctx context.Context, quiet *sync.Mutex) error
}

// Stats of a run.
type Stats struct {
	Seed       uint64
	Statements int
	Checks     int
	Mismatches []string
	Refusals   map[string]int    // "family: message" -> count
	Errors     map[string]int    // SQLSTATE both sides agreed on -> count
	ErrorStmts map[string]string // SQLSTATE -> the first statement that gave it
	Families   map[string]int
	Moved      int // statements that met a moved shard (Config.Disturb)
	Elapsed    time.Duration
}

// Report prints the counts.
func (s *Stats) Report() string {
	var b strings.Builder
	rate := float64(s.Statements) / s.Elapsed.Seconds()
	fmt.Fprintf(&b, "difftest: seed %d: %d statements in %s (%.0f/s), %d invariant checks, %d mismatches\n",
		s.Seed, s.Statements, s.Elapsed.Round(time.Millisecond), rate, s.Checks, len(s.Mismatches))
	fmt.Fprintf(&b, "statements by family:\n%s", countLines(s.Families))
	if len(s.Errors) > 0 {
		fmt.Fprintf(&b, "errors both sides gave, by SQLSTATE:\n%s", countLines(s.Errors))
		fmt.Fprintf(&b, "first statement per SQLSTATE:\n")
		for _, code := range sortedKeys(s.ErrorStmts) {
			fmt.Fprintf(&b, "  %s: %s\n", code, s.ErrorStmts[code])
		}
	}
	if len(s.Refusals) > 0 {
		fmt.Fprintf(&b, "0A000 refusals by family and reason:\n%s", countLines(s.Refusals))
	}
	if s.Moved > 0 {
		fmt.Fprintf(&b, "statements that met a moved shard (40001): %d\n", s.Moved)
	}
	return b.String()
}

func countLines(m map[string]int) string {
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %7d  %s\n", m[k], k)
	}
	return b.String()
}

// side is one session's connection to the coordinator or the oracle.
type side struct {
	conn *pgconn.PgConn
	addr string
}

// runner is the state of one run.
type runner struct {
	env    Env
	cfg    Config
	r      *rand.Rand
	g      *gen
	st     *Stats
	chk    *checker
	coord  side
	oracle side
	// quiet is held while invariants are checked (Config.Disturb);
	// disturbing is closed when Disturb has returned.
	quiet      sync.Mutex
	disturbing chan struct{}
	n          int      // statement number
	startup    settings // the session's startup parameters (what RESET returns to)
	logs       []string
}

// Run builds a random schema and data on the fleet and the oracle, then
// runs random sessions until the duration, the statement count or the
// failure limit is reached. Mismatches are in Stats.Mismatches; an error
// means the run could not go on (a server unreachable).
func Run(ctx context.Context, env Env, cfg Config) (*Stats, error) {
	if cfg.Features == nil {
		cfg.Features = defaultFeatures()
	}
	if cfg.CheckEvery == 0 {
		cfg.CheckEvery = 200
	}
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = 1
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6469666674657374))
	ru := &runner{env: env, cfg: cfg, r: r,
		st: &Stats{Seed: cfg.Seed, Refusals: map[string]int{}, Errors: map[string]int{}, ErrorStmts: map[string]string{}, Families: map[string]int{}}}
	ru.g = &gen{r: r, f: cfg.Features, s: genSchema(r), set: settings{}}
	start := time.Now()
	defer func() { ru.st.Elapsed = time.Since(start) }()
	if err := ru.setup(ctx); err != nil {
		return ru.st, fmt.Errorf("setup: %w", err)
	}
	defer ru.endSession(ctx)
	chk, err := newChecker(ctx, env)
	if err != nil {
		return ru.st, err
	}
	ru.chk = chk
	defer chk.close()
	if err := ru.checkInvariants(ctx); err != nil || ru.failed() {
		return ru.st, err
	}
	var disturbErr error
	if cfg.Disturb != nil {
		dctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			disturbErr = cfg.Disturb(dctx, &ru.quiet)
		}()
		defer func() {
			stop()
			<-done
		}()
		ru.disturbing = done
	}
	sinceCheck := 0
	lastProgress := time.Now()
	for {
		if time.Since(lastProgress) >= time.Minute {
			lastProgress = time.Now()
			refusals := 0
			for _, n := range ru.st.Refusals {
				refusals += n
			}
			cfg.Logf("progress: %s: %d statements (%.0f/s), %d checks, %d refusals, %d mismatches",
				time.Since(start).Round(time.Second), ru.n, float64(ru.n)/time.Since(start).Seconds(), ru.st.Checks, refusals, len(ru.st.Mismatches))
		}
		if ctx.Err() != nil ||
			(cfg.Duration > 0 && time.Since(start) > cfg.Duration) ||
			(cfg.MaxStatements > 0 && ru.n >= cfg.MaxStatements) {
			break
		}
		if ru.coord.conn == nil || (!ru.g.inTx && r.IntN(60) == 0) {
			ru.endSession(ctx)
			if err := ru.startSession(ctx); err != nil {
				return ru.st, err
			}
			if ru.failed() {
				break
			}
		}
		ru.step(ctx, ru.g.next())
		if ru.failed() {
			break
		}
		sinceCheck++
		if !ru.g.inTx && sinceCheck >= cfg.CheckEvery {
			sinceCheck = 0
			if err := ru.checkInvariants(ctx); err != nil || ru.failed() {
				return ru.st, err
			}
		}
	}
	if !ru.failed() {
		ru.endSession(ctx)
		if err := ru.checkInvariants(ctx); err != nil {
			return ru.st, err
		}
	}
	if ru.disturbing != nil {
		select {
		case <-ru.disturbing:
			return ru.st, fmt.Errorf("disturbing the fleet: %w", disturbErr)
		default:
		}
	}
	return ru.st, nil
}

func (ru *runner) failed() bool { return len(ru.st.Mismatches) >= ru.cfg.MaxFailures }

// rerun is the command that repeats this run.
func (ru *runner) rerun() string {
	feat := ""
	if def := defaultFeatures(); def.String() != ru.cfg.Features.String() {
		feat = fmt.Sprintf(" -features=%s", ru.cfg.Features)
	}
	return fmt.Sprintf("go test ./difftest -run TestDifferential -count=1 -args -seed %d -statements %d%s   (or scripts/difftest --seed %d)",
		ru.cfg.Seed, ru.n, feat, ru.cfg.Seed)
}

func (ru *runner) fail(what string) {
	msg := fmt.Sprintf("MISMATCH (seed %d, statement %d, coordinator %s, settings %v):\n%s\nrerun: %s\nstatements since the last good invariant check:\n%s",
		ru.cfg.Seed, ru.n, ru.coord.addr, map[string]string(ru.g.set), what, ru.rerun(), strings.Join(ru.logs, "\n"))
	ru.st.Mismatches = append(ru.st.Mismatches, msg)
	ru.cfg.Logf("%s", msg)
}

// exec runs setup SQL on a connection and fails on any error.
func exec(ctx context.Context, c *pgconn.PgConn, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// setup drops the tables of earlier runs, creates the schema through the
// first coordinator and on the oracle, loads rows before distributing (so
// create_distributed_table moves them) and distributes.
func (ru *runner) setup(ctx context.Context) error {
	coord, err := connectFixed(ctx, ru.env.Coordinators[0])
	if err != nil {
		return err
	}
	defer coord.Close(ctx)
	oracle, err := connectFixed(ctx, ru.env.Oracle)
	if err != nil {
		return err
	}
	defer oracle.Close(ctx)
	// Tables of an earlier run in the same servers.
	old, err := query(ctx, oracle, "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'")
	if err != nil {
		return err
	}
	for _, name := range old {
		if err := exec(ctx, coord, "DROP TABLE IF EXISTS "+name+" CASCADE"); err != nil {
			return err
		}
		if err := exec(ctx, oracle, "DROP TABLE IF EXISTS "+name+" CASCADE"); err != nil {
			return err
		}
	}
	for _, t := range ru.g.s.tables {
		var tuples []string
		for range 10 + ru.r.IntN(30) {
			row := t.row(ru.r)
			lits := make([]string, len(row))
			for i, v := range row {
				lits[i] = "NULL"
				if !v.null {
					lits[i] = quoteLit(v.s, true)
				}
			}
			tuples = append(tuples, "("+strings.Join(lits, ", ")+")")
		}
		load := fmt.Sprintf("INSERT INTO %s (%s) VALUES %s ON CONFLICT DO NOTHING", t.name, colNames(t.cols), strings.Join(tuples, ", "))
		for _, c := range []*pgconn.PgConn{coord, oracle} {
			if err := exec(ctx, c, t.createSQL()); err != nil {
				return err
			}
			if err := exec(ctx, c, load); err != nil {
				return err
			}
		}
		if err := exec(ctx, coord, t.distributeSQL()); err != nil {
			return err
		}
		if !t.reference && ru.cfg.Features.on(featViews) {
			// A view or SQL function over a distributed table: the
			// coordinator plans through it, or refuses it with 0A000 (then
			// the oracle does not get it and viewRead reads the table).
			t.views = true
			for _, sql := range t.viewSQL() {
				err := exec(ctx, coord, sql)
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "0A000" {
					ru.st.Refusals["views (setup): "+refusalReason(pe.Message)]++
					t.views = false
					break
				}
				if err != nil {
					return err
				}
				if err := exec(ctx, oracle, sql); err != nil {
					return err
				}
			}
		}

		ru.cfg.Logf("difftest: %s; %s", t.createSQL(), t.distributeSQL())
	}
	return ru.waitForCatalog(ctx, oracle)
}

// waitForCatalog waits until every coordinator sees every table's rows
// (other coordinators re-read the catalog every 500 ms; before that they
// read the now empty local tables).
func (ru *runner) waitForCatalog(ctx context.Context, oracle *pgconn.PgConn) error {
	for _, addr := range ru.env.Coordinators {
		c, err := connectFixed(ctx, addr)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, t := range ru.g.s.tables {
			q := "SELECT count(*) FROM " + t.name
			want, err := query(ctx, oracle, q)
			if err != nil {
				c.Close(ctx)
				return err
			}
			for {
				got, err := query(ctx, c, q)
				if err == nil && slices.Equal(got, want) {
					break
				}
				if time.Now().After(deadline) {
					c.Close(ctx)
					return fmt.Errorf("coordinator %s does not see table %s's rows after 30 s: %v %q, want %q", addr, t.name, err, got, want)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		c.Close(ctx)
	}
	return nil
}

// startSession connects to a random coordinator and to the oracle with
// random settings, given as startup parameters or as SET statements.
func (ru *runner) startSession(ctx context.Context) error {
	set := genSettings(ru.r, ru.cfg.Features)
	asStartup := ru.r.IntN(2) == 0
	if asStartup && strings.Contains(set["search_path"], ",") && !ru.cfg.Features.on(featSearchPathStart) {
		delete(set, "search_path")
	}
	ru.coord.addr = ru.env.Coordinators[ru.r.IntN(len(ru.env.Coordinators))]
	ru.oracle.addr = ru.env.Oracle
	for _, sd := range []*side{&ru.coord, &ru.oracle} {
		cfg, err := pgconn.ParseConfig("postgres://postgres@" + sd.addr + "/postgres?sslmode=disable")
		if err != nil {
			return err
		}
		if asStartup {
			for k, v := range set {
				cfg.RuntimeParams[k] = v
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sd.conn, err = pgconn.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil {
			return fmt.Errorf("connecting to %s: %w", sd.addr, err)
		}
	}
	ru.g.set = settings{}
	ru.g.inTx, ru.g.failedTx, ru.g.sp, ru.g.cursors = false, false, 0, 0
	ru.logs = append(ru.logs[:0], fmt.Sprintf("-- new session on %s, settings %v (startup parameters: %v)", ru.coord.addr, set, asStartup))
	if ru.cfg.Trace != nil {
		fmt.Fprintln(ru.cfg.Trace, ru.logs[0])
	}
	ru.g.startup = settings{}
	if asStartup {
		ru.g.set = set
		ru.g.startup = maps.Clone(set)
		return nil
	}
	for _, name := range sortedKeys(set) {
		ru.step(ctx, &stmt{family: "session", proto: simpleProto, sql: setSQL(name, set[name]), setting: [2]string{name, set[name]}})
		if ru.failed() {
			return nil
		}
	}
	return nil
}

func (ru *runner) endSession(ctx context.Context) {
	if ru.coord.conn == nil {
		return
	}
	if ru.g.inTx && !ru.failed() {
		ru.step(ctx, &stmt{family: "session", proto: simpleProto, sql: "ROLLBACK", txCtl: true})
	}
	for _, sd := range []*side{&ru.coord, &ru.oracle} {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sd.conn.Close(cctx)
		cancel()
		sd.conn = nil
	}
}

// step runs one statement on both sides and compares. The coordinator goes
// first: when it refuses (0A000) the oracle does not run the statement, so
// the two databases stay equal, and an open transaction is brought to the
// same state on the oracle.
func (ru *runner) step(ctx context.Context, st *stmt) {
	ru.n++
	ru.st.Statements++
	ru.st.Families[st.family]++
	latin1 := ru.g.set.latin1()
	ru.logs = append(ru.logs, fmt.Sprintf("%d: %s", ru.n, st.describe()))
	if ru.cfg.Trace != nil {
		fmt.Fprintln(ru.cfg.Trace, ru.logs[len(ru.logs)-1])
	}
	if len(ru.logs) > 400 {
		ru.logs = append(ru.logs[:1], ru.logs[len(ru.logs)-300:]...)
	}
	ca := run(ctx, ru.coord.conn, st, latin1, ru.cfg.Timeout)
	moved := ru.cfg.Disturb != nil && ca.sqlstate == "40001" && strings.Contains(ca.message, "was moved or dropped by a concurrent change")
	if ca.refused() || moved {
		if moved {
			ru.st.Moved++
		} else {
			ru.st.Refusals[st.family+": "+refusalReason(ca.message)]++
		}
		if st.proto == preparedProto && ca.execs > 0 {
			// The executions before the refused one ran on the coordinator
			// (and may have written): the oracle runs them too, and their
			// answers are compared.
			pre := *st
			pre.more = st.more[:ca.execs-1]
			oa := run(ctx, ru.oracle.conn, &pre, latin1, ru.cfg.Timeout)
			done := ca
			done.sqlstate, done.message, done.txStatus = "", "", ca.execsTx
			if d := diff(&pre, done, oa); d != "" {
				ru.fail(fmt.Sprintf("statement %d: %s\nthe coordinator refused execution %d; executions before it: %s\n--- coordinator:\n%s--- oracle:\n%s",
					ru.n, st.describe(), ca.execs+1, d, ca.describe(latin1), oa.describe(latin1)))
				return
			}
			ru.logs = append(ru.logs, fmt.Sprintf("   (oracle: executions 1-%d only, the coordinator refused execution %d)", ca.execs, ca.execs+1))
			if ru.cfg.Trace != nil {
				fmt.Fprintln(ru.cfg.Trace, ru.logs[len(ru.logs)-1])
			}
		}
		ru.realign(ctx, ca.txStatus)
		return
	}
	oa := run(ctx, ru.oracle.conn, st, latin1, ru.cfg.Timeout)
	if d := diff(st, ca, oa); d != "" {
		ru.fail(fmt.Sprintf("statement %d: %s\n%s\n--- coordinator:\n%s--- oracle:\n%s", ru.n, st.describe(), d,
			ca.describe(latin1), oa.describe(latin1)))
		return
	}
	if ca.sqlstate != "" {
		ru.st.Errors[ca.sqlstate]++
		if _, ok := ru.st.ErrorStmts[ca.sqlstate]; !ok {
			ru.st.ErrorStmts[ca.sqlstate] = st.describe() + "\n    -> " + ca.message
		}
	} else if st.setting[0] != "" {
		ru.g.set[st.setting[0]] = st.setting[1]
	} else if st.reset == "all" {
		ru.g.set = maps.Clone(ru.g.startup)
	} else if st.reset != "" {
		if v, ok := ru.g.startup[st.reset]; ok {
			ru.g.set[st.reset] = v
		} else {
			delete(ru.g.set, st.reset)
		}
	}
	ru.followReported()
	ru.txState(ca.txStatus)
}

// followReported takes the settings that decide how statements are written
// (client_encoding, standard_conforming_strings) from the oracle's
// ParameterStatus: a SET in a transaction that rolls back (or a ROLLBACK TO
// before it) is undone there, which the generator's own record of SETs
// cannot see.
func (ru *runner) followReported() {
	for _, name := range []string{"client_encoding", "standard_conforming_strings"} {
		v := ru.oracle.conn.ParameterStatus(name)
		if v == "" {
			continue
		}
		if name == "client_encoding" && v == "UTF8" || name == "standard_conforming_strings" && v == "on" {
			if _, ok := ru.g.set[name]; ok {
				ru.g.set[name] = v
			}
			continue
		}
		ru.g.set[name] = v
	}
}

var (
	reTableName = regexp.MustCompile(`public\.[a-z0-9_]+(, public\.[a-z0-9_]+)*`)
	reQuoted    = regexp.MustCompile(`"[^"]*"`)
	reNumber    = regexp.MustCompile(`[0-9][0-9.:]*`)
)

// refusalReason is a refusal's message without table names, column names,
// addresses and numbers, so that refusals count by reason.
func refusalReason(msg string) string {
	if i := strings.IndexAny(msg, ":("); i > 0 {
		msg = msg[:i]
	}
	msg = reTableName.ReplaceAllString(msg, "T")
	msg = reQuoted.ReplaceAllString(msg, `"…"`)
	msg = reNumber.ReplaceAllString(msg, "N")
	return strings.TrimSpace(msg)
}

// txState follows the transaction status after a statement.
func (ru *runner) txState(status byte) {
	inTx := status == 'T' || status == 'E'
	if !inTx {
		ru.g.sp, ru.g.cursors = 0, 0
	}
	ru.g.inTx = inTx
	ru.g.failedTx = status == 'E'
}

// realign brings the oracle's transaction to the coordinator's status
// after a statement the oracle did not run.
func (ru *runner) realign(ctx context.Context, coordStatus byte) {
	os := ru.oracle.conn.TxStatus()
	var sql string
	switch {
	case coordStatus == os:
	case coordStatus == 'E' && os == 'T':
		sql = "SELECT 1/0" // fail the oracle's transaction too
	case coordStatus == 'I':
		sql = "ROLLBACK"
	default:
		ru.fail(fmt.Sprintf("after a refusal the coordinator's transaction status is %q and the oracle's %q", coordStatus, os))
		return
	}
	if sql != "" {
		run(ctx, ru.oracle.conn, &stmt{proto: simpleProto, sql: sql}, false, ru.cfg.Timeout)
		ru.logs = append(ru.logs, "   (oracle: "+sql+" to follow the coordinator's refusal)")
	}
	ru.followReported()
	ru.txState(coordStatus)
}

func (ru *runner) checkInvariants(ctx context.Context) error {
	ru.quiet.Lock()
	defer ru.quiet.Unlock()
	ru.st.Checks++
	bad, err := ru.chk.check(ctx, ru.g.s)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		ru.fail("invariants after statement " + fmt.Sprint(ru.n) + ":\n" + strings.Join(bad, "\n"))
		return nil
	}
	// The statements since the last good check are what a failure report
	// shows (with the session's first line).
	if len(ru.logs) > 1 {
		ru.logs = ru.logs[:1]
	}
	return nil
}
