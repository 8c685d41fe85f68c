package pooling

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// WorkerTLS is how the coordinator's connections to workers use TLS, in
// libpq's terms. The zero value is sslmode=disable.
type WorkerTLS struct {
	SSLMode  string // disable (""), allow, prefer, require, verify-ca or verify-full
	RootCert string // sslrootcert: PEM file of the CAs that sign the workers' certificates
}

// ConnString is a libpq keyword/value connection string for addr
// (host:port) with these settings; callers append user, database, ...
func (w WorkerTLS) ConnString(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "5432"
	}
	mode := w.SSLMode
	if mode == "" {
		mode = "disable"
	}
	s := fmt.Sprintf("host=%s port=%s sslmode=%s", quoteConnValue(host), quoteConnValue(port), quoteConnValue(mode))
	if w.RootCert != "" {
		s += " sslrootcert=" + quoteConnValue(w.RootCert)
	}
	return s
}

// Check reports a bad sslmode or an unreadable root certificate at startup
// rather than at the first connection.
func (w WorkerTLS) Check() error {
	switch w.SSLMode {
	case "", "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		return fmt.Errorf("worker sslmode %q: use disable, allow, prefer, require, verify-ca or verify-full", w.SSLMode)
	}
	if w.RootCert != "" && (w.SSLMode == "" || w.SSLMode == "disable") {
		return fmt.Errorf("worker sslrootcert %s is given but worker sslmode is disable: set the sslmode too (verify-full checks the certificate and the host name)", w.RootCert)
	}
	if _, err := pgconn.ParseConfig(w.ConnString("localhost:5432")); err != nil {
		return fmt.Errorf("worker TLS settings: %w", err)
	}
	return nil
}

// quoteConnValue quotes a libpq connection string value.
func quoteConnValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// rawConn is the TCP connection under a TLS one, for socket-level checks.
func rawConn(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}
