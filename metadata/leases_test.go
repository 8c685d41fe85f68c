package metadata_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/pgfleet/pgfleet/metadata"
)

// TestLeases: coordinators divide a worker's budget through their leases.
// A newcomer gets only what the others' recorded shares leave; the others
// give way at their next renewals; a lapsed lease's share counts until it
// is forgotten (its backends ended), and then the others take it; the sum
// of recorded shares never exceeds the budget, also when many renew at once.
func TestLeases(t *testing.T) {
	pool, _ := storeDB(t)
	ctx := context.Background()
	st := metadata.NewStore(pool)
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	const w, budget = "10.0.0.1:5432", 12
	caps := map[string]int{}
	renew := func(name string, ttl time.Duration, open int, pids ...int32) metadata.Lease {
		t.Helper()
		hold := func(share int) (int, []int32) {
			caps[name] = min(caps[name], share)
			return open, pids
		}
		l, err := st.RenewLease(ctx, name, name+":6432", name, false, ttl, []metadata.ShareWant{{Worker: w, Budget: budget, Hold: hold}})
		if err != nil {
			t.Fatal(err)
		}
		caps[name] = l.Shares[w]
		return l
	}
	recorded := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT coalesce(sum(share), 0) FROM pgfleet.connection_shares WHERE worker = $1", w).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	steps := []struct {
		who        string
		ttl        time.Duration
		open       int
		live, cap  int
		recordedLE int // the sum of recorded shares
	}{
		{"a", time.Minute, 0, 1, 12, 12},
		{"b", time.Minute, 0, 2, 0, 12}, // a records 12: nothing for b yet
		{"a", time.Minute, 3, 2, 6, 6},  // a gives way
		{"b", time.Minute, 0, 2, 6, 12}, // room for b now
		{"c", time.Minute, 0, 3, 0, 12}, // a full fleet: nothing for c yet
		{"a", time.Minute, 5, 3, 4, 11}, // a holds 5: records 5
		{"b", time.Minute, 1, 3, 4, 9},
		{"a", time.Minute, 4, 3, 4, 8},
		{"c", time.Minute, 0, 3, 4, 12}, // c gets its share
	}
	for i, s := range steps {
		l := renew(s.who, s.ttl, s.open)
		if l.Live != s.live || l.Shares[w] != s.cap {
			t.Fatalf("step %d (%s): live %d, share %d; want %d, %d", i, s.who, l.Live, l.Shares[w], s.live, s.cap)
		}
		if r := recorded(); r != s.recordedLE {
			t.Fatalf("step %d: recorded shares sum to %d, want %d", i, r, s.recordedLE)
		}
	}
	// c's lease lapses: its share counts until it is forgotten, and the
	// others are told which backends to end.
	renew("c", time.Millisecond, 0, 101, 102)
	time.Sleep(20 * time.Millisecond)
	l := renew("a", time.Minute, 4)
	want := []metadata.ExpiredShare{{Coordinator: "c", Worker: w, PIDs: []int32{101, 102}}}
	for i := range l.Expired {
		l.Expired[i].Recorded = time.Time{}
	}
	if l.Live != 2 || l.Shares[w] != 4 || !reflect.DeepEqual(l.Expired, want) {
		t.Fatalf("after c lapsed: live %d, share %d, expired %+v; want 2, 4 (c's share still counted), %+v", l.Live, l.Shares[w], l.Expired, want)
	}
	if err := st.ForgetLease(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if l := renew("a", time.Minute, 4); l.Shares[w] != 6 || len(l.Expired) != 0 {
		t.Fatalf("after c was forgotten: share %d, expired %v; want 6, none", l.Shares[w], l.Expired)
	}
	if l := renew("b", time.Minute, 4); l.Shares[w] != 6 {
		t.Fatalf("b after c was forgotten: share %d; want 6", l.Shares[w])
	}
	// A coordinator that renewed before it was forgotten keeps its lease.
	renew("d", time.Millisecond, 0)
	time.Sleep(20 * time.Millisecond)
	renew("d", time.Minute, 0)
	if err := st.ForgetLease(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if l := renew("a", time.Minute, 4); l.Live != 3 {
		t.Fatalf("d renewed, then forgotten: live %d, want 3", l.Live)
	}
	if err := st.DropLease(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	// Gossip revokes e's process (incarnation "e"): its lease lapses now,
	// it can record no backend, and the others are told to end its
	// backends; another process under its name is not revoked.
	renew("e", time.Minute, 0, 201)
	if ok, err := st.RevokeLease(ctx, "e", 50*time.Second); err != nil || ok {
		t.Fatalf("revoking e, renewed just now: %v, %v; want nothing revoked (it is alive)", ok, err)
	}
	if ok, err := st.RevokeLease(ctx, "e", time.Hour); err != nil || !ok {
		t.Fatalf("revoking e: %v, %v", ok, err)
	}
	if err := st.RecordBackend(ctx, "e", w, 202); err == nil {
		t.Fatal("a revoked lease recorded a backend")
	}
	if l := renew("a", time.Minute, 4); len(l.Expired) != 1 || l.Expired[0].Coordinator != "e" || !reflect.DeepEqual(l.Expired[0].PIDs, []int32{201}) {
		t.Fatalf("after e was revoked: expired %+v, want e's backend 201", l.Expired)
	}
	if ok, err := st.RevokeLease(ctx, "e", time.Hour); err != nil || ok {
		t.Fatalf("revoking e again: %v, %v; want nothing to revoke", ok, err)
	}
	// e's process, renewing as one that held a lease, is told it lost it
	// (and nothing is written); as a newcomer it gets a lease again.
	if _, err := st.RenewLease(ctx, "e", "e:6432", "e", true, time.Minute, nil); !errors.Is(err, metadata.ErrLeaseLost) {
		t.Fatalf("e renewing after its revocation: %v, want ErrLeaseLost", err)
	}
	if _, err := st.RenewLease(ctx, "e", "e:6432", "e2", false, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.RevokeLease(ctx, "e", time.Hour); err != nil || ok {
		t.Fatalf("revoking e's old process after a new one renewed under its name: %v, %v; want nothing revoked", ok, err)
	}
	if err := st.DropLease(ctx, "e"); err != nil {
		t.Fatal(err)
	}

	// Many at once: the recorded shares never exceed the budget.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range []string{"a", "b", "e", "f", "g"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				hold := func(share int) (int, []int32) {
					mu.Lock()
					defer mu.Unlock()
					caps[name] = min(caps[name], share)
					return min(caps[name], 1), nil
				}
				l, err := st.RenewLease(ctx, name, "", name, false, time.Minute, []metadata.ShareWant{{Worker: w, Budget: budget, Hold: hold}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				caps[name] = l.Shares[w]
				mu.Unlock()
				if r := recorded(); r > budget {
					t.Errorf("recorded shares sum to %d, over the budget %d", r, budget)
				}
			}
		}()
	}
	wg.Wait()
	// Those that finished first had fewer peers: two rounds settle them.
	for range 2 {
		for _, name := range []string{"a", "b", "e", "f", "g"} {
			renew(name, time.Minute, min(caps[name], 1))
		}
	}
	sum := 0
	for _, name := range []string{"a", "b", "e", "f", "g"} {
		sum += caps[name]
		if caps[name] != budget/5 {
			t.Errorf("%s settled at %d, want %d", name, caps[name], budget/5)
		}
	}
	if sum > budget {
		t.Errorf("caps sum to %d, over %d", sum, budget)
	}
}
