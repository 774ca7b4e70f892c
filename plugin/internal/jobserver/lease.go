package jobserver

import (
	"context"
	"errors"
	"time"

	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/jobs"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// The server holds one lease on the queue (jobs.Lease) and accepts every
// job under it: jobs need no heartbeat of their own, a dead node's jobs
// are re-enqueued when its lease expires (node_lease_sec), and every
// request a worker sends checks the lease first (replicate.Options.Fence),
// so a node that lost its lease writes nothing more. A lost lease is never
// renewed: the server stops its workers, revokes it (its jobs are
// re-enqueued at once, for any node to take, this one included) and
// grants itself a new one.

// errLeaseLost is why a worker's run was abandoned: the node's lease was
// lost, so another node may run its job.
var errLeaseLost = errors.New("node lease lost")

// errLeaseStrained leaves a periodic checkpoint out while the node's lease
// renewals are late (jobs.Lease.Strained).
var errLeaseStrained = errors.New("the node's lease renewals are late")

// leaseRetry bounds the wait between attempts to grant a lease.
const leaseRetry = 2 * time.Second

// holdLease keeps the server holding a lease until it stops, starting
// with first when it is not nil.
func (s *Server) holdLease(first *jobs.Lease) {
	for {
		l := first
		first = nil
		if l == nil {
			l = s.grantLease()
		}
		if l == nil {
			return
		}
		s.mu.Lock()
		s.lease = l
		s.mu.Unlock()
		close(s.leased) // wakes acceptors waiting for a lease
		s.publishLoad()
		s.spawnAcceptors(0)
		select {
		case <-s.ctx.Done():
			return // Stop revokes it
		case <-l.Done():
		}
		s.loseLease(l)
	}
}

// grantLease grants a lease, retrying until it succeeds or the server
// stops (nil).
func (s *Server) grantLease() *jobs.Lease {
	wait := 100 * time.Millisecond
	for {
		l, err := s.grantOnce(s.ctx)
		if err == nil {
			return l
		}
		if s.ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, jobs.ErrNodeInUse) {
			wait = leaseRetry
			s.log.Error("another live process runs as this node; this one runs no job until it stops", "node", s.opts.Node, "error", err)
		} else {
			s.log.Warn("could not take a lease on the job queue; retrying", "error", err, "retry_in", wait.String())
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, leaseRetry)
	}
}

// grantOnce grants a lease once. It may wait up to a lease TTL for the
// node name to be free (jobs.Queue.Grant), and fails with
// jobs.ErrNodeInUse when another live process holds it.
func (s *Server) grantOnce(ctx context.Context) (*jobs.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.config().NodeLease)
	defer cancel()
	return s.q.Grant(ctx, jobs.LeaseOptions{
		Node:     s.opts.Node,
		TTL:      s.config().NodeLease,
		Replaces: s.opts.Replaces,
		Halted:   s.halted,
		Format:   jobdata.Format,
	})
}

// loseLease stops the workers of a lost lease at once (they write nothing
// more: their fence is closed) and revokes it, so that their jobs are
// pending again now rather than when the lease's TTL has passed.
func (s *Server) loseLease(l *jobs.Lease) {
	s.mu.Lock()
	s.leased = make(chan struct{})
	s.lease = nil
	n := 0
	for _, w := range s.workers {
		if w.lease == l {
			w.abandon(errLeaseLost)
			n++
		}
	}
	s.mu.Unlock()
	s.log.Warn("node lease on the job queue lost; stopped its jobs without a final checkpoint", "jobs", n, "error", l.Err())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wait := 100 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), s.config().NodeLease)
			err := l.Revoke(ctx)
			cancel()
			if err == nil {
				return
			}
			if s.ctx.Err() != nil {
				return // the lease expires after its TTL anyway
			}
			s.log.Debug("could not revoke a lost lease; retrying", "error", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, leaseRetry)
		}
	}()
}

// currentLease returns the lease to accept jobs under, waiting for one
// while there is none; nil when ctx ends first.
func (s *Server) currentLease(ctx context.Context) *jobs.Lease {
	for {
		s.mu.Lock()
		l, ready := s.lease, s.leased
		s.mu.Unlock()
		if l != nil && l.Valid() == nil {
			return l
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ready:
		case <-time.After(100 * time.Millisecond): // a lease just lost
		}
	}
}

// halted stops this node's worker of a job taken from its lease. A job
// held or replaced (a doc edit) may run elsewhere at once: its run is
// abandoned, writing nothing more. A job removed for good (a cancel, a
// deleted doc) stops as StopJob stops it, with a final checkpoint, since
// nobody else can run it: beforeCheckpoint checks it is still gone.
func (s *Server) halted(h jobs.HaltedJob) {
	s.mu.Lock()
	w := s.workers[h.ID]
	s.mu.Unlock()
	if w == nil || !h.Is(w.job) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	gone := s.gone(ctx, h.ID)
	cancel()
	if gone {
		w.stop(errRemoved)
		return
	}
	w.abandon(errRemoved)
}

// publishLoad tells other nodes, with the next renewal, how many jobs
// this one runs and may run (see balance.go).
func (s *Server) publishLoad() {
	s.mu.Lock()
	l, n := s.lease, s.active
	s.mu.Unlock()
	if l != nil {
		l.SetLoad(n, s.config().MaxJobs)
	}
}

// handOverLease gives the lease up at Stop, once every worker wrote its
// final checkpoint or was abandoned: the jobs still held under it are
// left as they stand for other nodes to take many per transaction, and
// their acceptors are woken (jobs.Lease.HandOver).
func (s *Server) handOverLease(ctx context.Context) {
	s.mu.Lock()
	l := s.lease
	s.lease = nil
	s.mu.Unlock()
	if l == nil {
		return
	}
	if err := l.HandOver(ctx, jobdata.JobType); err != nil {
		s.log.Warn("could not hand the node's lease over; its jobs move when it expires", "error", err)
	}
}

// fence is what a worker's requests check: the worker must not have been
// abandoned (its job taken from it) and the lease it was accepted under
// must still be valid.
func (w *worker) fence() func() error {
	return func() error {
		if w.abandoned.Load() {
			return replicate.ErrAbandoned
		}
		if err := w.lease.Valid(); err != nil {
			return replicate.ErrAbandoned
		}
		return nil
	}
}

// releaseOrphans re-enqueues the jobs held under the node's lease that no
// worker of this node runs (a worker ended without settling its job, say
// because its Resubmit failed while the queue was unreachable): while the
// node's lease lives nothing else would, and the job would show running
// with nothing replicating. A job counts as orphaned when two cycles in a
// row find it so, since a job just accepted gets its worker in between.
func (s *Server) releaseOrphans(ctx context.Context) {
	s.mu.Lock()
	l := s.lease
	s.mu.Unlock()
	if l == nil {
		return
	}
	ids, err := l.Held(ctx, jobdata.JobType)
	if err != nil {
		s.log.Debug("could not list the jobs held under the node's lease", "error", err)
		return
	}
	var orphans []string
	seen := map[string]bool{}
	s.mu.Lock()
	for _, id := range ids {
		if w := s.workers[id]; w != nil && w.lease == l && !w.isDone() {
			continue
		}
		if s.orphans[id] {
			orphans = append(orphans, id)
		} else {
			seen[id] = true
		}
	}
	s.orphans = seen
	s.mu.Unlock()
	for _, id := range orphans {
		released, err := l.Release(ctx, jobdata.JobType, id)
		switch {
		case err != nil:
			s.log.Warn("could not release a job no worker runs; trying again next cycle", "job", id, "error", err)
		case released:
			s.log.Warn("released a job held under the node's lease that no worker ran", "job", id)
		}
	}
}
