package coordinator

import (
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/internal/wire"
	"github.com/pgfleet/pgfleet/planner"
)

// Statement is a distinct (query text, parameter types) pair, shared by every
// session that prepares it. Server connections prepare it under Name, so a
// client's own statement names never reach a worker and one client's Close
// cannot break another's.
type Statement struct {
	Name  string
	Query string
	parse []byte // the Parse frame that prepares it under Name
	cls   class
	// paramTail is the Parse body after the query: parameter count and types.
	paramTail []byte
	plan      atomic.Pointer[stmtPlan]
	// viewChk: whether the text names a view that may change session
	// state (stateviews.go), for the viewSet it was checked against.
	viewChk atomic.Pointer[viewCheck]
	// descs are the first RowDescription (nil row: NoData) clients were
	// given for the statement, per settings key (names resolve by
	// search_path); stale is set once the statement's result changed (a
	// table changed): every session holding it then gets 0A000, as on
	// PostgreSQL, and the registry forgets it, so that a new Parse of the
	// text makes a new statement.
	descs atomic.Pointer[[]stmtDesc]
	stale atomic.Bool
	// paramDesc: the parameter types of the first ParameterDescription a
	// client was given for the statement (the types PostgreSQL fixed for
	// it, which clients encode their values by).
	paramDesc atomic.Pointer[[]uint32]
	// prepared: a worker prepared it, or a shard statement of it, once; a
	// later failure of a shard statement's Parse does not undo the
	// client's statement.
	prepared atomic.Bool
	// epoch: the server's stmtEpoch when it was made (stmtRegistry.epoch).
	epoch int64
	// own: one session's, not interned (stmtRegistry.own).
	own bool
	// checked: a worker parsed its shard form at a client's Parse
	// (checkAtParse).
	checked atomic.Bool
	// bridgeable: whether it may be a statement the coordinator runs
	// itself over the extended protocol (bridge.go): 0 not known yet, 1
	// no, 2 maybe.
	bridgeable atomic.Int32
	// nparams: 1 + the number of parameters PostgreSQL gives the
	// statement (numParams); 0 until counted.
	nparams atomic.Int32
}

// numParams is the number of parameters PostgreSQL gives the statement:
// the types its Parse declared, or more when the text refers to a higher
// $n (parse analysis adds them).
func (st *Statement) numParams() int {
	if n := st.nparams.Load(); n > 0 {
		return int(n) - 1
	}
	n := planner.MaxParam(st.Query)
	if len(st.paramTail) >= 2 {
		n = max(n, int(binary.BigEndian.Uint16(st.paramTail)))
	}
	st.nparams.Store(int32(n) + 1)
	return n
}

// bindCountErr is PostgreSQL's check of a Bind's parameters against its
// statement, for a Bind the coordinator keeps instead of relaying
// (exec_bind_message: 08P01). name is the client's name for the
// statement. A Bind too short to read is left to bindResults.
func bindCountErr(st *Statement, name string, params []byte) error {
	if len(params) < 2 {
		return nil
	}
	nf := int(binary.BigEndian.Uint16(params))
	if len(params) < 2+2*nf+2 {
		return nil
	}
	np := int(binary.BigEndian.Uint16(params[2+2*nf:]))
	if nf > 1 && nf != np {
		return pgerr.New(pgerr.ProtocolViolation, "bind message has %d parameter formats but %d parameters", nf, np)
	}
	if want := st.numParams(); np != want {
		return pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d", np, name, want)
	}
	return nil
}

// stmtDesc is a statement's result description as clients were told it
// under one settings key.
type stmtDesc struct {
	key string
	row []byte
}

// maxDescKeys bounds the settings keys a statement remembers descriptions
// for; beyond them new keys are not checked.
const maxDescKeys = 16

// descFor returns the description clients were given under settings key,
// or nil.
func (st *Statement) descFor(key string) *stmtDesc {
	if l := st.descs.Load(); l != nil {
		for i := range *l {
			if (*l)[i].key == key {
				return &(*l)[i]
			}
		}
	}
	return nil
}

// addDesc records the description given under key, unless one is there.
func (st *Statement) addDesc(key string, row []byte) {
	for {
		old := st.descs.Load()
		var l []stmtDesc
		if old != nil {
			if len(*old) >= maxDescKeys {
				return
			}
			for _, d := range *old {
				if d.key == key {
					return
				}
			}
			l = append(l, *old...)
		}
		l = append(l, stmtDesc{key: key, row: append([]byte(nil), row...)})
		if st.descs.CompareAndSwap(old, &l) {
			return
		}
	}
}

// stmtRegistry interns statements coordinator-wide.
type stmtRegistry struct {
	mu   sync.RWMutex
	m    map[string]*Statement // key: Parse body after the statement name
	next uint64
	size int // bytes of the keys in m
	// epoch is the server's stmtEpoch: a statement interned before DDL
	// (here or anywhere in the fleet) is not given to a new Parse, which
	// PostgreSQL analyses with the tables as they are now (its parameter
	// types included); the sessions that prepared it keep it.
	epoch *atomic.Int64
}

// maxSharedStatement: a statement text longer than this is not shared
// between sessions (each Parse of it makes a new statement), so that the
// registry never keeps a large statement after its sessions let it go;
// maxRegistryBytes bounds the texts the registry keeps.
const (
	maxSharedStatement = 1 << 20
	maxRegistryBytes   = 64 << 20
)

// maxStatements bounds the registry; past it the registry starts afresh
// (names stay unique, so server connections' caches stay correct).
const maxStatements = 100_000

// epochNow is the statement epoch statements are interned under now.
func (r *stmtRegistry) epochNow() int64 {
	if r.epoch == nil {
		return 0
	}
	return r.epoch.Load()
}

// current reports whether a new Parse of st's text may be given st.
func (r *stmtRegistry) current(st *Statement) bool { return st.epoch == r.epochNow() }

// intern returns the statement for a Parse body's query and parameter types
// (the bytes after the statement name).
func (r *stmtRegistry) intern(rest []byte) *Statement {
	epoch := r.epochNow()
	r.mu.RLock()
	st := r.m[string(rest)]
	r.mu.RUnlock()
	if st != nil && st.epoch == epoch {
		return st
	}
	q, _, ok := wire.CString(rest)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st = r.m[string(rest)]; st != nil && st.epoch == epoch {
		return st
	}
	if st != nil {
		delete(r.m, string(rest))
		r.size -= len(rest)
	}
	if len(r.m) >= maxStatements || r.size+len(rest) > maxRegistryBytes {
		r.m, r.size = map[string]*Statement{}, 0
	}
	r.next++
	name := "pgfleet_" + strconv.FormatUint(r.next, 10)
	body := append(append([]byte(name), 0), rest...)
	st = &Statement{Name: name, Query: q, parse: wire.AppendFrame(nil, 'P', body), cls: classify(q),
		paramTail: append([]byte(nil), rest[len(q)+1:]...), epoch: epoch}
	if len(rest) <= maxSharedStatement {
		r.m[string(rest)] = st
		r.size += len(rest)
	}
	return st
}
