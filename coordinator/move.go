package coordinator

import (
	"context"
	"net"
	"strconv"
	"strings"

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
		if from, err = nodeAt(fn, snap, funcArg(fn, 1, "source_node_name", ""), funcArg(fn, 2, "source_node_port", "")); err != nil {
			return nil, err
		}
		if to, err = nodeAt(fn, snap, funcArg(fn, 3, "target_node_name", ""), funcArg(fn, 4, "target_node_port", "")); err != nil {
			return nil, err
		}
		mode = funcArg(fn, 5, "shard_transfer_mode", shards.TransferAuto)
	}
	s.ensureShardsSchema(ctx, ss.database, snap.Node(to).Addr())
	return shards.MoveShard(ctx, s.store, conns, s.defaultNode.Load(), id, from, to, ss.moveConfig(mode))
}

// splitShard runs citus_split_shard_by_split_points(shard_id,
// split_points, node_ids_for_new_shards [, shard_transfer_mode]): the
// points are hash values as text ('{-1073741825}' or ARRAY['...']), the
// node ids one per new shard.
func (ss *session) splitShard(ctx context.Context, fn *planner.Function, conns map[int32]*pgx.Conn) (*metadata.Snapshot, error) {
	s := ss.srv
	id, err := strconv.ParseInt(funcArg(fn, 0, "shard_id", ""), 10, 64)
	if err != nil {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "%s needs a shard id", fn.Name)
	}
	list := func(name string, i int) ([]int64, error) {
		v := strings.TrimSpace(funcArg(fn, i, name, ""))
		if !strings.HasPrefix(v, "{") || !strings.HasSuffix(v, "}") {
			return nil, pgerr.New(pgerr.InvalidParameterValue, "%s must be an array, as ARRAY['-1073741825'] or '{1,2}'", name)
		}
		var out []int64
		for _, f := range strings.Split(strings.Trim(v, "{}"), ",") {
			n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(f), `"`), 10, 32)
			if err != nil {
				return nil, pgerr.New(pgerr.InvalidTextRepresentation, "%s: %q is not a 32-bit integer", name, f)
			}
			out = append(out, n)
		}
		return out, nil
	}
	pts, err := list("split_points", 1)
	if err != nil {
		return nil, err
	}
	ids, err := list("node_ids_for_new_shards", 2)
	if err != nil {
		return nil, err
	}
	points := make([]int32, len(pts))
	for i, p := range pts {
		points[i] = int32(p)
	}
	nodes := make([]int32, len(ids))
	snap := s.catalog.Load()
	var addrs []string
	for i, n := range ids {
		nodes[i] = int32(n)
		if nd := snap.Node(int32(n)); nd != nil {
			addrs = append(addrs, nd.Addr())
		}
	}
	s.ensureShardsSchema(ctx, ss.database, addrs...)
	return shards.SplitShard(ctx, s.store, conns, s.defaultNode.Load(), id, points, nodes, funcArg(fn, 3, "shard_transfer_mode", shards.TransferAuto), s.holdFleet)
}

// moveConfig is how this session's moves reach the nodes as pgfleet's
// superuser (shards.MoveConfig).
func (ss *session) moveConfig(mode string) shards.MoveConfig {
	return ss.srv.moveConfig(ss.database, mode)
}

// moveConfig is how moves in database reach the nodes as pgfleet's
// superuser.
func (s *Server) moveConfig(database, mode string) shards.MoveConfig {
	addr := func(n int32) string { return s.catalog.Load().Node(n).Addr() }
	cfg := shards.MoveConfig{
		Mode:     mode,
		Database: database,
		Hold:     s.holdFleet,
		Admin: func(ctx context.Context, n int32) (*pgx.Conn, error) {
			return s.directConnDB(ctx, addr(n), database)
		},
		SourceDSN: func(n int32) string {
			// The target node reaches the source as the coordinator does;
			// a root certificate file is the coordinator's, not the node's.
			tls := s.cfg.WorkerTLS
			tls.RootCert = ""
			dsn := tls.ConnString(addr(n)) + " user=postgres dbname=" + quoteConnValue(database) +
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
	return cfg
}

// rebalancePlan plans get_rebalance_table_shards_plan(relation,
// threshold, max_shard_moves, excluded_shard_list, drain_only) or
// rebalance_table_shards(relation, threshold, max_shard_moves,
// excluded_shard_list, shard_transfer_mode, drain_only) on snap (the
// threshold is not used: shard groups are spread by count).
func rebalancePlan(fn *planner.Function, snap *metadata.Snapshot) ([]shards.PlannedMove, error) {
	var opt shards.RebalanceOptions
	drainAt := 4
	if fn.Name == "rebalance_table_shards" {
		drainAt = 5
	}
	if rel := funcArg(fn, 0, "relation", ""); rel != "" {
		opt.Table = catalogTableName(rel)
	}
	if v := funcArg(fn, 2, "max_shard_moves", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, pgerr.New(pgerr.InvalidParameterValue, "max_shard_moves must be a non-negative integer")
		}
		if opt.MaxMoves = n; n == 0 {
			return nil, nil
		}
	}
	if v := strings.Trim(funcArg(fn, 3, "excluded_shard_list", ""), "{} "); v != "" {
		for _, f := range strings.Split(v, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return nil, pgerr.New(pgerr.InvalidTextRepresentation, "excluded_shard_list must be an array of shard ids, as '{102008,102009}'")
			}
			opt.Excluded = append(opt.Excluded, id)
		}
	}
	if v := funcArg(fn, drainAt, "drain_only", "false"); v != "" {
		opt.DrainOnly, _ = planner.ParseBool(v)
	}
	return shards.RebalancePlan(snap, opt)
}

// catalogTableName is a table name as a Citus function takes it, as the
// catalog spells it: unqualified names are taken to be in public.
func catalogTableName(rel string) string {
	parts := strings.Split(rel, ".")
	for i, p := range parts {
		if strings.HasPrefix(p, `"`) && strings.HasSuffix(p, `"`) && len(p) > 1 {
			parts[i] = strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		} else {
			parts[i] = strings.ToLower(p)
		}
	}
	if len(parts) == 1 {
		return "public." + parts[0]
	}
	return strings.Join(parts, ".")
}

// rebalance runs rebalance_table_shards (the plan's moves, one after the
// other, each announced to the fleet as it commits) or
// citus_drain_node(nodename, nodeport [, shard_transfer_mode]), which
// first stops the node from taking shards, then moves every shard group
// off it. A failed move stops the run; those before it stay done.
func (ss *session) rebalance(ctx context.Context, fn *planner.Function, conns map[int32]*pgx.Conn) (*metadata.Snapshot, error) {
	s := ss.srv
	snap := s.catalog.Load()
	mode := funcArg(fn, 4, "shard_transfer_mode", shards.TransferAuto)
	var plan []shards.PlannedMove
	var err error
	if fn.Name == "citus_drain_node" {
		mode = funcArg(fn, 2, "shard_transfer_mode", shards.TransferAuto)
		id, nerr := ss.nodeArg(fn, snap)
		if nerr != nil {
			return nil, nerr
		}
		if snap, err = s.store.SetShouldHaveShards(ctx, id, false); err != nil {
			return nil, err
		}
		s.changedCatalog(snap)
		plan, err = shards.RebalancePlan(snap, shards.RebalanceOptions{DrainOnly: true})
	} else {
		plan, err = rebalancePlan(fn, snap)
	}
	if err != nil {
		return nil, err
	}
	for _, m := range plan {
		s.ensureShardsSchema(ctx, ss.database, snap.Node(m.To).Addr())
		after, err := shards.MoveShard(ctx, s.store, conns, s.defaultNode.Load(), m.Shard, m.From, m.To, ss.moveConfig(mode))
		if after != nil {
			s.changedCatalog(after)
			snap = after
		}
		if err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// nodeArg is the node a function's (nodename, nodeport) arguments name.
func (ss *session) nodeArg(fn *planner.Function, snap *metadata.Snapshot) (int32, error) {
	return nodeAt(fn, snap, funcArg(fn, 0, "nodename", ""), funcArg(fn, 1, "nodeport", "5432"))
}

// nodeAt is the catalog's node at host and port, arguments of fn.
func nodeAt(fn *planner.Function, snap *metadata.Snapshot, host, port string) (int32, error) {
	p, err := strconv.Atoi(port)
	if host == "" || err != nil {
		return 0, pgerr.New(pgerr.InvalidParameterValue, "%s needs node names and ports", fn.Name)
	}
	id := nodeID(snap, net.JoinHostPort(host, strconv.Itoa(p)))
	if id == 0 {
		return 0, pgerr.New(pgerr.UndefinedObject, "node %s:%d is not in the catalog", host, p).
			WithHint("citus_get_active_worker_nodes() lists the nodes.")
	}
	return id, nil
}

// setNodeProperty is citus_set_node_property(nodename, nodeport,
// 'shouldhaveshards', value), the one property pgfleet keeps.
func (ss *session) setNodeProperty(ctx context.Context, fn *planner.Function) (*metadata.Snapshot, error) {
	id, err := ss.nodeArg(fn, ss.srv.catalog.Load())
	if err != nil {
		return nil, err
	}
	if p := strings.ToLower(funcArg(fn, 2, "property", "")); p != "shouldhaveshards" {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "node property %q is not supported", p).
			WithHint("pgfleet keeps shouldhaveshards only.")
	}
	v := funcArg(fn, 3, "value", "")
	on, ok := planner.ParseBool(v)
	if v == "" || !ok {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "citus_set_node_property needs a boolean value")
	}
	return ss.srv.store.SetShouldHaveShards(ctx, id, on)
}

// superuserPassword is the password of pgfleet's own postgres logins to
// the workers.
func (s *Server) superuserPassword() string {
	if pw := s.cfg.Users["postgres"]; pw != "" {
		return pw
	}
	return s.cfg.WorkerPassword
}
