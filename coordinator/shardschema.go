package coordinator

import (
	"context"
	"time"

	"github.com/pgfleet/pgfleet/coordinator/shards"
)

// ensureShardsSchema makes sure, before shards are placed on the nodes at
// addrs, that each has schema pgfleet_shards in database db, owned by the
// superuser the coordinator reaches workers as (directConnDB) with USAGE
// and CREATE for every role. Made by the session's role instead, the
// schema would be that role's, and its owner may drop any table in it:
// every other role's shards. Best effort: where the superuser cannot
// connect, placing a shard makes the schema if the session's role is a
// superuser and refuses otherwise (shards.ensureShardsSchema).
func (s *Server) ensureShardsSchema(ctx context.Context, db string, addrs ...string) {
	for _, addr := range addrs {
		key := addr + "/" + db
		if _, ok := s.shardsSchema.Load(key); ok {
			continue
		}
		if err := s.makeShardsSchema(ctx, addr, db); err != nil {
			s.log.Warn("cannot make sure of the shards' schema as the superuser", "node", addr, "database", db, "err", err)
			continue
		}
		s.shardsSchema.Store(key, true)
	}
}

func (s *Server) makeShardsSchema(ctx context.Context, addr, db string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := s.directConnDB(ctx, addr, db)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return shards.MakeShardsSchema(ctx, c)
}
