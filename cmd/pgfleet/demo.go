package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
	"github.com/pgfleet/pgfleet/internal/tlscert"
)

func demo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	nWorkers := fs.Int("workers", 2, "PostgreSQL workers to start")
	nCoords := fs.Int("coordinators", 1, "coordinators to start")
	dataDir := fs.String("data-dir", "", "keep the workers' data here (default: a temporary directory, removed on exit)")
	port := fs.Int("port", 6432, "port of the first coordinator (the next ones count up; taken ports are skipped)")
	shardCount := fs.Int("shards", 32, "shards per distributed table (with --pgbench-scale)")
	scale := fs.Int("pgbench-scale", 0, "load pgbench's schema at this scale: pgbench_accounts distributed by aid, tellers and branches as reference tables")
	withTLS := fs.Bool("tls", false, "offer TLS to clients with a throwaway CA and server certificate made in the demo's directory\n"+
		"(the printed URLs use sslmode=verify-full with that CA as sslrootcert)")
	var cf coordinatorFlags
	cf.register(fs)
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if *nWorkers < 1 || *nCoords < 1 {
		return fmt.Errorf("--workers and --coordinators must be at least 1")
	}
	if *withTLS && (cf.tlsCert != "" || cf.tlsKey != "") {
		return fmt.Errorf("--tls makes its own certificate: give either --tls or --tls-cert and --tls-key")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := ensurePostgres(ctx); err != nil {
		return err
	}
	fmt.Printf("pgfleet demo: starting %s and %s...\n", plural(*nWorkers, "PostgreSQL worker"), plural(*nCoords, "coordinator"))
	cl, err := pgcluster.StartCluster(ctx, *dataDir, *nWorkers)
	if err != nil {
		return err
	}
	defer cl.Stop()
	caFile := ""
	if *withTLS {
		// The coordinators listen on 127.0.0.1; localhost and ::1 are
		// there for clients that name the host so.
		files, err := tlscert.Make(cl.Dir, "127.0.0.1", "localhost", "::1")
		if err != nil {
			return fmt.Errorf("making the demo's certificates: %w", err)
		}
		cf.tlsCert, cf.tlsKey, caFile = files.Cert, files.Key, files.CA
	}
	var workers []string
	for i, s := range cl.Servers {
		workers = append(workers, s.Addr())
		fmt.Printf("  worker %d:      %s\n", i+1, s.URL())
	}
	var coords []*coordinator.Server
	defer func() {
		for _, c := range coords {
			_ = c.Close()
		}
	}()
	next := *port
	for i := 0; i < *nCoords; i++ {
		listen := "127.0.0.1:0"
		for ; next > 0 && next < *port+100; next++ {
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(next))); err == nil {
				l.Close()
				listen = l.Addr().String()
				next++
				break
			}
		}
		cfg, err := cf.config(listen, workers)
		if err != nil {
			return err
		}
		if len(coords) == 0 {
			defer cf.startProcs(cfg.Logger)() // for the process: every coordinator
		}
		if *nCoords > 1 {
			// The coordinators are a fleet: they gossip on loopback, the
			// later ones joining the first.
			cfg.Gossip = "127.0.0.1:0"
			if len(coords) > 0 {
				cfg.Join = []string{coords[0].Fleet().Addr()}
			}
		}
		c, err := coordinator.New(cfg)
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		coords = append(coords, c)
		fmt.Printf("  coordinator %d: %s\n", i+1, demoURL(c.Addr(), caFile))
	}
	if *scale > 0 {
		fmt.Printf("  loading pgbench scale %d and distributing it over %d shards...\n", *scale, *shardCount)
		if err := loadPgbench(ctx, demoURL(coords[0].Addr(), caFile), *scale, *shardCount); err != nil {
			return err
		}
	}
	if len(coords) > 1 {
		// libpq takes several hosts: it connects to the first that
		// answers (libpq 16 and later spread clients with
		// load_balance_hosts=random).
		var hosts []string
		for _, c := range coords {
			hosts = append(hosts, c.Addr())
		}
		fmt.Printf("  the fleet (gossip, %s): %s\n", plural(len(coords[len(coords)-1].Fleet().Members()), "member"), demoURL(strings.Join(hosts, ","), caFile))
	}
	fmt.Printf("ready: psql \"%s\"  (Ctrl-C stops the cluster", demoURL(coords[0].Addr(), caFile))
	if *dataDir == "" {
		fmt.Printf(" and removes %s)\n", cl.Dir)
	} else {
		fmt.Printf("; data kept in %s)\n", cl.Dir)
	}
	<-ctx.Done()
	fmt.Println("pgfleet demo: stopping")
	return nil
}

// loadPgbench runs pgbench -i through the coordinator (the tables are plain
// tables on the default node then), and distributes them as the Citus
// benchmark did.
func loadPgbench(ctx context.Context, connURL string, scale, shards int) error {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		return fmt.Errorf("--pgbench-scale needs pgbench (Debian: apt-get install postgresql-client): %w", err)
	}
	out, err := exec.CommandContext(ctx, pgbench, "-i", "-q", "-s", strconv.Itoa(scale), connURL).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench -i: %w\n%s", err, out)
	}
	c, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for _, q := range []string{
		fmt.Sprintf("SELECT create_distributed_table('pgbench_accounts', 'aid', shard_count => %d)", shards),
		"SELECT create_reference_table('pgbench_branches')",
		"SELECT create_reference_table('pgbench_tellers')",
		"SELECT create_distributed_table('pgbench_history', 'aid', colocate_with => 'pgbench_accounts')",
	} {
		if _, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// demoURL is the libpq URL of a demo coordinator: with TLS (caFile not
// empty), one that checks the coordinator's certificate against the demo's
// CA and its host name.
func demoURL(addr, caFile string) string {
	if caFile == "" {
		return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	}
	return "postgres://postgres@" + addr + "/postgres?sslmode=verify-full&sslrootcert=" +
		strings.ReplaceAll(url.QueryEscape(caFile), "%2F", "/") // a path needs no escaped slashes
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// ensurePostgres installs PostgreSQL's server binaries (and psql, pgbench)
// when they are missing, as the README's test command does: on a machine
// with apt-get, as root. Elsewhere it says what to install.
func ensurePostgres(ctx context.Context) error {
	_, err := pgcluster.BinDir()
	if err == nil {
		return nil
	}
	if _, aerr := exec.LookPath("apt-get"); aerr != nil || os.Geteuid() != 0 {
		return err
	}
	fmt.Println("pgfleet demo: installing PostgreSQL (apt-get install postgresql postgresql-client)...")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "postgresql", "postgresql-client"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing PostgreSQL: apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	_, err = pgcluster.BinDir()
	return err
}
