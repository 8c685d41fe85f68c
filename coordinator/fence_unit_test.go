package coordinator

import (
	"testing"
	"time"
)

// TestFences: a fenced table's statements are refused (by name, ignoring
// case and schema) until every mover that fenced it lifted its own fence
// or its lease lapsed; other statements run.
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
	s.fence(`public."Accounts"`, 1, time.Hour)
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
	// A short name fences the statements that name it, not every
	// statement that has its letters.
	s.fence("e", 3, time.Hour)
	for sql, want := range map[string]string{
		"SELECT 1":                               "",
		"select count(*) from plain_local":       "",
		"SELECT * FROM e":                        "40001",
		`SELECT * FROM public."E" WHERE x = 1`:   "40001",
		"SELECT 'e'::regclass":                   "40001",
		"UPDATE e SET v = 1":                     "40001",
		"SELECT * FROM accounts_e, e_x, x_e, ée": "", // longer identifiers: neither e nor accounts
	} {
		if got := state(sql); got != want {
			t.Errorf("fence of e: %s: %q, want %q", sql, got, want)
		}
	}
	s.unfence("e", 3)
	// A name with a letter that lowers to another number of bytes (the
	// Kelvin sign to k, İ to i̇).
	s.fence(`"Kt"`, 4, time.Hour)
	for sql, want := range map[string]string{
		`SELECT count(*) FROM "Kt"`: "40001",
		`SELECT count(*) FROM "kt"`: "40001",
		"SELECT 'é'":                "",
		"SELECT 1":                  "",
	} {
		if got := state(sql); got != want {
			t.Errorf("fence of a non-ASCII name: %s: %q, want %q", sql, got, want)
		}
	}
	s.unfence(`"Kt"`, 4)
	s.fence(`"İz"`, 5, time.Hour)
	if got := state(`SELECT * FROM "İz"`); got != "40001" {
		t.Errorf("fence of İz: %q, want 40001", got)
	}
	s.unfence(`"İz"`, 5)
	// A second mover of the same table (which will fail on the first's
	// work) lifts only its own fence (found by an adversary: it lifted
	// the winner's, and readers counted 0 rows).
	s.fence("accounts", 2, time.Hour)
	s.unfence("accounts", 2)
	if got := state("SELECT * FROM accounts"); got != "40001" {
		t.Errorf("another mover's unfence lifted the fence: %q", got)
	}
	s.unfence("public.accounts", 1)
	if got := state("SELECT * FROM accounts"); got != "" {
		t.Errorf("every mover unfenced, still refused: %q", got)
	}
	s.fence("accounts", 3, 20*time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	if got := state("SELECT * FROM accounts"); got != "" {
		t.Errorf("a lapsed fence still refuses: %q", got)
	}
}
