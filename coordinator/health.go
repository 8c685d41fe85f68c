package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pgfleet/pgfleet/metadata"
)

// Health endpoints on the metrics listener. /healthz says the process is
// alive and serving HTTP; /readyz says whether it can serve clients: the
// catalog is loaded, the metadata database answers and every node of the
// catalog accepts a connection and a query. A load balancer takes a
// coordinator out on 503 (with the reason in the body) and a restart is
// not needed for that; liveness should not depend on the workers.

const (
	// readyTimeout bounds one readiness check of every dependency.
	readyTimeout = 3 * time.Second
	// readyCacheFor: answers within this long reuse the last check, so that
	// probes, which need no authentication, cannot make the coordinator
	// open connections to the workers at any rate they like.
	readyCacheFor = time.Second
)

// readiness is the last readiness check.
type readiness struct {
	mu   sync.Mutex
	at   time.Time
	errs []string
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	errs := s.checkReady(r.Context())
	if len(errs) > 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + strings.Join(errs, "; ") + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// checkReady returns why the coordinator cannot serve clients, or nothing.
func (s *Server) checkReady(ctx context.Context) []string {
	if s.draining.Load() {
		return []string{"shutting down"}
	}
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	if !s.ready.at.IsZero() && time.Since(s.ready.at) < readyCacheFor {
		return s.ready.errs
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var errs []string
	snap := s.catalog.Load()
	if snap == nil || s.metaPool == nil {
		errs = append(errs, "catalog not loaded")
	} else {
		if err := s.metaPool.Ping(ctx); err != nil {
			errs = append(errs, fmt.Sprintf("metadata database: %v", err))
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, n := range snap.Nodes {
			if !n.Active {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.pingNode(ctx, n)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("worker %s: %v", n.Addr(), err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if ctx.Err() != nil && len(errs) == 0 {
		errs = append(errs, "check timed out")
	}
	s.ready.at, s.ready.errs = time.Now(), errs
	return errs
}

// pingNode opens a new connection to a node as the postgres user and runs
// a query: readiness is the worker accepting connections (a stopped
// postmaster leaves the pools' connections answering), so this is the one
// connection the coordinator opens outside its pools, at most once a
// second per worker (answers are cached), closed at once.
func (s *Server) pingNode(ctx context.Context, n metadata.Node) error {
	c, err := s.directConn(ctx, n.Addr())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, "SELECT 1")
	return err
}
