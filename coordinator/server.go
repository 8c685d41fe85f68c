package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/fleet"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// Config is a coordinator's configuration.
type Config struct {
	Listen  string   // client address, host:port
	Workers []string // worker host:port; the first is the default node
	// Auth is "trust", "scram-sha-256", "md5" or "workers" (SCRAM-SHA-256
	// against the role's verifier on the first worker, which the
	// coordinator then logs into the workers with, authworkers.go). Empty
	// means scram-sha-256
	// when users are given and trust when none are, which New allows only
	// on a loopback Listen: without users, a coordinator reachable from
	// other hosts refuses to start unless Auth is "trust" explicitly.
	Auth string
	// Users maps user names to passwords, for client authentication and for
	// the coordinator's own connections to workers.
	Users map[string]string
	// WorkerPassword is used for server connections of users not in Users.
	WorkerPassword string

	// TLS, when set, lets clients encrypt their connections: an SSLRequest
	// is answered 'S' and the handshake follows. Nil answers 'N'.
	TLS *tls.Config
	// TLSRequired refuses clients that did not negotiate TLS (28000, as a
	// hostssl-only pg_hba.conf would); it needs TLS.
	TLSRequired bool
	// WorkerTLS is libpq's sslmode and sslrootcert for every connection
	// the coordinator makes to a worker (pools, per-statement connections,
	// recovery, and the metadata database when MetadataURL is empty). The
	// zero value is sslmode=disable.
	WorkerTLS pooling.WorkerTLS

	PoolSize int // server connections per worker, database and user
	// WorkerConnections is each worker's connection budget, which the
	// coordinators sharing the metadata database divide between them
	// (0: the worker's max_connections less superuser_reserved_connections
	// and 20). LeaseTTL is the length of a coordinator's lease on its
	// shares (0: 10s; negative: no budget, each pool bounded by PoolSize
	// alone).
	WorkerConnections int
	LeaseTTL          time.Duration
	PoolTimeout       time.Duration // longest wait for a server connection
	ServerLifetime    time.Duration // age past which a server connection is closed (pooling.Config.Lifetime; 0: never)
	StartupTimeout    time.Duration // longest a client may take to start up
	StmtCacheSize     int           // prepared statements per server connection

	// MaxClientConnections bounds the client connections open at once,
	// those still starting up included (default 10000); a client over it
	// gets FATAL 53300 "sorry, too many clients already", as from
	// PostgreSQL's max_connections.
	MaxClientConnections int
	// MaxMessageSize bounds one message from an authenticated client
	// (default 256 MiB, at most 1 GiB): a query, Bind with its parameters,
	// a CopyData. The data-less messages are bounded by PostgreSQL's 10000
	// bytes, and before authentication nothing longer than PostgreSQL's
	// authentication messages (64 KiB, SASL 1 KiB) is read. A longer message
	// ends the session with FATAL 08P01 "invalid message length" before its
	// body is read; bodies are read as they arrive, never allocated from
	// the length word.
	MaxMessageSize int
	// MessageMemory bounds the memory that large client messages (bodies
	// over the 8 KiB read buffer) take across all sessions at once (default
	// 256 MiB, at least MaxMessageSize): a session reserves a body's size
	// before reading it and gives it back with its next message. A session
	// that cannot get its share within MessageMemoryWait (default 30s)
	// ends with FATAL 53200 out of memory, as a backend that cannot
	// allocate would.
	MessageMemory     int64
	MessageMemoryWait time.Duration
	// MaxGather bounds the rows one multi-shard query gathers on the
	// coordinator to merge them (partial results, or a table's rows when
	// the whole statement runs over them): past it the query fails with
	// 54000. Default 64 MiB.
	MaxGather int64
	// IdleInTransactionTimeout ends a session idle in a transaction block
	// for longer (FATAL 25P03, as idle_in_transaction_session_timeout does)
	// and rolls its transaction back; 0: no limit beyond what the session
	// sets itself.
	IdleInTransactionTimeout time.Duration
	// IdleSleep: a session waiting for its client outside a transaction
	// for one to two times this long gives its goroutine up until the
	// client sends again (on Linux; default 1s, negative: never), so that
	// an idle client holds no goroutine stack.
	IdleSleep time.Duration

	// MetadataURL is the libpq URL of the database holding the shard
	// catalog; empty means the first worker's postgres database.
	MetadataURL string
	// CatalogPoll is how often the coordinator checks the catalog version
	// for changes made by other coordinators (default 500ms): the
	// fallback to gossip, which tells it at once.
	CatalogPoll time.Duration
	// Gossip is the address the coordinator gossips on with the rest of
	// the fleet (hashicorp/memberlist, TCP and UDP; port 0 picks one); ""
	// is no fleet. GossipAdvertise, when set, is the address the others
	// reach it on. Join are members to join through.
	Gossip          string
	GossipAdvertise string
	Join            []string
	// AdvertiseSQL is the client address the fleet is told (default: the
	// listener's).
	AdvertiseSQL string
	// RecoveryInterval is how often the coordinator resolves prepared
	// transactions that a crashed coordinator left on the workers, from the
	// decisions in the metadata database (default 5s; negative: never).
	RecoveryInterval time.Duration
	// DeadlockCheck is how often the coordinator looks for lock waits in
	// a cycle through several workers among its sessions' transactions,
	// which no worker's own detector sees (default 1s; negative: never).
	DeadlockCheck time.Duration
	// RecoveryGrace is the age a prepared transaction without a decision
	// must reach before recovery rolls it back (default 1m), so that a live
	// coordinator's transactions are left to it. Decided ones are finished
	// at once.
	RecoveryGrace time.Duration

	MetricsListen string // address for /metrics, /healthz and /readyz; "" disables
	Logger        *slog.Logger
	Registry      *prometheus.Registry // nil: a new one
}

// Defaults of Config's limits.
const (
	DefaultMaxClientConnections = 10000
	DefaultMaxMessageSize       = 256 << 20
	DefaultMessageMemory        = 256 << 20
	DefaultMaxGather            = 64 << 20
)

// Server is one coordinator.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ln      net.Listener
	metrics *metrics
	// msgMemory is Config.MessageMemory, shared by the sessions' readers.
	msgMemory *wire.Budget
	pm        *pooling.Metrics
	stmts     stmtRegistry

	catalog     atomic.Pointer[metadata.Snapshot]
	defaultNode atomic.Int32
	store       *metadata.Store

	// The connection budget (budget.go). name is this coordinator's
	// lease's; gates are by worker, budgets read from the workers.
	name        string
	incarnation string // this process's, random: its lease's in the fleet's member data
	// --auth workers (authworkers.go): the pool reading roles' verifiers
	// and the keys clients logged in with, by user.
	authMu    sync.Mutex
	authPool  *pgxpool.Pool
	scramKeys map[string]*pooling.SCRAMKey
	gatesMu   sync.Mutex
	gates     map[string]*pooling.Gate
	// joining are the workers citus_add_node is adding (not active in the
	// catalog yet), by the number of calls: the lease asks shares of them
	// too, so that the call can connect to them (joinBudget).
	joining     map[string]int
	budgets     map[string]int
	budgetKick  chan struct{}
	budgetEnd   chan struct{}
	leaseTimer  *time.Timer
	reaping     atomic.Bool
	leasePaused atomic.Bool                   // tests: renewals stop, as when the metadata database is out of reach
	leaseHeld   atomic.Bool                   // the last renewal succeeded (this process holds a lease)
	lastRenew   atomic.Int64                  // when the last successful renewal began, Unix ns
	renewed     atomic.Pointer[chan struct{}] // closed when a renewal ends
	metaPool    *pgxpool.Pool
	// leases is the store on a pool of its own (leasePool, two
	// connections) for the lease's statements, which are on a clock: a
	// queue of catalog and planning queries on metaPool cannot starve them.
	leases    *metadata.Store
	leasePool *pgxpool.Pool
	// ddlEpoch counts DDL statements run through this coordinator; with
	// the catalog version it dates mutable's verdicts.
	ddlEpoch atomic.Int64
	// stmtEpoch advances when a session that sent DDL ends its
	// transaction: statements the pools' connections prepared before are
	// prepared again at their next use (pooling.StmtCache).
	stmtEpoch atomic.Int64
	// welcomes: what recent startups read (welcome.go).
	welcomes  welcomes
	viewEpoch atomic.Int64 // user code that may have made a view ran
	views     atomic.Pointer[viewSet]
	viewsMu   sync.Mutex // one reading of the views at a time
	mutable   mutableCache
	// randomDefaults: which distribution columns default to a random
	// UUID, by table and column, at a catalog version and DDL epoch
	// (randomdefault.go).
	randomDefaults struct {
		mu    sync.Mutex
		stamp [2]int64
		at    time.Time
		m     map[string]bool
	}
	// castsOK: computed distribution values whose casts were found to call
	// no volatile function, with the catalog version and DDL epoch.
	castsMu  sync.Mutex
	castsOK  map[*planner.Value][2]int64
	metaDB   string // the catalog describes tables of this database
	plans    planCache
	execEnv  executor.Env // what the executor's runs share
	scatter  scatterCache // multi-shard plans' run-time state
	colTypes columnTypes  // distribution columns' types with modifiers
	// shardsSchema: the nodes and databases (addr+"/"+db) where
	// ensureShardsSchema made sure of schema pgfleet_shards.
	shardsSchema sync.Map
	records      recordTables                             // records.go
	pgTypes      atomic.Pointer[map[uint32]executor.Type] // built-in types, for merges
	stopWatch    chan struct{}
	idler        *idler                      // nil: sessions do not sleep (sleep.go)
	catalogKick  chan struct{}               // a member holds a newer catalog
	fences       fences                      // tables whose rows a coordinator is moving
	holds        holds                       // shard groups whose move is cutting over (hold.go)
	flight       flight                      // statements past a hold check (hold.go)
	fleet        atomic.Pointer[fleet.Fleet] // nil: no fleet
	recoveryEnd  chan struct{}               // closed when the recovery loop has returned
	// jobs: background rebalance runners (rebalancejob.go), told to stop
	// by closing jobStop.
	jobs     sync.WaitGroup
	jobStop  chan struct{}
	jobsOnce sync.Once

	hooks testHooks

	// span is the number of workers a transaction can hold connections
	// to at once (the catalog's active nodes): the pools' class reserve.
	span atomic.Int32

	mu           sync.Mutex
	pools        map[poolKey]*pooling.Pool
	paths        pathCache                      // searchpath.go
	userSchemas  atomic.Pointer[userSchemas]    // searchpath.go
	userSchemaMu sync.Mutex                     // one asking at a time
	types        map[typesKey]*pooling.TypeOIDs // typeoids.go
	typesDBs     map[string]*typesDB
	sessions     map[uint32]*session // by backend pid we gave the client
	conns        map[net.Conn]struct{}
	closed       bool
	// draining: Shutdown has begun (no new sessions; sessions end when
	// idle outside a transaction); stopping: its deadline has passed.
	draining atomic.Bool
	stopping atomic.Bool
	ready    readiness
	idleZero idleDefaults
	wg       sync.WaitGroup
	http     *http.Server

	// tlsEndPoint is the tls-server-end-point channel binding of the
	// certificate clients get (RFC 5929), for SCRAM-SHA-256-PLUS; nil
	// without TLS or when it cannot be known in advance.
	tlsEndPoint []byte
	// metricsAddr is where /metrics, /healthz and /readyz listen.
	metricsAddr string
}

type poolKey struct{ worker, database, user string }

// testHooks let tests put faults at the points where they matter; set
// before any client connects, nil in production.
type testHooks struct {
	// afterDecide sees the answer to a transaction block's commit decision
	// and may replace it (a lost answer, a stall past its deadline).
	afterDecide func(ctx context.Context, base string, err error) error
	// beforeCommitPrepared runs between a transaction block's commit
	// decision and its COMMIT PREPAREDs.
	beforeCommitPrepared func(base string)
	// beforeDecide runs between a transaction block's PREPAREs and its
	// commit decision.
	beforeDecide func(base string)
}

type metrics struct {
	clients prometheus.Gauge
	pinned  *prometheus.CounterVec
	cancels prometheus.Counter
	// recovered counts prepared transactions resolved by recovery, by
	// decision (commit, abort).
	recovered *prometheus.CounterVec
	// share is this coordinator's share of each worker's connection
	// budget.
	share *prometheus.GaugeVec
	// requests: from a client's request (a Query, or the extended-protocol
	// messages that arrived together) to its answer written.
	requests prometheus.Histogram
	// statements counts statements by plan kind (kinds: its counters),
	// errors the ErrorResponses clients got by SQLSTATE.
	statements *prometheus.CounterVec
	kinds      kindCounters
	errors     *prometheus.CounterVec
	// staleRetries: requests run again after meeting a moved shard.
	staleRetries prometheus.Counter
	// holdWaits, holdSeconds: statements that waited for a cut-over's
	// hold (hold.go), and their time waiting.
	holdWaits, holdSeconds prometheus.Counter
	// welcomesReused: logins answered from an earlier one's record
	// (welcome.go).
	welcomesReused prometheus.Counter
	// propagated: from a member announcing a catalog change to this
	// coordinator holding it.
	propagated  prometheus.Histogram
	propagation propagation
}

// New validates cfg and makes a server; Start begins listening.
func New(cfg Config) (*Server, error) {
	if len(cfg.Workers) == 0 {
		return nil, errors.New("at least one worker is required (--worker host:port)")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:6432"
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = 16
	}
	if cfg.PoolTimeout <= 0 {
		cfg.PoolTimeout = 5 * time.Second
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = defaultLeaseTTL
	}
	if cfg.CatalogPoll <= 0 {
		cfg.CatalogPoll = 500 * time.Millisecond
	}
	if cfg.RecoveryInterval == 0 {
		cfg.RecoveryInterval = defaultRecoveryInterval
	}
	if cfg.DeadlockCheck == 0 {
		cfg.DeadlockCheck = defaultDeadlockCheck
	}
	if cfg.RecoveryGrace <= 0 {
		cfg.RecoveryGrace = defaultRecoveryGrace
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 10 * time.Second
	}
	if cfg.IdleSleep == 0 {
		cfg.IdleSleep = time.Second
	}
	if cfg.MaxClientConnections <= 0 {
		cfg.MaxClientConnections = DefaultMaxClientConnections
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	if cfg.MaxMessageSize > wire.MaxMessageLen {
		return nil, fmt.Errorf("max message size %d is over PostgreSQL's 1 GiB", cfg.MaxMessageSize)
	}
	if cfg.MaxGather <= 0 {
		cfg.MaxGather = DefaultMaxGather
	}
	if cfg.MessageMemory <= 0 {
		cfg.MessageMemory = max(DefaultMessageMemory, int64(cfg.MaxMessageSize))
	}
	if cfg.MessageMemory < int64(cfg.MaxMessageSize) {
		return nil, fmt.Errorf("message memory %d is less than the max message size %d: a message of the largest size could never be read",
			cfg.MessageMemory, cfg.MaxMessageSize)
	}
	if cfg.MessageMemoryWait <= 0 {
		cfg.MessageMemoryWait = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	explicitTrust := cfg.Auth == "trust"
	if cfg.Auth == "" {
		if len(cfg.Users) == 0 {
			cfg.Auth = "trust"
		} else {
			cfg.Auth = "scram-sha-256"
		}
	}
	switch cfg.Auth {
	case "trust":
		if !isLoopback(cfg.Listen) && len(cfg.Users) == 0 {
			if !explicitTrust {
				return nil, fmt.Errorf("refusing to listen on %s without authentication: with no users, trust "+
					"authentication is allowed only on loopback addresses; give users (--user name:password; clients "+
					"then authenticate with SCRAM-SHA-256), listen on 127.0.0.1, or pass --auth trust to let in "+
					"anyone who can reach %s", cfg.Listen, cfg.Listen)
			}
			cfg.Logger.Warn("trust authentication on a non-loopback address: anyone who can reach it can connect", "listen", cfg.Listen)
		}
	case "scram-sha-256", "md5":
		if len(cfg.Users) == 0 {
			return nil, fmt.Errorf("auth %s needs at least one user (--user name:password)", cfg.Auth)
		}
	case "workers":
	default:
		return nil, fmt.Errorf("unknown auth method %q: use trust, scram-sha-256, md5 or workers", cfg.Auth)
	}
	if cfg.TLSRequired && cfg.TLS == nil {
		return nil, errors.New("TLS is required of clients but no certificate is configured (--tls-cert, --tls-key)")
	}
	if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil {
		return nil, errors.New("TLS configuration without a certificate")
	}
	if err := cfg.WorkerTLS.Check(); err != nil {
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		cfg.Registry = reg
	}
	m := &metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pgfleet_client_connections",
			Help: "Client connections open on this coordinator."}),
		pinned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_pinned_sessions_total",
			Help: "Sessions pinned to one server connection because they used state that cannot be multiplexed."},
			[]string{"reason"}),
		cancels: prometheus.NewCounter(prometheus.CounterOpts{Name: "pgfleet_cancel_requests_total",
			Help: "Cancel requests received."}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_recovered_transactions_total",
			Help: "Prepared transactions left by a coordinator that this coordinator's recovery committed or rolled back."},
			[]string{"decision"}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pgfleet_connection_share",
			Help: "Connections this coordinator may hold to each worker: its share of the worker's budget, divided between the coordinators."},
			[]string{"worker"}),
		requests: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pgfleet_request_duration_seconds",
			Help:    "Time from a client's request (a Query, or the extended-protocol messages that arrive together) to its whole answer written back.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)}),
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_statements_total",
			Help: "Statements planned and run, by plan kind (a Query's statement, an extended-protocol Bind)."},
			[]string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfleet_errors_total",
			Help: "Errors sent to clients, workers' and the coordinator's own, by SQLSTATE (\"other\": none of five letters or digits)."},
			[]string{"sqlstate"}),
		staleRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "pgfleet_stale_shard_retries_total",
			Help: "Requests outside a transaction block run again because a shard move's cut-over dropped a shard they were routed to."}),
		holdWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "pgfleet_cutover_hold_waits_total",
			Help: "Statements that waited at this coordinator for a shard move's cut-over of their shard group to end."}),
		holdSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "pgfleet_cutover_hold_seconds_total",
			Help: "Time statements spent waiting for shard moves' cut-overs (pgfleet_cutover_hold_waits_total counts them)."}),
		welcomesReused: prometheus.NewCounter(prometheus.CounterOpts{Name: "pgfleet_logins_answered_from_record_total",
			Help: "Logins answered from an earlier login's ParameterStatus values because no server connection was free at once."}),
		propagated: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pgfleet_catalog_propagation_seconds",
			Help:    "Time from a coordinator announcing a catalog change it committed to this one holding it (the announcer's clock to this one's).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	m.kinds = newKindCounters(m.statements)
	reg.MustRegister(m.clients, m.pinned, m.cancels, m.recovered, m.share, m.requests, m.statements, m.errors, m.staleRetries, m.holdWaits, m.holdSeconds, m.welcomesReused, m.propagated)
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: m, pm: pooling.NewMetrics(reg),
		pools: map[poolKey]*pooling.Pool{}, sessions: map[uint32]*session{}, conns: map[net.Conn]struct{}{},
		stmts: stmtRegistry{m: map[string]*Statement{}}, tlsEndPoint: serverEndPoint(cfg.TLS),
		msgMemory: wire.NewBudget(cfg.MessageMemory, cfg.MessageMemoryWait),
		gates:     map[string]*pooling.Gate{}, budgets: map[string]int{}, scramKeys: map[string]*pooling.SCRAMKey{}}
	s.stmts.epoch = &s.stmtEpoch
	s.span.Store(int32(len(cfg.Workers)))
	var inc [8]byte
	_, _ = rand.Read(inc[:])
	s.incarnation = hex.EncodeToString(inc[:])
	// The fleet, as this member sees it (0 without gossip).
	fleetValue := func(v func(*fleet.Fleet) float64) func() float64 {
		return func() float64 {
			if f := s.fleet.Load(); f != nil {
				return v(f)
			}
			return 0
		}
	}
	reg.MustRegister(newPoolCollector(s),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pgfleet_fleet_members", Help: "Live coordinators in the fleet, this one included (gossip)."},
			fleetValue(func(f *fleet.Fleet) float64 { return float64(len(f.Members())) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pgfleet_gossip_messages_sent_total", Help: "Messages sent to other coordinators (catalog changes, forwarded cancel requests)."},
			fleetValue(func(f *fleet.Fleet) float64 { return float64(f.Sent()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pgfleet_gossip_bytes_sent_total", Help: "Bytes sent to other coordinators: memberlist's probes, gossip and state exchanges, and pgfleet's messages."},
			fleetValue(func(f *fleet.Fleet) float64 { return float64(f.BytesSent()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pgfleet_gossip_dropped_total", Help: "Undecodable messages and member metadata from other coordinators, dropped."},
			fleetValue(func(f *fleet.Fleet) float64 { return float64(f.Dropped()) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pgfleet_procs", Help: "Processors the process runs Go code on (GOMAXPROCS; --procs 0 adapts it to the load)."},
			func() float64 { return float64(runtime.GOMAXPROCS(0)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pgfleet_client_sessions_asleep", Help: "Client sessions idle long enough to have given up their goroutines (IdleSleep)."},
			func() float64 {
				if s.idler != nil {
					return float64(s.idler.count())
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pgfleet_catalog_version", Help: "The catalog version this coordinator routes by."},
			func() float64 {
				if c := s.catalog.Load(); c != nil {
					return float64(c.Version)
				}
				return 0
			}))
	s.execEnv = executor.Env{MaxGather: cfg.MaxGather, Types: s.builtinTypes, Prepared: func(rest []byte) executor.Stmt {
		st := s.stmts.intern(rest)
		return executor.Stmt{Name: st.Name, Parse: st.parse}
	}}
	return s, nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start listens on the client address (and the metrics address) and serves
// in the background until Close.
func (s *Server) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := s.openCatalog(ctx)
	cancel()
	if err != nil {
		return err
	}
	s.stopWatch = make(chan struct{})
	s.jobStop = make(chan struct{})
	s.catalogKick = make(chan struct{}, 1)
	go s.watchCatalog(s.stopWatch)
	if s.cfg.RecoveryInterval > 0 {
		s.recoveryEnd = make(chan struct{})
		go s.recoveryLoop(s.stopWatch, s.recoveryEnd)
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		s.closeCatalog()
		return err
	}
	s.ln = ln
	if s.cfg.DeadlockCheck > 0 {
		go s.deadlockLoop(s.stopWatch)
	}
	if s.cfg.IdleSleep > 0 {
		if d, err := newIdler(func(ss *session) { s.resume(ss) }, s.log); err == nil {
			s.idler = d
			go s.sleepSweep(s.stopWatch)
		} else {
			s.log.Info("sessions keep their goroutines while idle", "reason", err)
		}
	}
	if s.cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", s.healthz)
		mux.HandleFunc("/readyz", s.readyz)
		mln, err := net.Listen("tcp", s.cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return err
		}
		s.metricsAddr = mln.Addr().String()
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = s.http.Serve(mln) }()
	}
	if s.cfg.LeaseTTL > 0 {
		s.name = leaseName(ln.Addr().String())
		s.budgetKick, s.budgetEnd = make(chan struct{}, 1), make(chan struct{})
		ch := make(chan struct{})
		s.renewed.Store(&ch)
		s.leaseTimer = time.AfterFunc(time.Hour, s.leaseLapsing)
		s.leaseTimer.Stop()
		s.renewBudget()
		go s.budgetLoop(s.stopWatch, s.budgetEnd)
	}
	if s.cfg.Gossip != "" {
		sql := s.advertised()
		host, _, _ := net.SplitHostPort(s.cfg.Gossip)
		f, err := fleet.Start(fleet.Config{Bind: s.cfg.Gossip, Advertise: s.cfg.GossipAdvertise, Join: s.cfg.Join,
			SQL: sql, Metrics: s.metricsAddr, Catalog: s.catalog.Load().Version, Local: isLoopback(net.JoinHostPort(host, "0")),
			OnCatalog: s.kickCatalog, OnCancel: func(pid uint32, secret []byte) { s.cancelHere(pid, secret) },
			OnFence: s.fence, OnUnfence: s.unfenced, OnMembers: s.kickBudget, OnDeparted: s.departed, OnLogins: s.refreshPools,
			Lease: s.incarnation, Logger: s.log})
		if err != nil {
			ln.Close()
			s.closeCatalog()
			return err
		}
		s.fleet.Store(f)
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return nil
}

// Fleet is the coordinator's fleet membership (nil without Gossip).
func (s *Server) Fleet() *fleet.Fleet { return s.fleet.Load() }

// MetricsAddr is the address of /metrics, /healthz and /readyz ("" when
// off).
func (s *Server) MetricsAddr() string { return s.metricsAddr }

// Addr is the address clients connect to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || s.draining.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			s.log.Error("accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		n := len(s.conns)
		if n >= 2*s.cfg.MaxClientConnections {
			// Far over the limit: do not even read a startup packet.
			s.mu.Unlock()
			s.refuse(c)
			continue
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1) // done when the session ends (connEnded)
		go s.serveConn(c, n >= s.cfg.MaxClientConnections)
	}
}

// refuse tells a client over twice the connection limit so and closes its
// connection at once.
func (s *Server) refuse(c net.Conn) {
	er := pgerr.Flatten(pgerr.Fatal(pgerr.TooManyConnections, "sorry, too many clients already"))
	b, _ := er.Encode(nil)
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(b)
	c.Close()
}

// adminShutdown is what a session ended by Shutdown is told, as PostgreSQL
// tells it.
func adminShutdown() error {
	return pgerr.Fatal(pgerr.AdminShutdown, "terminating connection due to administrator command")
}

// Shutdown stops the coordinator gracefully: it stops accepting clients
// (a client still starting up gets 57P03), ends every session waiting
// outside a transaction with FATAL 57P01 "terminating connection due to
// administrator command" at once and every other session when it next
// waits outside a transaction, so running statements and open transactions
// may finish. When ctx ends first, the rest are ended as by PostgreSQL's
// fast shutdown: waiting sessions get 57P01, running statements are cut
// off (their worker connections broken, so their transactions roll back)
// and their sessions get 57P01 too. Then it closes as Close does.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	// Idle sessions are told before the listener closes: once a client
	// sees connections refused, every idle one has its 57P01 (a session
	// that starts meanwhile sees draining when it waits, and ends too).
	s.endWaiting(false)
	if s.ln != nil {
		s.ln.Close()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.stopping.Store(true)
		s.stopNow()
		// Give the sessions cut off a moment to tell their clients.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	return s.Close()
}

// stopNow ends every session at Shutdown's deadline, as PostgreSQL's fast
// shutdown does. Running statements are cancelled first and given a moment
// to end on their workers (the session turns the worker's 57014 into
// 57P01), so that no cancelled statement can take a lock that a rolled-back
// transaction frees and go on to commit; connections still busy after that
// are broken. Only then are the sessions idle in a transaction ended,
// rolling their transactions back.
func (s *Server) stopNow() {
	s.mu.Lock()
	var busy []*session
	for _, ss := range s.sessions {
		if ss.wait.Load() == waitBusy {
			busy = append(busy, ss)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	var wg sync.WaitGroup
	for _, ss := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss.cancelMu.Lock()
			defer ss.cancelMu.Unlock()
			ss.cancelScatter(ctx)
			if t := ss.cancelTarget.Load(); t != nil {
				_ = sendCancel(ctx, t)
			}
		}()
	}
	wg.Wait()
	cancel()
	for i := 0; i < 200 && len(busy) > 0; i++ {
		time.Sleep(10 * time.Millisecond)
		s.mu.Lock()
		left := busy[:0]
		for _, ss := range busy {
			if s.sessions[ss.pid] == ss {
				left = append(left, ss)
			}
		}
		busy = left
		s.mu.Unlock()
	}
	s.mu.Lock()
	for _, ss := range s.sessions {
		ss.interrupt()
	}
	s.mu.Unlock()
	s.endWaiting(true)
}

// endWaiting ends the sessions waiting for their clients outside a
// transaction (all: in one too) with FATAL 57P01.
func (s *Server) endWaiting(all bool) {
	s.mu.Lock()
	var ended []*session
	var asleep []bool
	for _, ss := range s.sessions {
		if ok, slept := ss.killWaiting(all); ok {
			ended = append(ended, ss)
			asleep = append(asleep, slept)
		}
	}
	s.mu.Unlock()
	for i, ss := range ended {
		s.wakeWaiting(ss, asleep[i]) // each tells its client
	}
}

// interrupt breaks the session's worker connections, so that a statement
// running there fails now.
func (ss *session) interrupt() {
	if sc := ss.cancelTarget.Load(); sc != nil {
		sc.Interrupt()
	}
	ss.cancelMu.Lock()
	for _, sc := range slices.Concat(ss.scatterTargets, ss.sideTargets) {
		sc.Interrupt()
	}
	ss.cancelMu.Unlock()
}

// Close stops accepting, closes client connections and waits for sessions to
// end, then closes the pools.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	if s.idler != nil {
		// Sleeping sessions have no goroutine to see their connection
		// closed: each gets one, to end in.
		for _, ss := range s.idler.close() {
			go s.resume(ss)
		}
	}
	// A session waiting on its worker would not notice its client is gone.
	for _, ss := range s.sessions {
		ss.interrupt()
	}
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.http.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
	if s.jobStop != nil {
		// A rebalance runner stops between its steps (a move under way
		// is undone); the job stays, for another coordinator.
		s.jobsOnce.Do(func() { close(s.jobStop) })
		s.jobs.Wait()
	}
	if s.budgetEnd != nil {
		close(s.stopWatch)
		s.stopWatch = nil
		<-s.budgetEnd
		s.leaseTimer.Stop()
	}
	s.mu.Lock()
	for _, p := range s.pools {
		p.Close()
	}
	s.mu.Unlock()
	s.dropLease()
	// Then leave the fleet: the others revoke the lease of a member that
	// leaves (gossip cannot tell a leave from a death), which is gone now.
	if f := s.fleet.Load(); f != nil {
		f.Leave(time.Second)
	}
	s.closeCatalog()
	return nil
}

func (s *Server) closeCatalog() {
	if s.stopWatch != nil {
		close(s.stopWatch)
		s.stopWatch = nil
	}
	if s.recoveryEnd != nil {
		<-s.recoveryEnd // before the metadata pool closes under it
		s.recoveryEnd = nil
	}
	if s.metaPool != nil {
		s.metaPool.Close()
	}
	if s.leasePool != nil {
		s.leasePool.Close()
	}
	s.authMu.Lock()
	if s.authPool != nil {
		s.authPool.Close()
		s.authPool = nil
	}
	s.authMu.Unlock()
}

// pool returns the pool for (worker, database, user), making it on first use.
func (s *Server) pool(worker, database, user string) *pooling.Pool {
	k := poolKey{worker, database, user}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pools[k]; p != nil {
		return p
	}
	pw, ok := s.cfg.Users[user]
	if !ok {
		pw = s.cfg.WorkerPassword
	}
	var key func() *pooling.SCRAMKey
	if s.cfg.Auth == "workers" {
		key = func() *pooling.SCRAMKey { return s.scramKey(user) }
	}
	p := pooling.NewPool(pooling.Config{Addr: worker, Database: database, User: user, Password: pw,
		Size: s.cfg.PoolSize, AcquireTimeout: s.cfg.PoolTimeout, Lifetime: s.cfg.ServerLifetime, StmtCacheSize: s.cfg.StmtCacheSize, StmtEpoch: &s.stmtEpoch,
		TLS: s.cfg.WorkerTLS, Span: &s.span, Gate: s.gate(worker), SCRAM: key, Types: s.typeOIDs(worker, database)}, s.pm)
	s.pools[k] = p
	return p
}

// register gives a session a unique backend key.
func (s *Server) register(ss *session) {
	var b [8]byte
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		_, _ = rand.Read(b[:])
		pid := binary.BigEndian.Uint32(b[:4]) & 0x7fffffff
		if f := s.fleet.Load(); f != nil {
			pid = withTag(pid, f.Tag())
		}
		pid |= minSessionPID // above any worker's process ID (signal.go)
		if pid == 0 || s.sessions[pid] != nil {
			continue
		}
		ss.pid = pid
		ss.secret = append([]byte(nil), b[4:8]...)
		s.sessions[pid] = ss
		return
	}
}

// A backend key's pid carries, in a fleet, the tag of the coordinator that
// issued it (bits 23 to 30), so that a cancel request reaching another
// member goes to that one.
func withTag(pid uint32, tag uint8) uint32 { return pid&(1<<23-1) | uint32(tag)<<23 }

func tagOf(pid uint32) uint8 { return uint8(pid >> 23) }

func (s *Server) unregister(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.pid] == ss {
		delete(s.sessions, ss.pid)
	}
	s.mu.Unlock()
}

func (s *Server) lookup(pid uint32) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[pid]
}

// CatalogVersion is the catalog version the coordinator routes by.
func (s *Server) CatalogVersion() int64 {
	if c := s.catalog.Load(); c != nil {
		return c.Version
	}
	return 0
}

// askMeta runs f, a read on metaPool (the first worker's catalog), once
// more on a new connection if its connection was lost: after
// pg_terminate_backend of the first worker's backends, a pooled
// connection idle under a second is handed out unchecked (adversary 159:
// a search_path lookup answered 08006 so).
func (s *Server) askMeta(ctx context.Context, f func() error) error {
	return metadata.RetryLost(ctx, s.metaPool, f)
}
