package coordinator

import (
	"testing"

	"github.com/pgfleet/pgfleet/metadata"
)

// TestStaleShard: a 42P01 on a generated shard name the catalog no longer
// has, or has elsewhere (a move), is a retryable 40001; on a user's table,
// or another relation that merely ends in a shard's id, it stays 42P01.
func TestStaleShard(t *testing.T) {
	snap := &metadata.Snapshot{Shards: map[string][]metadata.Shard{"public.t": {{ID: 102010}}}}
	for _, c := range []struct {
		msg   string
		stale bool
	}{
		{`relation "mv1_102150" does not exist`, true},
		{`relation "public.mv1_102150" does not exist`, true},
		{`relation "t_102010" does not exist`, true},
		{`relation "pgfleet_shards.t_102010" does not exist`, true},
		{`relation "u_102010" does not exist`, false},
		{`relation "nosuch" does not exist`, false},
		{`relation "t_12" does not exist`, false},
		{`column "t_102150" does not exist`, false},
	} {
		e := staleShard(c.msg, snap)
		if (e != nil) != c.stale || (e != nil && e.Code != "40001") {
			t.Errorf("%s: %v, want stale %v", c.msg, e, c.stale)
		}
	}
}
