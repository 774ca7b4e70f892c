package jobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// markExpired marks lease l expired in the store as a lease watcher's
// first step does, without re-enqueueing its jobs yet.
func markExpired(t *testing.T, q *Queue, l *Lease) {
	t.Helper()
	err := q.store.Update(context.Background(), func(tx kv.Tx) error {
		tx.Set(q.l.lease(l.id), encodeLease(l.info, true))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAcceptMany(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		pending   int // jobs added pending
		dead      int // jobs running under an expired lease
		resubmit  bool
		max       int
		wantTaken int
		wantErr   error
	}{
		{"nothing due", 0, 0, false, 10, 0, ErrNotFound},
		{"fewer than max", 5, 0, false, 10, 5, nil},
		{"max of many", 50, 0, false, 10, 10, nil},
		{"bounded by MaxAcceptBatch", 100, 0, false, 1000, MaxAcceptBatch, nil},
		{"a dead lease's jobs as they stand", 0, 8, false, 10, 8, nil},
		{"dead lease's first, then pending", 5, 3, false, 6, 6, nil},
		{"resubmitted jobs are left to the release", 0, 4, true, 10, 0, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				clock := newTestClock()
				q := newQueue(t, s, Options{Now: clock.Now})
				var deadJobs []*Job
				if tc.dead > 0 {
					dl := grantManual(t, q, LeaseOptions{Node: "dead"})
					for i := 0; i < tc.dead; i++ {
						mustAdd(t, q, benchID(1000+i), "D", time.Time{})
						j := acceptUnder(t, q, dl)
						deadJobs = append(deadJobs, j)
						if tc.resubmit {
							mustAdd(t, q, j.ID, "D2", clock.Now().Add(time.Hour))
						}
					}
					markExpired(t, q, dl)
				}
				for i := 0; i < tc.pending; i++ {
					mustAdd(t, q, benchID(i), "P", time.Time{})
				}
				l := grantManual(t, q, LeaseOptions{Node: "live"})
				got, err := q.AcceptMany(ctx, typ, tc.max, AcceptOptions{Lease: l, NoWait: true})
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				if len(got) != tc.wantTaken {
					t.Fatalf("took %d jobs, want %d", len(got), tc.wantTaken)
				}
				seen := map[string]bool{}
				for _, j := range got {
					if seen[j.ID] {
						t.Fatalf("%s taken twice", j.ID)
					}
					seen[j.ID] = true
					wantState(t, q, j.ID, Running)
					if err := q.Update(ctx, j, nil); err != nil {
						t.Fatalf("update of taken %s: %v", j.ID, err)
					}
				}
				held, err := l.Held(ctx, typ)
				if err != nil || len(held) != len(got) {
					t.Fatalf("held under the lease: %v %v, want %d", held, err, len(got))
				}
				for _, j := range deadJobs {
					if !seen[j.ID] && !tc.resubmit {
						continue
					}
					if err := q.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
						t.Fatalf("the dead holder's %s: %v, want ErrHalt", j.ID, err)
					}
				}
				if tc.dead > 0 && tc.dead <= len(got) {
					// The expiry's release finds nothing left to re-enqueue.
					n, err := q.releaseLeaseJobs(ctx, deadLeaseID(t, q, l))
					if err != nil || n != 0 {
						t.Fatalf("released %d after adoption (%v), want 0", n, err)
					}
				}
			})
		})
	}
}

// deadLeaseID is the id of the one lease other than l in the store.
func deadLeaseID(t *testing.T, q *Queue, l *Lease) string {
	t.Helper()
	rows, err := q.readLeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id := range rows {
		if id != l.id {
			return id
		}
	}
	t.Fatal("no other lease")
	return ""
}

// TestAcceptManyLostLease: a lease no longer valid takes nothing.
func TestAcceptManyLostLease(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		mustAdd(t, q, "a", "A", time.Time{})
		l := grantManual(t, q, LeaseOptions{Node: "n"})
		clock.advance(leaseTTL)
		if _, err := q.AcceptMany(context.Background(), typ, 5, AcceptOptions{Lease: l, NoWait: true}); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("err %v, want ErrLeaseLost", err)
		}
		wantState(t, q, "a", Pending)
	})
}

// TestAdopt: Adopt takes the jobs of expired leases only, as they stand,
// and leaves pending jobs and live leases' jobs alone.
func TestAdopt(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		ctx := context.Background()
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		dead := grantManual(t, q, LeaseOptions{Node: "dead"})
		other := grantManual(t, q, LeaseOptions{Node: "other"})
		for i := 0; i < 3; i++ {
			mustAdd(t, q, benchID(i), "D", time.Time{})
			acceptUnder(t, q, dead)
		}
		mustAdd(t, q, "o", "O", time.Time{})
		oj := acceptUnder(t, q, other)
		mustAdd(t, q, "p", "P", time.Time{})
		l := grantManual(t, q, LeaseOptions{Node: "live"})
		if got, err := q.Adopt(ctx, typ, 10, l); err != nil || len(got) != 0 {
			t.Fatalf("adopted %d (%v) while no lease expired", len(got), err)
		}
		markExpired(t, q, dead)
		got, err := q.Adopt(ctx, typ, 10, l)
		if err != nil || len(got) != 3 {
			t.Fatalf("adopted %d (%v), want 3", len(got), err)
		}
		wantState(t, q, "p", Pending)
		if err := q.Update(ctx, oj, nil); err != nil {
			t.Fatalf("a live lease's job: %v", err)
		}
	})
}

// TestAcceptManyChooseMany: AcceptMany with a ChooseMany takes, in one
// transaction, the jobs a fair pick asks for, tag after tag, counting
// the jobs the attempt took already; with or without the tag index.
func TestAcceptManyChooseMany(t *testing.T) {
	ctx := context.Background()
	// fewest taken of its tag first, then the first offered.
	fair := func(cands, taken []Candidate) int {
		n := map[string]int{}
		for _, c := range taken {
			n[c.Tag]++
		}
		best := 0
		for i, c := range cands {
			if n[c.Tag] < n[cands[best].Tag] {
				best = i
			}
		}
		return best
	}
	for _, tc := range []struct {
		name   string
		tagged bool
		jobs   map[string]int // pending jobs per tag (its data)
		max    int
		want   map[string]int // taken per tag
	}{
		{"tagged, even", true, map[string]int{"A": 10, "B": 2, "C": 5}, 6, map[string]int{"A": 2, "B": 2, "C": 2}},
		{"tagged, a tag runs out", true, map[string]int{"A": 10, "B": 1, "C": 5}, 9, map[string]int{"A": 4, "B": 1, "C": 4}},
		{"tagged, fewer than max", true, map[string]int{"A": 2, "B": 1}, 10, map[string]int{"A": 2, "B": 1}},
		// No tag index: every candidate's Tag is "", the first due taken.
		{"untagged", false, map[string]int{"A": 10, "B": 2, "C": 5}, 6, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				opts := Options{}
				if tc.tagged {
					opts.Tag = func(_, _ string, data []byte) string { return string(data) }
				}
				q := newQueue(t, s, opts)
				total, i := 0, 0
				for tag, n := range tc.jobs {
					for j := 0; j < n; j++ {
						mustAdd(t, q, benchID(i), tag, time.Time{})
						i++
					}
					total += n
				}
				l := grantManual(t, q, LeaseOptions{Node: "live"})
				got, err := q.AcceptMany(ctx, typ, tc.max, AcceptOptions{Lease: l, NoWait: true, ChooseMany: fair})
				if err != nil {
					t.Fatal(err)
				}
				count := map[string]int{}
				seen := map[string]bool{}
				for _, j := range got {
					if seen[j.ID] {
						t.Fatalf("%s taken twice", j.ID)
					}
					seen[j.ID] = true
					count[string(j.Data)]++
					wantState(t, q, j.ID, Running)
				}
				if len(got) != min(tc.max, total) {
					t.Fatalf("took %d, want %d", len(got), min(tc.max, total))
				}
				for tag, n := range tc.want {
					if count[tag] != n {
						t.Fatalf("taken per tag %v, want %v", count, tc.want)
					}
				}
				// The rest are still pending and taken by the next accepts.
				rest, err := q.AcceptMany(ctx, typ, MaxAcceptBatch, AcceptOptions{Lease: l, NoWait: true, ChooseMany: fair})
				if want := total - len(got); len(rest) != want && !(want == 0 && errors.Is(err, ErrNotFound)) {
					t.Fatalf("then took %d (%v), want %d", len(rest), err, want)
				}
			})
		})
	}
}

// TestAcceptManyStalePick: a pick from the tag index whose job is gone
// (here an index entry left behind) is dropped and the pick made again in
// the same attempt, instead of reporting nothing due while a job is.
func TestAcceptManyStalePick(t *testing.T) {
	for _, ghosts := range []int{1, 3} {
		t.Run(fmt.Sprint(ghosts, " stale"), func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				ctx := context.Background()
				q := newQueue(t, s, Options{Tag: func(_, _ string, data []byte) string { return string(data) }})
				mustAdd(t, q, "zz-real", "A", time.Time{})
				err := q.store.Update(ctx, func(tx kv.Tx) error {
					for i := 0; i < ghosts; i++ { // sort before the real one
						tx.Set(q.l.tagged(typ, "A", 0, fmt.Sprintf("aa-ghost%d", i)), nil)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				l := grantManual(t, q, LeaseOptions{Node: "n"})
				got, err := q.AcceptMany(ctx, typ, 1, AcceptOptions{Lease: l, NoWait: true, ChooseMany: func(_, _ []Candidate) int { return 0 }})
				if err != nil || len(got) != 1 || got[0].ID != "zz-real" {
					t.Fatalf("took %v (%v), want zz-real", got, err)
				}
			})
		})
	}
}
