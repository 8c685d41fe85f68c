// Command pgfleet is a sharded-PostgreSQL coordinator. Subcommands:
//
//	pgfleet serve   run a coordinator in front of PostgreSQL workers
//	pgfleet demo    start a local cluster (workers + coordinators) for psql
//	pgfleet bench   run a benchmark (bench relay, bench router, bench idle; bench/README.md)
//
// This package only wires flags to the packages that do the work.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/pooling"
)

const usage = `pgfleet: a fleet of PostgreSQL-compatible coordinators in front of plain PostgreSQL workers.

Usage:
  pgfleet serve [flags]   run one coordinator (pgfleet serve -h for flags)
  pgfleet demo  [flags]   start PostgreSQL workers and coordinators on loopback, ready for psql
  pgfleet bench router    the head-to-head harness: workloads through a fleet of coordinators, directly,
                          through PgBouncer and against systems given by URL (bench/README.md)
  pgfleet bench relay     benchmark pgbench through pgfleet, PgBouncer and directly (bench/README.md)
  pgfleet bench idle      coordinator memory per idle client connection (bench/README.md)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "demo":
		err = demo(os.Args[2:])
	case "bench":
		err = benchCmd(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "pgfleet: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgfleet:", err)
		os.Exit(1)
	}
}

// listFlag collects a repeatable flag; commas also separate values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// fleetFlags are serve's flags for joining a fleet of coordinators.
type fleetFlags struct {
	gossip, gossipAdvertise, advertise string
	join                               listFlag
}

func (f *fleetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.gossip, "gossip", os.Getenv("PGFLEET_GOSSIP"),
		"address to gossip with the fleet's other coordinators on, TCP and UDP (e.g. 0.0.0.0:7946; default: off, or 0.0.0.0:7946 with --join)")
	fs.StringVar(&f.gossipAdvertise, "gossip-advertise", os.Getenv("PGFLEET_GOSSIP_ADVERTISE"), "address the other coordinators reach --gossip on (default: --gossip's)")
	fs.StringVar(&f.advertise, "advertise", os.Getenv("PGFLEET_ADVERTISE"), "client address the fleet is told (default: --listen's)")
	fs.Var(&f.join, "join", "a coordinator's gossip host:port to join the fleet through (repeatable or comma-separated; also $PGFLEET_JOIN)")
}

// apply sets the fleet's part of cfg.
func (f *fleetFlags) apply(cfg *coordinator.Config) {
	if len(f.join) == 0 {
		_ = f.join.Set(os.Getenv("PGFLEET_JOIN"))
	}
	cfg.Gossip, cfg.GossipAdvertise, cfg.Join, cfg.AdvertiseSQL = f.gossip, f.gossipAdvertise, f.join, f.advertise
	if cfg.Gossip == "" && len(f.join) > 0 {
		cfg.Gossip = "0.0.0.0:7946"
	}
}

// coordinatorFlags are the flags serve and demo share.
type coordinatorFlags struct {
	poolSize       int
	poolTimeout    time.Duration
	serverLifetime time.Duration
	startupTimeout time.Duration
	auth           string
	users          listFlag
	workerPassword string
	logLevel       string

	tlsCert, tlsKey   string
	tlsRequired       bool
	workerSSLMode     string
	workerSSLRootCert string
	maxClients        int
	maxMessage        sizeFlag
	messageMemory     sizeFlag
	maxGather         sizeFlag
	idleInTxn         time.Duration
	idleSleep         time.Duration
	procs             int
	workerConns       int
	leaseTTL          time.Duration
}

func (f *coordinatorFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.poolSize, "pool-size", envInt("PGFLEET_POOL_SIZE", 16), "server connections per worker, database and user")
	fs.IntVar(&f.workerConns, "worker-connections", envInt("PGFLEET_WORKER_CONNECTIONS", 0), "each worker's connection budget, divided between the coordinators that share the metadata database\n"+
		"(default: the worker's max_connections less superuser_reserved_connections and 20); -1: no budget, --pool-size alone bounds each pool")
	fs.DurationVar(&f.leaseTTL, "lease", envDuration("PGFLEET_LEASE", 10*time.Second), "length of a coordinator's lease on its shares of the budget, renewed every tenth of it; a coordinator\n"+
		"that cannot renew closes its worker connections three quarters into it, and the others take its shares when it lapses")
	fs.DurationVar(&f.poolTimeout, "pool-timeout", envDuration("PGFLEET_POOL_TIMEOUT", 5*time.Second), "longest a statement waits for a server connection")
	fs.DurationVar(&f.serverLifetime, "server-lifetime", envDuration("PGFLEET_SERVER_LIFETIME", time.Hour), "age past which a server connection is closed instead of used again (0: never), so that role and database\n"+
		"settings changed on a worker directly reach new sessions within it (changes made through any coordinator reach them at once)")
	fs.DurationVar(&f.startupTimeout, "startup-timeout", 10*time.Second, "longest a client may take to connect and authenticate")
	fs.StringVar(&f.auth, "auth", os.Getenv("PGFLEET_AUTH"), "client authentication: trust, scram-sha-256, md5, or workers (SCRAM-SHA-256 against the role's password on the first\n"+
		"worker, read as the postgres user; the coordinator logs into the workers with the client's SCRAM key: no --user needed)\n"+
		"(default: scram-sha-256 when users are given; without users, trust on a loopback --listen, and a non-loopback --listen\n"+
		"refuses to start unless --auth is given)")
	fs.Var(&f.users, "user", "name:password of a user (repeatable; also $PGFLEET_USERS, comma-separated)")
	fs.StringVar(&f.workerPassword, "worker-password", os.Getenv("PGFLEET_WORKER_PASSWORD"), "password for server connections of users not given with --user")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.tlsCert, "tls-cert", os.Getenv("PGFLEET_TLS_CERT"), "PEM certificate (chain) offered to clients that ask for TLS (with --tls-key; without them an SSLRequest is answered N)")
	fs.StringVar(&f.tlsKey, "tls-key", os.Getenv("PGFLEET_TLS_KEY"), "PEM private key of --tls-cert")
	fs.BoolVar(&f.tlsRequired, "tls-required", envBool("PGFLEET_TLS_REQUIRED"), "refuse clients that do not use TLS (FATAL 28000, as a hostssl-only pg_hba.conf); needs --tls-cert")
	fs.StringVar(&f.workerSSLMode, "worker-sslmode", envStr("PGFLEET_WORKER_SSLMODE", "disable"),
		"libpq sslmode of every connection to the workers and the metadata database: disable, allow, prefer, require, verify-ca or verify-full")
	fs.StringVar(&f.workerSSLRootCert, "worker-sslrootcert", os.Getenv("PGFLEET_WORKER_SSLROOTCERT"),
		"PEM file of the CAs that sign the workers' certificates (libpq sslrootcert; verify-ca and verify-full\nwithout it use the system's CAs; with require it verifies as verify-ca)")
	fs.IntVar(&f.maxClients, "max-client-connections", envInt("PGFLEET_MAX_CLIENT_CONNECTIONS", coordinator.DefaultMaxClientConnections),
		"client connections open at once, those starting up included; more get 53300 \"sorry, too many clients already\"")
	f.maxMessage = sizeFlag(coordinator.DefaultMaxMessageSize)
	fs.Var(&f.maxMessage, "max-message-size",
		"longest message from an authenticated client (a query, Bind with its parameters, CopyData), e.g. 64MiB, up to 1GiB; before authentication PostgreSQL's own bounds (64 KiB) apply")
	fs.Var(&f.messageMemory, "message-memory",
		"memory that large client messages (over 8 KiB) may take across all sessions at once; a session waits up to 30s for its share, then\n"+
			"ends with 53200 out of memory (default 256MiB, or --max-message-size when larger; at least --max-message-size)")
	f.maxGather = sizeFlag(coordinator.DefaultMaxGather)
	fs.Var(&f.maxGather, "max-gather",
		"rows one multi-shard query may gather on the coordinator to merge them (partial results, or all rows of a table for a statement\n"+
			"that runs whole over them: window functions, count(DISTINCT), UNION, subqueries); past it the query fails with 54000")
	fs.DurationVar(&f.idleInTxn, "idle-in-transaction-timeout", envDuration("PGFLEET_IDLE_IN_TRANSACTION_TIMEOUT", 0),
		"end a session idle in a transaction block for longer, rolling it back (FATAL 25P03; 0: off; a session's own idle_in_transaction_session_timeout applies too)")
	fs.IntVar(&f.procs, "procs", envInt("PGFLEET_PROCS", 0),
		"processors (GOMAXPROCS) the process runs Go code on; 0: from 1 up to every CPU, as the load needs (a GOMAXPROCS variable fixes it too)")
	fs.DurationVar(&f.idleSleep, "idle-sleep", envDuration("PGFLEET_IDLE_SLEEP", time.Second),
		"a session idle outside a transaction for one to two times this long gives up its goroutine until its client sends again\n"+
			"(Linux; it then holds no stack; negative: never)")
}

// sizeFlag is a byte count given as 1048576, 64KiB, 256MiB or 1GiB (kB, MB
// and GB are taken as PostgreSQL takes them, as powers of 1024).
type sizeFlag int

func (f *sizeFlag) String() string {
	n := int(*f)
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}
func (f *sizeFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 {
		return fmt.Errorf("want a positive size such as 256MiB")
	}
	if n > (1<<30)/mult {
		return fmt.Errorf("at most 1GiB")
	}
	*f = sizeFlag(n * mult)
	return nil
}

// startProcs fixes GOMAXPROCS at --procs, or leaves it to the GOMAXPROCS
// variable, or has coordinator.AdaptProcs size it (stop ends that).
func (f *coordinatorFlags) startProcs(log *slog.Logger) (stop func()) {
	switch {
	case f.procs > 0:
		runtime.GOMAXPROCS(f.procs)
	case os.Getenv("GOMAXPROCS") == "":
		return coordinator.AdaptProcs(log)
	}
	return func() {}
}

func (f *coordinatorFlags) config(listen string, workers []string) (coordinator.Config, error) {
	if len(f.users) == 0 && os.Getenv("PGFLEET_USERS") != "" {
		_ = f.users.Set(os.Getenv("PGFLEET_USERS"))
	}
	users := map[string]string{}
	for _, u := range f.users {
		name, pw, ok := strings.Cut(u, ":")
		if !ok || name == "" {
			return coordinator.Config{}, fmt.Errorf("--user %q: want name:password", u)
		}
		if pw == "" {
			// PostgreSQL never accepts an empty password; neither does
			// pgfleet, which would otherwise let anyone in as name.
			return coordinator.Config{}, fmt.Errorf("--user %q: the password is empty", name)
		}
		users[name] = pw
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return coordinator.Config{}, fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	cfg := coordinator.Config{Listen: listen, Workers: workers, Auth: f.auth, Users: users,
		WorkerPassword: f.workerPassword, PoolSize: f.poolSize, PoolTimeout: f.poolTimeout, ServerLifetime: f.serverLifetime,
		StartupTimeout: f.startupTimeout, Logger: log, TLSRequired: f.tlsRequired,
		WorkerTLS:            pooling.WorkerTLS{SSLMode: f.workerSSLMode, RootCert: f.workerSSLRootCert},
		MaxClientConnections: f.maxClients, MaxMessageSize: int(f.maxMessage), IdleInTransactionTimeout: f.idleInTxn, IdleSleep: f.idleSleep,
		MessageMemory: int64(f.messageMemory), MaxGather: int64(f.maxGather),
		WorkerConnections: f.workerConns, LeaseTTL: f.leaseTTL}
	if f.workerConns < 0 {
		cfg.WorkerConnections, cfg.LeaseTTL = 0, -1
	} else if f.leaseTTL != 0 && f.leaseTTL < 100*time.Millisecond {
		return coordinator.Config{}, fmt.Errorf("--lease must be at least 100ms")
	}
	if f.tlsCert != "" || f.tlsKey != "" {
		if f.tlsCert == "" || f.tlsKey == "" {
			return coordinator.Config{}, fmt.Errorf("--tls-cert and --tls-key go together")
		}
		tc, err := serverTLS(f.tlsCert, f.tlsKey)
		if err != nil {
			return coordinator.Config{}, err
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// serverTLS loads a certificate and key for client connections. TLS 1.2 is
// the oldest version offered, as PostgreSQL's ssl_min_protocol_version.
func serverTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", envStr("PGFLEET_LISTEN", "127.0.0.1:6432"), "address for clients")
	metrics := fs.String("metrics-listen", os.Getenv("PGFLEET_METRICS_LISTEN"),
		"address for /metrics, /healthz (alive) and /readyz (catalog, metadata database and workers answer; 503 otherwise) (empty: off)")
	shutdownTimeout := fs.Duration("shutdown-timeout", envDuration("PGFLEET_SHUTDOWN_TIMEOUT", 30*time.Second),
		"on SIGTERM or SIGINT, how long running statements and open transactions may take to finish before their sessions are ended (57P01) and rolled back; a second signal ends them at once")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file until shutdown (for profiling)")
	recovery := fs.Duration("recovery-interval", envDuration("PGFLEET_RECOVERY_INTERVAL", 5*time.Second),
		"how often to commit or roll back prepared transactions left by a crashed coordinator (0: never)")
	grace := fs.Duration("recovery-grace", envDuration("PGFLEET_RECOVERY_GRACE", time.Minute),
		"age at which recovery rolls back a prepared transaction whose commit was not decided (decided ones are committed at once)")
	deadlock := fs.Duration("deadlock-check", envDuration("PGFLEET_DEADLOCK_CHECK", time.Second),
		"how often to look for transactions waiting for each other's locks across workers, and cancel the youngest (40P01) (0: never)")
	var workers listFlag
	fs.Var(&workers, "worker", "worker host:port (repeatable; the first is the default node; also $PGFLEET_WORKERS)")
	metadataURL := fs.String("metadata", os.Getenv("PGFLEET_METADATA"),
		"libpq URL of the database that holds the shard catalog and the coordinators' leases (default: the first worker's postgres database)")
	var ff fleetFlags
	ff.register(fs)
	var cf coordinatorFlags
	cf.register(fs)
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if len(workers) == 0 {
		_ = workers.Set(os.Getenv("PGFLEET_WORKERS"))
	}
	cfg, err := cf.config(*listen, workers)
	if err != nil {
		return err
	}
	ff.apply(&cfg)
	cfg.MetricsListen = *metrics
	cfg.MetadataURL = *metadataURL
	cfg.RecoveryInterval = *recovery
	cfg.RecoveryGrace = *grace
	if *recovery <= 0 {
		cfg.RecoveryInterval = -1 // the Config's zero value means the default
	}
	cfg.DeadlockCheck = *deadlock
	if *deadlock <= 0 {
		cfg.DeadlockCheck = -1
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		return err
	}
	defer cf.startProcs(cfg.Logger)()
	if err := srv.Start(); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	cfg.Logger.Info("coordinator ready", "listen", srv.Addr(), "workers", strings.Join(workers, ","), "pool_size", cfg.PoolSize)
	if f := srv.Fleet(); f != nil {
		cfg.Logger.Info("fleet joined", "gossip", f.Addr(), "members", len(f.Members()))
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	sig := <-sigs
	cfg.Logger.Info("shutting down: no new clients; sessions end when their transactions do",
		"signal", sig.String(), "deadline", shutdownTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			cfg.Logger.Info("second signal: ending every session now", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	err = srv.Shutdown(ctx)
	cfg.Logger.Info("shut down")
	return err
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envBool(k string) bool {
	v, _ := strconv.ParseBool(os.Getenv(k))
	return v
}

func envInt(k string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(k), &v); err == nil {
		return v
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return d
	}
	return def
}
