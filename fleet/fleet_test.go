package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// node is a member under test and what its callbacks saw.
type node struct {
	f       *Fleet
	mu      sync.Mutex
	catalog []int64
	sent    []time.Time // OnCatalog's sent, beside catalog
	cancels []string
	fences  []string
	logins  int           // OnLogins calls
	gone    []string      // OnDeparted's members: SQL address and lease
	hold    chan struct{} // when set, OnFence waits for it to close
}

func (n *node) seen() ([]int64, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.catalog), slices.Clone(n.cancels)
}

func start(t *testing.T, i int, join []string) *node {
	t.Helper()
	n := &node{}
	f, err := Start(Config{Name: fmt.Sprintf("c%d", i), Bind: "127.0.0.1:0", Join: join, Local: true, Lease: fmt.Sprintf("lease%d", i),
		OnDeparted: func(m Member) { n.mu.Lock(); n.gone = append(n.gone, m.SQL+" "+m.Lease); n.mu.Unlock() },
		SQL:        fmt.Sprintf("127.0.0.1:%d", 6000+i), Catalog: 1,
		OnCatalog: func(v int64, sent time.Time) {
			n.mu.Lock()
			n.catalog, n.sent = append(n.catalog, v), append(n.sent, sent)
			n.mu.Unlock()
		},
		OnCancel: func(pid uint32, secret []byte) {
			n.mu.Lock()
			n.cancels = append(n.cancels, fmt.Sprintf("%d/%x", pid, secret))
			n.mu.Unlock()
		},
		OnFence: func(table string, token uint64, lease time.Duration) func() {
			n.mu.Lock()
			n.fences = append(n.fences, fmt.Sprintf("+%s/%d/%v", table, token, lease))
			hold := n.hold
			n.mu.Unlock()
			if hold != nil {
				return func() { <-hold }
			}
			return nil
		},
		OnLogins: func() { n.mu.Lock(); n.logins++; n.mu.Unlock() },
		OnUnfence: func(table string, token uint64, done bool) {
			n.mu.Lock()
			n.fences = append(n.fences, fmt.Sprintf("-%s/%d/%v", table, token, done))
			n.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	n.f = f
	t.Cleanup(func() { f.Leave(time.Second) })
	return n
}

// eventually waits (bounded) for cond; the fleet's work is asynchronous.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFleet(t *testing.T) {
	a := start(t, 1, nil)
	b := start(t, 2, []string{a.f.Addr()})
	c := start(t, 3, []string{b.f.Addr()}) // through any member
	for _, n := range []*node{a, b, c} {
		eventually(t, "three members", func() bool { return len(n.f.Members()) == 3 })
	}
	var sqls []string
	for _, m := range c.f.Members() {
		sqls = append(sqls, m.SQL)
	}
	slices.Sort(sqls)
	if want := []string{"127.0.0.1:6001", "127.0.0.1:6002", "127.0.0.1:6003"}; !slices.Equal(sqls, want) {
		t.Errorf("members' SQL addresses %v, want %v", sqls, want)
	}

	// A catalog change announced by a: the others hear of it, with when a
	// sent it; a does not.
	sentBy := a.f.BytesSent()
	at0 := time.Now()
	a.f.Announce(7)
	// Gossip may bring a's metadata, version 7 in it, before the
	// message: that report has no send time (the zero time); the
	// message's, when it comes, has a's clock at sending.
	for _, n := range []*node{b, c} {
		var at time.Time
		eventually(t, "catalog 7 announced with its send time", func() bool {
			n.mu.Lock()
			defer n.mu.Unlock()
			for i, v := range n.catalog {
				if v == 7 && !n.sent[i].IsZero() {
					at = n.sent[i]
					return true
				}
			}
			return false
		})
		if at.Before(at0) || at.After(time.Now()) {
			t.Errorf("catalog 7 sent at %v, want between %v and now", at, at0)
		}
	}
	// Two messages of 18 bytes, in memberlist's framing.
	if got := a.f.BytesSent() - sentBy; got < 2*18 {
		t.Errorf("bytes sent announcing: %d, want at least 36", got)
	}
	if v, _ := a.seen(); slices.Contains(v, 7) {
		t.Errorf("the announcing member was told of its own version: %v", v)
	}
	// b loads it (Held): an announcement of an older version is not news.
	b.f.Held(7)
	before, _ := b.seen()
	a.f.Announce(5)
	c.f.Announce(6)
	time.Sleep(200 * time.Millisecond)
	if after, _ := b.seen(); len(after) != len(before) {
		t.Errorf("b, holding 7, was told of older versions: %v", after[len(before):])
	}

	// A cancel key of c's, received by a: forwarded to c only.
	if !a.f.Cancel(c.f.Tag(), 42, []byte{1, 2, 3, 4}) {
		t.Fatal("no member with c's tag")
	}
	eventually(t, "cancel forwarded", func() bool { _, x := c.seen(); return slices.Contains(x, "42/01020304") })
	if _, x := b.seen(); len(x) != 0 && b.f.Tag() != c.f.Tag() {
		t.Errorf("b got c's cancel: %v", x)
	}

	// A fence: every other member has it before Fence returns.
	if err := a.f.Fence(context.Background(), "accounts", 7, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{b, c} {
		n.mu.Lock()
		got := slices.Clone(n.fences)
		n.mu.Unlock()
		if !slices.Equal(got, []string{"+accounts/7/15s"}) {
			t.Errorf("fences seen: %v, want [+accounts/7/15s]", got)
		}
	}
	a.f.Unfence("accounts", 7, true)
	eventually(t, "unfenced", func() bool {
		n := b
		n.mu.Lock()
		defer n.mu.Unlock()
		return slices.Contains(n.fences, "-accounts/7/true")
	})
	// A member that does not confirm in time fails the fence.
	b.mu.Lock()
	b.hold = make(chan struct{})
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := a.f.Fence(ctx, "branches", 8, time.Second)
	cancel()
	close(b.hold)
	if err == nil || !strings.Contains(err.Error(), "c2") {
		t.Errorf("fence with c2 not confirming: %v, want an error naming c2", err)
	}

	// Logins: every other member has called OnLogins before it returns;
	// the sender has not.
	if err := b.f.Logins(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, n := range []*node{a, b, c} {
		n.mu.Lock()
		got := n.logins
		n.mu.Unlock()
		if want := map[bool]int{true: 0, false: 1}[i == 1]; got != want {
			t.Errorf("member %d: OnLogins called %d times, want %d", i+1, got, want)
		}
	}

	// Undecodable messages are dropped and counted, not acted on.
	for _, m := range [][]byte{nil, {9, 'c'}, {msgVersion, 'c', 1}, {msgVersion, 'c', 0, 0, 0, 0, 0, 0, 0, 9, 1}, {msgVersion, 'q', 0, 0, 0, 0, 0, 0, 0, 0}, {msgVersion, msgFence, 1, 2}, {msgVersion, msgFenceAck}, {msgVersion, msgUnfence, 1},
		{msgVersion, msgLogins, 0, 0, 0, 0, 0, 0, 0, 1}, {msgVersion, msgLogins, 0, 0, 0, 0, 0, 0, 0, 1, 0, 5, 'c', '1'}} {
		c.f.handle(m)
	}
	if got := c.f.Dropped(); got != 10 {
		t.Errorf("dropped %d, want 10", got)
	}
	c.mu.Lock()
	if c.logins != 1 {
		t.Errorf("an undecodable Logins message was acted on: %d calls", c.logins)
	}
	c.mu.Unlock()
	// An older member's catalog message (the version alone) is understood.
	c.f.handle([]byte{msgVersion, msgCatalog, 0, 0, 0, 0, 0, 0, 0, 20})
	eventually(t, "catalog 20 from an older member", func() bool { v, _ := c.seen(); return slices.Contains(v, 20) })

	// Shares are advertised: the others see them in the member's data.
	b.f.SetShares(map[string]int{"w1:5432": 7})
	eventually(t, "b's shares seen by a", func() bool {
		for _, m := range a.f.Members() {
			if m.Name == "c2" && m.Shares["w1:5432"] == 7 {
				return true
			}
		}
		return false
	})

	// A member that leaves is gone from the others' lists.
	c.f.Leave(time.Second)
	eventually(t, "c gone", func() bool { return len(a.f.Members()) == 2 })
	eventually(t, "a told c departed", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Equal(a.gone, []string{"127.0.0.1:6003 lease3"})
	})
}
