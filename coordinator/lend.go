package coordinator

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/pooling"
)

// The coordinator's own statements over several workers (COPY, multi-row
// INSERT, DDL, reference writes, the Citus functions, recovery) are written
// with pgx. They run on pooled connections lent to pgx (pooling.Lent): no
// connection to a worker is opened outside a pool, and none is opened per
// statement.

// dialNode lends the session a connection to a worker from the session's
// pool for it (in the class of what the session holds, like any checkout),
// in the session's settings, as a pgx connection.
func (ss *session) dialNode(ctx context.Context, host string, port int) (*pgx.Conn, error) {
	if ss.settingsUnknown {
		// The session's role or settings live on its pinned connection
		// (SET ROLE, SET SESSION AUTHORIZATION, set_config(), user code):
		// another connection would run the client's SQL and data as the
		// login user under other settings.
		return nil, pgerr.New(pgerr.FeatureNotSupported,
			"this statement runs on other worker connections, which cannot take on this session's role and settings (changed by %s)", ss.pinned).
			WithHint("Run it in a session that has not used SET ROLE, SET SESSION AUTHORIZATION, set_config() or functions changing settings (plain SET is fine).")
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	pool := ss.srv.pool(addr, ss.database, ss.user)
	take := func() (*pooling.ServerConn, error) { return ss.lendOne(ctx, pool) }
	first, err := take()
	if err != nil {
		return nil, err
	}
	c, err := pooling.LendPgx(ctx, first, take, func(*pooling.ServerConn) { ss.lent.Add(-1) })
	if err != nil {
		return nil, pgerr.New(pgerr.SQLClientUnableToConnect, "cannot use a connection to worker %s: %v", addr, err)
	}
	return c, nil
}

// lendOne takes a connection of pool for the session's own statements.
// They run the client's SQL and data on its behalf, under the session's
// settings (TimeZone, DateStyle, standard_conforming_strings, search_path,
// ...; with default_transaction_read_only they refuse writes with 25006 as
// PostgreSQL would), which the checkout applies. The idle timeouts are the
// session's business, not these connections': their transactions wait
// between a COPY's batches and between the nodes of a two-phase commit
// while the client's statement runs; the connection goes back to the pool
// with its settings marked unknown, so the next checkout sets them again.
func (ss *session) lendOne(ctx context.Context, pool *pooling.Pool) (*pooling.ServerConn, error) {
	sc, err := ss.checkout(ctx, pool, ss.holding())
	if err != nil {
		return nil, err
	}
	sc.ParamsKey = lentParams
	if err := sc.Exec("SET idle_in_transaction_session_timeout = 0; SET idle_session_timeout = 0",
		time.Now().Add(pool.Config().ResetTimeout), nil); err != nil {
		sc.MarkBroken()
		pool.Release(sc)
		fe := pgerr.Flatten(err)
		return nil, &pgerr.Error{Severity: "ERROR", Code: fe.Code, Detail: fe.Detail,
			Message: "cannot apply session settings on worker " + sc.Addr + ": " + fe.Message}
	}
	ss.lent.Add(1)
	return sc, nil
}

// lentParams marks the settings of a connection that was lent: no
// session's key, so the next checkout applies its own.
const lentParams = "\x00lent"
