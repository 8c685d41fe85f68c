package coordinator

import "github.com/jackc/pgx/v5/pgproto3"

// Messages the coordinator composes itself are encoded by pgproto3 (its
// Encode appends to dst and fails only for values over the protocol's
// limits, which none of these can reach). Messages it relays are framed
// as they came (internal/wire).

// readyForQuery appends ReadyForQuery with the transaction status.
func readyForQuery(dst []byte, status byte) []byte {
	dst, _ = (&pgproto3.ReadyForQuery{TxStatus: status}).Encode(dst)
	return dst
}

// commandComplete appends CommandComplete with the tag.
func commandComplete(dst []byte, tag string) []byte {
	dst, _ = (&pgproto3.CommandComplete{CommandTag: []byte(tag)}).Encode(dst)
	return dst
}

// appendSync appends Sync; appendFlush appends Flush.
func appendSync(dst []byte) []byte {
	dst, _ = (&pgproto3.Sync{}).Encode(dst)
	return dst
}

func appendFlush(dst []byte) []byte {
	dst, _ = (&pgproto3.Flush{}).Encode(dst)
	return dst
}

// appendRun appends Parse of query as the unnamed statement (parameter
// types oids), Bind of the unnamed portal with no parameters, and Execute
// of it: a statement the coordinator runs on a worker connection itself.
func appendRun(dst []byte, query string, oids []uint32) []byte {
	dst, _ = (&pgproto3.Parse{Query: query, ParameterOIDs: oids}).Encode(dst)
	dst, _ = (&pgproto3.Bind{}).Encode(dst)
	dst, _ = (&pgproto3.Execute{}).Encode(dst)
	return dst
}

// appendExecute appends Execute of the unnamed portal, with no row limit.
func appendExecute(dst []byte) []byte {
	dst, _ = (&pgproto3.Execute{}).Encode(dst)
	return dst
}

// appendQuery appends a simple Query.
func appendQuery(dst []byte, sql string) []byte {
	dst, _ = (&pgproto3.Query{String: sql}).Encode(dst)
	return dst
}
