// Package depcheck holds the test that keeps package dependencies flowing
// one way (see docs/architecture.md).
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/pgfleet/pgfleet/"

// forbidden lists, per package, the packages it must not depend on,
// directly or not.
var forbidden = map[string][]string{
	"internal/pgerr":   {"internal/wire", "pooling", "coordinator", "planner", "metadata", "bench"},
	"internal/wire":    {"pooling", "coordinator", "planner", "metadata", "bench"},
	"internal/tlscert": {"internal/wire", "pooling", "coordinator", "planner", "metadata", "bench"},
	"pooling":          {"coordinator", "planner", "metadata", "bench", "executor"},
	"planner":          {"coordinator", "pooling", "bench", "executor"},
	// The executor runs plans on connections it is given and answers a
	// sink: it knows nothing of sessions, statements or the client.
	"executor": {"coordinator", "coordinator/shards", "bench"},
	// Membership knows no SQL: the coordinator gives it callbacks.
	"fleet":       {"coordinator", "pooling", "planner", "metadata", "executor", "bench"},
	"metadata":    {"coordinator", "planner", "pooling", "bench", "executor"},
	"coordinator": {"bench"},
	// The one two-phase commit knows nothing of sessions, pools or shards:
	// its participants bring their connections.
	"coordinator/twophase": {"coordinator", "coordinator/shards", "pooling", "planner", "bench"},
	"bench":                {"coordinator", "pooling", "planner", "metadata"},
	"difftest":             {"coordinator", "pooling", "planner", "metadata"}, // the oracle comparison talks over the wire only
	"compat":               {"coordinator", "pooling", "planner", "metadata"}, // real tools, over the wire
}

func TestDependencyDirection(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "../../"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, l := range strings.Split(string(out), "\n") {
			deps[strings.TrimPrefix(l, mod)] = true
		}
		for _, b := range bad {
			if deps[b] {
				t.Errorf("%s depends on %s; dependencies must flow the other way", pkg, b)
			}
		}
	}
}
