package jobs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

func fastMonitor() Options {
	return Options{MonitorTick: 10 * time.Millisecond, MonitorLease: 200 * time.Millisecond}
}

func runMonitors(t *testing.T, q *Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.RunMonitors(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestMonitorReenqueuesSilentRunner(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q := newQueue(t, s, fastMonitor())
		ctx := context.Background()
		if err := q.SetTypeTimeout(ctx, typ, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, q, "silent", "s", time.Time{})
		silent := mustAccept(t, q)
		mustAdd(t, q, "alive", "a", time.Time{})
		alive := mustAccept(t, q)
		runMonitors(t, q)

		stop := make(chan struct{})
		heartbeat := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					heartbeat <- nil
					return
				case <-time.After(20 * time.Millisecond):
				}
				if err := q.Update(ctx, alive, nil); err != nil {
					heartbeat <- err
					return
				}
			}
		}()
		eventually(t, "silent job re-enqueued", func() bool {
			st, _ := q.GetState(ctx, typ, "silent")
			return st == Pending
		})
		if err := q.Update(ctx, silent, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("silent runner after re-enqueue: got %v, want ErrHalt", err)
		}
		close(stop)
		if err := <-heartbeat; err != nil {
			t.Fatalf("updating runner lost its job: %v", err)
		}
		wantState(t, q, "alive", Running)
		j := mustAccept(t, q)
		if j.ID != "silent" || string(j.Data) != "s" {
			t.Fatalf("re-accepted %+v", j)
		}
	})
}

func TestMonitorLeaseSingleHolder(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		clock := newTestClock()
		opts := fastMonitor()
		opts.Now = clock.Now
		q1 := newQueue(t, s, opts)
		q2 := newQueue(t, s, opts)
		ctx := context.Background()
		cases := []struct {
			q      *Queue
			holder string
			want   bool
		}{
			{q1, "a", true},
			{q2, "b", false},
			{q1, "a", true},
			{q2, "b", false},
		}
		for i, c := range cases {
			if got, err := c.q.lease(ctx, c.holder); err != nil || got != c.want {
				t.Fatalf("step %d: lease(%s) = %v %v, want %v", i, c.holder, got, err, c.want)
			}
		}
		clock.advance(opts.MonitorLease - time.Millisecond)
		if got, _ := q2.lease(ctx, "b"); got {
			t.Fatal("lease taken over before it expired")
		}
		clock.advance(2 * time.Millisecond)
		if got, _ := q2.lease(ctx, "b"); !got {
			t.Fatal("expired lease not taken over")
		}
		if got, _ := q1.lease(ctx, "a"); got {
			t.Fatal("old holder kept the lease after takeover")
		}
		q2.releaseLease("b")
		if got, _ := q1.lease(ctx, "a"); !got {
			t.Fatal("released lease not taken")
		}
	})
}

// TestMonitorsManyProcesses runs monitors of two queues on one store: the
// silent job is re-enqueued exactly once.
func TestMonitorsManyProcesses(t *testing.T) {
	backends(t, func(t *testing.T, s kv.Store) {
		q1 := newQueue(t, s, fastMonitor())
		q2 := newQueue(t, s, fastMonitor())
		ctx := context.Background()
		if err := q1.SetTypeTimeout(ctx, typ, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, q1, "j", "", time.Time{})
		sub, _, _, err := q1.Subscribe(ctx, typ, "j")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		mustAccept(t, q1)
		runMonitors(t, q1)
		runMonitors(t, q2)
		if ev := nextEvent(t, sub); ev.State != Running {
			t.Fatalf("event %+v", ev)
		}
		if ev := nextEvent(t, sub); ev.State != Pending {
			t.Fatalf("event %+v", ev)
		}
		select {
		case ev := <-sub.Events():
			t.Fatalf("second re-enqueue event %+v", ev)
		case <-time.After(300 * time.Millisecond):
		}
	})
}

// TestCrashWithRunningJobs closes a bolt store while jobs run (as a crashed
// plugin would leave it), reopens it, and checks the monitor of the new
// owner re-enqueues them and they can run to completion.
func TestCrashWithRunningJobs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	ctx := context.Background()
	s, err := kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(s, fastMonitor())
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetTypeTimeout(ctx, typ, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		mustAdd(t, q, fmt.Sprintf("j%d", i), "", time.Time{})
	}
	var held []*Job
	for i := 0; i < 3; i++ {
		held = append(held, mustAccept(t, q))
	}
	// the dead process held the monitor lease too
	if ok, err := q.lease(ctx, "dead-process"); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	q.Close()
	s.Close()

	s, err = kv.OpenBolt(path, kv.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q = newQueue(t, s, fastMonitor())
	if err := q.SetTypeTimeout(ctx, typ, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, j := range held {
		wantState(t, q, j.ID, Running)
	}
	runMonitors(t, q)
	eventually(t, "crashed jobs re-enqueued", func() bool {
		n, _ := q.PendingCount(ctx, typ, time.Time{}, 0)
		return n == 5
	})
	for _, j := range held {
		if err := q.Update(ctx, j, nil); !errors.Is(err, ErrHalt) {
			t.Fatalf("stale runner: got %v, want ErrHalt", err)
		}
	}
	for i := 0; i < 5; i++ {
		j := mustAccept(t, q)
		if err := q.Finish(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTrimLog(t *testing.T) {
	s := kv.NewMemory()
	defer s.Close()
	clock := newTestClock()
	q := newQueue(t, s, Options{EventRetention: time.Minute, Now: clock.Now})
	ctx := context.Background()
	for i := 0; i < 1500; i++ {
		mustAdd(t, q, fmt.Sprint(i), "", time.Time{})
	}
	clock.advance(time.Minute + time.Millisecond)
	if err := q.trimLog(ctx, typ); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := s.View(ctx, func(t kv.ReadTx) error {
		b := q.l.logType(typ)
		return t.Range(b, kv.PrefixEnd(b), kv.RangeOptions{}, func(_, _ []byte) error { n++; return nil })
	})
	if err != nil || n != 0 {
		t.Fatalf("log entries left: %d %v", n, err)
	}
}

// TestMonitorTiming: with the clock moved in steps of T/16, a silent
// runner's job is re-enqueued no sooner than a whole T after its last
// update and no later than T + T/4 + a step, while an updating runner's job
// is never touched.
func TestMonitorTiming(t *testing.T) {
	clock := newTestClock()
	q := newQueue(t, kv.NewMemory(), Options{Now: clock.Now})
	ctx := context.Background()
	const T = time.Minute // newQueue's type timeout
	mustAdd(t, q, "silent", "", time.Time{})
	mustAdd(t, q, "alive", "", time.Time{})
	j1, j2 := mustAccept(t, q), mustAccept(t, q)
	alive := j1
	if j1.ID == "silent" {
		alive = j2
	}
	types := map[string]*monitorType{}
	step := T / 16
	var requeuedAt time.Duration
	for elapsed := time.Duration(0); elapsed <= 2*T; elapsed += step {
		if err := q.Update(ctx, alive, nil); err != nil {
			t.Fatalf("the updating runner lost its job at %v: %v", elapsed, err)
		}
		if err := q.monitorOnce(ctx, types); err != nil {
			t.Fatal(err)
		}
		if st, _ := q.GetState(ctx, typ, "silent"); st == Pending && requeuedAt == 0 {
			requeuedAt = elapsed
		}
		clock.advance(step)
	}
	if requeuedAt < T || requeuedAt > T+T/4+step {
		t.Fatalf("silent job re-enqueued %v after its last update, want within [%v, %v]", requeuedAt, T, T+T/4+step)
	}
	wantState(t, q, alive.ID, Running)
}
