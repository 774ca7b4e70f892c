package jobserver

import (
	"context"
	"errors"
	"math"
	"sort"
	"time"

	"github.com/couchepi/couchepi/plugin/jobs"
)

// Balance across the replication nodes sharing a queue: each node
// publishes how many jobs it runs with its lease (publishLoad), and
// learns the others' from the queue (jobs.Queue.Leases). A node running
// more than its fair share while another has room takes no new job for a
// moment (awaitBalance), and at each scheduling cycle stops its excess
// continuous jobs (they checkpoint and are re-enqueued for the others to
// take), idle ones first. So a node that comes back gets its share within
// an interval or two.

// errRebalanced is why a job was stopped to move to a less loaded node.
var errRebalanced = errors.New("stopped to run on a less loaded node")

// balanceHold bounds how long an acceptor defers to less loaded nodes
// before it takes a job anyway (they may not be taking any).
const balanceHold = 3 * time.Second

// fairShare returns how many of the jobs running across the live
// replication nodes (those publishing a capacity) each should run, and
// those nodes other than self, with mine as self's own count.
func fairShare(self string, mine int, leases []jobs.LeaseInfo) (fair int, others []jobs.LeaseInfo) {
	total, nodes := mine, 1
	for _, l := range leases {
		if l.ID == self || l.Capacity <= 0 {
			continue
		}
		others = append(others, l)
		total += l.Running
		nodes++
	}
	return (total + nodes - 1) / nodes, others
}

// MayTake reports whether a node running mine jobs should take another:
// not while it runs at least its fair share and another live replication
// node runs less than that and has room.
func MayTake(self string, mine int, leases []jobs.LeaseInfo) bool {
	fair, others := fairShare(self, mine, leases)
	if mine < fair {
		return true
	}
	for _, l := range others {
		if l.Running < fair && l.Running < l.Capacity {
			return false
		}
	}
	return true
}

// TakeBound is how many jobs a node running mine may take at once: up to
// its fair share while another live replication node runs less than
// that and has room (at least one, as MayTake allows one), else no bound
// (math.MaxInt), so that one node does not take, thirty per transaction,
// jobs its peers would run.
func TakeBound(self string, mine int, leases []jobs.LeaseInfo) int {
	fair, others := fairShare(self, mine, leases)
	for _, l := range others {
		if l.Running < fair && l.Running < l.Capacity {
			return max(fair-mine, 1)
		}
	}
	return math.MaxInt
}

// Excess is how many of its mine running jobs a node should hand on: those
// beyond its fair share (plus one, so that counts a job apart do not
// churn), at most what the other nodes have room for below their share.
func Excess(self string, mine int, leases []jobs.LeaseInfo) int {
	fair, others := fairShare(self, mine, leases)
	if mine <= fair+1 {
		return 0
	}
	room := 0
	for _, l := range others {
		room += max(0, min(fair, l.Capacity)-l.Running)
	}
	return min(mine-fair, room)
}

// handOn is how many more of its mine running jobs a node hands on at a
// scheduling cycle, leaving of them handed on already and still stopping:
// its whole excess, not bounded by max_churn, since moving a job changes
// which node runs it, not which jobs run, and a node that joins gets its
// share within an interval or two however many jobs run.
func handOn(self string, mine, leaving int, leases []jobs.LeaseInfo) int {
	return max(Excess(self, mine, leases)-leaving, 0)
}

// awaitBalance waits, up to balanceHold, while this node should let less
// loaded ones take the next job.
func (s *Server) awaitBalance(ctx context.Context) {
	deadline := time.Now().Add(balanceHold)
	for !s.mayTake() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// awaitRenewal waits while the node's lease is strained (its renewals
// late: the queue's store is slow to commit). Taking jobs adds load the
// node can put off; a lease lost drops every job it holds, which the
// other nodes, as loaded, then take: at 10,000 jobs starting on two
// shared cores the nodes lost their leases over and over and ran a few
// hundred (#39).
func (s *Server) awaitRenewal(ctx context.Context, l *jobs.Lease) {
	for l.Strained() { // false once lost (Strained declares it)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) mayTake() bool {
	s.mu.Lock()
	l, mine := s.lease, s.active
	s.mu.Unlock()
	if l == nil {
		return true
	}
	return mayTakeSeen(l.ID(), mine, s.q.Leases())
}

// mayTakeSeen is MayTake on one look at the leases: the others' counts
// are what their last renewal published (a second or two old), so this
// node's own count is taken from the same look, not from active, its
// count now. While every node starts jobs, each runs more now than the
// others seem to, and compared with active each would defer to the others
// at once: all holding back for balanceHold per job, a cluster started
// 200 jobs in 47 s (bench-cluster, #39). active counts only until the
// node's first publication is seen.
func mayTakeSeen(self string, active int, leases []jobs.LeaseInfo) bool {
	return MayTake(self, published(self, active, leases), leases)
}

// takeBoundSeen is TakeBound on one look at the leases, for the reason
// mayTakeSeen gives: compared with its count now, each of two nodes
// starting jobs at once sees the other below its share and takes one job
// per transaction.
func takeBoundSeen(self string, active int, leases []jobs.LeaseInfo) int {
	return TakeBound(self, published(self, active, leases), leases)
}

// published is the count self's last renewal published, or active until
// its first publication is seen.
func published(self string, active int, leases []jobs.LeaseInfo) int {
	for _, l := range leases {
		if l.ID == self {
			return l.Running
		}
	}
	return active
}

// shedLocked picks, at a scheduling cycle, the running continuous jobs to
// hand on to less loaded nodes: idle ones first, then the most recently
// started (they lose the least). Callers hold s.mu.
func (s *Server) shedLocked() []*worker {
	if s.lease == nil {
		return nil
	}
	// The ones handed on at an earlier cycle still hold their slots
	// until their final checkpoint: they are part of the excess already.
	leaving := 0
	for _, w := range s.workers {
		if w.holding && errors.Is(w.stopCause(), errRebalanced) {
			leaving++
		}
	}
	n := handOn(s.lease.ID(), s.active, leaving, s.q.Leases())
	if n <= 0 {
		return nil
	}
	var cands []*worker
	for _, w := range s.workers {
		if w.holding && w.continuous && w.stopCause() == nil {
			cands = append(cands, w)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if a, b := cands[i].idle.Load(), cands[j].idle.Load(); a != b {
			return a
		}
		return cands[i].started.After(cands[j].started)
	})
	return cands[:min(n, len(cands))]
}
