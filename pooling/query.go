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
	return c.QueryRelay(sql, deadline, nil)
}

// QueryRelay is Query on a connection a client's session holds: relay
// (when not nil) gets the ParameterStatus, NoticeResponse and
// NotificationResponse ('A', a LISTEN's) messages that come meanwhile, for
// the client.
func (c *ServerConn) QueryRelay(sql string, deadline time.Time, relay func(typ byte, body []byte)) ([][]string, error) {
	var rows [][]string
	err := c.run(sql, deadline, relay, nil, func(body []byte) {
		var dr pgproto3.DataRow
		if dr.Decode(body) == nil {
			row := make([]string, len(dr.Values))
			for i, v := range dr.Values {
				row[i] = string(v)
			}
			rows = append(rows, row)
		}
	})
	return rows, err
}

// ExecTag runs sql as Exec does and returns the command tag of its last
// statement; when relay is not nil it gets the ParameterStatus ('S'),
// NoticeResponse ('N') and NotificationResponse ('A') messages, for a
// client.
func (c *ServerConn) ExecTag(sql string, deadline time.Time, relay func(typ byte, body []byte)) (string, error) {
	var tag string
	err := c.run(sql, deadline, relay, &tag, nil)
	return tag, err
}

// run sends sql as a simple query and reads the answer up to ReadyForQuery:
// rows go to onRow (if any), ParameterStatus is noted (and passed, with
// notices, to relay), the last command tag to tag (if not nil), a COPY FROM
// STDIN is refused. It returns the first error the server reported, or the
// connection's error.
func (c *ServerConn) run(sql string, deadline time.Time, relay func(typ byte, body []byte), tag *string, onRow func(body []byte)) error {
	q := pgproto3.Query{String: sql}
	c.wbuf, _ = q.Encode(c.wbuf)
	return c.await(deadline, relay, tag, onRow)
}

// await sends what is buffered and reads the answer up to ReadyForQuery,
// as run describes.
func (c *ServerConn) await(deadline time.Time, relay func(typ byte, body []byte), tag *string, onRow func(body []byte)) error {
	_ = c.conn.SetDeadline(deadline)
	defer func() { _ = c.conn.SetDeadline(time.Time{}) }()
	if err := c.Flush(); err != nil {
		return err
	}
	var first error
	for {
		f, err := c.Next()
		if err != nil {
			return err
		}
		switch f.Type {
		case 'D':
			if onRow != nil {
				onRow(f.Body)
			}
		case 'C':
			if tag != nil && len(f.Body) > 0 {
				*tag = string(f.Body[:len(f.Body)-1])
			}
		case 'E':
			if first == nil {
				var er pgproto3.ErrorResponse
				_ = er.Decode(f.Body)
				first = pgconn.ErrorResponseToPgError(&er) // every field: constraint, table, ...
			}
		case 'S':
			c.NoteParameterStatus(f.Body)
			if relay != nil {
				relay('S', f.Body)
			}
		case 'N', 'A':
			if relay != nil {
				relay(f.Type, f.Body)
			}
		case 'G': // COPY FROM STDIN in an internal statement: refuse it.
			fail := pgproto3.CopyFail{Message: "pgfleet internal statement"}
			c.wbuf, _ = fail.Encode(c.wbuf)
			if err := c.Flush(); err != nil {
				return err
			}
		case 'Z':
			c.TxStatus = f.Body[0]
			return first
		}
	}
}

// Stmt is a statement with its parameters, in text format, for ExecParams.
type Stmt struct {
	SQL  string
	Args []string
}

// ExecParams runs stmts in one round trip of the extended protocol (the
// unnamed statement and portal, text parameters, one Sync), so that the
// parameters appear in no statement text (pg_stat_activity shows $1). It
// returns the command tag of the last statement that ran and the first
// error the server reported; after an error the server skips the rest.
func (c *ServerConn) ExecParams(stmts []Stmt, deadline time.Time) (string, error) {
	b := c.wbuf
	for _, s := range stmts {
		b, _ = (&pgproto3.Parse{Query: s.SQL}).Encode(b)
		params := make([][]byte, len(s.Args))
		for i, a := range s.Args {
			params[i] = []byte(a)
		}
		b, _ = (&pgproto3.Bind{Parameters: params}).Encode(b)
		b, _ = (&pgproto3.Execute{}).Encode(b)
	}
	c.wbuf, _ = (&pgproto3.Sync{}).Encode(b)
	var tag string
	err := c.await(deadline, nil, &tag, nil)
	return tag, err
}
