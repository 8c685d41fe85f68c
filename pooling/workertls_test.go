package pooling

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/tlscert"
)

// TestWorkerTLSConnString: the settings reach pgconn intact, also with a
// root certificate path that needs quoting, and verify-full checks the
// worker's host; bad settings fail Check, at startup.
func TestWorkerTLSConnString(t *testing.T) {
	dir := filepath.Join(t.TempDir(), `a b\c`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := tlscert.Make(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "it's ca.crt")
	if err := os.Rename(files.CA, ca); err != nil {
		t.Fatal(err)
	}
	w := WorkerTLS{SSLMode: "verify-full", RootCert: ca}
	if err := w.Check(); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(w.ConnString("[::1]:5433"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "::1" || cfg.Port != 5433 || cfg.TLSConfig == nil || cfg.TLSConfig.RootCAs == nil ||
		cfg.TLSConfig.ServerName != "::1" || len(cfg.Fallbacks) != 0 {
		t.Errorf("parsed %s: host %q port %d TLS %+v fallbacks %d", w.ConnString("[::1]:5433"), cfg.Host, cfg.Port, cfg.TLSConfig, len(cfg.Fallbacks))
	}
	plain, err := pgconn.ParseConfig(WorkerTLS{}.ConnString("127.0.0.1:5432"))
	if err != nil || plain.TLSConfig != nil || len(plain.Fallbacks) != 0 {
		t.Errorf("zero value: %v, TLS %v, want plain text only", err, plain.TLSConfig)
	}
	for _, bad := range []WorkerTLS{
		{SSLMode: "verify_full"},
		{SSLMode: "verify-full", RootCert: filepath.Join(dir, "missing.crt")},
		{RootCert: ca}, // a root certificate with sslmode disable would check nothing
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v: Check passed", bad)
		} else if !strings.Contains(err.Error(), "worker") {
			t.Errorf("%+v: %v does not say it is about workers", bad, err)
		}
	}
}
