package coordinator

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/internal/pgerr"
)

// SHOW POOLS answers, as PgBouncer's admin console does, with this
// coordinator's pools: one row per worker, database and user, with the
// connections open there, checked out and idle, the checkouts waiting, the
// pool's size and the coordinator's share of the worker's connection
// budget (NULL when the fleet-wide budget is off). Like PgBouncer's console
// it is answered over the simple query protocol only. PostgreSQL has no
// setting named pools, so the statement means nothing else.

var showPoolsColumns = []string{"worker", "database", "user", "sv_active", "sv_idle", "cl_waiting", "pool_size", "share", "pool_mode"}

// showPools writes SHOW POOLS's answer and ReadyForQuery.
func (ss *session) showPools() error {
	s := ss.srv
	type row struct {
		k                     poolKey
		open, busy, wait, max int
	}
	var rows []row
	s.mu.Lock()
	for k, p := range s.pools {
		open, busy, waiting := p.Stats()
		rows = append(rows, row{k: k, open: open, busy: busy, wait: waiting, max: p.Config().Size})
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.k.worker, b.k.worker), cmp.Compare(a.k.database, b.k.database), cmp.Compare(a.k.user, b.k.user))
	})
	rd := pgproto3.RowDescription{}
	for i, c := range showPoolsColumns {
		oid := uint32(25) // text
		if i >= 3 && i <= 7 {
			oid = 23 // int4
		}
		rd.Fields = append(rd.Fields, pgproto3.FieldDescription{Name: []byte(c), DataTypeOID: oid, DataTypeSize: -1, TypeModifier: -1})
	}
	ss.out, _ = rd.Encode(ss.out)
	num := func(n int) []byte { return strconv.AppendInt(nil, int64(n), 10) }
	for _, r := range rows {
		var share []byte // NULL: no budget
		s.gatesMu.Lock()
		if g := s.gates[r.k.worker]; g != nil && g.Cap() >= 0 {
			share = num(g.Cap())
		}
		s.gatesMu.Unlock()
		dr := pgproto3.DataRow{Values: [][]byte{[]byte(r.k.worker), []byte(r.k.database), []byte(r.k.user),
			num(r.busy), num(r.open - r.busy), num(r.wait), num(r.max), share, []byte("transaction")}}
		ss.out, _ = dr.Encode(ss.out)
	}
	ss.out, _ = (&pgproto3.CommandComplete{CommandTag: []byte("SHOW")}).Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// errShowPools refuses SHOW POOLS where the coordinator cannot answer it.
func errShowPools(what string) error {
	return pgerr.New(pgerr.FeatureNotSupported, "SHOW POOLS %s is not supported", what).
		WithHint("Send SHOW POOLS alone, as a simple query (in psql, as a plain statement), as PgBouncer's console takes it.")
}
