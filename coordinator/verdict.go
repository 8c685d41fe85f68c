package coordinator

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// workerVerdict is the error for a statement the planner refused (0A000):
// PostgreSQL's own error if the statement is wrong anyway (an operator or
// column that does not exist, a literal of the wrong type), as PostgreSQL
// would report it instead of the refusal; else the refusal. The default
// node parses the statement (Parse does parse analysis and runs nothing)
// on a pooled connection with the session's settings. In a transaction
// block the refusal stands: objects the transaction made are not visible
// there. paramTail is the Parse body after the query (parameter types),
// nil for the simple protocol.
func (ss *session) workerVerdict(query string, paramTail []byte, refusal error) error {
	var pe *pgerr.Error
	var own *planner.CoordinatorOnly
	if !errors.As(refusal, &pe) || pe.Code != pgerr.FeatureNotSupported || errors.As(refusal, &own) {
		return refusal
	}
	return ss.parseVerdict(query, paramTail, refusal)
}

// bindVerdict is the error for a Bind whose parameters the coordinator
// could not convert (the distribution value, 22003, 22P02, ...): PostgreSQL
// parses a statement before it sees parameters, so an error of the
// statement itself (a constant that does not read under the session's
// DateStyle) comes first. Asked as workerVerdict asks, on this error path
// only.
func (ss *session) bindVerdict(st *Statement, err error) error {
	var pe *pgerr.Error
	if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "22") {
		return err
	}
	return ss.parseVerdict(st.Query, st.paramTail, err)
}

// parseVerdict is what the default node's Parse of query says, if it fails
// with an analysis or data error, else err.
func (ss *session) parseVerdict(query string, paramTail []byte, refusal error) error {
	if ss.inTxn() || !ss.routes {
		return refusal
	}
	return ss.defaultParse(query, paramTail, refusal)
}

// defaultParse is parseVerdict where the caller knows the session's
// transaction made nothing the default node's other connections cannot
// see (one the coordinator opened for the statement).
func (ss *session) defaultParse(query string, paramTail []byte, refusal error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return refusal
	}
	sc, err := ss.sideCheckout(ctx, pool)
	if err != nil {
		return refusal
	}
	werr, err := parseOnly(sc, query, paramTail)
	ss.sideRelease(pool, sc)
	if err == nil && werr != nil && passThrough(werr.PG.Code) {
		return werr
	}
	return refusal
}

// parseOnly sends a Parse of query (paramTail: the Parse body after the
// query, the parameter types; nil for none) and a Sync on sc, and reads the
// answer up to ReadyForQuery: the worker's error, if the Parse failed. Parse
// runs parse analysis and nothing else. A lost connection is err.
func parseOnly(sc *pooling.ServerConn, query string, paramTail []byte) (*executor.WorkerError, error) {
	body := append([]byte{0}, query...)
	body = append(body, 0)
	if paramTail == nil {
		paramTail = []byte{0, 0}
	}
	body = append(body, paramTail...)
	b := wire.AppendFrame(sc.Buf(), 'P', body)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		return nil, err
	}
	var werr *executor.WorkerError
	for {
		f, err := sc.Next()
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case 'E':
			werr = executor.NewWorkerError(f.Body)
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			return werr, nil
		}
	}
}

// passThrough reports whether an error from parsing a statement is
// PostgreSQL's verdict on the statement itself: analysis errors (class 42,
// but not a syntax error, which here means several statements) and data
// errors in its literals (class 22).
func passThrough(code string) bool {
	// 42P01 is not taken: the statement names a catalog table, which the
	// default node may not resolve as the coordinator does (search_path,
	// a table being distributed or dropped meanwhile).
	return code != "42601" && code != "42P01" && (strings.HasPrefix(code, "42") || strings.HasPrefix(code, "22"))
}
