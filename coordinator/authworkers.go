package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/xdg-go/scram"

	"github.com/pgfleet/pgfleet/pooling"
)

// Authentication against the workers' own credentials (--auth workers): a
// client's password is checked with the SCRAM-SHA-256 verifier the first
// worker holds for the role (pg_authid.rolpassword, read as PgBouncer's
// auth_query reads it), and the coordinator then logs into the workers as
// the role with the ClientKey the client's proof reveals (SCRAM
// pass-through): it never learns the password, and no user need be listed
// in its configuration. Every worker must hold the same verifier for the
// role (a role made with the same password on two servers gets two salts).

// verifier is a parsed SCRAM-SHA-256 verifier.
type verifier struct {
	iters                int
	salt                 []byte
	storedKey, serverKey []byte
}

// parseVerifier reads PostgreSQL's SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>.
func parseVerifier(s string) (verifier, bool) {
	rest, ok := strings.CutPrefix(s, "SCRAM-SHA-256$")
	if !ok {
		return verifier{}, false
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return verifier{}, false
	}
	it, salt64, ok1 := strings.Cut(params, ":")
	sk64, svk64, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return verifier{}, false
	}
	var v verifier
	var err1, err2, err3, err4 error
	v.iters, err1 = strconv.Atoi(it)
	v.salt, err2 = base64.StdEncoding.DecodeString(salt64)
	v.storedKey, err3 = base64.StdEncoding.DecodeString(sk64)
	v.serverKey, err4 = base64.StdEncoding.DecodeString(svk64)
	if err := errors.Join(err1, err2, err3, err4); err != nil || v.iters < 1 || len(v.storedKey) != 32 || len(v.serverKey) != 32 {
		return verifier{}, false
	}
	return v, true
}

// credentials are the verifier's as the SCRAM server takes them.
func (v verifier) credentials() scram.StoredCredentials {
	return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(v.salt), Iters: v.iters},
		StoredKey: v.storedKey, ServerKey: v.serverKey}
}

// roleVerifier reads the role's SCRAM verifier on the first worker; ok is
// false when the role cannot log in with one (no such role, NOLOGIN,
// expired, no password or an MD5 one).
func (s *Server) roleVerifier(ctx context.Context, user string) (v verifier, ok bool, err error) {
	pool, err := s.authQueryPool(ctx)
	if err != nil {
		return verifier{}, false, err
	}
	var pw *string
	err = pool.QueryRow(ctx, `SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1 AND rolcanlogin
		AND (rolvaliduntil IS NULL OR rolvaliduntil > pg_catalog.now())`, user).Scan(&pw)
	if errors.Is(err, pgx.ErrNoRows) {
		return verifier{}, false, nil
	}
	if err != nil || pw == nil {
		return verifier{}, false, err
	}
	v, ok = parseVerifier(*pw)
	return v, ok, nil
}

// authQueryPool is the pool of the coordinator's own connections (as the
// postgres user) to the first worker that read roles' verifiers, made on
// first use.
func (s *Server) authQueryPool(ctx context.Context) (*pgxpool.Pool, error) {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if s.authPool != nil {
		return s.authPool, nil
	}
	cfg, err := pgxpool.ParseConfig(s.cfg.WorkerTLS.ConnString(s.cfg.Workers[0]) + " user=postgres dbname=postgres connect_timeout=10")
	if err != nil {
		return nil, err
	}
	pw := s.cfg.Users["postgres"]
	if pw == "" {
		pw = s.cfg.WorkerPassword
	}
	cfg.ConnConfig.Password = pw
	cfg.MaxConns = 2
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.authPool = p
	return p, nil
}

// workerCredentials are the SCRAM credentials a client of user is checked
// against under --auth workers, and whether they are the role's: an unknown
// role (or one without a SCRAM verifier) runs the exchange against random
// credentials, so that it looks like a wrong password.
func (ss *session) workerCredentials(user string) (scram.StoredCredentials, *verifier, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, ok, err := ss.srv.roleVerifier(ctx, user)
	if err != nil {
		return scram.StoredCredentials{}, nil, err
	}
	if !ok {
		var b [16]byte
		_, _ = rand.Read(b[:])
		creds, err := scramCredentials(base64.StdEncoding.EncodeToString(b[:]))
		return creds, nil, err
	}
	return v.credentials(), &v, nil
}

// rememberKey keeps the key a client's exchange revealed, for the pools'
// new connections as that user.
func (s *Server) rememberKey(user string, v *verifier, clientFirst, serverFirst, clientFinal string) error {
	key, err := pooling.ClientKeyFromProof(v.storedKey, clientFirst, serverFirst, clientFinal)
	if err != nil {
		return err
	}
	s.authMu.Lock()
	s.scramKeys[user] = &pooling.SCRAMKey{Salt: v.salt, Iters: v.iters, ClientKey: key, ServerKey: v.serverKey}
	s.authMu.Unlock()
	return nil
}

// scramKey is the last key a client of user logged in with (nil: none).
func (s *Server) scramKey(user string) *pooling.SCRAMKey {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	return s.scramKeys[user]
}
