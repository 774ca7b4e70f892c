package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// TestHandOver: a lease handed over wakes waiting acceptors, whose
// AcceptMany takes its jobs as they stand, many per transaction; lease
// watchers leave them a TTL to be so taken before they re-enqueue what is
// left; the old holder can write for none of them.
func TestHandOver(t *testing.T) {
	for _, tc := range []struct {
		name      string
		jobs      int
		adopt     bool // another runner accepts before the TTL passes
		wantTaken int
	}{
		{"adopted as they stand", 10, true, 10},
		{"left to the watcher", 10, false, 0},
		{"none held", 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				ctx := context.Background()
				clock := newTestClock()
				q := newQueue(t, s, Options{Now: clock.Now})
				old := grantManual(t, q, LeaseOptions{Node: "stopping"})
				var held []*Job
				for i := 0; i < tc.jobs; i++ {
					mustAdd(t, q, benchID(i), "D", time.Time{})
					held = append(held, acceptUnder(t, q, old))
				}
				next := grantManual(t, q, LeaseOptions{Node: "next"})
				w := newWatcher(q)
				w.look(t)
				// An acceptor waiting for a due job wakes at the hand-over.
				woke := make(chan []*Job, 1)
				if tc.adopt {
					go func() {
						actx, cancel := context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
						got, _ := q.AcceptMany(actx, typ, MaxAcceptBatch, AcceptOptions{Lease: next})
						woke <- got
					}()
					time.Sleep(50 * time.Millisecond) // let it wait
				}
				if err := old.HandOver(ctx, typ); err != nil {
					t.Fatal(err)
				}
				var got []*Job
				if tc.adopt && tc.jobs > 0 {
					got = <-woke
				}
				w.look(t) // sees it expired: leaves it a TTL
				for _, j := range held {
					if err := q.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
						t.Fatalf("old holder's update of %s: %v, want ErrHalt", j.ID, err)
					}
				}
				if len(got) != tc.wantTaken {
					t.Fatalf("acceptor took %d, want %d", len(got), tc.wantTaken)
				}
				for _, j := range got {
					wantState(t, q, j.ID, Running)
				}
				if !tc.adopt {
					for _, j := range held {
						wantState(t, q, j.ID, Running) // held, not yet re-enqueued
					}
				}
				clock.advance(leaseTTL)
				w.look(t) // a TTL on: what is left is re-enqueued
				if !tc.adopt {
					for _, j := range held {
						wantState(t, q, j.ID, Pending)
					}
				}
			})
		})
	}
}
