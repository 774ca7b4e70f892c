package jobserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// TestStrainedLeaseDefersRecords: while the node's lease renewals are late
// (the store slow to commit), a running job's stats push and its periodic
// checkpoint write nothing to the queue, and a run that stops still
// writes its last checkpoint's record. At 10,000 jobs starting on two
// shared cores these writes kept etcd busy enough that renewals missed
// their deadline and the nodes lost every job, over and over (#39).
func TestStrainedLeaseDefersRecords(t *testing.T) {
	ctx := context.Background()
	q, l, w, p, now := runningOnLease(t)
	stored := func() jobdata.Stats {
		t.Helper()
		data, err := q.GetData(ctx, jobdata.JobType, "j")
		if err != nil {
			t.Fatal(err)
		}
		r, err := jobdata.Decode(data, testKeys, "j")
		if err != nil {
			t.Fatal(err)
		}
		return r.Stats
	}
	check := w.beforeCheckpoint(p)
	for _, step := range []struct {
		name     string
		strained bool
		stopping bool
		docs     int64
		wantDocs int64 // docs_read the record holds after the push and the checkpoint
		skipped  bool  // the checkpoint was left out
	}{
		{"renewals on time", false, false, 1, 1, false},
		{"renewals late", true, false, 2, 1, true},
		{"renewals late, the run stopping", true, true, 3, 3, false},
	} {
		if step.strained && !l.Strained() {
			now.Add(int64(ttl/4 + time.Second)) // a quarter of the TTL without a renewal
		}
		if step.stopping {
			w.stop(errShutdown)
		}
		p.set(replicate.Stats{DocsRead: step.docs})
		if !step.stopping {
			p.push(ctx)
		}
		err := check(ctx, replicate.Stats{DocsRead: step.docs})
		if skipped := errors.Is(err, replicate.ErrSkipCheckpoint); skipped != step.skipped || !skipped && err != nil {
			t.Fatalf("%s: checkpoint: %v, want skipped %v", step.name, err, step.skipped)
		}
		if got := stored().DocsRead; got != step.wantDocs {
			t.Fatalf("%s: the record holds docs_read %d, want %d", step.name, got, step.wantDocs)
		}
	}
}

// TestLostLeaseStillAbandons: a push that finds the node's lease past its
// deadline (its renewal stuck on an unreachable store) abandons the run,
// as before pushes waited on a strained lease: putting the write off must
// not hide the loss (the partition test's node never learned it).
func TestLostLeaseStillAbandons(t *testing.T) {
	ctx := context.Background()
	_, _, w, p, now := runningOnLease(t)
	now.Add(int64(ttl/2 + time.Second)) // no renewal for half the TTL
	p.set(replicate.Stats{DocsRead: 1})
	p.push(ctx)
	if !w.abandoned.Load() {
		t.Fatal("a push on a lease past its deadline did not abandon the run")
	}
}

// ttl is the lease of runningOnLease: renewed by hand only, as the
// clock is the test's.
const ttl = time.Hour

// runningOnLease is a job accepted under a lease of a queue whose clock
// the test moves (now, in Unix nanoseconds), with its worker and progress.
func runningOnLease(t *testing.T) (*jobs.Queue, *jobs.Lease, *worker, *progress, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	now := new(atomic.Int64)
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	q, err := jobs.New(kv.NewMemory(), jobs.Options{Prefix: []byte(jobstore.QueuePrefix), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := jobdata.New(&parse.Rep{Source: parse.Endpoint{URL: "http://127.0.0.1:1/a/"}, Target: parse.Endpoint{URL: "http://127.0.0.1:1/b/"}}, "_replicator", "uuid", "d", clock())
	if err := q.Add(ctx, jobdata.JobType, "j", rec.Encode(testKeys, "j"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	l, err := q.Grant(ctx, jobs.LeaseOptions{Node: "n1", TTL: ttl, Renew: 100 * ttl})
	if err != nil {
		t.Fatal(err)
	}
	j, err := q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{NoWait: true, Lease: l})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	w := newWorker(New(Options{Queue: q, Keys: testKeys}, cfg), j, l)
	return q, l, w, &progress{w: w, rec: rec, cfg: cfg}, now
}
