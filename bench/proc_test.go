package bench

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{
			name: "plain",
			line: "16452 (cat) R 16449 16449 5542 0 -1 4194304 123 0 0 0 7 3 2 1 20 0 1 0 113082 3133440 390 18446744073709551615 0 0 0 0 0\n",
			want: procStat{Pid: 16452, Comm: "cat", State: "R", Ppid: 16449, Utime: 7, Stime: 3, Cutime: 2, Cstime: 1, StartTime: 113082},
		},
		{
			name: "postgres backend title with spaces",
			line: "900 (postgres) S 850 850 850 0 -1 4194560 5000 0 0 0 1234 567 89012 3456 20 0 1 0 99 200000000 3000 18446744073709551615",
			want: procStat{Pid: 900, Comm: "postgres", State: "S", Ppid: 850, Utime: 1234, Stime: 567, Cutime: 89012, Cstime: 3456, StartTime: 99},
		},
		{
			name: "name with spaces and parentheses",
			line: "42 (a) b (c)) S 1 42 42 0 -1 0 0 0 0 0 10 20 30 40 20 0 4 0 555 0 0",
			want: procStat{Pid: 42, Comm: "a) b (c)", State: "S", Ppid: 1, Utime: 10, Stime: 20, Cutime: 30, Cstime: 40, StartTime: 555},
		},
		{
			name: "zombie",
			line: "77 (pgbench) Z 1 77 77 0 -1 0 0 0 0 0 100 50 0 0 20 0 1 0 12 0 0",
			want: procStat{Pid: 77, Comm: "pgbench", State: "Z", Ppid: 1, Utime: 100, Stime: 50, StartTime: 12},
		},
		{name: "empty", line: "", wantErr: true},
		{name: "no parentheses", line: "1 init S 0 1 1", wantErr: true},
		{name: "too few fields", line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 5 6", wantErr: true},
		{name: "bad pid", line: "x1 (init) S 0 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1 0 0", wantErr: true},
		{name: "bad utime", line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 five 6 0 0 20 0 1 0 1 0 0", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestProcStatSums(t *testing.T) {
	s := procStat{Utime: 1, Stime: 2, Cutime: 4, Cstime: 8}
	if s.Self() != 3 || s.WithChildren() != 15 {
		t.Fatalf("Self %d WithChildren %d, want 3 and 15", s.Self(), s.WithChildren())
	}
}

func TestTicksToMicros(t *testing.T) {
	tests := []struct {
		ticks uint64
		hz    int
		want  float64
	}{{0, 100, 0}, {1, 100, 10000}, {250, 100, 2.5e6}, {3, 1000, 3000}, {5, 0, 0}}
	for _, tc := range tests {
		if got := ticksToMicros(tc.ticks, tc.hz); got != tc.want {
			t.Errorf("ticksToMicros(%d, %d) = %v, want %v", tc.ticks, tc.hz, got, tc.want)
		}
	}
}

// The live /proc of this test process parses: a smoke test of the real format.
func TestReadStatSelf(t *testing.T) {
	st, err := readStat(os.Getpid())
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("reading /proc under CI: %v", err)
		}
		t.Skipf("no /proc here: %v", err)
	}
	if st.Pid != os.Getpid() || st.Ppid != os.Getppid() {
		t.Fatalf("read %+v for pid %d ppid %d", st, os.Getpid(), os.Getppid())
	}
}
