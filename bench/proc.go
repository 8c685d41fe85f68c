package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procStat is the part of /proc/<pid>/stat the benchmark uses. CPU times are
// in clock ticks (see clockTicks).
type procStat struct {
	Pid       int
	Comm      string
	State     string
	Ppid      int
	Utime     uint64 // field 14
	Stime     uint64 // field 15
	Cutime    uint64 // field 16: reaped children's user time
	Cstime    uint64 // field 17: reaped children's system time
	StartTime uint64 // field 22, ticks after boot
}

// Self is the process's own CPU time (all its threads), in ticks.
func (s procStat) Self() uint64 { return s.Utime + s.Stime }

// WithChildren adds the CPU time of children the process has reaped.
func (s procStat) WithChildren() uint64 { return s.Utime + s.Stime + s.Cutime + s.Cstime }

// parseStat parses the contents of /proc/<pid>/stat. The command name is in
// parentheses and may itself contain spaces and parentheses, so the fields are
// counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	var s procStat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, fmt.Errorf("malformed stat line %q", trunc(string(b), 80))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return s, fmt.Errorf("malformed pid in stat line %q", trunc(string(b), 80))
	}
	s.Pid = pid
	s.Comm = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 20 {
		return s, fmt.Errorf("stat line of pid %d has %d fields after the name, want at least 20", pid, len(f))
	}
	s.State = f[0]
	if s.Ppid, err = strconv.Atoi(f[1]); err != nil {
		return s, fmt.Errorf("stat pid %d: ppid %q: %w", pid, f[1], err)
	}
	for i, dst := range []*uint64{&s.Utime, &s.Stime, &s.Cutime, &s.Cstime} {
		// cutime and cstime are signed in the kernel's format; negative values
		// do not occur in practice, so a parse failure is an error.
		if *dst, err = strconv.ParseUint(f[11+i], 10, 64); err != nil {
			return s, fmt.Errorf("stat pid %d: field %d %q: %w", pid, 14+i, f[11+i], err)
		}
	}
	if s.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return s, fmt.Errorf("stat pid %d: starttime %q: %w", pid, f[19], err)
	}
	return s, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// children lists the live children of pid by scanning /proc.
func children(pid int) ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []procStat
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n == pid {
			continue
		}
		st, err := readStat(n)
		if err != nil {
			continue // exited meanwhile
		}
		if st.Ppid == pid && st.State != "Z" {
			out = append(out, st)
		}
	}
	return out, nil
}

// treeCPU is the CPU time of a process and of all its children, living or
// reaped: its own time, its reaped children's time (cutime+cstime) and the
// live children's own and reaped time. For the postmaster this is the whole
// server: backends and background processes are its children. It also returns
// the live children's pids.
type treeCPU struct {
	Ticks    uint64         `json:"ticks"`
	Self     uint64         `json:"self_ticks"`      // postmaster utime+stime
	Reaped   uint64         `json:"reaped_ticks"`    // postmaster cutime+cstime
	Live     uint64         `json:"live_ticks"`      // live children, own and reaped
	Children map[int]uint64 `json:"-"`               // live children by pid
	NLive    int            `json:"live_children"`   // len(Children)
	TakenAt  time.Time      `json:"taken_at"`        // when read
	Err      string         `json:"error,omitempty"` // a read failure
}

func readTree(pid int) (treeCPU, error) {
	t := treeCPU{Children: map[int]uint64{}, TakenAt: time.Now()}
	kids, err := children(pid)
	if err != nil {
		return t, err
	}
	st, err := readStat(pid)
	if err != nil {
		return t, err
	}
	t.Self, t.Reaped = st.Self(), st.Cutime+st.Cstime
	for _, k := range kids {
		v := k.WithChildren()
		t.Children[k.Pid] = v
		t.Live += v
	}
	t.NLive = len(t.Children)
	t.Ticks = t.Self + t.Reaped + t.Live
	return t, nil
}

// waitChildrenGone waits until pid has no live child other than those in
// keep, or until timeout; it returns how many others are left.
func waitChildrenGone(pid int, keep map[int]uint64, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		kids, err := children(pid)
		left := 0
		if err == nil {
			for _, k := range kids {
				if _, ok := keep[k.Pid]; !ok {
					left++
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clockTicks is the unit of /proc/<pid>/stat CPU times per second (USER_HZ),
// from getconf CLK_TCK, else 100.
func clockTicks() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// ticksToMicros converts clock ticks to microseconds.
func ticksToMicros(ticks uint64, hz int) float64 {
	if hz <= 0 {
		return 0
	}
	return float64(ticks) * 1e6 / float64(hz)
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// readStatusKiB reads a "Key: N kB" line of /proc/<pid>/status (VmHWM,
// VmRSS); 0 when it cannot.
func readStatusKiB(pid int, key string) int64 {
	return procKiB(pid, "status", key)
}

// procKiB reads a "Key: N kB" line of /proc/<pid>/<file>; 0 when it cannot.
func procKiB(pid int, file, key string) int64 {
	v := firstField(filepath.Join("/proc", strconv.Itoa(pid), file), key)
	n, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	return n
}

// treePssKiB is the proportional set size of pid and its live children
// (smaps_rollup), in KiB: memory shared between them is counted once.
func treePssKiB(pid int) int64 {
	total := smapsPss(pid)
	kids, _ := children(pid)
	for _, k := range kids {
		total += smapsPss(k.Pid)
	}
	return total
}

func smapsPss(pid int) int64 { return procKiB(pid, "smaps_rollup", "Pss") }

// pssSampler samples the summed PSS of process trees until stopped.
type pssSampler struct {
	stopc chan struct{}
	done  chan int64
}

// startPssSampler samples the trees of pids every interval; stop returns the
// peak of the sums (0 for no pids).
func startPssSampler(pids []int, interval time.Duration) *pssSampler {
	s := &pssSampler{stopc: make(chan struct{}), done: make(chan int64, 1)}
	go func() {
		var peak int64
		sample := func() {
			var sum int64
			for _, p := range pids {
				sum += treePssKiB(p)
			}
			peak = max(peak, sum)
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				sample()
				s.done <- peak
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return s
}

func (s *pssSampler) stop() int64 {
	close(s.stopc)
	return <-s.done
}
