// Package fleet is the coordinators' membership, by gossip
// (hashicorp/memberlist): each coordinator advertises its client address,
// metrics address and the catalog version it holds; one that commits a
// catalog change tells every member at once, so that a member behind
// reloads without waiting for its poll; a cancel request that reaches a
// coordinator which did not issue the key goes to the one that did.
//
// The package knows no SQL: the coordinator gives it callbacks.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Member is a coordinator as the fleet sees it.
type Member struct {
	Name    string `json:"-"`
	Gossip  string `json:"-"`                 // its gossip address
	SQL     string `json:"sql"`               // where clients connect
	Metrics string `json:"metrics,omitempty"` // /metrics, /healthz, /readyz
	Catalog int64  `json:"catalog"`           // the catalog version it holds
	Tag     uint8  `json:"tag"`               // the tag in its cancel keys
	Lease   string `json:"lease,omitempty"`   // its process's lease on connection shares
	// Shares are its shares of the workers' connection budgets, by
	// worker, as of its last renewal.
	Shares map[string]int `json:"shares,omitempty"`
}

// metaVersion is the version of the member metadata's encoding; a member
// whose metadata has another is listed without it.
const metaVersion = 1

type meta struct {
	V int `json:"v"`
	Member
}

// Messages between members: a version byte, a type byte, the payload.
const (
	msgVersion  = 1
	msgCatalog  = 'c' // payload: the version, int64; the sender's clock when it sent, Unix ns, int64 (absent from older members)
	msgCancel   = 'x' // payload: pid uint32, secret 4 bytes
	msgFence    = 'f' // payload: id uint64, token uint64, lease ms uint32, sender name (len uint16), table
	msgFenceAck = 'k' // payload: id uint64, the acknowledging member's name
	msgUnfence  = 'u' // payload: token uint64, done byte, table
	msgLogins   = 'l' // payload: id uint64, sender name (len uint16); acknowledged as a fence is
)

// Config is a member's configuration.
type Config struct {
	// Name is unique in the fleet; empty: host and a random suffix.
	Name string
	// Bind is the gossip address (TCP and UDP), host:port; port 0 picks a
	// free one. Advertise, when set, is the address others reach it on.
	Bind      string
	Advertise string
	// Join are members to join through (any one is enough).
	Join []string
	// SQL and Metrics are advertised to the others.
	SQL, Metrics string
	// Catalog is the catalog version held at start.
	Catalog int64
	// OnCatalog is called (on a goroutine of the package's) when a member
	// holds a newer catalog version than this one announced last; sent is
	// when the member that committed it announced it (its clock), zero when
	// this member learned of it otherwise (from gossiped metadata).
	OnCatalog func(version int64, sent time.Time)
	// OnCancel is called with a cancel request forwarded by a member.
	OnCancel func(pid uint32, secret []byte)
	// OnFence is called (before the fence is acknowledged) when a member
	// is about to move a table's rows: statements on it are to be refused
	// until OnUnfence with the same token (done: the move committed, and
	// the catalog is to be reloaded first; else it was given up), for
	// lease at most (the mover renews it).
	//
	// OnFence may return a wait, which runs (on a goroutine of its own)
	// before the acknowledgement instead: the fence is in place when
	// OnFence returns, so an unfence that follows finds it.
	OnFence   func(table string, token uint64, lease time.Duration) (wait func())
	OnUnfence func(table string, token uint64, done bool)
	// OnLogins is called (before the message is acknowledged) when a
	// member changed what a login gets: a role's or database's settings
	// or privileges (Logins).
	OnLogins func()
	// OnMembers is called (on a goroutine of memberlist's; it must not
	// block) when a member joins or leaves.
	OnMembers func()
	// OnDeparted is called (likewise) with a member that left or that
	// failure detection declared dead.
	OnDeparted func(Member)
	// Lease is advertised as this member's Lease.
	Lease string
	// Local: loopback timings (faster failure detection), for tests and
	// the demo.
	Local  bool
	Logger *slog.Logger
}

// Fleet is this coordinator's membership.
type Fleet struct {
	cfg     Config
	ml      *memberlist.Memberlist
	mu      sync.Mutex
	self    Member
	dropped atomic.Int64 // undecodable messages and metadata
	sent    atomic.Int64 // messages sent
	bytes   atomic.Int64 // bytes sent, memberlist's own traffic included
	left    sync.Once
	fences  map[uint64]*fenceWait // by id, under mu: Fence and Logins waiting
	nextID  atomic.Uint64
}

// fenceWait is a Fence or Logins waiting for the members' acknowledgements.
type fenceWait struct {
	want map[string]bool // members not acknowledged yet
	done chan struct{}   // closed when want is empty
}

// Start joins the fleet (or starts one when Join is empty or none of its
// members answers: it is logged, and others may join this one).
func Start(cfg Config) (*Fleet, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	host, port, err := net.SplitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("gossip address %q: %w", cfg.Bind, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("gossip address %q: %w", cfg.Bind, err)
	}
	mc := memberlist.DefaultLANConfig()
	if cfg.Local {
		mc = memberlist.DefaultLocalConfig()
	}
	if cfg.Name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		mc.Name = fmt.Sprintf("%s-%x", mc.Name, b)
	} else {
		mc.Name = cfg.Name
	}
	mc.BindAddr, mc.BindPort = host, p
	mc.AdvertisePort = p
	if cfg.Advertise != "" {
		ah, ap, err := net.SplitHostPort(cfg.Advertise)
		if err != nil {
			return nil, fmt.Errorf("gossip advertise address %q: %w", cfg.Advertise, err)
		}
		mc.AdvertiseAddr = ah
		if mc.AdvertisePort, err = strconv.Atoi(ap); err != nil {
			return nil, fmt.Errorf("gossip advertise address %q: %w", cfg.Advertise, err)
		}
	}
	mc.Logger = log.New(slogWriter{cfg.Logger}, "", 0)
	f := &Fleet{cfg: cfg}
	tr, bound, err := newTransport(host, p, mc.Logger, &f.bytes)
	if err != nil {
		return nil, fmt.Errorf("starting gossip on %s: %w", cfg.Bind, err)
	}
	mc.Transport, mc.BindPort = tr, bound
	if cfg.Advertise == "" {
		mc.AdvertisePort = bound
	}
	f.self = Member{Name: mc.Name, SQL: cfg.SQL, Metrics: cfg.Metrics, Catalog: cfg.Catalog, Tag: TagOf(mc.Name), Lease: cfg.Lease}
	mc.Delegate = delegate{f}
	mc.Events = events{f}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("starting gossip on %s: %w", cfg.Bind, err)
	}
	f.ml = ml
	if len(cfg.Join) > 0 {
		if _, err := ml.Join(cfg.Join); err != nil {
			cfg.Logger.Warn("joining the fleet: none of the members answered; running alone until one joins this one", "join", cfg.Join, "err", err)
		}
	}
	return f, nil
}

// TagOf is the tag a member of that name puts in its cancel keys.
func TagOf(name string) uint8 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return uint8(h.Sum32())
}

// Tag is this member's cancel-key tag.
func (f *Fleet) Tag() uint8 { return f.self.Tag }

// Addr is this member's gossip address.
func (f *Fleet) Addr() string {
	n := f.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Members are the live members, this one included.
func (f *Fleet) Members() []Member {
	var out []Member
	for _, n := range f.ml.Members() {
		m, ok := f.member(n)
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// Dropped counts undecodable messages and metadata from members.
func (f *Fleet) Dropped() int64 { return f.dropped.Load() }

// Sent counts the messages this member sent to others.
func (f *Fleet) Sent() int64 { return f.sent.Load() }

// BytesSent counts the bytes this member sent to others: memberlist's
// probes, gossip and state exchanges, and this package's messages.
func (f *Fleet) BytesSent() int64 { return f.bytes.Load() }

func (f *Fleet) member(n *memberlist.Node) (Member, bool) {
	var m meta
	if err := json.Unmarshal(n.Meta, &m); err != nil || m.V != metaVersion {
		f.dropped.Add(1)
		return Member{}, false
	}
	m.Member.Name = n.Name
	m.Member.Gossip = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	return m.Member, true
}

// Announce tells every member that this one holds catalog version v (a
// change it committed): each is sent a message at once, and the version
// goes into this member's metadata, which gossip spreads to any that
// missed the message.
func (f *Fleet) Announce(v int64) {
	f.mu.Lock()
	if v <= f.self.Catalog {
		f.mu.Unlock()
		return
	}
	f.self.Catalog = v
	f.mu.Unlock()
	msg := binary.BigEndian.AppendUint64([]byte{msgVersion, msgCatalog}, uint64(v))
	msg = binary.BigEndian.AppendUint64(msg, uint64(time.Now().UnixNano()))
	f.toOthers(func(*memberlist.Node) bool { return true }, msg)
	go func() { _ = f.ml.UpdateNode(time.Second) }()
}

// Held records the catalog version this member loaded (from a poll or a
// message), for its metadata.
func (f *Fleet) Held(v int64) {
	f.mu.Lock()
	changed := v > f.self.Catalog
	if changed {
		f.self.Catalog = v
	}
	f.mu.Unlock()
	if changed {
		go func() { _ = f.ml.UpdateNode(time.Second) }()
	}
}

// SetShares records this member's connection shares, for its metadata.
func (f *Fleet) SetShares(shares map[string]int) {
	f.mu.Lock()
	changed := !maps.Equal(shares, f.self.Shares)
	if changed {
		f.self.Shares = maps.Clone(shares)
	}
	f.mu.Unlock()
	if changed {
		go func() { _ = f.ml.UpdateNode(time.Second) }()
	}
}

// Cancel forwards a cancel request whose key carries another member's tag
// to the members with that tag (usually one; the secret decides). It
// reports whether any was sent to.
func (f *Fleet) Cancel(tag uint8, pid uint32, secret []byte) bool {
	if len(secret) != 4 {
		return false
	}
	msg := binary.BigEndian.AppendUint32([]byte{msgVersion, msgCancel}, pid)
	msg = append(msg, secret...)
	return f.toOthers(func(n *memberlist.Node) bool { return TagOf(n.Name) == tag }, msg) > 0
}

// toOthers sends msg reliably (TCP) to the other live members that pass
// want, all at once, and returns how many it sent to.
func (f *Fleet) toOthers(want func(*memberlist.Node) bool, msg []byte) int {
	self := f.ml.LocalNode().Name
	var wg sync.WaitGroup
	sent := 0
	for _, n := range f.ml.Members() {
		if n.Name == self || !want(n) {
			continue
		}
		sent++
		wg.Add(1)
		go func(n *memberlist.Node) {
			defer wg.Done()
			if err := f.ml.SendReliable(n, msg); err != nil {
				f.cfg.Logger.Warn("gossip: sending to a member", "member", n.Name, "err", err)
				return
			}
			f.sent.Add(1)
		}(n)
	}
	wg.Wait()
	return sent
}

// Fence asks every other live member to refuse statements on table (its
// name as the statement may write it: the relation name alone will do)
// until it holds a catalog that has the table, or for lease, and waits
// until each has confirmed, or has left the fleet. A member that neither
// confirms nor leaves before ctx ends fails the fence: the caller must not
// move the table's rows then (and should Unfence).
func (f *Fleet) Fence(ctx context.Context, table string, token uint64, lease time.Duration) error {
	return f.ask(ctx, func(id uint64, self string) []byte {
		msg := binary.BigEndian.AppendUint64([]byte{msgVersion, msgFence}, id)
		msg = binary.BigEndian.AppendUint64(msg, token)
		msg = binary.BigEndian.AppendUint32(msg, uint32(lease/time.Millisecond))
		msg = binary.BigEndian.AppendUint16(msg, uint16(len(self)))
		return append(append(msg, self...), table...)
	})
}

// Logins tells every other live member that what a login gets changed
// (ALTER ROLE ... SET, NOLOGIN, REVOKE CONNECT, ...: PostgreSQL applies
// those at login), and waits until each has called its OnLogins, or has
// left the fleet, or ctx ends (an error naming the members that did not
// confirm).
func (f *Fleet) Logins(ctx context.Context) error {
	return f.ask(ctx, func(id uint64, self string) []byte {
		msg := binary.BigEndian.AppendUint64([]byte{msgVersion, msgLogins}, id)
		msg = binary.BigEndian.AppendUint16(msg, uint16(len(self)))
		return append(msg, self...)
	})
}

// ask sends every other live member the message build makes for a new id
// and this member's name, and waits until each has acknowledged the id
// (msgFenceAck), or has left the fleet, or ctx ends.
func (f *Fleet) ask(ctx context.Context, build func(id uint64, self string) []byte) error {
	id := f.nextID.Add(1)
	self := f.ml.LocalNode().Name
	msg := build(id, self)
	w := &fenceWait{want: map[string]bool{}, done: make(chan struct{})}
	for _, n := range f.ml.Members() {
		if n.Name != self {
			w.want[n.Name] = true
		}
	}
	if len(w.want) == 0 {
		return nil
	}
	f.mu.Lock()
	if f.fences == nil {
		f.fences = map[uint64]*fenceWait{}
	}
	f.fences[id] = w
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.fences, id)
		f.mu.Unlock()
	}()
	f.toOthers(func(n *memberlist.Node) bool { return true }, msg)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.done:
			return nil
		case <-tick.C:
			// A member that left (or was found dead) is not waited for.
			alive := map[string]bool{}
			for _, n := range f.ml.Members() {
				alive[n.Name] = true
			}
			f.mu.Lock()
			for name := range w.want {
				if !alive[name] {
					delete(w.want, name)
				}
			}
			empty := len(w.want) == 0
			f.mu.Unlock()
			if empty {
				return nil
			}
		case <-ctx.Done():
			f.mu.Lock()
			var missing []string
			for name := range w.want {
				missing = append(missing, name)
			}
			f.mu.Unlock()
			return fmt.Errorf("coordinators %v of the fleet did not confirm within the time allowed", missing)
		}
	}
}

// Unfence lifts the fence token of table on every other member: the move
// is done (they reload the catalog first) or was given up.
func (f *Fleet) Unfence(table string, token uint64, done bool) {
	msg := binary.BigEndian.AppendUint64([]byte{msgVersion, msgUnfence}, token)
	b := byte(0)
	if done {
		b = 1
	}
	msg = append(append(msg, b), table...)
	f.toOthers(func(*memberlist.Node) bool { return true }, msg)
}

// fenced handles a member's fence: OnFence, then the acknowledgement.
func (f *Fleet) fenced(p []byte) {
	if len(p) < 22 {
		f.dropped.Add(1)
		return
	}
	id, token := binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])
	lease := time.Duration(binary.BigEndian.Uint32(p[16:])) * time.Millisecond
	nl := int(binary.BigEndian.Uint16(p[20:]))
	if len(p) < 22+nl {
		f.dropped.Add(1)
		return
	}
	sender, table := string(p[22:22+nl]), string(p[22+nl:])
	var wait func()
	if f.cfg.OnFence != nil {
		wait = f.cfg.OnFence(table, token, lease)
	}
	if wait == nil {
		f.ack(id, sender)
		return
	}
	go func() {
		wait()
		f.ack(id, sender)
	}()
}

// loginsChanged handles a member's Logins: OnLogins, then the
// acknowledgement.
func (f *Fleet) loginsChanged(p []byte) {
	if len(p) < 10 || len(p) != 10+int(binary.BigEndian.Uint16(p[8:])) {
		f.dropped.Add(1)
		return
	}
	if f.cfg.OnLogins != nil {
		f.cfg.OnLogins()
	}
	f.ack(binary.BigEndian.Uint64(p), string(p[10:]))
}

// ack acknowledges message id to its sender.
func (f *Fleet) ack(id uint64, sender string) {
	ack := binary.BigEndian.AppendUint64([]byte{msgVersion, msgFenceAck}, id)
	ack = append(ack, f.ml.LocalNode().Name...)
	go f.toOthers(func(n *memberlist.Node) bool { return n.Name == sender }, ack)
}

// acked handles a member's acknowledgement of a fence or of Logins.
func (f *Fleet) acked(p []byte) {
	if len(p) < 8 {
		f.dropped.Add(1)
		return
	}
	id, name := binary.BigEndian.Uint64(p), string(p[8:])
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.fences[id]; w != nil && w.want[name] {
		delete(w.want, name)
		if len(w.want) == 0 {
			close(w.done)
		}
	}
}

// Leave tells the fleet this member is going, then stops gossip (once).
func (f *Fleet) Leave(timeout time.Duration) {
	f.left.Do(func() {
		_ = f.ml.Leave(timeout)
		_ = f.ml.Shutdown()
	})
}

// handle is a message from a member.
func (f *Fleet) handle(b []byte) {
	if len(b) < 2 || b[0] != msgVersion {
		f.dropped.Add(1)
		return
	}
	switch p := b[2:]; b[1] {
	case msgCatalog:
		var sent time.Time
		switch len(p) {
		case 16:
			sent = time.Unix(0, int64(binary.BigEndian.Uint64(p[8:])))
		case 8:
		default:
			f.dropped.Add(1)
			return
		}
		f.behind(int64(binary.BigEndian.Uint64(p)), sent)
	case msgCancel:
		if len(p) != 8 {
			f.dropped.Add(1)
			return
		}
		if f.cfg.OnCancel != nil {
			f.cfg.OnCancel(binary.BigEndian.Uint32(p), append([]byte(nil), p[4:]...))
		}
	case msgFence:
		f.fenced(p)
	case msgFenceAck:
		f.acked(p)
	case msgLogins:
		f.loginsChanged(p)
	case msgUnfence:
		if len(p) < 9 {
			f.dropped.Add(1)
			return
		}
		if f.cfg.OnUnfence != nil {
			f.cfg.OnUnfence(string(p[9:]), binary.BigEndian.Uint64(p), p[8] == 1)
		}
	default:
		f.dropped.Add(1)
	}
}

// behind calls OnCatalog when a member holds a newer version than this one.
func (f *Fleet) behind(v int64, sent time.Time) {
	f.mu.Lock()
	newer := v > f.self.Catalog
	f.mu.Unlock()
	if newer && f.cfg.OnCatalog != nil {
		go f.cfg.OnCatalog(v, sent)
	}
}

type delegate struct{ f *Fleet }

func (d delegate) NodeMeta(limit int) []byte {
	d.f.mu.Lock()
	b, _ := json.Marshal(meta{V: metaVersion, Member: d.f.self})
	d.f.mu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}

func (d delegate) NotifyMsg(b []byte)                         { d.f.handle(b) }
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState and MergeRemoteState carry nothing: the metadata has the
// catalog version, and push/pull spreads it.
func (d delegate) LocalState(join bool) []byte            { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool) {}

type events struct{ f *Fleet }

func (e events) NotifyJoin(n *memberlist.Node) {
	e.seen(n)
	e.members()
}
func (e events) NotifyUpdate(n *memberlist.Node) { e.seen(n) }
func (e events) NotifyLeave(n *memberlist.Node) {
	if f := e.f.cfg.OnDeparted; f != nil && n.Name != e.f.self.Name {
		if m, ok := e.f.member(n); ok {
			f(m)
		}
	}
	e.members()
}

func (e events) members() {
	if f := e.f.cfg.OnMembers; f != nil {
		f()
	}
}

func (e events) seen(n *memberlist.Node) {
	if n.Name == e.f.self.Name {
		return
	}
	if m, ok := e.f.member(n); ok {
		e.f.behind(m.Catalog, time.Time{})
	}
}

// slogWriter passes memberlist's log lines to slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(b []byte) (int, error) {
	w.l.Debug("gossip", "msg", string(trimNL(b)))
	return len(b), nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return b
}
