package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
)

// TestNodeNamesUniqueEtcd: two processes (two queues, each on its own etcd
// client) granting a lease under one node name. The second refuses with
// ErrNodeInUse while the first renews, and never expires its lease; it
// takes the name once the first is dead (at once when Replaces says so).
func TestNodeNamesUniqueEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	cluster := etcdtest.StartCluster(t, 1)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		node2    string // the second process's node name
		renews   bool   // the first process keeps renewing
		replaces bool   // the second's Replaces names the first
		wantErr  error
	}{
		{"live holder", "n1", true, false, ErrNodeInUse},
		{"dead holder", "n1", false, false, nil},
		{"dead holder replaced", "n1", false, true, nil},
		{"other name", "n2", true, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("nodename-%d/", time.Now().UnixNano())
			open := func() *Queue {
				q := openEtcdQueue(t, cluster.Endpoints(), prefix, Options{})
				if err := q.SetTypeTimeout(ctx, typ, time.Minute); err != nil {
					t.Fatal(err)
				}
				return q
			}
			q1, q2 := open(), open()
			renew := time.Hour
			if tc.renews {
				renew = 20 * time.Millisecond
			}
			l1, err := q1.Grant(ctx, LeaseOptions{Node: "n1", Host: "h1", PID: 1, TTL: 500 * time.Millisecond, Renew: renew})
			if err != nil {
				t.Fatal(err)
			}
			mustAdd(t, q1, "a", "A", time.Time{})
			j := acceptUnder(t, q1, l1)
			var replaces func(LeaseInfo) bool
			if tc.replaces {
				replaces = func(li LeaseInfo) bool { return li.ID == l1.ID() }
			}
			gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l2, err := q2.Grant(gctx, LeaseOptions{Node: tc.node2, Host: "h2", PID: 2, TTL: 500 * time.Millisecond, Renew: 20 * time.Millisecond, Replaces: replaces})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("second grant: %v, want %v", err, tc.wantErr)
				}
				if err := l1.Valid(); err != nil {
					t.Fatalf("the live holder lost its lease: %v", err)
				}
				if err := q1.Update(ctx, j, []byte("A2")); err != nil {
					t.Fatalf("the live holder's job: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("second grant: %v", err)
			}
			defer l2.Revoke(ctx)
			if tc.renews {
				if err := l1.Valid(); err != nil {
					t.Fatalf("first lease: %v", err)
				}
				wantState(t, q1, "a", Running)
				return
			}
			wantState(t, q1, "a", Pending) // the dead holder's job was re-enqueued
			if err := q1.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
				t.Fatalf("the dead holder's job: %v, want ErrHalt", err)
			}
		})
	}
	t.Run("at once", func(t *testing.T) {
		// Two processes granting one name at the same moment: one wins,
		// the other sees it renew and refuses.
		prefix := fmt.Sprintf("nodename-race-%d/", time.Now().UnixNano())
		var qs []*Queue
		for i := 0; i < 2; i++ {
			q := openEtcdQueue(t, cluster.Endpoints(), prefix, Options{})
			qs = append(qs, q)
		}
		var wg sync.WaitGroup
		leases := make([]*Lease, 2)
		errs := make([]error, 2)
		for i, q := range qs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				leases[i], errs[i] = q.Grant(ctx, LeaseOptions{Node: "n", Host: fmt.Sprint("h", i), PID: i + 1, TTL: 2 * time.Second, Renew: 20 * time.Millisecond})
			}()
		}
		wg.Wait()
		won := 0
		for i := range qs {
			switch {
			case errs[i] == nil:
				won++
				defer leases[i].Revoke(ctx)
			case !errors.Is(errs[i], ErrNodeInUse):
				t.Fatalf("grant %d: %v", i, errs[i])
			}
		}
		if won != 1 {
			t.Fatalf("%d grants took the name, want 1 (errors %v)", won, errs)
		}
	})
}
