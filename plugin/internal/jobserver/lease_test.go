package jobserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/internal/jobstore"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/kv"
)

// TestReleaseOrphans (issue 30 item 7): a job held under the node's lease
// that no worker of the node runs (its worker ended without settling it)
// is re-enqueued by the scheduling cycle: the second in a row to find it
// so, since a job just accepted gets its worker in between. A job that a
// worker runs stays held.
func TestReleaseOrphans(t *testing.T) {
	ctx := context.Background()
	store := kv.NewMemory()
	defer store.Close()
	q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.SetTypeTimeout(ctx, jobdata.JobType, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"orphan", "running"} {
		if err := q.Add(ctx, jobdata.JobType, id, []byte(`{}`), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := q.Grant(ctx, jobs.LeaseOptions{Node: "n1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Queue: q}, DefaultConfig())
	s.lease = l
	for range 2 {
		j, err := q.Accept(ctx, jobdata.JobType, jobs.AcceptOptions{NoWait: true, Lease: l})
		if err != nil {
			t.Fatal(err)
		}
		if j.ID == "running" {
			s.workers[j.ID] = newWorker(s, j, l)
		}
	}
	state := func(id string) jobs.State {
		st, err := q.GetState(ctx, jobdata.JobType, id)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	s.releaseOrphans(ctx)
	if state("orphan") != jobs.Running {
		t.Fatal("released at the first cycle that found it without a worker")
	}
	s.releaseOrphans(ctx)
	if state("orphan") != jobs.Pending {
		t.Fatal("a job held under the lease with no worker was not released")
	}
	if state("running") != jobs.Running {
		t.Fatal("a job its worker runs was released")
	}
	held, err := l.Held(ctx, jobdata.JobType)
	if err != nil || len(held) != 1 || held[0] != "running" {
		t.Fatalf("held: %v %v", held, err)
	}
}

// TestStartRefusesANodeNameInUse (issue 39 item 6): a server whose node
// name another live process holds (its lease renewed) refuses to start
// with jobs.ErrNodeInUse, and leaves that lease alone.
func TestStartRefusesANodeNameInUse(t *testing.T) {
	ctx := context.Background()
	store := kv.NewMemory()
	defer store.Close()
	open := func() *jobs.Queue {
		q, err := jobs.New(store, jobs.Options{Prefix: []byte(jobstore.QueuePrefix)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	other, q := open(), open()
	held, err := other.Grant(ctx, jobs.LeaseOptions{Node: "n1", Host: "elsewhere", PID: 1, TTL: 500 * time.Millisecond, Renew: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Queue: q, Node: "n1"}, DefaultConfig())
	if err := s.Start(ctx, false); !errors.Is(err, jobs.ErrNodeInUse) {
		if err == nil {
			s.Stop(ctx)
		}
		t.Fatalf("start: %v, want jobs.ErrNodeInUse", err)
	}
	if err := held.Valid(); err != nil {
		t.Fatalf("the other process's lease: %v", err)
	}
}
