package jobs

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// writeCounter is a kv.Store counting its transactions that write, and
// its read-only ones.
type writeCounter struct {
	kv.Store
	writes, views atomic.Int64
}

func (s *writeCounter) Update(ctx context.Context, fn func(kv.Tx) error) error {
	wrote := false
	err := s.Store.Update(ctx, func(tx kv.Tx) error {
		wrote = false
		return fn(writeSpy{tx, &wrote})
	})
	if err == nil && wrote {
		s.writes.Add(1)
	}
	return err
}

func (s *writeCounter) View(ctx context.Context, fn func(kv.ReadTx) error) error {
	s.views.Add(1)
	return s.Store.View(ctx, fn)
}

type writeSpy struct {
	kv.Tx
	wrote *bool
}

func (t writeSpy) Set(k, v []byte)              { *t.wrote = true; t.Tx.Set(k, v) }
func (t writeSpy) Clear(k []byte)               { *t.wrote = true; t.Tx.Clear(k) }
func (t writeSpy) ClearRange(begin, end []byte) { *t.wrote = true; t.Tx.ClearRange(begin, end) }

// TestExclusiveQueueWritesNothingAtRest: a queue that is its store's only
// user (a bolt file) renews its lease, watches leases and runs its
// monitors without a single write while nothing changes, for a held
// lease with jobs and without; its jobs stay running.
func TestExclusiveQueueWritesNothingAtRest(t *testing.T) {
	for _, tc := range []struct {
		name string
		jobs int
	}{{"no jobs", 0}, {"jobs held", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				ctx := context.Background()
				cs := &writeCounter{Store: s}
				clock := newTestClock()
				q := newQueue(t, cs, Options{Now: clock.Now, Exclusive: true, MonitorTick: time.Millisecond})
				l := grantManual(t, q, LeaseOptions{Node: "n1"})
				for i := 0; i < tc.jobs; i++ {
					mustAdd(t, q, benchID(i), "A", time.Time{})
					acceptUnder(t, q, l)
				}
				l.SetLoad(tc.jobs, 10)
				if err := l.renewOnce(ctx); err != nil { // publishes the load
					t.Fatal(err)
				}
				w := newWatcher(q)
				mctx, stop := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { defer close(done); q.RunMonitors(mctx) }()
				before := cs.writes.Load()
				// A minute on the queue's clock, renewals every second.
				for i := 0; i < 60; i++ {
					w.look(t)
					clock.advance(time.Second)
					if err := l.renewOnce(ctx); err != nil {
						t.Fatalf("renewal %d: %v", i, err)
					}
				}
				// Let the monitor loop go round several times.
				for views := cs.views.Load(); cs.views.Load() < views+20; {
					time.Sleep(time.Millisecond)
				}
				stop()
				<-done
				if n := cs.writes.Load() - before; n != 0 {
					t.Fatalf("%d writes at rest, want 0", n)
				}
				if err := l.Valid(); err != nil {
					t.Fatalf("lease: %v", err)
				}
				for i := 0; i < tc.jobs; i++ {
					wantState(t, q, benchID(i), Running)
				}
				if got := q.Leases(); len(got) != 1 || got[0].Running != tc.jobs {
					t.Fatalf("live leases %+v, want this one with %d running", got, tc.jobs)
				}
			})
		})
	}
}

// TestExclusiveQueueExpiresEarlierProcessLeases: a lease an earlier
// process left in the store (its queue gone) is expired by an Exclusive
// queue after its TTL, its jobs re-enqueued; the queue's own lease is not.
func TestExclusiveQueueExpiresEarlierProcessLeases(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		old, err := New(s, Options{Now: clock.Now, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := old.SetTypeTimeout(context.Background(), typ, time.Minute); err != nil {
			t.Fatal(err)
		}
		ol := grantManual(t, old, LeaseOptions{Node: "n1"})
		mustAdd(t, old, "a", "A", time.Time{})
		acceptUnder(t, old, ol)
		old.Close() // the earlier process died holding its lease

		q := newQueue(t, s, Options{Now: clock.Now, Exclusive: true})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		w := newWatcher(q)
		for i := 0; i <= int(leaseTTL/time.Second); i++ {
			w.look(t)
			clock.advance(time.Second)
			if err := l.renewOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		w.look(t)
		wantState(t, q, "a", Pending)
		if got := q.Leases(); len(got) != 1 || got[0].ID != l.ID() {
			t.Fatalf("live leases %+v, want only %s", got, l.ID())
		}
		if err := l.Valid(); err != nil {
			t.Fatalf("own lease: %v", err)
		}
	})
}
