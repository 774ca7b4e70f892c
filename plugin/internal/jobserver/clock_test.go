package jobserver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/jobs"
)

// testClock is an Options.Now the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestCycleClock (issue #32 item 4): the job server's scheduling reads
// Options.Now. A finished `_replicate` job stays for
// transient_job_max_age_sec by that clock and is dropped by the first
// cycle after it, without the test waiting for it.
func TestCycleClock(t *testing.T) {
	s := queueServer(t)
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	s.opts.Now = clock.Now
	cfg := s.config()
	cfg.TransientMaxAge = time.Hour
	s.cfg.Store(&cfg)

	job, rec := acceptJob(t, s, "t1", testRecord(""))
	w := newWorker(s, job, nil)
	if !w.started.Equal(clock.Now()) {
		t.Fatalf("worker started at %v, want the server's clock %v", w.started, clock.Now())
	}
	rec.State, rec.LastUpdated = jobdata.Completed, clock.Now().Unix()
	if err := w.finish(rec); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []struct {
		advance time.Duration
		kept    bool
	}{
		{0, true},
		{time.Hour - time.Second, true},
		{time.Second, false},
	} {
		clock.Add(step.advance)
		s.Cycle(ctx)
		_, err := s.recs.Get(ctx, "t1")
		if kept := err == nil; kept != step.kept {
			t.Fatalf("%v after it finished: kept %v (%v), want %v", clock.Now().Sub(time.Unix(rec.LastUpdated, 0)), kept, err, step.kept)
		}
		if err != nil && !errors.Is(err, jobs.ErrNotFound) {
			t.Fatal(err)
		}
	}
}
