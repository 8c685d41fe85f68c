package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a long-running process the benchmark started (a coordinator or
// PgBouncer). It runs in its own process group, so a Ctrl-C on the terminal
// reaches only the benchmark, which then stops it by PID; if the benchmark
// dies, the kernel sends it SIGTERM (Pdeathsig).
type child struct {
	Name    string
	Argv    []string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startChild starts argv with stdout and stderr appended to logPath, as cred
// when it is not nil.
func startChild(name string, argv []string, env []string, cred *syscall.Credential, logPath string) (*child, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{Name: name, Argv: argv, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

// Pid is the process id.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (c *child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// ExitStatus describes how the process ended ("" while it runs).
func (c *child) ExitStatus() string {
	if !c.Exited() || c.cmd.ProcessState == nil {
		return ""
	}
	return c.cmd.ProcessState.String()
}

// Stop sends sig to the process (by PID), waits up to grace, then sends
// SIGKILL and waits for it to exit. It reports whether it had to kill.
func (c *child) Stop(sig syscall.Signal, grace time.Duration) (killed bool) {
	if c == nil || c.Exited() {
		return false
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
		return false
	case <-time.After(grace):
	}
	_ = c.cmd.Process.Kill()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
	return true
}

// waitReady waits until addr answers a PostgreSQL startup message for user
// postgres and database postgres with an authentication request, or the
// process exits, or timeout passes.
func waitReady(ctx context.Context, c *child, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if c.Exited() {
			return fmt.Errorf("%s exited during start (%s); log %s:\n%s", c.Name, c.ExitStatus(), c.LogPath, tailFile(c.LogPath, 1500))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if last = probe(addr); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not become ready on %s within %s: %v; log %s:\n%s", c.Name, addr, timeout, last, c.LogPath, tailFile(c.LogPath, 1500))
}

// probe sends a startup message and expects an authentication request ('R').
func probe(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	body := []byte{0, 3, 0, 0}
	for _, s := range []string{"user", "postgres", "database", "postgres"} {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	n := len(body) + 4
	pkt := append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, body...)
	if _, err := conn.Write(pkt); err != nil {
		return err
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		return err
	}
	if b[0] != 'R' {
		return fmt.Errorf("startup answered with message %q, want 'R'", b[0])
	}
	return nil
}

// runAs is the credential for PostgreSQL and PgBouncer, which refuse to run
// as root: the user $PGFLEET_PG_OS_USER (default postgres) when this process
// is root, else nil (run as ourselves). It mirrors internal/pgcluster.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	name := os.Getenv("PGFLEET_PG_OS_USER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root, PgBouncer must run as an unprivileged user, and %q does not exist: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// cleanEnv is the environment without variables that would change what the
// children connect to or how (PG*, PGFLEET_*), plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// tailFile is the last n bytes of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// logProblems returns the lines of a log that look like warnings or errors
// (slog's level=WARN/ERROR, PgBouncer's WARNING/ERROR/FATAL), at most max,
// and how many there were.
func logProblems(path string, max int) (lines []string, total int) {
	return logProblemsFrom(path, 0, max)
}

// logProblemsFrom is logProblems over the part of the log from byte offset
// on (what was written after a point in time).
func logProblemsFrom(path string, offset int64, max int) (lines []string, total int) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return nil, 0
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		if isProblemLine(l) {
			total++
			if len(lines) < max {
				lines = append(lines, trunc(l, 400))
			}
		}
	}
	return lines, total
}

func isProblemLine(l string) bool {
	if strings.Contains(l, "canceling statement due to user request") {
		// A client's cancel (or a client gone mid-statement, whose
		// statement the coordinator cancels) as a timed run ends: the
		// client's doing, not a fault.
		return false
	}
	if strings.Contains(l, "canceling autovacuum task") {
		// PostgreSQL cancels autovacuum on a table whose lock another
		// statement asks for (the load's TRUNCATE or distribution): its
		// own, not a fault.
		return false
	}
	for _, m := range []string{"level=WARN", "level=ERROR", " WARNING ", " ERROR ", " FATAL ", "panic:", "fatal error:",
		"WARNING:  ", "ERROR:  ", "FATAL:  ", "PANIC:  "} {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}
