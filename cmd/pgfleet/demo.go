package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/pgfleet/pgfleet/coordinator"
	"github.com/pgfleet/pgfleet/internal/pgcluster"
)

func demo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	nWorkers := fs.Int("workers", 2, "PostgreSQL workers to start")
	nCoords := fs.Int("coordinators", 1, "coordinators to start")
	dataDir := fs.String("data-dir", "", "keep the workers' data here (default: a temporary directory, removed on exit)")
	port := fs.Int("port", 6432, "port of the first coordinator (the next ones count up; taken ports are skipped)")
	var cf coordinatorFlags
	cf.register(fs)
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if *nWorkers < 1 || *nCoords < 1 {
		return fmt.Errorf("--workers and --coordinators must be at least 1")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("pgfleet demo: starting %d PostgreSQL workers and %d coordinators...\n", *nWorkers, *nCoords)
	cl, err := pgcluster.StartCluster(ctx, *dataDir, *nWorkers)
	if err != nil {
		return err
	}
	defer cl.Stop()
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
		c, err := coordinator.New(cfg)
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		coords = append(coords, c)
		fmt.Printf("  coordinator %d: postgres://postgres@%s/postgres?sslmode=disable\n", i+1, c.Addr())
	}
	fmt.Printf("ready: psql \"postgres://postgres@%s/postgres?sslmode=disable\"  (Ctrl-C stops the cluster", coords[0].Addr())
	if *dataDir == "" {
		fmt.Printf(" and removes %s)\n", cl.Dir)
	} else {
		fmt.Printf("; data kept in %s)\n", cl.Dir)
	}
	<-ctx.Done()
	fmt.Println("pgfleet demo: stopping")
	return nil
}
