package pooling

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Query runs a simple-protocol query to completion and returns its rows as
// text (a NULL is ""), and the first error the server reported. It is for
// the coordinator's own small questions on rare paths (a transaction's
// characteristics, the session's settings), not for client statements.
func (c *ServerConn) Query(sql string, deadline time.Time) ([][]string, error) {
	q := pgproto3.Query{String: sql}
	b, _ := q.Encode(c.wbuf)
	c.wbuf = b
	_ = c.conn.SetDeadline(deadline)
	defer func() { _ = c.conn.SetDeadline(time.Time{}) }()
	if err := c.Flush(); err != nil {
		return nil, err
	}
	var rows [][]string
	var first error
	for {
		f, err := c.Next()
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case 'D':
			var dr pgproto3.DataRow
			if dr.Decode(f.Body) == nil {
				row := make([]string, len(dr.Values))
				for i, v := range dr.Values {
					row[i] = string(v)
				}
				rows = append(rows, row)
			}
		case 'E':
			if first == nil {
				var er pgproto3.ErrorResponse
				_ = er.Decode(f.Body)
				first = &pgconn.PgError{Severity: er.Severity, Code: er.Code, Message: er.Message,
					Detail: er.Detail, Hint: er.Hint}
			}
		case 'S':
			c.NoteParameterStatus(f.Body)
		case 'G':
			fail := pgproto3.CopyFail{Message: "pgfleet internal statement"}
			c.wbuf, _ = fail.Encode(c.wbuf)
			if err := c.Flush(); err != nil {
				return nil, err
			}
		case 'Z':
			c.TxStatus = f.Body[0]
			return rows, first
		}
	}
}
