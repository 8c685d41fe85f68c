package coordinator

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
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
	if !errors.As(refusal, &pe) || pe.Code != pgerr.FeatureNotSupported || ss.inTxn() || !ss.routes {
		return refusal
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := ss.poolFor(ss.srv.defaultNode.Load())
	if err != nil {
		return refusal
	}
	sc, err := ss.checkout(ctx, pool)
	if err != nil {
		return refusal
	}
	body := append([]byte{0}, query...)
	body = append(body, 0)
	if paramTail == nil {
		paramTail = []byte{0, 0}
	}
	body = append(body, paramTail...)
	b := sc.Buf()
	b = append(b, 'P', 0, 0, 0, 0)
	b = append(b, body...)
	n := len(body) + 4
	b[len(b)-len(body)-4], b[len(b)-len(body)-3], b[len(b)-len(body)-2], b[len(b)-len(body)-1] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	b, _ = (&pgproto3.Sync{}).Encode(b)
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		pool.Release(sc)
		return refusal
	}
	var werr *workerError
	for {
		f, err := sc.Next()
		if err != nil {
			pool.Release(sc)
			return refusal
		}
		switch f.Type {
		case 'E':
			werr = newWorkerError(f.Body)
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			sc.TxStatus = f.Body[0]
			pool.Release(sc)
			if werr != nil && passThrough(werr.pg.Code) {
				return werr
			}
			return refusal
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
