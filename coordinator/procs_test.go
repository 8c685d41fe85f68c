package coordinator

import "testing"

func TestNextProcs(t *testing.T) {
	for _, c := range []struct {
		cur, limit int
		used       float64
		want       int
	}{
		{1, 8, 0.2, 1},  // light load stays on one
		{1, 8, 0.74, 1}, // under three quarters
		{1, 8, 0.8, 2},  // over: doubles
		{2, 8, 1.6, 4},
		{4, 8, 3.5, 8},
		{8, 8, 7.9, 8}, // at the limit
		{6, 8, 5, 8},   // doubling stops at the limit
		{2, 8, 0.9, 2}, // the band: one processor would be over three quarters
		{2, 8, 0.5, 1}, // under 30%: halves
		{8, 8, 1, 4},
		{1, 1, 0.99, 1},
	} {
		if got := nextProcs(c.cur, c.limit, c.used); got != c.want {
			t.Errorf("nextProcs(%d, %d, %.2f) = %d, want %d", c.cur, c.limit, c.used, got, c.want)
		}
	}
}
