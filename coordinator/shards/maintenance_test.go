package shards

import (
	"reflect"
	"testing"
)

// TestPlanMaintenance checks the command each node gets for VACUUM and
// ANALYZE of catalog tables: the same options and columns over that
// node's shards (a reference table's copy on each node), local tables left
// to the default node's statement, a bare command everywhere.
func TestPlanMaintenance(t *testing.T) {
	snap := rewriteSnap()
	for _, tc := range []struct {
		sql        string
		kind       string
		everywhere bool
		want       map[int32]string
	}{
		{"VACUUM items", "VACUUM", false, map[int32]string{1: "VACUUM public.items_102008", 2: "VACUUM public.items_102009"}},
		{"vacuum (verbose, analyze) items (name, qty), local_t, app.kinds", "VACUUM", false, map[int32]string{
			1: "VACUUM (VERBOSE, ANALYZE) public.items_102008(name, qty), app.kinds_102010",
			2: "VACUUM (VERBOSE, ANALYZE) public.items_102009(name, qty), app.kinds_102010"}},
		{`ANALYZE "Mixed"`, "ANALYZE", false, map[int32]string{1: `ANALYZE pgfleet_shards."Mixed_102011"`}},
		{"ANALYZE VERBOSE app.kinds (label)", "ANALYZE", false, map[int32]string{1: "ANALYZE (VERBOSE) app.kinds_102010(label)", 2: "ANALYZE (VERBOSE) app.kinds_102010(label)"}},
		{"VACUUM FULL", "VACUUM", true, map[int32]string{}},
		{"ANALYZE", "ANALYZE", true, map[int32]string{}},
		{"VACUUM local_t", "", false, nil},
		{"SELECT 1", "", false, nil},
	} {
		m, err := PlanMaintenance(tc.sql, snap)
		if err != nil {
			t.Errorf("%s: %v", tc.sql, err)
			continue
		}
		if tc.want == nil {
			if m != nil {
				t.Errorf("%s: %+v, want nil", tc.sql, m)
			}
			continue
		}
		if m == nil || m.Kind != tc.kind || m.Everywhere != tc.everywhere || !reflect.DeepEqual(m.PerNode, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %s everywhere=%v %v", tc.sql, m, tc.kind, tc.everywhere, tc.want)
		}
	}
	if _, err := PlanMaintenance("VACUUM items; SELECT 1", snap); err == nil {
		t.Error("VACUUM with another statement: no error")
	}
}
