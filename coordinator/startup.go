package coordinator

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/rawio"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/pooling"
)

const (
	codeSSLRequest    = 80877103
	codeGSSEncRequest = 80877104
	codeCancelRequest = 80877102
	maxStartupPacket  = 10000 // PostgreSQL's MAX_STARTUP_PACKET_LENGTH

	// PostgreSQL's bounds on authentication messages (auth.c): a password
	// (PG_MAX_AUTH_TOKEN_LENGTH) and a SASL message
	// (PG_MAX_SASL_MESSAGE_LENGTH). A longer one fails the authentication
	// before its body is read.
	maxPasswordMessage = 65535
	maxSASLMessage     = 1024
)

// serveConn runs one client connection from its first byte to its end
// (or to its first sleep: sleep.go). tooMany: the client is over
// --max-client-connections.
//
// The session runs in a frame of its own after the startup's has
// returned: a session waiting for its client in a transaction keeps a
// goroutine with little on its stack, which the runtime shrinks to 4 KiB
// (with the startup's frame under it, it stayed at 8 KiB).
func (s *Server) serveConn(c net.Conn, tooMany bool) {
	ss := s.startSession(c, tooMany)
	if ss == nil {
		s.connEnded(c)
		return
	}
	s.metrics.clients.Inc()
	s.serveSession(ss)
}

// connEnded closes a client connection whose session ended.
func (s *Server) connEnded(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
	s.wg.Done()
}

// startSession reads a client's startup, authenticates it and begins its
// session, or tells it why not (nil).
func (s *Server) startSession(c net.Conn, tooMany bool) *session {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	// The client's read buffer goes back to a shared pool whenever the
	// session waits for the client, so an idle session does not hold it.
	ss := &session{srv: s, conn: c, accepted: c}
	var rd io.Reader
	rd, ss.w = rawio.Wrap(c)
	ss.r = wire.NewPooledReader(rd, 8192)
	// Until the client has authenticated nothing longer than an
	// authentication message is read.
	ss.r.SetLimits(maxPasswordMessage, wire.SmallMessageLen)
	_ = c.SetDeadline(time.Now().Add(s.cfg.StartupTimeout))
	startup, err := ss.readStartup()
	if err != nil {
		ss.fatal(err)
		return nil
	}
	if tooMany {
		// As PostgreSQL: the startup packet is read (a cancel request is
		// still served), then the client is told.
		ss.fatal(pgerr.Fatal(pgerr.TooManyConnections, "sorry, too many clients already"))
		return nil
	}
	if s.draining.Load() {
		ss.fatal(pgerr.Fatal(pgerr.CannotConnectNow, "the database system is shutting down"))
		return nil
	}
	if err := ss.checkTransport(startup); err != nil {
		ss.fatal(err)
		return nil
	}
	if err := ss.authenticate(startup); err != nil {
		ss.fatal(err)
		return nil
	}
	ss.r.SetLimits(s.cfg.MaxMessageSize, wire.SmallMessageLen)
	ss.r.SetBudget(s.msgMemory)
	if err := ss.begin(startup); err != nil {
		ss.fatal(err)
		ss.r.Release()
		return nil
	}
	_ = c.SetDeadline(time.Time{})
	ss.rawConn = rawSocket(ss.conn) // not after TLS
	return ss
}

// serveSession runs a begun session until it ends or sleeps.
func (s *Server) serveSession(ss *session) {
	asleep := false
	defer s.endSession(ss, &asleep) // one deferred call: a small frame under run's
	asleep = ss.run()
}

// endSession ends a session that serveSession ran, or hands it to the
// idler (*asleep). A panic of its goroutine is logged and told to the
// client (a bug in one session must not take the coordinator down). An
// ended session gives its worker connections back, leaves the registry,
// and its client connection closes.
func (s *Server) endSession(ss *session, asleep *bool) {
	r := recover()
	if r == nil && *asleep {
		s.sleep(ss)
		return
	}
	if r != nil {
		s.log.Error("session panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		if ss.sc != nil {
			ss.sc.MarkBroken()
		}
	}
	ss.end()
	if r != nil {
		ss.fatal(pgerr.Fatal(pgerr.Internal, "internal error in pgfleet: %v", r))
	}
	ss.leaveFlight()
	s.unregister(ss)
	s.metrics.clients.Dec()
	ss.r.Release()
	s.connEnded(ss.accepted)
}

// errQuietClose ends a connection without an error message (a cancel request,
// or a client that went away during startup or a statement's run: the
// executor's executor.ErrClientGone).
var errQuietClose = executor.ErrClientGone

// readStartup reads startup packets until a StartupMessage, serving cancel
// requests and answering encryption requests as PostgreSQL does: an
// SSLRequest gets 'S' and a TLS handshake when the coordinator has a
// certificate, 'N' otherwise; a GSSENCRequest always gets 'N'. Each may
// come once; a repeated one is an unsupported protocol version.
func (ss *session) readStartup() (*pgproto3.StartupMessage, error) {
	sslDone, gssDone := false, false
	for {
		body, err := ss.r.ReadStartup(maxStartupPacket)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, errQuietClose // a client that says nothing is dropped
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
				return nil, errQuietClose // PostgreSQL logs "incomplete startup packet" and closes too
			}
			return nil, pgerr.Fatal(pgerr.ProtocolViolation, "%v", err)
		}
		code := binary.BigEndian.Uint32(body)
		switch {
		case code == codeSSLRequest && !sslDone || code == codeGSSEncRequest && !gssDone:
			if len(body) != 4 {
				return nil, pgerr.Fatal(pgerr.ProtocolViolation, "invalid length of encryption request packet")
			}
			if ss.r.Buffered() > 0 {
				// Bytes after the request before our answer: a man in the middle
				// could have injected them (CVE-2021-23214).
				return nil, pgerr.Fatal(pgerr.ProtocolViolation, "received unencrypted data after SSL request")
			}
			if code == codeGSSEncRequest {
				gssDone = true
				if _, err := ss.conn.Write([]byte{'N'}); err != nil {
					return nil, errQuietClose
				}
				continue
			}
			sslDone = true
			if ss.srv.cfg.TLS == nil {
				if _, err := ss.conn.Write([]byte{'N'}); err != nil {
					return nil, errQuietClose
				}
				continue
			}
			if err := ss.startTLS(); err != nil {
				return nil, err
			}
			gssDone = true // as PostgreSQL: no GSS encryption inside TLS
		case code == codeCancelRequest:
			var cr pgproto3.CancelRequest
			if err := cr.Decode(body); err == nil {
				ss.srv.cancel(cr.ProcessID, cr.SecretKey)
			}
			return nil, errQuietClose
		case code>>16 == 3:
			if code&0xffff != 0 {
				// A newer minor version: answer with the one we speak (3.0)
				// and go on with the same packet read as 3.0.
				binary.BigEndian.PutUint32(body, pgproto3.ProtocolVersion30)
				var opts []string
				if sm, err := decodeStartup(body); err == nil {
					for k := range sm.Parameters {
						if len(k) > 5 && k[:5] == "_pq_." {
							opts = append(opts, k)
						}
					}
				}
				npv := pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: opts}
				ss.out, _ = npv.Encode(ss.out)
			}
			sm, err := decodeStartup(body)
			if err != nil {
				return nil, pgerr.Fatal(pgerr.ProtocolViolation, "invalid startup packet layout: %v", err)
			}
			if sm.Parameters["user"] == "" {
				return nil, pgerr.Fatal(pgerr.InvalidAuthorization, "no PostgreSQL user name specified in startup packet")
			}
			return sm, nil
		default:
			return nil, pgerr.Fatal(pgerr.ProtocolViolation,
				"unsupported frontend protocol %d.%d: server supports 3.0", code>>16, code&0xffff)
		}
	}
}

// startTLS answers an SSLRequest with 'S' and runs the server side of the
// TLS handshake (under the startup deadline set on the connection); the
// session then reads and writes through TLS.
func (ss *session) startTLS() error {
	if _, err := ss.conn.Write([]byte{'S'}); err != nil {
		return errQuietClose
	}
	tc := tls.Server(ss.conn, ss.srv.cfg.TLS)
	if err := tc.Handshake(); err != nil {
		// The client may not speak TLS any more: nothing it could read.
		ss.srv.log.Debug("TLS handshake failed", "remote", ss.conn.RemoteAddr().String(), "err", err.Error())
		return errQuietClose
	}
	ss.conn, ss.w = tc, tc
	ss.r = wire.NewPooledReader(tc, 8192)
	ss.tls = true
	return nil
}

// checkTransport refuses a plaintext client when TLS is required, with
// the error PostgreSQL gives under a pg_hba.conf of hostssl lines only.
func (ss *session) checkTransport(sm *pgproto3.StartupMessage) error {
	if !ss.srv.cfg.TLSRequired || ss.tls {
		return nil
	}
	user := sm.Parameters["user"]
	db := sm.Parameters["database"]
	if db == "" {
		db = user
	}
	host := ss.conn.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	e := pgerr.Fatal(pgerr.InvalidAuthorization, "no pg_hba.conf entry for host \"%s\", user \"%s\", database \"%s\", no encryption", host, user, db)
	e.Hint = "This pgfleet coordinator accepts only TLS connections (--tls-required): connect with sslmode=require, verify-ca or verify-full."
	return e
}

func decodeStartup(body []byte) (*pgproto3.StartupMessage, error) {
	sm := &pgproto3.StartupMessage{}
	if err := sm.Decode(body); err != nil {
		return nil, err
	}
	return sm, nil
}

// authenticate runs the configured authentication exchange.
func (ss *session) authenticate(sm *pgproto3.StartupMessage) error {
	s := ss.srv
	user := sm.Parameters["user"]
	switch s.cfg.Auth {
	case "trust":
		return nil
	case "md5":
		return ss.authMD5(user)
	default:
		return ss.authSCRAM(user)
	}
}

func authFailed(user string) error {
	return pgerr.Fatal(pgerr.InvalidPassword, "password authentication failed for user %q", user)
}

func (ss *session) authMD5(user string) error {
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	req := pgproto3.AuthenticationMD5Password{Salt: salt}
	ss.out, _ = req.Encode(ss.out)
	if err := ss.flush(); err != nil {
		return errQuietClose
	}
	ss.r.SetLimits(maxPasswordMessage, wire.SmallMessageLen)
	f, err := ss.r.Next()
	if err != nil || f.Type != 'p' {
		return authFailed(user)
	}
	var pm pgproto3.PasswordMessage
	if pm.Decode(f.Body) != nil {
		return authFailed(user)
	}
	pw, ok := ss.srv.cfg.Users[user]
	if !ok {
		return authFailed(user)
	}
	inner := md5.Sum([]byte(pw + user))
	outer := md5.Sum(append([]byte(hex.EncodeToString(inner[:])), salt[:]...))
	want := "md5" + hex.EncodeToString(outer[:])
	if subtle.ConstantTimeCompare([]byte(want), []byte(pm.Password)) != 1 {
		return authFailed(user)
	}
	return nil
}

func (ss *session) authSCRAM(user string) error {
	var creds scram.StoredCredentials
	var role *verifier // --auth workers: the role's verifier on the first worker
	known := true
	if ss.srv.cfg.Auth == "workers" {
		var err error
		if creds, role, err = ss.workerCredentials(user); err != nil {
			return pgerr.Fatal(pgerr.SQLClientUnableToConnect, "cannot read the role's credentials on the first worker: %v", err).
				WithHint("The coordinator reads pg_authid there as the postgres user (--worker-password, or --user postgres:...).")
		}
		known = role != nil
	} else {
		pw, ok := ss.srv.cfg.Users[user]
		if !ok {
			// Run the exchange against a random password so that unknown
			// and known users look alike to the client.
			var b [16]byte
			_, _ = rand.Read(b[:])
			pw = hex.EncodeToString(b[:])
		}
		var err error
		if creds, err = scramCredentials(pw); err != nil {
			return err
		}
		known = ok
	}
	srv, err := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return creds, nil })
	if err != nil {
		return err
	}
	// Over TLS, SCRAM-SHA-256-PLUS is offered first, as PostgreSQL does:
	// channel binding to our certificate lets the client detect a man in
	// the middle who has a certificate of his own.
	conv := srv.NewConversation()
	mechs := []string{"SCRAM-SHA-256"}
	if ss.tls && ss.srv.tlsEndPoint != nil {
		conv = srv.NewConversationWithChannelBinding(scram.ChannelBinding{
			Type: scram.ChannelBindingTLSServerEndpoint, Data: ss.srv.tlsEndPoint})
		mechs = []string{"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"}
	}
	req := pgproto3.AuthenticationSASL{AuthMechanisms: mechs}
	ss.out, _ = req.Encode(ss.out)
	if err := ss.flush(); err != nil {
		return errQuietClose
	}
	ss.r.SetLimits(maxSASLMessage, wire.SmallMessageLen)
	f, err := ss.r.Next()
	if err != nil || f.Type != 'p' {
		return authFailed(user)
	}
	var init pgproto3.SASLInitialResponse
	if init.Decode(f.Body) != nil || !slices.Contains(mechs, init.AuthMechanism) {
		return pgerr.Fatal(pgerr.ProtocolViolation, "client selected an invalid SASL authentication mechanism")
	}
	// The mechanism and the GS2 header's channel binding flag must agree
	// (PostgreSQL's read_client_first_message).
	binds := len(init.Data) > 0 && init.Data[0] == 'p'
	if plus := init.AuthMechanism == "SCRAM-SHA-256-PLUS"; plus && !binds {
		return pgerr.Fatal(pgerr.ProtocolViolation, "malformed SCRAM message").
			WithHint("The client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include channel binding data.")
	} else if !plus && binds {
		return pgerr.Fatal(pgerr.ProtocolViolation, "malformed SCRAM message").
			WithHint("The client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data.")
	}
	clientFirst := string(init.Data) // (the reader's buffer is reused by the next message)
	first, err := conv.Step(clientFirst)
	if err != nil {
		return authFailed(user)
	}
	cont := pgproto3.AuthenticationSASLContinue{Data: []byte(first)}
	ss.out, _ = cont.Encode(ss.out)
	if err := ss.flush(); err != nil {
		return errQuietClose
	}
	f, err = ss.r.Next()
	if err != nil || f.Type != 'p' {
		return authFailed(user)
	}
	var resp pgproto3.SASLResponse
	if resp.Decode(f.Body) != nil {
		return authFailed(user)
	}
	final, err := conv.Step(string(resp.Data))
	if err != nil || !conv.Valid() || !known {
		return authFailed(user)
	}
	if role != nil {
		if err := ss.srv.rememberKey(user, role, clientFirst, first, string(resp.Data)); err != nil {
			return authFailed(user)
		}
	}
	fin := pgproto3.AuthenticationSASLFinal{Data: []byte(final)}
	ss.out, _ = fin.Encode(ss.out)
	return nil
}

// serverEndPoint is the tls-server-end-point channel binding data of the
// certificate cfg serves (RFC 5929: its hash under its signature's hash
// function, SHA-256 for MD5 and SHA-1), or nil when cfg may serve more than
// one certificate or the algorithm has no defined binding.
func serverEndPoint(cfg *tls.Config) []byte {
	if cfg == nil || len(cfg.Certificates) != 1 || cfg.GetCertificate != nil || len(cfg.Certificates[0].Certificate) == 0 {
		return nil
	}
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return nil
	}
	var h hash.Hash
	switch leaf.SignatureAlgorithm {
	case x509.MD5WithRSA, x509.SHA1WithRSA, x509.ECDSAWithSHA1, x509.DSAWithSHA1,
		x509.SHA256WithRSA, x509.SHA256WithRSAPSS, x509.ECDSAWithSHA256:
		h = sha256.New()
	case x509.SHA384WithRSA, x509.SHA384WithRSAPSS, x509.ECDSAWithSHA384:
		h = sha512.New384()
	case x509.SHA512WithRSA, x509.SHA512WithRSAPSS, x509.ECDSAWithSHA512:
		h = sha512.New()
	default:
		return nil // Ed25519: no binding defined; offer SCRAM-SHA-256 only
	}
	h.Write(leaf.Raw)
	return h.Sum(nil)
}

// scramCredentials derives SCRAM-SHA-256 stored credentials from a password,
// with a fresh salt and PostgreSQL's default iteration count.
func scramCredentials(password string) (scram.StoredCredentials, error) {
	client, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		return scram.StoredCredentials{}, pgerr.Fatal(pgerr.InvalidPassword, "invalid password: %v", err)
	}
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	return client.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: 4096}), nil
}

// begin finishes startup: it checks that the worker accepts this database and
// user, applies the client's startup settings there, and reports the
// resulting parameters, our backend key and ReadyForQuery.
func (ss *session) begin(sm *pgproto3.StartupMessage) error {
	s := ss.srv
	user := sm.Parameters["user"]
	db := sm.Parameters["database"]
	if db == "" {
		db = user
	}
	sp, err := startupParams(sm.Parameters)
	if err != nil {
		return err
	}
	ss.user, ss.database = user, db
	ss.params = newSessionParams(sp)
	ss.pools = map[int32]*pooling.Pool{}
	ss.routes = db == s.metaDB
	ss.stmts = map[string]*Statement{}
	ss.portals = map[string]*Statement{}
	s.register(ss)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StartupTimeout)
	defer cancel()
	w, err := ss.welcome(ctx)
	if err != nil {
		s.unregister(ss)
		return asFatal(err)
	}
	if w.rolePath != "" {
		ss.params.rolePath = w.rolePath
		ss.params.derivePath()
	}
	ss.roleTempPath = w.tempPath
	ok := pgproto3.AuthenticationOk{}
	ss.out, _ = ok.Encode(ss.out)
	for k, v := range w.params {
		ps := pgproto3.ParameterStatus{Name: k, Value: v}
		ss.out, _ = ps.Encode(ss.out)
	}
	ss.releaseIfIdle()
	if ss.sc != nil && !pooling.DefinesWithin(ss.sc.Defines, ss.params.defines) {
		ss.releaseServer() // (taken whatever it defined: checkoutFor)
	}
	bkd := pgproto3.BackendKeyData{ProcessID: ss.pid, SecretKey: ss.secret}
	ss.out, _ = bkd.Encode(ss.out)
	rfq := pgproto3.ReadyForQuery{TxStatus: 'I'}
	ss.out, _ = rfq.Encode(ss.out)
	ss.ready = true
	if err := ss.flush(); err != nil {
		s.unregister(ss)
		return errQuietClose
	}
	// The startup answer (every ParameterStatus) is the largest most
	// sessions write until they run a query; do not keep its buffer for an
	// idle session. The first answer allocates one of its own size.
	ss.out = nil
	return nil
}

func asFatal(err error) error {
	fe := pgerr.Flatten(err)
	return &pgerr.Error{Severity: "FATAL", Code: fe.Code, Message: fe.Message, Detail: fe.Detail, Hint: fe.Hint}
}

// cancel forwards a client's cancel request to the worker running its
// statement, or, for a key another member of the fleet issued, to that
// member. Unknown keys are ignored, as PostgreSQL does.
func (s *Server) cancel(pid uint32, secret []byte) {
	s.metrics.cancels.Inc()
	f := s.fleet.Load()
	if (f == nil || tagOf(pid) == f.Tag()) && s.cancelHere(pid, secret) {
		return
	}
	if f != nil {
		// Another member's key (or one of a member whose tag is this
		// one's too): it cancels there.
		f.Cancel(tagOf(pid), pid, secret)
	}
}

// cancelHere cancels the statement of this coordinator's session with
// that key, if any, and reports whether there was one.
func (s *Server) cancelHere(pid uint32, secret []byte) bool {
	ss := s.lookup(pid)
	if ss == nil || subtle.ConstantTimeCompare(ss.secret, secret) != 1 {
		return false
	}
	ss.cancelMu.Lock()
	defer ss.cancelMu.Unlock()
	if f := ss.waitCancel.Load(); f != nil {
		(*f)()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ss.cancelScatter(ctx)
	for node, c := range ss.writeConns {
		pc := c.PgConn()
		if err := pooling.SendCancel(ctx, s.nodeAddr(node), pc.PID(), pc.SecretKey()); err != nil {
			s.log.Warn("forwarding cancel request", "worker", s.nodeAddr(node), "err", fmt.Sprint(err))
		}
	}
	t := ss.cancelTarget.Load()
	if t == nil {
		return true
	}
	if err := sendCancel(ctx, t); err != nil {
		s.log.Warn("forwarding cancel request", "worker", t.Addr, "err", fmt.Sprint(err))
	}
	return true
}
