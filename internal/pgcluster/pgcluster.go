// Package pgcluster starts and stops real PostgreSQL servers on loopback for
// the demo, the benchmark harness and the integration tests. It runs initdb
// and postgres as an unprivileged user when the caller is root (PostgreSQL
// refuses to run as root), in data directories that user owns.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is one running PostgreSQL instance.
type Server struct {
	Name    string
	Host    string
	Port    int
	User    string // superuser created by initdb
	DataDir string
	LogFile string
	cmd     *exec.Cmd
	done    chan struct{}
	opts    Options // what Start was given, with the port it chose
}

// URL is a libpq URL for the server's postgres database.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://%s@%s:%d/postgres?sslmode=disable", s.User, s.Host, s.Port)
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// BinDir finds the directory holding initdb and postgres: $PG_BIN, then PATH,
// then the newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or under " +
		"/usr/lib/postgresql/*/bin; install them (Debian/Ubuntu: apt-get install postgresql; " +
		"macOS: brew install postgresql) or set PG_BIN to their directory")
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// FreePort finds a loopback port free for TCP and UDP alike (a gossip
// address takes both), below the kernel's ephemeral range when there is
// room: a port the kernel hands out for :0 is in that range, where any
// outgoing connection may take it as its local port between this check
// and the server's bind (a coordinator's gossip listener failed so, with
// "address already in use", under the load of a test run).
func FreePort() (int, error) {
	const floor = 10000
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	if lo-floor >= 1000 {
		for range 200 {
			if p := floor + rand.IntN(lo-floor); portFree(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portFree reports whether loopback port p can be bound for TCP and UDP.
func portFree(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// runAs is the credential to run PostgreSQL with: nil when not root.
func runAs() (*syscall.Credential, string, error) {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return nil, "", err
		}
		return nil, u.Username, nil
	}
	name := os.Getenv("PGFLEET_PG_OS_USER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, "", fmt.Errorf("running as root, PostgreSQL must run as an unprivileged user, "+
			"and user %q does not exist: create it (useradd -r postgres) or set PGFLEET_PG_OS_USER: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, name, nil
}

// Options for Start.
type Options struct {
	Name    string
	Dir     string   // parent directory; the server's data lives in Dir/Name
	Port    int      // 0 picks a free port
	Config  []string // extra postgresql.conf lines
	LogFile string   // default Dir/Name.log
}

// Start initdb's a data directory and starts postgres on 127.0.0.1. The
// server is a child of this process and receives SIGQUIT if this process dies,
// so a killed test run does not leave it behind.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, osUser, err := runAs()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	data := filepath.Join(o.Dir, o.Name)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	logFile := o.LogFile
	if logFile == "" {
		logFile = filepath.Join(o.Dir, o.Name+".log")
	}
	if cred != nil {
		// The parent must be traversable by the unprivileged user.
		_ = os.Chmod(o.Dir, 0o755)
		for _, p := range []string{data} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		f.Close()
		_ = os.Chown(logFile, int(cred.Uid), int(cred.Gid))
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
			"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		initdb.Env = append(os.Environ(), "LC_ALL=C")
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb %s: %w\n%s", data, err, out)
		}
	}
	_ = osUser
	// A server started again on its data keeps its port: a catalog in
	// it (pgfleet's nodes) names the others by address.
	portFile := filepath.Join(o.Dir, o.Name+".port")
	fixed := o.Port
	if b, err := os.ReadFile(portFile); fixed == 0 && err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 {
			fixed = p
		}
	}
	port := fixed
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if fixed == 0 {
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		s, err := launch(ctx, bin, data, logFile, port, cred, o)
		if err == nil {
			s.opts = o
			s.opts.Port = port
			if err := os.WriteFile(portFile, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
				s.Stop()
				return nil, err
			}
			return s, nil
		}
		lastErr = err
		if fixed != 0 {
			if o.Port == 0 {
				lastErr = fmt.Errorf("%s was on port %d before (%s), and cannot start there again: %w", o.Name, port, portFile, err)
			}
			break
		}
	}
	return nil, lastErr
}

func launch(ctx context.Context, bin, data, logFile string, port int, cred *syscall.Credential, o Options) (*Server, error) {
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "max_prepared_transactions=100",
		"-c", "shared_buffers=128MB", "-c", "wal_level=logical"}
	for _, c := range o.Config {
		args = append(args, "-c", c)
	}
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	lf.Close()
	s := &Server{Name: o.Name, Host: "127.0.0.1", Port: port, User: "postgres", DataDir: data,
		LogFile: logFile, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return nil, fmt.Errorf("postgres %s exited during start; log %s:\n%s", o.Name, logFile, tail(logFile))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		default:
		}
		c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			if ready(s) {
				return s, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	return nil, fmt.Errorf("postgres %s did not accept connections within 30s; log %s:\n%s", o.Name, logFile, tail(logFile))
}

// ready reports whether the server answers a startup packet (not "starting up").
func ready(s *Server) bool {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	// StartupMessage: protocol 3.0, user=postgres, database=postgres.
	body := []byte{0, 3, 0, 0}
	for _, kv := range []string{"user", "postgres", "database", "postgres"} {
		body = append(body, kv...)
		body = append(body, 0)
	}
	body = append(body, 0)
	pkt := append([]byte{0, 0, 0, byte(len(body) + 4)}, body...)
	if _, err := c.Write(pkt); err != nil {
		return false
	}
	var hdr [1]byte
	if _, err := c.Read(hdr[:]); err != nil {
		return false
	}
	return hdr[0] == 'R' // AuthenticationOk/other auth request; 'E' means not ready
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Pid is the postmaster's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop shuts the server down (fast shutdown, then immediate after 10s) and
// waits for it to exit. It does not remove the data directory.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		<-s.done
	}
}

// Restart starts a stopped server again, on the same port and data
// directory (for tests of a worker restarting).
func (s *Server) Restart(ctx context.Context) error {
	select {
	case <-s.done:
	default:
		return fmt.Errorf("postgres %s is running", s.Name)
	}
	ns, err := Start(ctx, s.opts)
	if err != nil {
		return err
	}
	s.cmd, s.done = ns.cmd, ns.done
	return nil
}

// Cluster is a set of servers sharing one parent directory.
type Cluster struct {
	Dir     string
	Servers []*Server
	ownDir  bool
}

// StartCluster starts n servers named worker1..n in dir (a new temporary
// directory when dir is empty; removed by Stop).
func StartCluster(ctx context.Context, dir string, n int, config ...string) (*Cluster, error) {
	c := &Cluster{Dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "pgfleet-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.ownDir = d, true
	}
	for i := 1; i <= n; i++ {
		s, err := Start(ctx, Options{Name: fmt.Sprintf("worker%d", i), Dir: c.Dir, Config: config})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	return c, nil
}

// Stop stops every server and removes the directory if StartCluster made it.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}
