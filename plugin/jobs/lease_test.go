package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// leaseTTL is the TTL of the leases these tests grant; their renewals and
// the lease watch are driven by hand (renewOnce, watchLeases) under a test
// clock, so nothing here depends on timing.
const leaseTTL = 10 * time.Second

// grantManual grants a lease whose own renewal goroutine never ticks.
func grantManual(t *testing.T, q *Queue, opts LeaseOptions) *Lease {
	t.Helper()
	if opts.TTL == 0 {
		opts.TTL = leaseTTL
	}
	opts.Renew = time.Hour
	l, err := q.Grant(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func acceptUnder(t *testing.T, q *Queue, l *Lease) *Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j, err := q.Accept(ctx, typ, AcceptOptions{Lease: l})
	if err != nil {
		t.Fatalf("accept under lease: %v", err)
	}
	return j
}

// watcher is one process's lease watch, stepped by hand.
type watcher struct {
	q    *Queue
	seen map[string]*leaseSeen
}

func newWatcher(q *Queue) *watcher { return &watcher{q: q, seen: map[string]*leaseSeen{}} }

func (w *watcher) look(t *testing.T) {
	t.Helper()
	if err := w.q.watchLeases(context.Background(), w.seen); err != nil {
		t.Fatalf("watch leases: %v", err)
	}
}

func TestLeaseKeepsJobsWithoutUpdates(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		mustAdd(t, q, "a", "A", time.Time{})
		j := acceptUnder(t, q, l)
		w := newWatcher(q)
		// A minute of renewals, no Update of the job: it stays running.
		for i := 0; i < 60; i++ {
			w.look(t)
			clock.advance(time.Second)
			if err := l.renewOnce(context.Background()); err != nil {
				t.Fatalf("renewal %d: %v", i, err)
			}
		}
		w.look(t)
		wantState(t, q, "a", Running)
		if err := q.Update(context.Background(), j, []byte("A2")); err != nil {
			t.Fatalf("update under a live lease: %v", err)
		}
		if err := q.Finish(context.Background(), j, nil); err != nil {
			t.Fatalf("finish under a live lease: %v", err)
		}
		wantState(t, q, "a", Finished)
		wantData(t, q, "a", "A2")
	})
}

// TestLeaseTimingRule checks the rule of lease.go at its edges: the holder
// stops being valid TTL/2 after the start of its last renewal; a watcher
// expires the lease only after seeing its heartbeat unchanged for a whole
// TTL; then the job is re-enqueued and the old holder can neither write
// for it nor renew.
func TestLeaseTimingRule(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		mustAdd(t, q, "a", "A", time.Time{})
		j := acceptUnder(t, q, l)
		if err := l.renewOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		w := newWatcher(q)
		w.look(t) // first sight of the heartbeat, right after the renewal

		clock.advance(leaseTTL/2 - time.Millisecond)
		if err := l.Valid(); err != nil {
			t.Fatalf("valid just before TTL/2: %v", err)
		}
		clock.advance(time.Millisecond)
		if err := l.Valid(); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("valid at TTL/2: got %v, want ErrLeaseLost", err)
		}
		if err := q.Update(context.Background(), j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("update after TTL/2: got %v, want ErrHalt", err)
		}
		clock.advance(leaseTTL/2 - time.Millisecond)
		w.look(t)
		wantState(t, q, "a", Running) // TTL not over for the watcher yet
		if got := len(q.Leases()); got != 1 {
			t.Fatalf("live leases: %d, want 1", got)
		}
		clock.advance(time.Millisecond)
		w.look(t)
		wantState(t, q, "a", Pending)
		if got := len(q.Leases()); got != 0 {
			t.Fatalf("live leases after expiry: %d, want 0", got)
		}
		if err := l.renewOnce(context.Background()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("renewal after expiry: got %v, want ErrLeaseLost", err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("Done not closed after the lease was lost")
		}
		if err := q.Resubmit(context.Background(), j, time.Time{}, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("resubmit by the old holder: got %v, want ErrHalt", err)
		}
		if _, err := q.Accept(context.Background(), typ, AcceptOptions{Lease: l, NoWait: true}); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("accept under a lost lease: got %v, want ErrLeaseLost", err)
		}
		j2 := mustAccept(t, q)
		if j2.ID != "a" || string(j2.Data) != "A" {
			t.Fatalf("re-accepted %+v", j2)
		}
	})
}

// TestLeaseLostForGood: a holder that missed its deadline is never valid
// again, even though its renewal would still commit (no one expired it).
func TestLeaseLostForGood(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		clock.advance(leaseTTL / 2)
		if err := l.renewOnce(context.Background()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("late renewal: got %v, want ErrLeaseLost", err)
		}
		if err := l.Valid(); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("valid after a late renewal: %v", err)
		}
	})
}

// TestLeaseStrained: a lease whose renewals are a quarter of its TTL late
// says so (its holder then stops taking jobs, #39: under load a node lost
// its lease and every job with it), and a renewal that commits clears it.
func TestLeaseStrained(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		granted := clock.Now()
		for _, step := range []struct {
			advance time.Duration
			want    bool
		}{
			{0, false},
			{leaseTTL/4 - time.Millisecond, false},
			{2 * time.Millisecond, true},
		} {
			clock.advance(step.advance)
			if got := l.Strained(); got != step.want {
				t.Fatalf("%s after the grant: strained %v, want %v", clock.Now().Sub(granted), got, step.want)
			}
		}
		if err := l.renewOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if l.Strained() {
			t.Fatal("strained right after a renewal")
		}
		// Past half its TTL it is lost, and Strained says so through
		// Done: a holder that puts its writes off must still learn it.
		clock.advance(leaseTTL / 2)
		if l.Strained() {
			t.Fatal("a lease past its deadline reported strained, not lost")
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("a lease past its deadline not lost after Strained")
		}
	})
}

// TestLeaseLostWhileRenewalHangs: a lease whose renewal hangs on a store
// that answers nothing, not even its deadline, is lost once its deadline
// passes, and its holder told (Done), with no other call to Valid. A node
// cut off from etcd kept its jobs running while another node took them
// (the partition test of plugin/e2e).
func TestLeaseLostWhileRenewalHangs(t *testing.T) {
	mem := kv.NewMemory()
	defer mem.Close()
	s := &stallingStore{Store: mem, stalled: make(chan struct{}, 1), deaf: true, release: make(chan struct{})}
	q, err := New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	defer close(s.release)
	l, err := q.Grant(context.Background(), LeaseOptions{Node: "n", TTL: 400 * time.Millisecond, Renew: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.stall.Store(true)
	<-s.stalled // a renewal hangs
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second): // a bound only: it is lost 200 ms after its last renewal began
		t.Fatal("a lease whose renewal hangs still held 10 s later")
	}
}

// TestLeaseRenewalRacesExpiry: an expiry decided on a heartbeat that has
// changed since does nothing.
func TestLeaseRenewalRacesExpiry(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		mustAdd(t, q, "a", "A", time.Time{})
		acceptUnder(t, q, l)
		rows, err := q.readLeases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		old := rows[l.ID()].heartbeat
		if err := l.renewOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		done, err := q.expireLease(context.Background(), l.ID(), old, "test")
		if err != nil || done {
			t.Fatalf("expiry on a stale heartbeat: done %v, err %v", done, err)
		}
		wantState(t, q, "a", Running)
		if err := l.renewOnce(context.Background()); err != nil {
			t.Fatalf("renewal after a failed expiry: %v", err)
		}
	})
}

func TestLeaseHaltsRemovedJobs(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) { testLeaseHaltsRemovedJobs(t, exclusive) })
	}
}

func testLeaseHaltsRemovedJobs(t *testing.T, exclusive bool) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		q := newQueue(t, s, Options{Now: clock.Now, Exclusive: exclusive})
		var mu sync.Mutex
		var halted []string
		var last HaltedJob
		l := grantManual(t, q, LeaseOptions{Node: "n1", Halted: func(h HaltedJob) {
			mu.Lock()
			halted = append(halted, h.Type+"/"+h.ID)
			last = h
			mu.Unlock()
		}})
		mustAdd(t, q, "a", "A", time.Time{})
		mustAdd(t, q, "b", "B", time.Time{})
		ja, jb := acceptUnder(t, q, l), acceptUnder(t, q, l)
		if err := q.Remove(context.Background(), typ, ja.ID); err != nil {
			t.Fatal(err)
		}
		if err := l.renewOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := fmt.Sprint(halted)
		mu.Unlock()
		if want := fmt.Sprint([]string{typ + "/" + ja.ID}); got != want {
			t.Fatalf("halted: %s, want %s", got, want)
		}
		if err := q.Update(context.Background(), ja, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("update of a removed job: %v", err)
		}
		if !last.Is(ja) || last.Is(jb) {
			t.Fatal("HaltedJob.Is does not name the removed job")
		}
		// The same job added and accepted again is not the one halted.
		mustAdd(t, q, ja.ID, "A again", time.Time{})
		again := acceptUnder(t, q, l)
		if again.ID != ja.ID || last.Is(again) {
			t.Fatalf("a new acceptance of %s counts as the halted one", ja.ID)
		}
		// Told once only.
		if err := l.renewOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(halted)
		mu.Unlock()
		if n != 1 {
			t.Fatalf("halted %d times, want 1", n)
		}
		if err := q.Update(context.Background(), jb, nil); err != nil {
			t.Fatalf("the other job: %v", err)
		}
	})
}

func TestLeaseReplaces(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		old := grantManual(t, q, LeaseOptions{Node: "n1", Host: "h", PID: 100})
		other := grantManual(t, q, LeaseOptions{Node: "n2", Host: "h", PID: 200})
		mustAdd(t, q, "a", "A", time.Time{})
		mustAdd(t, q, "b", "B", time.Time{})
		ja := acceptUnder(t, q, old)
		jb := acceptUnder(t, q, other)
		var asked []LeaseInfo
		grantManual(t, q, LeaseOptions{Node: "n1", Host: "h", PID: 101, Replaces: func(li LeaseInfo) bool {
			asked = append(asked, li)
			return li.Node == "n1" && li.PID == 100
		}})
		if len(asked) != 2 {
			t.Fatalf("asked about %d leases, want 2: %+v", len(asked), asked)
		}
		wantState(t, q, ja.ID, Pending)
		wantState(t, q, jb.ID, Running)
		if err := old.renewOnce(context.Background()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("replaced lease renewal: %v", err)
		}
	})
}

func TestLeaseRevoke(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		l := grantManual(t, q, LeaseOptions{Node: "n1"})
		// More jobs than one release transaction takes.
		const n = 3*releaseBatch + 7
		for i := 0; i < n; i++ {
			mustAdd(t, q, fmt.Sprintf("j%04d", i), "x", time.Time{})
		}
		for i := 0; i < n; i++ {
			acceptUnder(t, q, l)
		}
		if err := l.Revoke(context.Background()); err != nil {
			t.Fatal(err)
		}
		cnt, err := q.PendingCount(context.Background(), typ, time.Time{}, 0)
		if err != nil || cnt != n {
			t.Fatalf("pending after revoke: %d %v, want %d", cnt, err, n)
		}
		// Nothing of the lease is left in the store.
		err = s.View(context.Background(), func(t2 kv.ReadTx) error {
			for _, space := range []int{spaceLease, spaceLeaseJobs, spaceHeartbeat, spaceHolder, spaceHalted} {
				begin := q.l.key(space)
				if err := t2.Range(begin, kv.PrefixEnd(begin), kv.RangeOptions{}, func(k, _ []byte) error {
					return fmt.Errorf("key left in space %d: %x", space, k)
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestLeasesReportLoad(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, Options{})
		l1 := grantManual(t, q, LeaseOptions{Node: "n1"})
		l2 := grantManual(t, q, LeaseOptions{Node: "n2"})
		l1.SetLoad(3, 10)
		l2.SetLoad(0, 10)
		for _, l := range []*Lease{l1, l2} {
			if err := l.renewOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		newWatcher(q).look(t)
		got := map[string]LeaseInfo{}
		for _, li := range q.Leases() {
			got[li.Node] = li
		}
		if got["n1"].Running != 3 || got["n1"].Capacity != 10 || got["n2"].Running != 0 || got["n1"].ID != l1.ID() {
			t.Fatalf("leases: %+v", got)
		}
	})
}

// TestLeaseRunMonitorsExpires runs the real loops: a lease whose holder
// stops renewing is expired by another process's RunMonitors.
func TestLeaseRunMonitorsExpires(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q1 := newQueue(t, s, Options{MonitorTick: 10 * time.Millisecond})
		q2 := newQueue(t, s, Options{MonitorTick: 10 * time.Millisecond})
		runMonitors(t, q2)
		// The live lease has seconds of slack between renewals, so that a
		// loaded machine does not lose it; the dead one expires quickly.
		live, err := q2.Grant(context.Background(), LeaseOptions{Node: "live", TTL: 10 * time.Second, Renew: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		dead := grantManual(t, q1, LeaseOptions{Node: "dead", TTL: 300 * time.Millisecond})
		mustAdd(t, q1, "a", "A", time.Time{})
		mustAdd(t, q1, "b", "B", time.Time{})
		ja := acceptUnder(t, q1, dead)
		jb := acceptUnder(t, q2, live)
		eventually(t, "dead lease's job re-enqueued", func() bool {
			st, _ := q2.GetState(context.Background(), typ, ja.ID)
			return st == Pending
		})
		wantState(t, q2, jb.ID, Running)
		if err := live.Valid(); err != nil {
			t.Fatalf("renewed lease: %v", err)
		}
	})
}

// TestLeaseNotRevivedByALateRenewal: a renewal that commits after the
// holder's deadline passed does not make the lease valid again; whoever
// saw it invalid may have stopped half way.
func TestLeaseNotRevivedByALateRenewal(t *testing.T) {
	clock := newTestClock()
	s := &slowUpdates{Store: kv.NewMemory()}
	defer s.Close()
	q := newQueue(t, s, Options{Now: clock.Now})
	l := grantManual(t, q, LeaseOptions{Node: "n1"})
	clock.advance(leaseTTL/2 - time.Second)
	// The renewal starts while the lease is valid and commits after its
	// deadline.
	s.during = func() { clock.advance(2 * time.Second) }
	if err := l.renewOnce(context.Background()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a renewal committed past the deadline: %v, want ErrLeaseLost", err)
	}
	if err := l.Valid(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("valid again after a late renewal: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed")
	}
}

// slowUpdates runs during inside every Update, before the transaction
// commits.
type slowUpdates struct {
	kv.Store
	during func()
}

func (s *slowUpdates) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return s.Store.Update(ctx, func(tx kv.Tx) error {
		if s.during != nil {
			s.during()
		}
		return fn(tx)
	})
}

// TestLeaseCountsSuspendedTime: the monotonic clock (the queue's Now here)
// stands still while the machine is suspended; the suspend-counting clock
// (uptime) does not. Time passed on either clock counts against the
// lease, so a holder resumed after a suspend longer than TTL/2 writes
// nothing, though its monotonic clock says no time passed.
func TestLeaseCountsSuspendedTime(t *testing.T) {
	for _, tc := range []struct {
		name             string
		monotonic, upFor time.Duration
		valid            bool
	}{
		{"no time passed", 0, 0, true},
		{"suspended just under TTL/2", 0, leaseTTL/2 - time.Millisecond, true},
		{"suspended TTL/2", 0, leaseTTL / 2, false},
		{"suspended an hour", 0, time.Hour, false},
		{"running TTL/2, suspend clock standing", leaseTTL / 2, 0, false},
		{"both clocks past TTL/2", leaseTTL, leaseTTL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends(t, func(t *testing.T, s kv.Store) {
				clock, up := newTestClock(), newTestClock()
				q := newQueue(t, s, Options{Now: clock.Now})
				q.uptime = func() time.Duration { return time.Duration(up.ns.Load()) }
				l := grantManual(t, q, LeaseOptions{Node: "n1"})
				mustAdd(t, q, "a", "A", time.Time{})
				j := acceptUnder(t, q, l)
				if err := l.renewOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
				clock.advance(tc.monotonic)
				up.advance(tc.upFor)
				err := l.Valid()
				if tc.valid {
					if err != nil {
						t.Fatalf("valid: %v, want nil", err)
					}
					if err := q.Update(context.Background(), j, []byte("A2")); err != nil {
						t.Fatalf("update under a valid lease: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("valid: %v, want ErrLeaseLost", err)
				}
				if err := q.Update(context.Background(), j, []byte("A2")); !errors.Is(err, ErrHalt) {
					t.Fatalf("update after the pause: %v, want ErrHalt", err)
				}
				if err := l.renewOnce(context.Background()); !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("renewal after the pause: %v, want ErrLeaseLost", err)
				}
			})
		})
	}
}

// TestUptimeCountsOn: the default suspend-counting clock reads and moves.
func TestUptimeCountsOn(t *testing.T) {
	a := uptime()
	time.Sleep(2 * time.Millisecond)
	if b := uptime(); b <= a {
		t.Fatalf("uptime did not move: %v then %v", a, b)
	}
}
