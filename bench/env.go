package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// versions of what the benchmark ran.
type versions struct {
	Pgfleet         string `json:"pgfleet"`                     // git describe, else the build's VCS revision
	PgfleetBuildVCS string `json:"pgfleet_build_vcs,omitempty"` // revision and modified flag from the binary
	Go              string `json:"go"`
	Postgres        string `json:"postgres"`
	Pgbouncer       string `json:"pgbouncer,omitempty"`
	Pgbench         string `json:"pgbench"`
}

// machine the benchmark ran on.
type machine struct {
	Nproc        int    `json:"nproc"`
	NumCPU       int    `json:"go_num_cpu"`
	CPUModel     string `json:"cpu_model"`
	Kernel       string `json:"kernel"`
	OS           string `json:"os,omitempty"`
	MemTotal     string `json:"mem_total,omitempty"`
	ClockTicks   int    `json:"clock_ticks_per_second"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end,omitempty"`
	Euid         int    `json:"euid"`
	Hostname     string `json:"hostname,omitempty"`
}

// commandOutput runs argv (as cred when not nil) with a short time limit and
// returns its trimmed output, or "" when it fails.
func commandOutput(cred *syscall.Credential, argv ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func pgfleetVersion() (describe, build string) {
	describe = commandOutput(nil, "git", "describe", "--always", "--dirty", "--tags")
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, mod, when string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				mod = s.Value
			case "vcs.time":
				when = s.Value
			}
		}
		if rev != "" {
			build = rev
			if mod == "true" {
				build += " (modified)"
			}
			if when != "" {
				build += " " + when
			}
		}
	}
	if describe == "" {
		describe = build
	}
	if describe == "" {
		describe = "unknown"
	}
	return describe, build
}

func readMachine(hz int) machine {
	m := machine{NumCPU: runtime.NumCPU(), ClockTicks: hz, Euid: os.Geteuid()}
	if n := commandOutput(nil, "nproc"); n != "" {
		m.Nproc = atoiOr(n, 0)
	}
	if m.Nproc == 0 {
		m.Nproc = runtime.NumCPU()
	}
	m.CPUModel = firstField("/proc/cpuinfo", "model name")
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if v := commandOutput(nil, "uname", "-srvm"); v != "" {
		m.Kernel = v
	}
	m.OS = strings.Trim(firstField("/etc/os-release", "PRETTY_NAME"), `"`)
	m.MemTotal = firstField("/proc/meminfo", "MemTotal")
	m.LoadAvgStart = loadAvg()
	m.Hostname, _ = os.Hostname()
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// firstField is the value of the first "key: value" or "key=value" line.
func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			k, v, ok = strings.Cut(line, "=")
		}
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func atoiOr(s string, def int) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return def
		}
		n = n*10 + int(c-'0')
	}
	return n
}
