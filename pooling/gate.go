package pooling

import (
	"context"
	"sync"
	"sync/atomic"
)

// Gate bounds the server connections this coordinator holds to one worker
// across all its pools there (every database and user): its share of the
// worker's fleet-wide connection budget. The cap moves at run time: raised,
// pools may open more; lowered, idle connections above it are closed at
// once and busy ones when they are released, and no pool opens one until
// the count is under the cap again. A pool's own Size still bounds it too.
//
// A nil *Gate admits everything.
type Gate struct {
	cap  atomic.Int64
	open atomic.Int64 // connections open or being dialled, all pools
	// ceil bounds the connections opened for clients that hold a
	// connection to another worker (class > 0), at or above cap: when the
	// share shrinks below what busy clients hold, those clients (whose
	// transactions free connections on every worker when they end) still
	// get one, within what the coordinator recorded (Hold). Negative: none.
	ceil atomic.Int64
	// capMu orders opening a slot against Hold's reading of the count.
	capMu sync.Mutex
	// waiting counts the checkouts waiting in every pool of the gate.
	waiting atomic.Int64
	// epoch advances at each Fence: a connection dialled from before it is
	// closed before use (its slot predates the fence).
	epoch atomic.Int64

	// Record, when set, is called with the backend of every new
	// connection before it is used; an error closes it and fails the
	// checkout (the coordinator records its backends where the others can
	// end them).
	Record func(ctx context.Context, pid uint32) error
	// BeforeDial, when set, is called before a new connection is dialled;
	// an error gives the slot back and fails the checkout (the coordinator
	// opens no connection while it does not know its lease is current).
	BeforeDial func(ctx context.Context) error

	mu    sync.Mutex
	pools []*Pool
}

// NewGate makes a gate with the given cap (negative: no cap).
func NewGate(cap int) *Gate {
	g := &Gate{}
	g.cap.Store(int64(cap))
	g.ceil.Store(int64(cap))
	return g
}

// Cap is the gate's cap (negative: none).
func (g *Gate) Cap() int {
	if g == nil {
		return -1
	}
	return int(g.cap.Load())
}

// Epoch counts the gate's fences.
func (g *Gate) Epoch() int64 {
	if g == nil {
		return 0
	}
	return g.epoch.Load()
}

// Open is the count of connections open or being dialled through the gate.
func (g *Gate) Open() int {
	if g == nil {
		return 0
	}
	return int(g.open.Load())
}

// SetCap moves the cap. Lowered, idle connections of the gate's pools are
// closed (in the background) until the count is at the cap (busy ones
// close on release);
// raised, pools with waiters are served.
func (g *Gate) SetCap(n int) {
	old := g.cap.Swap(int64(n))
	pools := g.poolList()
	if n >= 0 && (old < 0 || int64(n) < old) {
		excess := int(g.open.Load()) - n
		for _, p := range pools {
			if excess <= 0 {
				break
			}
			excess -= p.trimIdle(excess)
		}
		return
	}
	for _, p := range pools {
		p.wake()
	}
}

// Fence closes every connection of the gate's pools, the busy ones too
// (their sessions see the worker gone: 08006), and sets the cap to 0: what
// a coordinator that lost its share's lease does before the others may take
// the share.
func (g *Gate) Fence() {
	g.epoch.Add(1)
	g.capMu.Lock()
	g.cap.Store(0)
	g.ceil.Store(0)
	g.capMu.Unlock()
	for _, p := range g.poolList() {
		p.closeAll()
	}
}

func (g *Gate) poolList() []*Pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Pool(nil), g.pools...)
}

func (g *Gate) add(p *Pool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.pools = append(g.pools, p)
	g.mu.Unlock()
}

// tryOpen takes a slot for a new connection for a client of class (the
// connections it holds to other workers) if the cap allows, or for class
// > 0 the ceiling.
func (g *Gate) tryOpen(class int) bool {
	if g == nil {
		return true
	}
	g.capMu.Lock()
	defer g.capMu.Unlock()
	n, c := g.open.Load(), g.cap.Load()
	if e := g.ceil.Load(); class > 0 && c >= 0 && e > c {
		c = e
	}
	if c >= 0 && n >= c {
		return false
	}
	g.open.Add(1)
	return true
}

// Ceil is the gate's ceiling (negative: none).
func (g *Gate) Ceil() int {
	if g == nil {
		return -1
	}
	return int(g.ceil.Load())
}

// Hold lowers the cap to share if it is above and returns what the
// coordinator must record as its share of the worker: at least share and
// every connection open, and while more is open than share, room for
// reserve more connections for clients holding connections elsewhere, but
// never above the ceiling; the ceiling becomes that. A ceiling raised by a larger share is the caller's
// to raise (Raise) once the share is recorded.
func (g *Gate) Hold(share, reserve int) int {
	if g.Cap() > share {
		g.SetCap(share)
	}
	g.capMu.Lock()
	defer g.capMu.Unlock()
	// The reserve is kept only while more is open than the share: at or
	// under it, the pools' own reserve (a class 0 client leaves the last
	// slot of a pool) serves such clients, and the record is the share,
	// so that shares converge to the fair ones under load.
	rec := int64(share)
	if open := g.open.Load(); open > rec {
		rec = open + int64(reserve)
		if e := g.ceil.Load(); e >= 0 {
			rec = max(int64(share), min(rec, e))
		}
	}
	g.ceil.Store(rec)
	return int(rec)
}

// Raise moves the cap and the ceiling up to share (a share recorded).
func (g *Gate) Raise(share int) {
	g.capMu.Lock()
	if g.ceil.Load() < int64(share) {
		g.ceil.Store(int64(share))
	}
	g.capMu.Unlock()
	if g.Cap() < share {
		g.SetCap(share)
	}
}

// starving reports whether the gate is full and pools other than p have
// checkouts waiting (two atomic loads when they do not). Called with p's
// mu held.
func (g *Gate) starving(p *Pool) bool {
	if g == nil || g.waiting.Load() <= int64(p.nwait.Load()) {
		return false
	}
	c := g.cap.Load()
	return c >= 0 && g.open.Load() >= c
}

// over reports whether the gate holds more connections than its cap.
func (g *Gate) over() bool {
	if g == nil {
		return false
	}
	c := g.cap.Load()
	return c >= 0 && g.open.Load() > c
}

// closed gives a slot back and serves the pools waiting for one (except
// from, whose lock the caller may hold and which serves itself).
func (g *Gate) closed(from *Pool) {
	if g == nil {
		return
	}
	g.open.Add(-1)
	for _, p := range g.poolList() {
		if p != from {
			p.wakeAsync()
		}
	}
}

// evictIdle closes one idle connection of a pool other than p, making room
// under the cap for p. It reports whether it closed one.
func (g *Gate) evictIdle(p *Pool) bool {
	if g == nil {
		return false
	}
	for _, q := range g.poolList() {
		if q != p && q.dropOneIdle() {
			return true
		}
	}
	return false
}

// PIDs are the backend process ids of the gate's connections.
func (g *Gate) PIDs() []int32 {
	if g == nil {
		return nil
	}
	var pids []int32
	for _, p := range g.poolList() {
		p.mu.Lock()
		for c := range p.conns {
			pids = append(pids, int32(c.PID))
		}
		p.mu.Unlock()
	}
	return pids
}
