package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// findPgbouncer returns the pgbouncer binary, installing it with apt-get when
// it is missing and this process is root. When it cannot, it returns "" and
// the reason, which goes into the report. Every command it runs is appended
// to cmds.
func findPgbouncer(ctx context.Context, logf func(string, ...any), cmds *[]commandRecord) (path, note string) {
	if p := lookPgbouncer(); p != "" {
		return p, ""
	}
	if os.Geteuid() != 0 {
		return "", "PgBouncer is not installed and this is not root, so it was not installed; PgBouncer rows skipped (install it, e.g. apt-get install pgbouncer)"
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", "PgBouncer is not installed and apt-get is not available; PgBouncer rows skipped"
	}
	install := []string{"apt-get", "install", "-y", "pgbouncer"}
	logf("PgBouncer is not installed: running %s", strings.Join(install, " "))
	out, err := runLogged(ctx, 10*time.Minute, install, cmds)
	if err != nil {
		// The package lists may be missing or stale: update them once and retry.
		update := []string{"apt-get", "update"}
		logf("%s failed (%v); running %s and retrying", strings.Join(install, " "), err, strings.Join(update, " "))
		if _, uerr := runLogged(ctx, 10*time.Minute, update, cmds); uerr == nil {
			out, err = runLogged(ctx, 10*time.Minute, install, cmds)
		}
	}
	if p := lookPgbouncer(); p != "" {
		return p, ""
	}
	return "", fmt.Sprintf("PgBouncer could not be installed (%v: %s); PgBouncer rows skipped", err, trunc(strings.TrimSpace(out), 300))
}

func lookPgbouncer() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// runLogged runs argv with a time limit and records it in cmds.
func runLogged(ctx context.Context, limit time.Duration, argv []string, cmds *[]commandRecord) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	// SIGTERM first: killing dpkg outright can leave its database locked.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	start := time.Now()
	out, err := cmd.CombinedOutput()
	rec := commandRecord{What: "setup", Argv: argv, Seconds: time.Since(start).Seconds()}
	if err != nil {
		rec.Error = err.Error()
	}
	*cmds = append(*cmds, rec)
	return string(out), err
}

// bouncerConfig is one PgBouncer set-up.
type bouncerConfig struct {
	PoolMode     string // session or transaction
	PoolSize     int
	Port         int
	WorkerPort   int
	QueryTimeout time.Duration // query_wait_timeout: longer than the run
	// Databases are served besides postgres (which the readiness probe
	// uses), each to the worker's database of the same name.
	Databases []string
}

// iniText is pgbouncer.ini for c, with the auth file at authFile.
func (c bouncerConfig) iniText(authFile string) string {
	wait := int(c.QueryTimeout.Seconds())
	if wait < 1 {
		wait = 120
	}
	dbs := fmt.Sprintf("postgres = host=127.0.0.1 port=%d dbname=postgres user=postgres\n", c.WorkerPort)
	for _, d := range c.Databases {
		if d != "postgres" {
			dbs += fmt.Sprintf("%s = host=127.0.0.1 port=%d dbname=%s user=postgres\n", d, c.WorkerPort, d)
		}
	}
	return fmt.Sprintf(`[databases]
%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 2000
max_db_connections = 0
query_wait_timeout = %d
server_check_delay = 30
ignore_startup_parameters = extra_float_digits
admin_users = postgres
log_connections = 0
log_disconnections = 0
`, dbs, c.Port, authFile, c.PoolMode, c.PoolSize, wait)
}

// startPgbouncer writes pgbouncer.ini into a new directory under parent,
// owned by the user PgBouncer runs as, and starts PgBouncer as a child.
func startPgbouncer(ctx context.Context, bin, parent string, c bouncerConfig, cred *syscall.Credential) (*child, string, error) {
	dir, err := os.MkdirTemp(parent, "pgbouncer-"+c.PoolMode+"-")
	if err != nil {
		return nil, "", err
	}
	auth := filepath.Join(dir, "userlist.txt")
	ini := filepath.Join(dir, "pgbouncer.ini")
	text := c.iniText(auth)
	// With auth_type=trust PgBouncer still wants the user in the auth file.
	if err := os.WriteFile(auth, []byte("\"postgres\" \"\"\n"), 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(ini, []byte(text), 0o600); err != nil {
		return nil, "", err
	}
	if cred != nil {
		for _, p := range []string{dir, auth, ini} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, "", err
			}
		}
		_ = os.Chmod(parent, 0o755)
	}
	ch, err := startChild("pgbouncer", []string{bin, ini}, cleanEnv(), cred, filepath.Join(dir, "pgbouncer.log"))
	if err != nil {
		return nil, text, err
	}
	if err := waitReady(ctx, ch, fmt.Sprintf("127.0.0.1:%d", c.Port), 15*time.Second); err != nil {
		ch.Stop(syscall.SIGTERM, 5*time.Second)
		return nil, text, err
	}
	return ch, text, nil
}
