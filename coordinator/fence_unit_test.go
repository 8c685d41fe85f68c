package coordinator

import (
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/metadata"
)

// TestFences: a fenced table's statements are refused (by name, ignoring
// case and schema) until the catalog has the table, the fence is lifted or
// its lease lapses; other statements run.
func TestFences(t *testing.T) {
	s := &Server{}
	state := func(sql string) string {
		if err := s.fencedIn(sql); err != nil {
			return err.(interface{ SQLState() string }).SQLState()
		}
		return ""
	}
	if got := state("SELECT * FROM accounts"); got != "" {
		t.Errorf("no fence: %s", got)
	}
	s.fence(`public."Accounts"`, time.Hour)
	for sql, want := range map[string]string{
		"SELECT count(*) FROM ACCOUNTS":   "40001",
		"select * from public.accounts a": "40001",
		"SELECT * FROM branches":          "",
		`SELECT * FROM U&"\0061ccounts"`:  "40001", // a name the text scan cannot see
	} {
		if got := state(sql); got != want {
			t.Errorf("%s: %q, want %q", sql, got, want)
		}
	}
	s.liftFences(&metadata.Snapshot{Tables: map[string]*metadata.Table{"public.branches": {Name: "public.branches"}}})
	if got := state("SELECT * FROM accounts"); got != "40001" {
		t.Errorf("another table's move lifted the fence: %q", got)
	}
	s.liftFences(&metadata.Snapshot{Tables: map[string]*metadata.Table{`public."Accounts"`: {Name: `public."Accounts"`}}})
	if got := state("SELECT * FROM accounts"); got != "" {
		t.Errorf("the catalog has the table, the fence stays: %q", got)
	}
	s.fence("accounts", 20*time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	if got := state("SELECT * FROM accounts"); got != "" {
		t.Errorf("a lapsed fence still refuses: %q", got)
	}
	s.fence("accounts", time.Hour)
	s.unfence("public.accounts")
	if got := state("SELECT * FROM accounts"); got != "" {
		t.Errorf("an unfenced table is refused: %q", got)
	}
}
