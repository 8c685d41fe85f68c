package coordinator

import "testing"

// TestTimeLike: which string constants a DateStyle or TimeZone change may
// read differently (a Bind of such a prepared statement is refused).
func TestTimeLike(t *testing.T) {
	for c, want := range map[string]bool{"'01/02/2020'": true, "'2020-01-01 00:00'": true, "'-c7'": false, "'A1'": false,
		"'1 day'": false, "'1-2'": true, "'20200102'": true, "'now'": true, "'abc'": false, "'x1 y2'": false, "'1 2'": true,
		"'12:30'": true, "'Jan 2 2020'": true} {
		if got := timeLike(c); got != want {
			t.Errorf("timeLike(%s) = %v, want %v", c, got, want)
		}
	}
}

// TestOwnOffset: constants whose reading no TimeZone changes.
func TestOwnOffset(t *testing.T) {
	for c, want := range map[string]bool{"'2024-07-01 00:00:00+00'": true, "'2024-07-01T00:00Z'": true,
		"E'10:30-05:30'": true, "$$2024-07-01 00:00:00.5 UTC$$": true, "'2024-07-01 00:00:00'": false,
		"'2024-07-01'": false, "'2024-07-01-05'": false, "'now'": false, "'2024-07-01 00:00 America/New_York'": false,
		"'[2024-01-01 00:00+00,2024-02-01 00:00)'": false, "'12:00'": false} {
		if got := ownOffset(c); got != want {
			t.Errorf("ownOffset(%s) = %v, want %v", c, got, want)
		}
	}
}

// TestStringConstants: the constants of a statement, comments and quoted
// names apart.
func TestStringConstants(t *testing.T) {
	got := stringConstants(`SELECT "a'b", 'x''y', E'\'z', $q$w'$q$, $1 -- 'c'
	/* 'd' */ FROM t`)
	want := []string{`'x''y'`, `E'\'z'`, `$q$w'$q$`}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] && got[i] != want[i][1:] {
			t.Errorf("constant %d: %q, want %q", i, got[i], want[i])
		}
	}
}
