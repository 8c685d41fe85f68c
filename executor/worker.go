package executor

import (
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/pooling"
)

// FirstNormalOID: types below it are built in, with the same OID and
// binary format on every node.
const FirstNormalOID = 16384

// WorkerError is an ErrorResponse from a worker, passed to the client as
// it came (a FATAL one as ERROR: it ended the worker connection, not the
// client's session).
type WorkerError struct {
	Body []byte // the ErrorResponse's body, as sent to the client
	PG   *pgconn.PgError
	// Addr is the worker that sent it, where the executor knows it
	// (multi-shard statements); empty otherwise.
	Addr string
}

// NewWorkerError reads an ErrorResponse body from a worker.
func NewWorkerError(body []byte) *WorkerError {
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil {
		er = pgproto3.ErrorResponse{Severity: "ERROR", Code: pgerr.Internal, Message: "invalid error message from a worker"}
	}
	if er.SeverityUnlocalized == "FATAL" || er.SeverityUnlocalized == "PANIC" || er.Severity == "FATAL" || er.Severity == "PANIC" {
		er.Severity, er.SeverityUnlocalized = "ERROR", "ERROR"
		b, _ := er.Encode(nil)
		body = b[5:]
	} else {
		body = append([]byte(nil), body...)
	}
	return &WorkerError{Body: body, PG: pgconn.ErrorResponseToPgError(&er)}
}

func (e *WorkerError) Error() string { return e.PG.Error() }
func (e *WorkerError) Unwrap() error { return e.PG }

// IsWorkerError reports whether err is a worker's answer (the connection
// is fine), not a failure to talk to it.
func IsWorkerError(err error) bool { return errors.As(err, new(*WorkerError)) }

// LostWorker is the error for a worker connection that failed mid-answer.
func LostWorker(addr string, err error) error {
	return pgerr.New(pgerr.ConnectionFailure, "lost connection to worker %s during a multi-shard query: %v", addr, err).
		WithHint("The query read nothing it could have changed; retry it.")
}

// Cycle reads a worker's answer up to its ReadyForQuery, handing every
// message but ParameterStatus and ReadyForQuery to each; it keeps the
// connection's parameters and transaction status. A failure to read
// marks the connection broken and returns LostWorker's error. This is the
// one loop the executor reads workers with.
func Cycle(sc *pooling.ServerConn, each func(typ byte, body []byte)) error {
	return CycleUntil(sc, func(typ byte, body []byte) error {
		each(typ, body)
		return nil
	})
}

// CycleUntil is Cycle where each may stop the reading with an error,
// which it returns: the connection is left mid-answer and marked broken.
func CycleUntil(sc *pooling.ServerConn, each func(typ byte, body []byte) error) error {
	for {
		f, err := sc.Next()
		if err != nil {
			sc.MarkBroken()
			return LostWorker(sc.Addr, err)
		}
		switch f.Type {
		case 'S':
			sc.NoteParameterStatus(f.Body)
		case 'Z':
			if len(f.Body) == 1 {
				sc.TxStatus = f.Body[0]
			}
			return nil
		default:
			if err := each(f.Type, f.Body); err != nil {
				sc.MarkBroken()
				return err
			}
		}
	}
}

// QueryText runs a simple query and returns its rows as text (nil: NULL).
// An error from the worker comes back as *WorkerError, with the
// connection ready for the next statement.
func QueryText(sc *pooling.ServerConn, sql string) ([][]*string, error) {
	q := pgproto3.Query{String: sql}
	b, _ := q.Encode(sc.Buf())
	sc.SetBuf(b)
	if err := sc.Flush(); err != nil {
		return nil, LostWorker(sc.Addr, err)
	}
	return ReadText(sc)
}

// ReadText reads the answer to a simple query sent on sc (see QueryText).
func ReadText(sc *pooling.ServerConn) ([][]*string, error) {
	var rows [][]*string
	var werr error
	err := Cycle(sc, func(typ byte, body []byte) {
		switch typ {
		case 'D':
			row, ok := TextRow(body)
			if !ok {
				if werr == nil {
					werr = pgerr.New(pgerr.Internal, "invalid DataRow from worker %s", sc.Addr)
				}
				return
			}
			rows = append(rows, row)
		case 'E':
			if werr == nil {
				werr = NewWorkerError(body)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, werr
	}
	return rows, nil
}

// TextRow is a DataRow body's values as text (nil: NULL); ok false when
// the body is not a DataRow's.
func TextRow(body []byte) (row []*string, ok bool) {
	var dr pgproto3.DataRow
	if dr.Decode(body) != nil {
		return nil, false
	}
	row = make([]*string, len(dr.Values))
	for i, v := range dr.Values {
		if v != nil {
			s := string(v)
			row[i] = &s
		}
	}
	return row, true
}

// ParamTail is the part of a Parse body after the query: parameter types.
func ParamTail(oids []uint32) []byte {
	b := make([]byte, 2, 2+4*len(oids))
	b[0], b[1] = byte(len(oids)>>8), byte(len(oids))
	for _, o := range oids {
		b = append(b, byte(o>>24), byte(o>>16), byte(o>>8), byte(o))
	}
	return b
}

// WorkerParamOID is the type a worker's statement that uses (or not) a
// parameter the client's statement has as oid is prepared with: a type
// that is not built in has another OID on each worker, so it is left for
// the worker to infer (0) when used, and is text, which takes any value,
// when not.
func WorkerParamOID(oid uint32, used bool) uint32 {
	switch {
	case oid < FirstNormalOID:
		return oid
	case used:
		return 0
	}
	return oidText
}

// SizeText is a byte count as people read it (64 MiB, 1000 bytes).
func SizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// FatalSeverity reports whether an ErrorResponse body is FATAL or PANIC:
// the worker closes the connection after it.
func FatalSeverity(body []byte) bool {
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil {
		return false
	}
	return er.SeverityUnlocalized == "FATAL" || er.SeverityUnlocalized == "PANIC" ||
		(er.SeverityUnlocalized == "" && (er.Severity == "FATAL" || er.Severity == "PANIC"))
}

const (
	oidInt4      = 23
	oidText      = 25
	oidInt4Array = 1007
	oidTextArray = 1009
)
