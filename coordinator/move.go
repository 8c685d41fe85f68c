package coordinator

import (
	"context"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// moveShard runs citus_move_shard_placement(shard_id, source_node_name,
// source_node_port, target_node_name, target_node_port [,
// shard_transfer_mode]) or its form with node ids (shard_id,
// source_node_id, target_node_id [, shard_transfer_mode]) on conns, the
// session's connections to every active node (shards.MoveShard).
func (ss *session) moveShard(ctx context.Context, fn *planner.Function, conns map[int32]*pgx.Conn) (*metadata.Snapshot, error) {
	s := ss.srv
	snap := s.catalog.Load()
	id, err := strconv.ParseInt(funcArg(fn, 0, "shard_id", ""), 10, 64)
	if err != nil {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "%s needs a shard id", fn.Name)
	}
	node := func(host, port string) (int32, error) {
		p, err := strconv.Atoi(port)
		if err != nil || host == "" {
			return 0, pgerr.New(pgerr.InvalidParameterValue, "%s needs the source and target nodes' names and ports", fn.Name)
		}
		if n := nodeID(snap, net.JoinHostPort(host, strconv.Itoa(p))); n != 0 {
			return n, nil
		}
		return 0, pgerr.New(pgerr.UndefinedObject, "node %s:%d is not in the catalog", host, p).
			WithHint("citus_get_active_worker_nodes() lists the nodes.")
	}
	byID := func(v string) (int32, error) {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || snap.Node(int32(n)) == nil {
			return 0, pgerr.New(pgerr.UndefinedObject, "node %s is not in the catalog", v)
		}
		return int32(n), nil
	}
	var from, to int32
	var mode string
	_, named := fn.NamedArgs["source_node_id"]
	if _, numeric := strconv.Atoi(funcArg(fn, 1, "", "")); named || numeric == nil {
		// (shard_id, source_node_id, target_node_id [, mode])
		if from, err = byID(funcArg(fn, 1, "source_node_id", "")); err != nil {
			return nil, err
		}
		if to, err = byID(funcArg(fn, 2, "target_node_id", "")); err != nil {
			return nil, err
		}
		mode = funcArg(fn, 3, "shard_transfer_mode", shards.TransferAuto)
	} else {
		if from, err = node(funcArg(fn, 1, "source_node_name", ""), funcArg(fn, 2, "source_node_port", "")); err != nil {
			return nil, err
		}
		if to, err = node(funcArg(fn, 3, "target_node_name", ""), funcArg(fn, 4, "target_node_port", "")); err != nil {
			return nil, err
		}
		mode = funcArg(fn, 5, "shard_transfer_mode", shards.TransferAuto)
	}
	addr := func(n int32) string { return snap.Node(n).Addr() }
	s.ensureShardsSchema(ctx, ss.database, addr(to))
	cfg := shards.MoveConfig{
		Mode: mode,
		Admin: func(ctx context.Context, n int32) (*pgx.Conn, error) {
			return s.directConnDB(ctx, addr(n), ss.database)
		},
		SourceDSN: func(n int32) string {
			// The target node reaches the source as the coordinator does;
			// a root certificate file is the coordinator's, not the node's.
			tls := s.cfg.WorkerTLS
			tls.RootCert = ""
			dsn := tls.ConnString(addr(n)) + " user=postgres dbname=" + quoteConnValue(ss.database) +
				" application_name=pgfleet_move"
			if pw := s.superuserPassword(); pw != "" {
				dsn += " password=" + quoteConnValue(pw)
			}
			return dsn
		},
	}
	if s.cfg.Auth == "workers" && s.superuserPassword() == "" {
		cfg.Admin, cfg.SourceDSN = nil, nil // no superuser login of its own
	}
	return shards.MoveShard(ctx, s.store, conns, s.defaultNode.Load(), id, from, to, cfg)
}

// superuserPassword is the password of pgfleet's own postgres logins to
// the workers.
func (s *Server) superuserPassword() string {
	if pw := s.cfg.Users["postgres"]; pw != "" {
		return pw
	}
	return s.cfg.WorkerPassword
}
